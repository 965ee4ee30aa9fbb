// tessera-cli as a user runs it, for the app test suites: start it with arguments, wait,
// collect exit code and both streams. Header-only (not a suite: no tst_ prefix).
#pragma once

#include <QProcess>
#include <QProcessEnvironment>
#include <QString>
#include <QStringList>

#include "core/run/ModelFileLookup.h"

namespace tessera::testing {

struct CliRun {
    int exitCode = -1;  // -1 when it crashed or timed out
    QString out, err;
};

// Waits for a started tessera-cli and collects what it said.
inline CliRun finishCli(QProcess& process, int timeoutMs) {
    CliRun run;
    if (!process.waitForFinished(timeoutMs)) {
        process.kill();
        process.waitForFinished();
        run.err = QStringLiteral("timed out: ") + process.errorString();
        return run;
    }
    run.exitCode = process.exitStatus() == QProcess::NormalExit ? process.exitCode() : -1;
    run.out = QString::fromUtf8(process.readAllStandardOutput());
    run.err = QString::fromUtf8(process.readAllStandardError());
    return run;
}

inline CliRun runCli(const QStringList& args, int timeoutMs = 300000) {
    QProcess process;
    process.start(QStringLiteral(TESSERA_BINARY_DIR "/app/tessera-cli"), args);
    return finishCli(process, timeoutMs);
}

// tessera-cli with $TESSERA_MODELS set to `models`, or unset when `models` is empty (so that a
// developer's own models folder never leaks into a suite's lookups).
inline CliRun runCliWithModels(const QStringList& args, const QString& models, int timeoutMs = 300000) {
    QProcess process;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.remove(QString::fromLatin1(kModelsFolderVariable));
    if (!models.isEmpty()) env.insert(QString::fromLatin1(kModelsFolderVariable), models);
    process.setProcessEnvironment(env);
    process.start(QStringLiteral(TESSERA_BINARY_DIR "/app/tessera-cli"), args);
    return finishCli(process, timeoutMs);
}

inline QString describe(const CliRun& r) {
    return QStringLiteral("exit %1\nstdout:\n%2\nstderr:\n%3").arg(r.exitCode).arg(r.out, r.err);
}

}  // namespace tessera::testing
