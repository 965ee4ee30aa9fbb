#include "ui/CompareView.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include <QDialogButtonBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QKeyEvent>
#include <QLabel>
#include <QPainter>
#include <QTableWidget>
#include <QVBoxLayout>

#include "app/qt/Exporters.h"
#include "app/qt/RunHistory.h"
#include "ui/HeatMap.h"

namespace tessera {

namespace {

// Room left free around a fitted image: the sides, the title strip above and the legend below.
const QSize kPaneFitMargin(16, 40);

QString runName(const RunRecord& record) {
    if (!record.config.label.empty()) return QString::fromStdString(record.config.label);
    return QString::fromStdString(record.runId);
}

QString number(double value, int decimals) {
    return value < 0 ? QStringLiteral("—") : QString::number(value, 'f', decimals);
}

// Rounded first: a difference that rounds to zero (two runs' equal peak memory) reads "0.0",
// never "-0.0" or "+0.0".
QString signedNumber(double value, int decimals) {
    const double scale = std::pow(10.0, decimals);
    const double rounded = std::round(value * scale) / scale;
    if (rounded == 0.0) return QString::number(0.0, 'f', decimals);
    return (rounded > 0 ? QStringLiteral("+") : QString()) + QString::number(rounded, 'f', decimals);
}

// Calls fn(x, y, d) for each pixel of two images of one size, d being its largest channel
// difference (0 to 255) in 8-bit RGB.
template <typename Fn>
void forEachPixelDifference(const QImage& a, const QImage& b, Fn&& fn) {
    const QImage ia = a.convertToFormat(QImage::Format_RGB888);
    const QImage ib = b.convertToFormat(QImage::Format_RGB888);
    for (int y = 0; y < ia.height(); ++y) {
        const uchar* pa = ia.constScanLine(y);
        const uchar* pb = ib.constScanLine(y);
        for (int x = 0; x < ia.width(); ++x) {
            int pixel = 0;
            for (int c = 0; c < 3; ++c) pixel = std::max(pixel, std::abs(int(pa[3 * x + c]) - int(pb[3 * x + c])));
            fn(x, y, pixel);
        }
    }
}

}  // namespace

CompareDeltas compareRuns(const CompareSide& a, const CompareSide& b) {
    CompareDeltas d;
    d.totalMsA = a.record.totalMs;
    d.totalMsB = b.record.totalMs;
    d.speedup = d.totalMsA > 0 && d.totalMsB > 0 ? d.totalMsA / d.totalMsB : 0.0;
    d.differences = configDifferences(a.record.config, b.record.config);
    d.sameWork = std::none_of(d.differences.begin(), d.differences.end(),
                              [](const SettingDifference& x) { return x.changesWork; });
    d.peakMiBA = peakMemoryMiB(a.record);
    d.peakMiBB = peakMemoryMiB(b.record);
    d.seamMeanA = a.seamMean;
    d.seamMeanB = b.seamMean;
    d.seamScoreA = a.record.seamScore;
    d.seamScoreB = b.record.seamScore;
    if (!a.image.isNull() && !b.image.isNull() && a.image.size() == b.image.size()) {
        int maxDiff = 0;
        double sum = 0;
        forEachPixelDifference(a.image, b.image, [&](int, int, int pixel) {
            maxDiff = std::max(maxDiff, pixel);
            sum += pixel;
        });
        d.maxPixelDiff = maxDiff;
        d.meanPixelDiff = sum / (static_cast<double>(a.image.width()) * a.image.height());
    }
    return d;
}

QImage differenceImage(const QImage& a, const QImage& b, int scaleMax) {
    if (a.isNull() || b.isNull() || a.size() != b.size()) return {};
    const int width = a.width();
    std::vector<float> diff(static_cast<std::size_t>(width) * static_cast<std::size_t>(a.height()));
    int maxDiff = 0;
    forEachPixelDifference(a, b, [&](int x, int y, int pixel) {
        diff[static_cast<std::size_t>(y) * width + x] = static_cast<float>(pixel);
        maxDiff = std::max(maxDiff, pixel);
    });
    const double top = scaleMax > 0 ? scaleMax : std::max(maxDiff, 1);
    return heatImage(diff.data(), width, a.height(), 0.0, top);
}

// --- CompareImagePane ---

CompareImagePane::CompareImagePane(QString title, QWidget* parent)
    : ZoomPanView(kPaneFitMargin, parent), title_(std::move(title)) {
    setMinimumSize(160, 160);
    setAttribute(Qt::WA_OpaquePaintEvent);
}

void CompareImagePane::setImage(const QImage& image) {
    const QSize before = contentSize();
    image_ = image;
    contentSizeChanged(before);
}

void CompareImagePane::setLegend(const QString& title, double low, double high) {
    legendTitle_ = title;
    legendLow_ = low;
    legendHigh_ = high;
    hasLegend_ = true;
    update();
}

void CompareImagePane::paintEvent(QPaintEvent*) {
    QPainter painter(this);
    painter.fillRect(rect(), QColor(0x26, 0x28, 0x2b));
    if (!image_.isNull()) {
        painter.save();
        painter.translate(contentOrigin());
        painter.scale(zoom(), zoom());
        painter.setRenderHint(QPainter::SmoothPixmapTransform, zoom() < 2.0);
        painter.drawImage(QPointF(0, 0), image_);
        painter.restore();
    } else {
        painter.setPen(QColor(200, 200, 200));
        painter.drawText(rect(), Qt::AlignCenter | Qt::TextWordWrap, tr("No image (missing, or sizes differ)"));
    }
    // Title strip at the top.
    const QRect strip(0, 0, width(), painter.fontMetrics().height() + 8);
    painter.fillRect(strip, QColor(20, 20, 24, 200));
    painter.setPen(QColor(235, 235, 235));
    painter.drawText(strip.adjusted(8, 0, -8, 0), Qt::AlignLeft | Qt::AlignVCenter,
                     painter.fontMetrics().elidedText(title_, Qt::ElideMiddle, width() - 70));
    painter.drawText(strip.adjusted(8, 0, -8, 0), Qt::AlignRight | Qt::AlignVCenter,
                     QStringLiteral("%1%").arg(std::lround(zoom() * 100.0)));
    if (hasLegend_) drawHeatLegend(painter, QPoint(8, height() - 8), legendTitle_, legendLow_, legendHigh_);
}

// --- CompareView ---

CompareView::CompareView(const CompareSide& a, const CompareSide& b, QWidget* parent) : QWidget(parent) {
    setObjectName(QStringLiteral("compareView"));
    setWindowTitle(tr("Compare %1 and %2").arg(runName(a.record), runName(b.record)));
    deltas_ = compareRuns(a, b);

    paneA_ = new CompareImagePane(tr("A: %1").arg(runName(a.record)));
    paneB_ = new CompareImagePane(tr("B: %1").arg(runName(b.record)));
    paneDiff_ = new CompareImagePane(tr("|A − B| (max over R, G, B)"));
    paneA_->setObjectName(QStringLiteral("comparePaneA"));
    paneB_->setObjectName(QStringLiteral("comparePaneB"));
    paneDiff_->setObjectName(QStringLiteral("comparePaneDiff"));
    paneA_->setImage(a.image);
    paneB_->setImage(b.image);
    const int scale = std::max(deltas_.maxPixelDiff, 1);
    paneDiff_->setImage(differenceImage(a.image, b.image, scale));
    if (deltas_.maxPixelDiff == 0)
        paneDiff_->setLegend(tr("|A − B|: identical images (no pixel differs)"), 0, scale);
    else if (deltas_.maxPixelDiff > 0)
        paneDiff_->setLegend(tr("|A − B| in 8-bit levels"), 0, scale);

    // One view for all three panes (setView emits nothing, so the followers do not echo).
    for (CompareImagePane* source : {paneA_, paneB_, paneDiff_}) {
        connect(source, &CompareImagePane::viewChanged, this, [this, source](double zoom, QPointF centre) {
            for (CompareImagePane* other : {paneA_, paneB_, paneDiff_})
                if (other != source) other->setView(zoom, centre);
        });
    }

    table_ = new QTableWidget(7, 3);
    table_->setObjectName(QStringLiteral("compareTable"));
    table_->setHorizontalHeaderLabels({tr("A"), tr("B"), tr("B − A")});
    table_->setVerticalHeaderLabels(
        {tr("Total time (s)"),
         deltas_.sameWork ? tr("Speedup (A time / B time)") : tr("Time ratio (not a speedup: the work differs)"),
         tr("Peak memory (MiB)"), tr("Max pixel difference"), tr("Mean pixel difference"),
         tr("Seam visibility (1 = invisible)"), tr("Tile disagreement (mean)")});
    table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
    table_->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
    table_->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    table_->setFocusPolicy(Qt::NoFocus);  // a read-only table: no focus frame on the first cell
    table_->setSelectionMode(QAbstractItemView::NoSelection);
    // Every row visible: the header sizes are not final before the table is shown, so use hints.
    const int tableHeight = table_->verticalHeader()->defaultSectionSize() * table_->rowCount() +
                            table_->horizontalHeader()->sizeHint().height() + 2 * table_->frameWidth() + 2;
    table_->setFixedHeight(tableHeight);
    fillTable(a, b);

    auto* panes = new QHBoxLayout;
    panes->addWidget(paneA_);
    panes->addWidget(paneB_);
    panes->addWidget(paneDiff_);
    auto* layout = new QVBoxLayout(this);
    auto* caption = new QLabel(tr("A: %1 — %2<br>B: %3 — %4")
                                   .arg(runName(a.record).toHtmlEscaped(), configSummary(a.record).toHtmlEscaped(),
                                        runName(b.record).toHtmlEscaped(), configSummary(b.record).toHtmlEscaped()));
    caption->setTextFormat(Qt::RichText);
    layout->addWidget(caption);
    differences_ = new QLabel(differencesText());
    differences_->setObjectName(QStringLiteral("compareDifferences"));
    differences_->setWordWrap(true);
    differences_->setTextFormat(Qt::PlainText);
    if (!deltas_.sameWork) differences_->setStyleSheet(QStringLiteral("color: #a05a00;"));
    layout->addWidget(differences_);
    note_ = new QLabel;
    note_->setObjectName(QStringLiteral("compareNote"));
    note_->setWordWrap(true);
    note_->setTextFormat(Qt::PlainText);
    note_->hide();
    layout->addWidget(note_);
    layout->addLayout(panes, 1);
    layout->addWidget(table_);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close);
    buttons->setObjectName(QStringLiteral("compareButtons"));
    connect(buttons, &QDialogButtonBox::rejected, this, &QWidget::close);
    layout->addWidget(buttons);
    resize(1200, 640);
}

