// Files of a run history as the history suites plant them (tests/app/tst_runhistory.cpp and
// tests/ui/tst_untrustedfiles.cpp). Header-only (not a suite: no tst_ prefix).
#pragma once

#include <string>

#include <QFile>
#include <QString>
#include <QtTest>

#include "core/run/RunRecordIO.h"

namespace tessera::testing {

// A run id of the right grammar for the i-th planted run (0 <= i < 1000000).
inline std::string runIdOf(int i) {
    return QStringLiteral("20260101-%1-0000abcd").arg(i, 6, 10, QLatin1Char('0')).toStdString();
}
// A start time for the i-th planted run (0 <= i < 3600), ordered as i, all in the year 2000.
inline std::string startOf(int i) {
    return QStringLiteral("2000-01-01T00:%1:%2.000Z")
        .arg(i / 60, 2, 10, QLatin1Char('0'))
        .arg(i % 60, 2, 10, QLatin1Char('0'))
        .toStdString();
}

// A manifest as RunHistory writes it, with `id` as its run_id.
inline std::string manifestOf(const std::string& id, const std::string& startedAt) {
    RunRecord record;
    record.runId = id;
    record.startedAt = startedAt;
    return manifestJson(record).dump(2) + "\n";
}

// A manifest whose config's width is `levels` nested arrays (about 2 bytes a level): deep
// enough (60,000) to overflow the stack of any recursive reader or printer.
inline std::string deepManifest(int levels) {
    const auto n = static_cast<std::size_t>(levels);
    return R"({"schema_version": 1, "config": {"width": )" + std::string(n, '[') + std::string(n, ']') + "}}";
}

// Writes `bytes` to `path` (QVERIFY on failure).
inline void writeFile(const QString& path, const std::string& bytes) {
    QFile file(path);
    QVERIFY2(file.open(QIODevice::WriteOnly | QIODevice::Truncate), qPrintable(path));
    QCOMPARE(file.write(bytes.data(), static_cast<qint64>(bytes.size())), static_cast<qint64>(bytes.size()));
}

}  // namespace tessera::testing
