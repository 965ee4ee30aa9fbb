// StartImageGroup: the settings panel's Start image group (image-to-image and upscaling, any
// model): the file (Open…, dropped on the group or the canvas, Clear) with its name and size,
// read from its header off this thread, the strength, and the scale: ×1, ×2, ×4 or any factor
// (the canvas is the image's size times it, rounded down to multiples of 8, as tessera-cli
// render sizes it; the Size fields then show it and are read-only) or Target size (the Size
// fields; the image is stretched to them).
//
// The start image's path is the panel's (RunConfig::initImage); the group reads the header of
// the path it is asked about and answers headerChecked.
#pragma once

#include <optional>
#include <string>

#include <QSize>

#include "app/cli/InitImage.h"
#include "app/qt/JobQueue.h"
#include "ui/ConfigGroup.h"

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
    // The header of `path` is being read.
    bool isChecking(const std::string& path) const { return !path.empty() && !header_ && error_.isEmpty(); }
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

signals:
    // Open…, a drop on the group, or Clear (an empty path).
    void startImageChosen(const QString& path);
    // The header asked for by check() was read (`usable`) or found unusable.
    void headerChecked(bool usable);

private:
    void chooseStartImage();

    QLabel* name_ = nullptr;
    QToolButton* clear_ = nullptr;
    QDoubleSpinBox* strength_ = nullptr;
    QComboBox* scale_ = nullptr;
    QDoubleSpinBox* upscale_ = nullptr;
    QLabel* canvasSize_ = nullptr;
    std::string shownPath_;  // the start image shown
    QString askedFor_;       // the path of the newest header request
    quint64 job_ = 0;
    std::optional<ImageHeader> header_;  // its answer
    QString error_;                      // or why it cannot be used
    JobQueue headerJobs_{1};             // last member: waited for first
};

}  // namespace tessera