QString CompareView::differencesText() const {
    if (deltas_.differences.empty()) return tr("Same settings.");
    const QString all = QString::fromStdString(describeDifferences(deltas_.differences));
    if (deltas_.sameWork) return tr("Settings differ (same work, so the time ratio is a speedup): %1").arg(all);
    return tr("The runs did different work (%1), so their times are not a speed comparison. All differences: %2")
        .arg(QString::fromStdString(describeDifferences(deltas_.differences, true)), all);
}

void CompareView::keyPressEvent(QKeyEvent* event) {
    if (event->key() == Qt::Key_Escape) {
        close();
        return;
    }
    QWidget::keyPressEvent(event);
}

void CompareView::setNote(const QString& note) {
    note_->setText(note);
    note_->setVisible(!note.isEmpty());
}

QString CompareView::note() const { return note_->text(); }

void CompareView::fillTable(const CompareSide&, const CompareSide&) {
    const CompareDeltas& d = deltas_;
    auto set = [this](int row, int col, const QString& text) {
        auto* item = new QTableWidgetItem(text);
        item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
        table_->setItem(row, col, item);
    };
    set(0, 0, number(d.totalMsA / 1000.0, 2));
    set(0, 1, number(d.totalMsB / 1000.0, 2));
    set(0, 2, signedNumber((d.totalMsB - d.totalMsA) / 1000.0, 2));
    set(1, 0, QStringLiteral("1.00×"));
    set(1, 1, d.speedup > 0 ? QStringLiteral("%1×").arg(d.speedup, 0, 'f', 2) : QStringLiteral("—"));
    set(1, 2, QString());
    set(2, 0, number(d.peakMiBA, 1));
    set(2, 1, number(d.peakMiBB, 1));
    set(2, 2, d.peakMiBA >= 0 && d.peakMiBB >= 0 ? signedNumber(d.peakMiBB - d.peakMiBA, 1) : QStringLiteral("—"));
    for (int row : {3, 4})
        for (int col : {0, 1}) set(row, col, QStringLiteral("·"));
    set(3, 2, d.maxPixelDiff >= 0 ? QString::number(d.maxPixelDiff) : tr("— (sizes differ)"));
    set(4, 2, d.meanPixelDiff >= 0 ? QString::number(d.meanPixelDiff, 'f', 3) : QStringLiteral("—"));
    set(5, 0, number(d.seamScoreA, 2));
    set(5, 1, number(d.seamScoreB, 2));
    set(5, 2,
        d.seamScoreA >= 0 && d.seamScoreB >= 0 ? signedNumber(d.seamScoreB - d.seamScoreA, 2) : QStringLiteral("—"));
    set(6, 0, number(d.seamMeanA, 5));
    set(6, 1, number(d.seamMeanB, 5));
    set(6, 2, d.seamMeanA >= 0 && d.seamMeanB >= 0 ? signedNumber(d.seamMeanB - d.seamMeanA, 5) : QStringLiteral("—"));
}

}  // namespace tessera
