#include "ui/ImageGroup.h"

#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPainter>
#include <QPolygonF>
#include <QRandomGenerator>
#include <QRegularExpressionValidator>
#include <QSpinBox>
#include <QToolButton>

#include "core/run/SamplerNames.h"
#include "core/sampling/Scheduler.h"

namespace tessera {

namespace {

// The sampler list: A1111's names (samplerDisplayName), one entry per kind and, where the kind
// has one, a "Karras" entry. Data: the kind's name; kKarrasRole: whether it is the Karras entry.
constexpr int kKarrasRole = Qt::UserRole + 1;

bool hasKarras(SchedulerKind kind) {
    SchedulerOptions karras;
    karras.karrasSigmas = true;
    return samplerDisplayName(kind, karras).scheduleType == "Karras";
}

QComboBox* makeSamplerCombo() {
    auto* combo = new QComboBox;
    for (const SchedulerKind kind :
         {SchedulerKind::Euler, SchedulerKind::EulerAncestral, SchedulerKind::DPMPP2M, SchedulerKind::DPMPP2MSDE,
          SchedulerKind::DPMPPSDE, SchedulerKind::LMS, SchedulerKind::Heun, SchedulerKind::DPM2, SchedulerKind::UniPC,
          SchedulerKind::DDIM, SchedulerKind::DDPM}) {
        for (const bool karras : {false, true}) {
            if (karras && !hasKarras(kind)) continue;
            SchedulerOptions options;
            options.karrasSigmas = karras;
            const SamplerDisplay shown = samplerDisplayName(kind, options);
            const QString text =
                QString::fromStdString(shown.sampler) +
                (karras ? QStringLiteral(" ") + QString::fromStdString(shown.scheduleType) : QString());
            combo->addItem(text, enumName(kind));
            combo->setItemData(combo->count() - 1, karras, kKarrasRole);
        }
    }
    return combo;
}

void selectSampler(QComboBox* combo, SchedulerKind kind, bool karras) {
    const QString name = enumName(kind);
    for (int i = 0; i < combo->count(); ++i)
        if (combo->itemData(i).toString() == name &&
            (!hasKarras(kind) || combo->itemData(i, kKarrasRole).toBool() == karras)) {
            combo->setCurrentIndex(i);
            return;
        }
}

// A die showing five: an icon that needs no theme and no emoji font.
QIcon diceIcon() {
    QPixmap pixmap(32, 32);
    pixmap.fill(Qt::transparent);
    QPainter painter(&pixmap);
    painter.setRenderHint(QPainter::Antialiasing);
    painter.setPen(QPen(QColor(70, 70, 70), 2));
    painter.setBrush(QColor(250, 250, 250));
    painter.drawRoundedRect(QRectF(3, 3, 26, 26), 6, 6);
    painter.setPen(Qt::NoPen);
    painter.setBrush(QColor(40, 40, 40));
    for (const QPointF& pip : {QPointF(10, 10), QPointF(22, 10), QPointF(16, 16), QPointF(10, 22), QPointF(22, 22)})
        painter.drawEllipse(pip, 2.6, 2.6);
    return QIcon(pixmap);
}

// A recycling arrow: reuse (the last run's seed), drawn so it needs no theme either.
QIcon reuseIcon() {
    QPixmap pixmap(32, 32);
    pixmap.fill(Qt::transparent);
    QPainter painter(&pixmap);
    painter.setRenderHint(QPainter::Antialiasing);
    painter.setPen(QPen(QColor(40, 110, 60), 3, Qt::SolidLine, Qt::RoundCap));
    painter.drawArc(QRectF(6, 6, 20, 20), 60 * 16, 290 * 16);
    painter.setPen(Qt::NoPen);
    painter.setBrush(QColor(40, 110, 60));
    painter.drawPolygon(QPolygonF({QPointF(17, 2), QPointF(26, 7.5), QPointF(17, 13)}));
    return QIcon(pixmap);
}

}  // namespace

ImageGroup::ImageGroup(QWidget* parent) : ConfigGroup(tr("Image"), parent) {
    auto* form = new QFormLayout(this);
    form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);

    width_ = makeSpin(0, kMaxSpin, tr(" px"));
    width_->setObjectName(QStringLiteral("widthSpin"));
    width_->setSingleStep(64);
    height_ = makeSpin(0, kMaxSpin, tr(" px"));
    height_->setObjectName(QStringLiteral("heightSpin"));
    height_->setSingleStep(64);
    width_->setToolTip(tr("Image width"));
    height_->setToolTip(tr("Image height"));
    auto* sizeRow = new QHBoxLayout;
    sizeRow->setContentsMargins(0, 0, 0, 0);
    sizeRow->addWidget(width_, 1);
    sizeRow->addWidget(new QLabel(QStringLiteral("×")));
    sizeRow->addWidget(height_, 1);
    form->addRow(tr("Size"), sizeRow);
    form->addRow(QString(), addErrorLabel(QStringLiteral("width"), width_));
    form->addRow(QString(), addErrorLabel(QStringLiteral("height"), height_));

