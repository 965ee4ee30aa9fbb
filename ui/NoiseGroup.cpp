#include "ui/NoiseGroup.h"

#include <cstdint>
#include <utility>
#include <vector>

#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QRegularExpressionValidator>
#include <QSpinBox>
#include <QToolButton>

namespace tessera {

namespace {

struct SourceItem {
    RngSource source;
    QString text;
    QString toolTip;
};

// The README's "Noise sources" table: what each draws and what it is for.
std::vector<SourceItem> sourceItems() {
    return {
        {RngSource::Tessera, NoiseGroup::tr("Tessera"),
         NoiseGroup::tr("Tessera's counter-based Philox, keyed by (seed, draw, canvas element): the same bits on every "
                        "GPU and on the CPU engine, whatever the tile plan. For everything made in Tessera.")},
        {RngSource::CPU, NoiseGroup::tr("CPU"),
         NoiseGroup::tr("torch.randn on torch's CPU generator (mt19937): A1111 images with \"RNG: CPU\", and "
                        "ComfyUI's start noise. Bit-exact on both engines.")},
        {RngSource::GPU, NoiseGroup::tr("GPU"),
         NoiseGroup::tr("torch.randn on torch's CUDA generator: A1111 images without an RNG key (its default). "
                        "Bit for bit on the CUDA engine's GPU; the CPU engine uses A1111's NV emulation (within "
                        "about 3e-6) and says so. Large latents differ between GPUs of different sizes.")},
        {RngSource::NV, NoiseGroup::tr("NV"),
         NoiseGroup::tr("A1111's \"NV\" source, its CPU emulation of the CUDA generator: A1111 images with "
                        "\"RNG: NV\". Bit-exact on both engines.")},
        {RngSource::ComfyUI, NoiseGroup::tr("ComfyUI"),
         NoiseGroup::tr("ComfyUI's: the start noise from torch's CPU generator, the ancestral steps' from the "
                        "device's generator seeded with the seed. For ComfyUI images (its workflow in a PNG picks "
                        "it). A1111's extra seed settings do not apply.")},
    };
}

bool isA1111Source(RngSource source) {
    return source == RngSource::CPU || source == RngSource::GPU || source == RngSource::NV;
}

QLineEdit* makeNumberEdit(const char* name, const QString& pattern) {
    auto* edit = new QLineEdit;
    edit->setObjectName(QString::fromLatin1(name));
    edit->setValidator(new QRegularExpressionValidator(QRegularExpression(pattern), edit));
    return edit;
}

}  // namespace

NoiseGroup::NoiseGroup(QWidget* parent) : ConfigGroup(tr("Noise"), parent) {
    setObjectName(QStringLiteral("noiseGroup"));
    auto* form = new QFormLayout(this);
    form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);

    source_ = new QComboBox;
    source_->setObjectName(QStringLiteral("noiseSourceCombo"));
    QString sourcesHelp = tr("Where the start noise and the noise of ancestral steps come from:");
    for (const SourceItem& item : sourceItems()) {
        source_->addItem(item.text, enumName(item.source));
        source_->setItemData(source_->count() - 1, item.toolTip, Qt::ToolTipRole);
        sourcesHelp += QStringLiteral("\n• %1: %2").arg(item.text, item.toolTip);
    }
    source_->setToolTip(sourcesHelp);
    extra_ = new QToolButton;
    extra_->setObjectName(QStringLiteral("noiseExtraButton"));
    extra_->setText(tr("Extra"));
    extra_->setCheckable(true);
    extra_->setToolButtonStyle(Qt::ToolButtonTextBesideIcon);
    extra_->setArrowType(Qt::RightArrow);
    extra_->setToolTip(tr("A1111's Extra seed settings: variation seed and strength, resize seed from, ENSD"));
    auto* sourceRow = new QHBoxLayout;
    sourceRow->setContentsMargins(0, 0, 0, 0);
    sourceRow->addWidget(source_, 1);
    sourceRow->addWidget(extra_);
    form->addRow(tr("Source"), sourceRow);

    // The extras are rows of this form (aligned with Source), shown and hidden with the expander.
    form_ = form;
    ignored_ = makeRoleLabel("noiseExtrasIgnored", "hint");
    ignored_->setText(tr("These apply to the A1111 sources (CPU, GPU, NV); the source chosen ignores them."));
    form->addRow(ignored_);

    variationSeed_ = makeNumberEdit("variationSeedEdit", QStringLiteral("[0-9]{1,20}"));
    variationSeed_->setToolTip(
        tr("A1111's Variation seed: its noise is blended into the seed's by the strength (A1111's subseed)"));
    variationStrength_ = makeRealSpin(0, 1, 0.01, 2);
    variationStrength_->setObjectName(QStringLiteral("variationStrengthSpin"));
    variationStrength_->setSpecialValueText(tr("off"));
    variationStrength_->setToolTip(
        tr("A1111's Variation strength, 0 to 1: how far the noise moves toward the variation seed's (a spherical "
           "blend); 0 is off"));
    auto* variationRow = new QHBoxLayout;
    variationRow->setContentsMargins(0, 0, 0, 0);
    variationRow->addWidget(variationSeed_, 3);
    variationRow->addWidget(new QLabel(tr("Strength")));
    variationRow->addWidget(variationStrength_, 2);
    form->addRow(tr("Variation"), variationRow);
    form->addRow(QString(), addErrorLabel(QStringLiteral("variation_strength"), variationStrength_));

