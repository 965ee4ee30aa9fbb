#include "app/qt/SettingsFile.h"

#include <cerrno>
#include <filesystem>
#include <string>
#include <system_error>

#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QSaveFile>
#include <QSettings>
#include <QStandardPaths>
#include <QTemporaryDir>

namespace tessera {

namespace {

QString shown(const QString& path) { return QString::fromStdString(shownPath(QFile::encodeName(path).toStdString())); }

// Why the settings cannot be read from `path`, found without opening it ("is a FIFO, not a
// regular file", "is a symbolic-link loop ..."); empty for a regular file or nothing at all.
QString unusableKind(const QString& path) {
    namespace fs = std::filesystem;
    const fs::path native = QFile::encodeName(path).toStdString();
    std::error_code ec;
    const fs::file_status status = fs::status(native, ec);  // follows links, opens nothing
    if (ec && ec.value() == ELOOP) return QStringLiteral("is a symbolic-link loop (too many levels of symbolic links)");
    if (status.type() == fs::file_type::not_found) {
        std::error_code linkError;
        if (fs::is_symlink(fs::symlink_status(native, linkError)))
            return QStringLiteral("is a dangling symbolic link (to %1)")
                .arg(QString::fromStdString(shownPath(fs::read_symlink(native, linkError))));
        return {};
    }
    if (ec) return QStringLiteral("cannot be looked at (%1)").arg(QString::fromStdString(ec.message()));
    switch (status.type()) {
        case fs::file_type::fifo:
            return QStringLiteral("is a FIFO, not a regular file");
        case fs::file_type::character:
        case fs::file_type::block:
            return QStringLiteral("is a device, not a regular file");
        case fs::file_type::socket:
            return QStringLiteral("is a socket, not a regular file");
        case fs::file_type::directory:
            return QStringLiteral("is a folder, not a regular file");
        default:
            return {};
    }
}

const QString kConsequence = QStringLiteral("Tessera starts with its default settings and does not save them");

}  // namespace

QString SettingsFile::defaultPath() {
    // QSettings' user scope for NativeFormat on Unix: <config>/<organization>/<application>.conf.
    QString organization = QCoreApplication::organizationName();
    if (organization.isEmpty()) organization = QStringLiteral("Unknown Organization");
    return QStandardPaths::writableLocation(QStandardPaths::GenericConfigLocation) + QLatin1Char('/') + organization +
           QLatin1Char('/') + QCoreApplication::applicationName() + QStringLiteral(".conf");
}

SettingsFile::SettingsFile(QString path) : path_(std::move(path)), scratch_(std::make_unique<QTemporaryDir>()) {
    std::string bytes;
    bool present = false;
    if (const QString kind = unusableKind(path_); !kind.isEmpty()) {
        problem_ = QStringLiteral("The settings file %1 %2; %3").arg(shown(path_), kind, kConsequence);
    } else {
        try {
            present = QFileInfo::exists(path_);
            if (present) bytes = readBoundedFile(QFile::encodeName(path_).toStdString(), "settings", kMaxBytes);
        } catch (const std::exception& e) {
            problem_ = QStringLiteral("The settings file could not be read (%1); %2")
                           .arg(QString::fromStdString(toValidUtf8(e.what())), kConsequence);
            bytes.clear();
        }
    }
    if (!scratch_->isValid()) {
        // Nowhere to keep a copy QSettings may read: the values live in memory only.
        if (problem_.isEmpty())
            problem_ = QStringLiteral("No temporary folder for the settings of %1 (%2); %3")
                           .arg(shown(path_), scratch_->errorString(), kConsequence);
        values_ = std::make_unique<QSettings>(QString(), QSettings::IniFormat);
        return;
    }
    const QString copy = scratch_->filePath(QStringLiteral("tessera.conf"));
    if (problem_.isEmpty() && present) {
        QFile file(copy);
        if (!file.open(QIODevice::WriteOnly) ||
            file.write(bytes.data(), static_cast<qint64>(bytes.size())) != static_cast<qint64>(bytes.size())) {
            problem_ = QStringLiteral("The settings of %1 could not be copied to %2 (%3); %4")
                           .arg(shown(path_), shown(copy), file.errorString(), kConsequence);
            file.close();
            QFile::remove(copy);
        }
    }
    values_ = std::make_unique<QSettings>(copy, QSettings::IniFormat);
}

SettingsFile::~SettingsFile() = default;

bool SettingsFile::save(QString* error) {
    const auto fail = [&](const QString& why) {
        if (error) *error = QStringLiteral("The settings could not be saved to %1: %2").arg(shown(path_), why);
        return false;
    };
    if (!savesChanges()) return true;
    values_->sync();
    if (values_->status() != QSettings::NoError) return fail(QStringLiteral("they could not be written out"));
    QFile copy(values_->fileName());
    if (!copy.exists()) return true;  // nothing was ever set
    if (!copy.open(QIODevice::ReadOnly)) return fail(copy.errorString());
    const QByteArray bytes = copy.readAll();
    const QString folder = QFileInfo(path_).absolutePath();
    if (!QDir().mkpath(folder)) return fail(QStringLiteral("its folder cannot be created"));
    // A temporary file beside it, renamed over it once complete (no direct-write fallback).
    QSaveFile file(path_);
    if (!file.open(QIODevice::WriteOnly)) return fail(file.errorString());
    if (file.write(bytes) != bytes.size()) {
        file.cancelWriting();
        return fail(file.errorString());
    }
    if (!file.commit()) return fail(file.errorString());
    return true;
}

}  // namespace tessera
