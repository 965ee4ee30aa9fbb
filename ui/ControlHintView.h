// ControlHintView: what each ControlNet of the run shown saw: its hint canvas after the preprocessor
// (FinishedRun::controlHints, made by the worker), zoomed and panned as the canvas is, with a unit
// selector when the run had several and a caption naming the unit's model, preprocessor and image.
// A1111's ControlNet extension shows the same beside its output ("preprocessor preview").
#pragma once

#include <vector>

#include <QImage>
#include <QStringList>
#include <QWidget>

class QComboBox;
class QLabel;

namespace tessera {

class CompareImagePane;
struct FinishedRun;

class ControlHintView : public QWidget {
    Q_OBJECT
public:
    explicit ControlHintView(QWidget* parent = nullptr);

    // The hints of `run` (none: the view says the run had no ControlNet).
    void showRun(const FinishedRun& run);
    void clear();

    int hintCount() const { return static_cast<int>(hints_.size()); }
    // The hint shown (null when none is).
    QImage shownHint() const;
    const QImage& hint(int unit) const { return hints_[static_cast<std::size_t>(unit)]; }
    QString caption() const;
    void selectUnit(int unit);

private:
    void showUnit(int unit);

    std::vector<QImage> hints_;
    QStringList captions_;
    QComboBox* unit_ = nullptr;
    QLabel* caption_ = nullptr;
    CompareImagePane* pane_ = nullptr;
};

}  // namespace tessera