    resizeWidth_ = makeSpin(0, kMaxSpin, tr(" px"));
    resizeWidth_->setObjectName(QStringLiteral("seedResizeWidthSpin"));
    resizeHeight_ = makeSpin(0, kMaxSpin, tr(" px"));
    resizeHeight_->setObjectName(QStringLiteral("seedResizeHeightSpin"));
    for (QSpinBox* side : {resizeWidth_, resizeHeight_}) {
        side->setSingleStep(64);
        side->setSpecialValueText(tr("off"));
        side->setToolTip(
            tr("A1111's Resize seed from: the noise an image of this size would get, centred on this one, so a "
               "seed found at one size keeps its look at another. 0 × 0 is off."));
    }
    auto* resizeRow = new QHBoxLayout;
    resizeRow->setContentsMargins(0, 0, 0, 0);
    resizeRow->addWidget(resizeWidth_, 1);
    resizeRow->addWidget(new QLabel(QStringLiteral("×")));
    resizeRow->addWidget(resizeHeight_, 1);
    form->addRow(tr("Resize from"), resizeRow);
    form->addRow(QString(), addErrorLabel(QStringLiteral("seed_resize_from"), resizeWidth_));

    ensd_ = makeNumberEdit("ensdEdit", QStringLiteral("-?[0-9]{1,19}"));
    ensd_->setToolTip(
        tr("A1111's Eta noise seed delta (ENSD, in its Settings): the ancestral steps draw their noise from a "
           "generator seeded with seed + ENSD (31337 in many shared images); 0 is off"));
    form->addRow(tr("ENSD"), ensd_);
    extraRows_ = {variationRow, resizeRow, ensd_};
    for (QObject* row : extraRows_) setRowShown(row, false);

    connect(extra_, &QToolButton::toggled, this, &NoiseGroup::setExtrasShown);
    connect(source_, &QComboBox::currentIndexChanged, this, [this] {
        updateHints();
        emit edited();
    });
    for (QLineEdit* edit : {variationSeed_, ensd_})
        connect(edit, &QLineEdit::textChanged, this, [this] {
            updateHints();
            emit edited();
        });
    connect(variationStrength_, &QDoubleSpinBox::valueChanged, this, [this] {
        updateHints();
        emit edited();
    });
    for (QSpinBox* side : {resizeWidth_, resizeHeight_})
        connect(side, &QSpinBox::valueChanged, this, [this] {
            updateHints();
            emit edited();
        });
    updateHints();
}

void NoiseGroup::readInto(RunConfig& c) const {
    c.noiseSource = parseRngSource(selectedName(source_));
    c.variationSeed = variationSeed_->text().toULongLong();
    c.variationStrength = variationStrength_->value();
    c.seedResizeFromWidth = resizeWidth_->value();
    c.seedResizeFromHeight = resizeHeight_->value();
    c.etaNoiseSeedDelta = ensd_->text().toLongLong();
}

void NoiseGroup::showConfig(const RunConfig& c) {
    selectIn(source_, c.noiseSource);
    variationSeed_->setText(QString::number(c.variationSeed));
    variationStrength_->setValue(c.variationStrength);
    resizeWidth_->setValue(c.seedResizeFromWidth);
    resizeHeight_->setValue(c.seedResizeFromHeight);
    ensd_->setText(QString::number(c.etaNoiseSeedDelta));
    // Settings that change the image are never hidden behind a closed expander when they arrive.
    if (extrasSet()) setExtrasShown(true);
    updateHints();
}

bool NoiseGroup::extrasShown() const { return extra_->isChecked(); }

void NoiseGroup::setExtrasShown(bool shown) {
    if (extra_->isChecked() != shown) extra_->setChecked(shown);  // toggled comes back here once
    extra_->setArrowType(shown ? Qt::DownArrow : Qt::RightArrow);
    for (QObject* row : extraRows_) setRowShown(row, shown);
    updateHints();
}

void NoiseGroup::setRowShown(QObject* row, bool shown) {
    if (auto* layout = qobject_cast<QLayout*>(row))
        form_->setRowVisible(layout, shown);
    else
        form_->setRowVisible(static_cast<QWidget*>(row), shown);
}

bool NoiseGroup::extrasSet() const {
    return variationStrength_->value() != 0.0 || resizeWidth_->value() != 0 || resizeHeight_->value() != 0 ||
           ensd_->text().toLongLong() != 0;
}

void NoiseGroup::updateHints() {
    const bool set = extrasSet();
    form_->setRowVisible(ignored_, extrasShown() && set && !isA1111Source(parseRngSource(selectedName(source_))));
    // Closed, the button still tells that extras act on the run.
    QFont font = extra_->font();
    font.setBold(set && !extrasShown());
    extra_->setFont(font);
    extra_->setText(set && !extrasShown() ? tr("Extra (set)") : tr("Extra"));
}

}  // namespace tessera
