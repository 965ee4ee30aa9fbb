// StartImageGroup: the settings panel's Start image group (image-to-image and upscaling, any
// model): the file (Open…, dropped on the group or the canvas, Clear) with its name and size,
// read from its header off this thread, the strength, and the scale: ×1, ×2, ×4 or any factor
// (the canvas is the image's size times it, rounded down to multiples of 8, as tessera-cli
// render sizes it; the Size fields then show it and are read-only) or Target size (the Size
// fields; the image is stretched to them).
//
// The Upscaler (RunConfig::upscaleModel), as A1111's SD upscale and ComfyUI's upscale models
// offer it: "None (resize only: <filter>)", the upscale models of the models folders' ESRGAN/ and
// upscale_models/ (app/qt/UpscaleModelCatalog.h: each with its name, scale and family once its
// header is read, off this thread), the files chosen with Browse…, and Browse…. A model chosen
// from the list is kept as its file's path; a NAME from elsewhere (a run PNG's "SD upscale
// upscaler") selects the model of that name found (its path is then the setting) or stays a name,
// looked up by the run. The list is read again whenever it is opened. The chosen model's
// architecture, scale and size show under it; a file that cannot be used, or a factor beyond the
// model's scale, is a problem of the panel (upscaleModelProblems). The Upscale only button shows
// the window's action (setUpscaleOnlyAction): the model alone over the start image, no diffusion.
//
// The start image's path is the panel's (RunConfig::initImage); the group reads the header of
// the path it is asked about and answers headerChecked (also when the upscale model a start
// image is upscaled with has been read: isChecking covers both).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <QSize>
#include <QStringList>

#include "app/cli/InitImage.h"
#include "app/qt/JobQueue.h"
#include "app/qt/UpscaleModelCatalog.h"
#include "ui/ConfigGroup.h"

class QAction;
class QFormLayout;
class QToolButton;

namespace tessera {

class StartImageGroup : public ConfigGroup {
    Q_OBJECT
public:
    explicit StartImageGroup(QWidget* parent = nullptr);

    void readInto(RunConfig& config) const override;
    void showConfig(const RunConfig& config) override;

    // How the canvas size follows from the start image.
    enum class Scale { Factor, TargetSize };
    Scale scale() const;

    // The problem with start image `path` ("" when fine, or when there is none). A path not
    // asked about yet has its header read off this thread; headerChecked tells when.
    QString check(const std::string& path);
    // The header of `path`, or the upscale model chosen for it, is being read.
    bool isChecking(const std::string& path) const {
        return !path.empty() && ((!header_ && error_.isEmpty()) || isReadingUpscaleModel());
    }
    // What the header said (nullopt without a start image, while reading, or when unusable).
    const std::optional<ImageHeader>& header() const { return header_; }

    // The canvas as the start image `path` makes it: `follows` when the Size fields show the
    // image's size times the factor (its header known, a factor chosen), `size` then that size
    // when the factor is one a run allows.
    struct Canvas {
        bool follows = false;
        std::optional<QSize> size;
    };
    Canvas canvasFromImage(const std::string& path) const;
    // Shows start image `path` (empty: none) and the canvas `canvas` the run will have.
    void showStartImage(const std::string& path, QSize canvas);

    // The upscale model list's folders (UpscaleModelCatalog::modelsFolders): listed again when
    // they change.
    void setUpscaleModelSources(const QString& windowModelsFolder, const std::string& runModel);
    // `path` becomes the upscale model (what Browse… does once a file is chosen); its header is
    // read off this thread.
    void chooseUpscaleModelFile(const QString& path);
    // The last list read (nullopt before the first answer), and whether a newer one is being read.
    const std::optional<UpscaleModelScan>& upscaleModels() const { return scan_; }
    bool isScanningUpscaleModels() const { return scanning_; }
    // The model chosen is not described yet and the list is being read.
    bool isReadingUpscaleModel() const;
    // What is known of the model chosen: null for None, and while it is not read (or a name that
    // no models folder has).
    const UpscaleModelEntry* chosenUpscaleModel() const;
    // The upscale model's problems for `config` (its start image and canvas), as (field, reason):
    // "upscale_model" while it is read, for a file that cannot be used and for a name found
    // nowhere; "upscale" for a canvas beyond the model's output. None without a start image or model.
    std::vector<std::pair<QString, QString>> upscaleModelProblems(const RunConfig& config) const;
    // Why the model alone cannot run over `config`'s start image ("" when it can).
    QString upscaleOnlyBlocker(const RunConfig& config) const;
    // The Upscale only button triggers `action` and shows its state (hidden until one is set).
    void setUpscaleOnlyAction(QAction* action);

signals:
    // Open…, a drop on the group, or Clear (an empty path).
    void startImageChosen(const QString& path);
    // The header asked for by check() was read (`usable`) or found unusable.
    void headerChecked(bool usable);

private:
    void chooseStartImage();
    // The Upscaler list, its description and the Upscale only button, under the scale.
    void addUpscalerRows(QFormLayout* form);
    // Browse…: a file dialog; the file chosen becomes the upscale model.
    void browseUpscaleModel();
    // Reads the list again (the folders, the files chosen with Browse… and the path set).
    void scanUpscaleModels();
    void onUpscaleModelsScanned(const UpscaleModelScan& scan);
    // Fills the Upscaler list from scan_ and selects wanted_.
    void fillUpscaleModels();
    void showUpscaleModelInfo();
    // The setting the list's selection gives ("" for None).
    QString chosenUpscaleValue() const;
    // The entry for setting `value` (a path; or a name: the first model of that name listed,
    // folder by folder as a run looks a name up), or null.
    const UpscaleModelEntry* entryFor(const QString& value) const;

    QLabel* name_ = nullptr;
    QToolButton* clear_ = nullptr;
    QDoubleSpinBox* strength_ = nullptr;
    QComboBox* scale_ = nullptr;
    QDoubleSpinBox* upscale_ = nullptr;
    QLabel* canvasSize_ = nullptr;
    QComboBox* upscaler_ = nullptr;
    QLabel* upscalerInfo_ = nullptr;
    QToolButton* upscaleOnly_ = nullptr;
    UpscaleModelCatalog* upscaleModels_ = nullptr;
    QStringList upscaleFolders_;            // the models folders listed
    QStringList browsed_;                   // files chosen with Browse… (kept in the list)
    QString wanted_;                        // the setting to select (a path, a name, "" for None)
    QString noneText_;                      // the None item's text
    std::optional<UpscaleModelScan> scan_;  // the last list read
    bool scanning_ = false;                 // a newer one is being read
    quint64 scanJob_ = 0;
    std::string shownPath_;  // the start image shown
    QString askedFor_;       // the path of the newest header request
    quint64 job_ = 0;
    std::optional<ImageHeader> header_;  // its answer
    QString error_;                      // or why it cannot be used
    JobQueue headerJobs_{1};             // last member: waited for first
};

}  // namespace tessera