    seed_ = new QLineEdit;
    seed_->setObjectName(QStringLiteral("seedEdit"));
    seed_->setValidator(new QRegularExpressionValidator(QRegularExpression(QStringLiteral("[0-9]{1,20}")), seed_));
    dice_ = new QToolButton;
    dice_->setObjectName(QStringLiteral("diceButton"));
    dice_->setIcon(diceIcon());
    dice_->setToolTip(tr("New random seed"));
    reuseSeed_ = new QToolButton;
    reuseSeed_->setObjectName(QStringLiteral("reuseSeedButton"));
    reuseSeed_->setIcon(reuseIcon());
    reuseSeed_->setEnabled(false);
    reuseSeed_->setToolTip(tr("Reuse the seed of the last run (none yet)"));
    auto* seedRow = new QHBoxLayout;
    seedRow->setContentsMargins(0, 0, 0, 0);
    seedRow->addWidget(seed_, 1);
    seedRow->addWidget(dice_);
    seedRow->addWidget(reuseSeed_);
    form->addRow(tr("Seed"), seedRow);
    form->addRow(QString(), addErrorLabel(QStringLiteral("seed"), seed_));

    steps_ = makeSpin(0, 100000);
    steps_->setObjectName(QStringLiteral("stepsSpin"));
    form->addRow(tr("Steps"), steps_);
    form->addRow(QString(), addErrorLabel(QStringLiteral("steps"), steps_));

    scheduler_ = makeSamplerCombo();
    scheduler_->setObjectName(QStringLiteral("schedulerCombo"));
    scheduler_->setToolTip(tr("Sampler, as A1111 names it (\"Karras\": its Karras noise schedule)"));
    form->addRow(tr("Sampler"), scheduler_);
    form->addRow(QString(), addErrorLabel(QStringLiteral("scheduler"), scheduler_));

    previewEvery_ = makeSpin(0, 100000);
    previewEvery_->setObjectName(QStringLiteral("previewEverySpin"));
    previewEvery_->setPrefix(tr("every "));
    previewEvery_->setSuffix(tr(" steps"));
    previewEvery_->setSpecialValueText(tr("never (the final image only)"));
    previewEvery_->setToolTip(
        tr("The canvas shows the image forming after every N steps (Stable Diffusion: A1111's "
           "\"Approx cheap\" preview of the latents; the VAE decodes the final image). 0: never."));
    form->addRow(tr("Preview"), previewEvery_);
    form->addRow(QString(), addErrorLabel(QStringLiteral("preview_every"), previewEvery_));

    for (QSpinBox* spin : {width_, height_, steps_, previewEvery_})
        connect(spin, &QSpinBox::valueChanged, this, &ImageGroup::edited);
    connect(seed_, &QLineEdit::textChanged, this, &ImageGroup::edited);
    connect(dice_, &QToolButton::clicked, this, &ImageGroup::rollSeed);
    connect(reuseSeed_, &QToolButton::clicked, this, [this] {
        if (lastRunSeed_) seed_->setText(QString::number(*lastRunSeed_));
    });
    connect(scheduler_, &QComboBox::currentIndexChanged, this, &ImageGroup::edited);
}

void ImageGroup::readInto(RunConfig& c) const {
    c.width = width_->value();
    c.height = height_->value();
    c.seed = seed_->text().toULongLong();
    c.steps = steps_->value();
    c.previewEvery = previewEvery_->value();
    c.scheduler = parseScheduler(selectedName(scheduler_));
    if (hasKarras(c.scheduler)) c.schedulerOptions.karrasSigmas = scheduler_->currentData(kKarrasRole).toBool();
}

void ImageGroup::showConfig(const RunConfig& c) {
    width_->setValue(c.width);
    height_->setValue(c.height);
    seed_->setText(QString::number(c.seed));
    steps_->setValue(c.steps);
    previewEvery_->setValue(c.previewEvery);
    selectSampler(scheduler_, c.scheduler, c.schedulerOptions.karrasSigmas);
}

QSize ImageGroup::canvasSize() const { return {width_->value(), height_->value()}; }

void ImageGroup::followStartImage(bool follows, const std::optional<QSize>& size) {
    if (size) {
        const QSignalBlocker blockW(width_), blockH(height_);
        width_->setValue(size->width());
        height_->setValue(size->height());
    }
    for (QSpinBox* side : {width_, height_}) {
        side->setReadOnly(follows);
        side->setToolTip(follows ? tr("The start image's size times the scale; choose Target size (Start image) "
                                      "to type a size")
                                 : (side == width_ ? tr("Image width") : tr("Image height")));
    }
}

void ImageGroup::setLastRunSeed(std::uint64_t seed) {
    lastRunSeed_ = seed;
    reuseSeed_->setEnabled(true);
    reuseSeed_->setToolTip(tr("Reuse the seed of the last run: %1").arg(seed));
}

void ImageGroup::rollSeed() {
    // 32 bits: easy to read back, type and share.
    seed_->setText(QString::number(QRandomGenerator::global()->generate()));
}

}  // namespace tessera
