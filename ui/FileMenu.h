// FileMenu: the File menu's work: Open preset… and Save preset… (presets, run manifests and run
// PNGs restore the settings panel's configuration), and the four Export actions (the run shown:
// its PNG with the "parameters" line and manifest, its timings as CSV, its manifest, a Chrome
// trace). The folders chosen last are remembered in the window's settings.
//
// Every file is read or written off the GUI thread, on a JobQueue of its own, one at a time in
// the order asked; an answer to a restore superseded by a newer one is dropped by job id. An
// existing file is replaced only after the person agrees (Ask), always (Replace) or never
// (Refuse); the existence check runs with the write, off the GUI thread, and only the question
// is asked on it.
#pragma once

#include <functional>
#include <string>

#include <QObject>
#include <QString>

#include "app/qt/Exporters.h"
#include "app/qt/JobQueue.h"

class QAction;
class QMenu;
class QSettings;
class QWidget;

namespace tessera {

class ConfigPanel;
class StatusLine;
struct FinishedRun;

class FileMenu : public QObject {
    Q_OBJECT
public:
    // What to do when an export's target file exists already.
    enum class Overwrite { Ask, Replace, Refuse };

    // Dialogs open over `window` (the actions' parent, which owns this); `settings` keeps the
    // folders; configurations are restored into and saved from `panel`; `status` tells how
    // things went; `shownRun` is the run the exports write (null: none yet).
    FileMenu(QWidget* window, QSettings& settings, ConfigPanel* panel, StatusLine* status,
             std::function<const FinishedRun*()> shownRun);

    // The preset actions, a separator, the export actions.
    void addTo(QMenu* menu);
    QAction* exportAction(ExportFormat format) const;
    // The export actions enabled where the run shown has what they write.
    void updateActions();

    // Writes the run shown in `format` to `path`; exportFinished tells how it went (at once when
    // there is nothing to export). Errors go to the status line.
    void exportTo(ExportFormat format, const QString& path, Overwrite overwrite);
    // Puts the configuration stored in a run PNG, a manifest JSON or a preset JSON in the panel;
    // configurationRestored tells how it went. Errors go to the status line.
    void restoreConfigurationFrom(const QString& path);

signals:
    void configurationRestored(const QString& path, bool ok, const QString& error);
    void exportFinished(const QString& path, bool ok, const QString& error);

private:
    // How an answer that arrives later is told.
    enum class Feedback { StatusLine, MessageBox };
    void openPreset();
    void savePreset();
    void exportInteractively(ExportFormat format);
    void restoreConfiguration(const QString& path, Feedback feedback);
    void startExport(ExportFormat format, const QString& path, Overwrite overwrite, Feedback feedback);
    // Writes `path` with `write` on files_ unless it exists and `overwrite` says no; with Ask,
    // asks and tries again. `done(ok, error)` runs on the GUI thread.
    void writeInBackground(const QString& path, Overwrite overwrite,
                           const std::function<void(const std::string&)>& write,
                           const std::function<void(bool, const QString&)>& done);
    bool askToReplace(const QString& path);

    QWidget* window_;
    QSettings& settings_;
    ConfigPanel* panel_;
    StatusLine* status_;
    std::function<const FinishedRun*()> shownRun_;

    QAction* openPresetAction_ = nullptr;
    QAction* savePresetAction_ = nullptr;
    QAction* exportAction_ = nullptr;
    QAction* exportCsvAction_ = nullptr;
    QAction* exportManifestAction_ = nullptr;
    QAction* exportTraceAction_ = nullptr;

    quint64 restoreJob_ = 0;  // the newest restore
    // Last member: its destructor waits for a write in flight and drops its answer.
    JobQueue files_{1};
};

}  // namespace tessera
