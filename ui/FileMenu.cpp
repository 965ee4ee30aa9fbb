#include "ui/FileMenu.h"

#include <memory>

#include <QAction>
#include <QCoreApplication>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QMenu>
#include <QMessageBox>
#include <QSettings>

#include "app/qt/ImportedParameters.h"
#include "app/qt/RunWorker.h"
#include "core/base/BoundedInput.h"
#include "core/run/OutputSet.h"
#include "core/run/RunRecordIO.h"
#include "core/sampling/ImageOps.h"
#include "ui/ConfigPanel.h"
#include "ui/StatusLine.h"

namespace tessera {

namespace {

const QString kPresetDirKey = QStringLiteral("paths/presets");
const QString kExportDirKey = QStringLiteral("paths/export");
const QString kParametersDirKey = QStringLiteral("paths/parameters");

QString presetsFolder() {
    // Installed (.deb) and bundled copies keep the presets beside the binaries.
    const QString installed = QCoreApplication::applicationDirPath() + QStringLiteral("/../share/tessera/presets");
    if (QFileInfo(installed).isDir()) return QDir::cleanPath(installed);
#ifdef TESSERA_RESOURCE_DIR
    QString resources = QStringLiteral(TESSERA_RESOURCE_DIR "/presets");
    if (QFileInfo(resources).isDir()) return resources;
#endif
    return QDir::homePath();
}

}  // namespace

FileMenu::FileMenu(QWidget* window, QSettings& settings, ConfigPanel* panel, StatusLine* status,
                   std::function<const FinishedRun*()> shownRun)
    : QObject(window),
      window_(window),
      settings_(settings),
      panel_(panel),
      status_(status),
      shownRun_(std::move(shownRun)) {
    auto make = [window](const QString& text, const char* name, const QKeySequence& shortcut = {}) {
        auto* action = new QAction(text, window);
        action->setObjectName(QString::fromLatin1(name));
        if (!shortcut.isEmpty()) action->setShortcut(shortcut);
        return action;
    };
    openPresetAction_ = make(tr("&Open preset…"), "actionOpenPreset", QKeySequence::Open);
    openPresetAction_->setToolTip(
        tr("Replace the settings with a preset, a run's manifest or image, or another tool's PNG or JPEG"));
    savePresetAction_ = make(tr("&Save preset…"), "actionSavePreset", QKeySequence::Save);
    loadParametersAction_ =
        make(tr("&Load parameters from PNG/JPEG…"), "actionLoadParameters", QKeySequence(tr("Ctrl+Shift+O")));
    loadParametersAction_->setToolTip(
        tr("Apply the generation settings an image holds (A1111's parameters, ComfyUI's prompt, a JPEG's EXIF "
           "comment) onto the settings shown, as A1111's PNG Info sends them"));
    exportAction_ = make(tr("&Export image…"), "actionExportImage", QKeySequence(tr("Ctrl+E")));
    exportCsvAction_ = make(tr("Export &timings (CSV)…"), "actionExportTimings");
    exportManifestAction_ = make(tr("Export &manifest (JSON)…"), "actionExportManifest");
    exportTraceAction_ = make(tr("Export Chrome t&race (JSON)…"), "actionExportTrace");
    connect(openPresetAction_, &QAction::triggered, this, &FileMenu::openPreset);
    connect(savePresetAction_, &QAction::triggered, this, &FileMenu::savePreset);
    connect(loadParametersAction_, &QAction::triggered, this, &FileMenu::chooseParametersFile);
    for (const ExportFormat format :
         {ExportFormat::ImagePng, ExportFormat::TimingsCsv, ExportFormat::ManifestJson, ExportFormat::ChromeTrace})
        connect(exportAction(format), &QAction::triggered, this, [this, format] { exportInteractively(format); });
}

void FileMenu::addTo(QMenu* menu) {
    menu->addAction(openPresetAction_);
    menu->addAction(savePresetAction_);
    menu->addAction(loadParametersAction_);
    menu->addSeparator();
    menu->addAction(exportAction_);
    menu->addAction(exportCsvAction_);
    menu->addAction(exportManifestAction_);
    menu->addAction(exportTraceAction_);
}

QAction* FileMenu::exportAction(ExportFormat format) const {
    switch (format) {
        case ExportFormat::ImagePng:
            return exportAction_;
        case ExportFormat::TimingsCsv:
            return exportCsvAction_;
        case ExportFormat::ManifestJson:
            return exportManifestAction_;
        case ExportFormat::ChromeTrace:
            return exportTraceAction_;
    }
    return nullptr;
}

void FileMenu::updateActions() {
    const FinishedRun* run = shownRun_();
    exportAction_->setEnabled(run && !run->image.isNull());
    for (QAction* action : {exportCsvAction_, exportManifestAction_, exportTraceAction_})
        action->setEnabled(run && run->result);
}

void FileMenu::openPreset() {
    const QString path = QFileDialog::getOpenFileName(
        window_, tr("Open preset"), settings_.value(kPresetDirKey, presetsFolder()).toString(),
        tr("Presets, manifests and run images (*.json *.png *.jpg *.jpeg);;All files (*)"));
    if (path.isEmpty()) return;
    settings_.setValue(kPresetDirKey, QFileInfo(path).absolutePath());
    restoreConfiguration(path, Feedback::MessageBox);
}

void FileMenu::restoreConfigurationFrom(const QString& path) { restoreConfiguration(path, Feedback::StatusLine); }

namespace {

QStringList notAppliedOf(const std::vector<UnmappedSetting>& unmapped) {
    QStringList list;
    for (const UnmappedSetting& setting : unmapped) list << QString::fromStdString(setting.message());
    return list;
}

QStringList fieldsOf(const std::vector<std::string>& fields) {
    QStringList list;
    for (const std::string& field : fields)
        if (!list.contains(QString::fromStdString(field))) list << QString::fromStdString(field);
    return list;
}

}  // namespace

void FileMenu::showRestored(RunConfig config, bool keepDevice) {
    if (keepDevice) {
        const RunConfig shown = panel_->config();
        config.backend = shown.backend;
        config.threads = shown.threads;
    }
    panel_->setConfig(config);
}

void FileMenu::reportApplied(const QString& what, const QStringList& fields,
                             const std::vector<UnmappedSetting>& unmapped, Feedback feedback) {
    // What was left out first (the settings as written), where the status line shows it; the
    // reasons are in the tooltip (the whole text) and the message.
    const QStringList notApplied = notAppliedOf(unmapped);
    QStringList shown;
    for (const UnmappedSetting& setting : unmapped) shown << QString::fromStdString(setting.shown);
    const QString set = fields.isEmpty() ? tr("nothing") : fields.join(QStringLiteral(", "));
    const QString text =
        notApplied.isEmpty()
            ? tr("Parameters of %1 applied (%2)").arg(what, set)
            : tr("Parameters of %1 applied but %n setting(s): %2 · set: %3 · not applied: %4", nullptr,
                 static_cast<int>(notApplied.size()))
                  .arg(what, shown.join(QStringLiteral(", ")), set, notApplied.join(QStringLiteral("; ")));
    status_->setStatusText(text, false);
    if (feedback == Feedback::MessageBox && !notApplied.isEmpty()) {
        auto* box = new QMessageBox(QMessageBox::Information, tr("Parameters applied"),
                                    tr("The settings of %1 are in the panel. These could not be applied:").arg(what),
                                    QMessageBox::Ok, window_);
        box->setObjectName(QStringLiteral("notAppliedMessage"));
        box->setInformativeText(notApplied.join(QLatin1Char('\n')));
        box->setAttribute(Qt::WA_DeleteOnClose);
        box->open();
    }
}

void FileMenu::chooseParametersFile() {
    const QString path = QFileDialog::getOpenFileName(
        window_, tr("Load parameters from an image"), settings_.value(kParametersDirKey, QDir::homePath()).toString(),
        tr("Images with generation parameters (*.png *.jpg *.jpeg);;All files (*)"));
    if (path.isEmpty()) return;
    settings_.setValue(kParametersDirKey, QFileInfo(path).absolutePath());
    loadParametersFrom(path);
}

void FileMenu::loadParametersFrom(const QString& path) {
    restoreJob_ = files_.start(
        [file = path.toStdString(), base = panel_->config(), models = panel_->modelsFolder().toStdString()] {
            return parametersFromImage(file, base, models);
        },
        [this, path](quint64 id, const ImportedParameters& imported) {
            if (id != restoreJob_) return;  // a newer file was opened or dropped since
            showRestored(imported.config, true);
            reportApplied(QFileInfo(path).fileName(), fieldsOf(imported.fields), imported.unmapped,
                          Feedback::MessageBox);
            emit parametersApplied(path, true, {}, notAppliedOf(imported.unmapped));
        },
        [this, path](quint64 id, const QString& error) {
            if (id != restoreJob_) return;
            status_->setStatusText(tr("No parameters loaded: %1").arg(error), true);
            emit parametersApplied(path, false, error, {});
        });
}

void FileMenu::applyParametersText(const QString& text) {
    restoreJob_ = 0;  // an answer of a file still being read is older than this
    ImportedParameters parsed;
    try {
        // The text is parsed here (no file is read); a text that holds no setting is told at once.
        parsed = parametersFromText(text.toStdString(), panel_->config());
    } catch (const std::exception& e) {
        const QString error = QString::fromStdString(toValidUtf8(e.what()));
        status_->setStatusText(tr("No parameters pasted: %1").arg(error), true);
        emit parametersApplied({}, false, error, {});
        return;
    }
    // The LoRA, VAE and embedding files the text names are found and hashed off this thread, on the
    // same queue as a loaded or dropped image's, and their notes told the same way.
    restoreJob_ = files_.start(
        [imported = std::move(parsed), models = panel_->modelsFolder().toStdString()]() mutable {
            checkModelFiles(imported, windowModelsFolders(imported.config.model, models));
            return imported;
        },
        [this](quint64 id, const ImportedParameters& imported) {
            if (id != restoreJob_) return;  // a newer paste, file or drop since
            showRestored(imported.config, true);
            reportApplied(tr("the clipboard"), fieldsOf(imported.fields), imported.unmapped, Feedback::StatusLine);
            emit parametersApplied({}, true, {}, notAppliedOf(imported.unmapped));
        },
        [this](quint64 id, const QString& error) {
            if (id != restoreJob_) return;
            status_->setStatusText(tr("No parameters pasted: %1").arg(error), true);
            emit parametersApplied({}, false, error, {});
        });
}

void FileMenu::restoreConfiguration(const QString& path, Feedback feedback) {
    restoreJob_ = files_.start(
        [file = path.toStdString(), base = panel_->config(), models = panel_->modelsFolder().toStdString()] {
            return configurationFromFile(file, base, models);
        },
        [this, path, feedback](quint64 id, const RestoredConfig& restored) {
            if (id != restoreJob_) return;  // a newer file was opened or dropped since
            showRestored(restored.config, restored.source != ConfigSource::Preset);
            const QString name = QFileInfo(path).fileName();
            const QString run = QString::fromStdString(restored.runId);
            switch (restored.source) {
                case ConfigSource::RunPng:
                    status_->setStatusText(tr("Settings of run %1 restored from the image %2").arg(run, name));
                    break;
                case ConfigSource::Manifest:
                    status_->setStatusText(tr("Settings of run %1 restored from the manifest %2").arg(run, name));
                    break;
                case ConfigSource::Preset:
                    status_->setStatusText(tr("Loaded preset %1").arg(name));
                    break;
                case ConfigSource::ImageParameters:
                    reportApplied(name, {tr("its generation settings")}, restored.unmapped, feedback);
                    break;
            }
            emit configurationRestored(path, true, {});
        },
        [this, path, feedback](quint64 id, const QString& error) {
            if (id != restoreJob_) return;
            if (feedback == Feedback::MessageBox)
                QMessageBox::warning(window_, tr("Open preset"), tr("This is not a usable preset:\n%1").arg(error));
            else
                status_->setStatusText(tr("Nothing restored: %1").arg(error), true);
            emit configurationRestored(path, false, error);
        });
}

void FileMenu::savePreset() {
    const QString path = QFileDialog::getSaveFileName(
        window_, tr("Save preset"),
        settings_.value(kPresetDirKey, QDir::homePath()).toString() + QStringLiteral("/preset.json"),
        tr("Tessera presets (*.json)"), nullptr, QFileDialog::DontConfirmOverwrite);
    if (path.isEmpty()) return;
    settings_.setValue(kPresetDirKey, QFileInfo(path).absolutePath());
    const std::string json = toJson(panel_->config()).dump(2) + "\n";
    writeInBackground(
        path, Overwrite::Ask, [json](const std::string& file) { writeFileAtomically(file, json); },
        [this, path](bool ok, const QString& error) {
            if (ok)
                status_->setStatusText(tr("Saved preset %1").arg(QFileInfo(path).fileName()));
            else if (!error.isEmpty())
                QMessageBox::warning(window_, tr("Save preset"), error);
        });
}

void FileMenu::writeInBackground(const QString& path, Overwrite overwrite,
                                 const std::function<void(const std::string&)>& write,
                                 const std::function<void(bool, const QString&)>& done) {
    // The existence check runs with the write, off this thread; only the question is asked here.
    files_.start(
        [file = path.toStdString(), replace = overwrite == Overwrite::Replace, write] {
            if (!replace && QFileInfo::exists(QString::fromStdString(file))) return false;
            write(file);
            return true;
        },
        [this, path, overwrite, write, done](quint64, bool written) {
            if (written) return done(true, {});
            if (overwrite == Overwrite::Ask && askToReplace(path))
                return writeInBackground(path, Overwrite::Replace, write, done);
            done(false, tr("%1: the file exists and was not replaced").arg(QDir::toNativeSeparators(path)));
        },
        [path, done](quint64, const QString& error) {
            done(false, error.contains(path) ? error : QDir::toNativeSeparators(path) + QStringLiteral(": ") + error);
        });
}

bool FileMenu::askToReplace(const QString& path) {
    return QMessageBox::question(
               window_, tr("Replace file?"),
               tr("%1 already exists.\nDo you want to replace it?").arg(QDir::toNativeSeparators(path)),
               QMessageBox::Yes | QMessageBox::No, QMessageBox::No) == QMessageBox::Yes;
}

void FileMenu::exportInteractively(ExportFormat format) {
    const FinishedRun* run = shownRun_();
    if (!run || !run->result) return;
    const RunRecord& record = run->result->record;
    const QString suggested = settings_.value(kExportDirKey, QDir::homePath()).toString() + QLatin1Char('/') +
                              suggestedExportName(record, format);
    const QString filter = QStringLiteral("%1 (*.%2)").arg(exportTitle(format), exportSuffix(format));
    // The overwrite question is ours (writeInBackground), the same for every way of exporting.
    QString path = QFileDialog::getSaveFileName(window_, tr("Export %1").arg(exportTitle(format)), suggested, filter,
                                                nullptr, QFileDialog::DontConfirmOverwrite);
    if (path.isEmpty()) return;
    if (QFileInfo(path).suffix().isEmpty()) path += QLatin1Char('.') + exportSuffix(format);
    settings_.setValue(kExportDirKey, QFileInfo(path).absolutePath());
    startExport(format, path, Overwrite::Ask, Feedback::MessageBox);
}

void FileMenu::exportTo(ExportFormat format, const QString& path, Overwrite overwrite) {
    startExport(format, path, overwrite, Feedback::StatusLine);
}

void FileMenu::startExport(ExportFormat format, const QString& path, Overwrite overwrite, Feedback feedback) {
    const auto done = [this, path, format, feedback](bool ok, const QString& error) {
        if (ok)
            status_->setStatusText(tr("Exported %1").arg(QDir::toNativeSeparators(path)));
        else if (feedback == Feedback::MessageBox && !error.isEmpty())
            QMessageBox::warning(window_, tr("Export %1").arg(exportTitle(format)), error);
        else
            status_->setStatusText(error, true);
        emit exportFinished(path, ok, error);
    };
    const FinishedRun* run = shownRun_();
    const std::shared_ptr<const RunResult> result = run ? run->result : nullptr;
    if (!result) return done(false, QDir::toNativeSeparators(path) + tr(": there is no finished run to export yet"));
    // A run reopened from the history has its image as shown alone (FinishedRun::image).
    const QImage shown = format == ExportFormat::ImagePng && result->image.data.empty() ? run->image : QImage();
    if (format == ExportFormat::ImagePng && result->image.data.empty() && shown.isNull())
        return done(false, QDir::toNativeSeparators(path) + tr(": there is no finished image to export yet"));
    // The shared result is only read there; the PNG is encoded on files_' thread too.
    writeInBackground(
        path, overwrite,
        [result, shown, format](const std::string& file) {
            if (shown.isNull()) return exportRun(*result, format, file);
            // The model-space image the exporter takes, made only for as long as the export runs.
            RunResult withImage = *result;
            withImage.image = fromRgb8(rgb8Of(shown));
            exportRun(withImage, format, file);
        },
        done);
}

}  // namespace tessera
