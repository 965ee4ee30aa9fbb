// SettingsFile: the window's settings (geometry, the last configuration, the folders chosen),
// in Qt's INI format where QSettings keeps an application's user settings
// (QStandardPaths::GenericConfigLocation/Tessera/tessera.conf), read and written by Tessera
// rather than by QSettings. The file is input like any other: it is read once, at construction,
// through core/base/BoundedInput (opened without blocking, regular files only, at most
// kMaxBytes), and written whole by save() (QSaveFile: a temporary file beside it, renamed over
// it, so it is never left half-written). values() is a QSettings over a private copy in a folder
// this object creates, so Qt's INI parser and writer, and with them the files written before,
// stay as they are; QSettings never opens the real file, so a FIFO, a device or a link loop
// there cannot block or break the window.
//
// A file that cannot be used (not a regular file, too large, unreadable) leaves values() empty
// (the defaults); problem() says why, and save() does not write: what is there is left for the
// person to look at. A file that is not there is no problem: save() creates it.
//
// Threads: one thread at a time. Construction and save() touch files, on the window's thread:
// once before it is built and when it closes or starts a run, as QSettings did; every read is
// bounded and no open can wait for a writer, so neither can hold the window up.
#pragma once

#include <cstddef>
#include <memory>

#include <QString>

#include "core/base/BoundedInput.h"

class QSettings;
class QTemporaryDir;

namespace tessera {

class SettingsFile {
public:
    // The saved configuration alone may take input_limits::kJsonBytes (the window refuses more),
    // and INI escaping can double it; the window's geometry and folders add a few KiB.
    static constexpr std::size_t kMaxBytes = 2 * input_limits::kJsonBytes + (std::size_t{1} << 20);

    // Where QSettings would keep the settings of this application (organization and application
    // names as set on QCoreApplication), without reading anything there.
    static QString defaultPath();

    // Reads `path` (see above). Never throws for what is found at `path`: problem() says it.
    explicit SettingsFile(QString path);
    ~SettingsFile();
    SettingsFile(const SettingsFile&) = delete;
    SettingsFile& operator=(const SettingsFile&) = delete;

    const QString& path() const { return path_; }
    // The values: what the file held, then whatever the window set.
    QSettings& values() { return *values_; }
    const QSettings& values() const { return *values_; }
    // Why the file was not used, naming it ("settings file '…' is a FIFO, …; Tessera starts with
    // its default settings and does not save them"); empty when it was read or is not there.
    const QString& problem() const { return problem_; }
    // False when problem() is set: save() then leaves the file alone.
    bool savesChanges() const { return problem_.isEmpty(); }
    // Writes values() to path() all-or-nothing (creating its folder). True when written or when
    // nothing is to be written (savesChanges() false); false with *error naming the file when
    // the write failed (the file is then as it was).
    bool save(QString* error = nullptr);

private:
    QString path_;
    QString problem_;
    std::unique_ptr<QTemporaryDir> scratch_;  // holds the private copy values_ reads and writes
    std::unique_ptr<QSettings> values_;
};

}  // namespace tessera
