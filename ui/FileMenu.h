// FileMenu: the File menu's work: Open preset… and Save preset… (presets, run manifests and run
// PNGs restore the settings panel's configuration; a PNG or JPEG of another tool gives its
// generation settings), Load parameters from PNG/JPEG… (an image's generation settings applied
// onto the settings shown, as A1111's PNG Info "Send to txt2img" and tessera-cli --params-from:
// app/qt/ImportedParameters.h), the same from text (the Edit menu's Paste parameters), and the
// four Export actions (the run shown: its PNG with the "parameters" line and manifest, its
// timings as CSV, its manifest, a Chrome trace). The folders chosen last are remembered in the
// window's settings.
//
// What a run's file holds is where it ran (its backend, its CPU threads): a restore from a run's
// PNG, manifest or parameters keeps the window's choices of those; a preset sets them. Every
// setting that could not be applied is named in the status line (and, for the menu's dialogs, in
// a message).
//
// Every file is read or written off the GUI thread, on a JobQueue of its own, one at a time in
// the order asked; an answer to a restore superseded by a newer one is dropped by job id. An
// existing file is replaced only after the person agrees (Ask), always (Replace) or never
// (Refuse); the existence check runs with the write, off the GUI thread, and only the question
// is asked on it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <QObject>
#include <QString>
#include <QStringList>

#include "app/qt/Exporters.h"
#include "app/qt/JobQueue.h"
#include "core/run/Infotext.h"
#include "core/run/RunConfig.h"

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
    // Puts the configuration stored in a run PNG, a manifest JSON or a preset JSON (or the
    // generation settings of another tool's PNG or JPEG) in the panel; configurationRestored
    // tells how it went. Errors go to the status line.
    void restoreConfigurationFrom(const QString& path);
    // Applies the generation settings of image `path` (PNG or JPEG, read off this thread) onto the
    // settings shown; parametersApplied tells how it went.
    void loadParametersFrom(const QString& path);
    // Applies A1111 infotext `text` onto the settings shown; parametersApplied tells how it went:
    // at once when the text holds no setting (it is parsed here), else once the LoRA, VAE and
    // embedding files it names were found and hashed off this thread (checkModelFiles, as for a
    // loaded image), their notes among the settings not applied.
    void applyParametersText(const QString& text);
    QAction* loadParametersAction() const { return loadParametersAction_; }

signals:
    void configurationRestored(const QString& path, bool ok, const QString& error);
    // loadParametersFrom (`source`: the path) or applyParametersText (`source` empty) ended: the
    // settings in the panel (ok) with `notApplied` (each "'key: value' why") left out, or `error`.
    void parametersApplied(const QString& source, bool ok, const QString& error, const QStringList& notApplied);
    void exportFinished(const QString& path, bool ok, const QString& error);

private:
    // How an answer that arrives later is told.
    enum class Feedback { StatusLine, MessageBox };
    void openPreset();
    void savePreset();
    void chooseParametersFile();
    // `config` in the panel, the window's backend and CPU threads kept (a run's file says where it ran).
    void showRestored(RunConfig config, bool keepDevice);
    // The status line (and with MessageBox a message) after parameters from `what` were applied.
    void reportApplied(const QString& what, const QStringList& fields, const std::vector<UnmappedSetting>& unmapped,
                       Feedback feedback);
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
    QAction* loadParametersAction_ = nullptr;
    QAction* exportAction_ = nullptr;
    QAction* exportCsvAction_ = nullptr;
    QAction* exportManifestAction_ = nullptr;
    QAction* exportTraceAction_ = nullptr;

    quint64 restoreJob_ = 0;  // the newest restore or parameters load
    // Last member: its destructor waits for a write in flight and drops its answer.
    JobQueue files_{1};
};

}  // namespace tessera
