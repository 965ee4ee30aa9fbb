#include "ui/ModelPicker.h"

#include <QDialogButtonBox>
#include <QDir>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QToolButton>
#include <QTreeWidget>
#include <QVBoxLayout>

namespace tessera {

namespace {

constexpr int kEntryRole = Qt::UserRole + 2;  // the row's CatalogEntry

QString sizeCell(qint64 bytes) {
    if (bytes < 0) return QStringLiteral("—");
    if (bytes >= (qint64{1} << 30)) return QObject::tr("%1 GB").arg(bytes / 1e9, 0, 'f', 2);
    if (bytes >= (qint64{1} << 20)) return QObject::tr("%1 MB").arg(bytes / 1e6, 0, 'f', 1);
    return QObject::tr("%1 KB").arg((bytes + 999) / 1000);
}

QTreeWidgetItem* makeGroup(QTreeWidget* tree, const QString& title) {
    auto* group = new QTreeWidgetItem(tree, {title});
    group->setFlags(Qt::ItemIsEnabled);
    QFont bold = group->font(0);
    bold.setBold(true);
    group->setFont(0, bold);
    group->setFirstColumnSpanned(true);
    group->setExpanded(true);
    return group;
}

}  // namespace

ModelPicker::ModelPicker(ModelCatalog* catalog, const QString& modelsFolder, const QStringList& recent, QWidget* parent)
    : QDialog(parent), catalog_(catalog), folder_(modelsFolder), recent_(recent) {
    setObjectName(QStringLiteral("modelPicker"));
    setWindowTitle(tr("Pick a model"));
    auto* layout = new QVBoxLayout(this);

    auto* folderRow = new QHBoxLayout;
    folderRow->addWidget(new QLabel(tr("Models folder")));
    folderEdit_ = new QLineEdit(folder_);
    folderEdit_->setObjectName(QStringLiteral("modelsFolderEdit"));
    folderEdit_->setPlaceholderText(tr("a folder of .safetensors checkpoints and diffusers folders"));
    folderRow->addWidget(folderEdit_, 1);
    auto* browse = new QToolButton;
    browse->setObjectName(QStringLiteral("modelsFolderBrowse"));
    browse->setText(tr("Browse…"));
    folderRow->addWidget(browse);
    layout->addLayout(folderRow);
    folderNote_ = new QLabel;
    folderNote_->setObjectName(QStringLiteral("modelsFolderNote"));
    folderNote_->setWordWrap(true);
    layout->addWidget(folderNote_);

    tree_ = new QTreeWidget;
    tree_->setObjectName(QStringLiteral("modelTree"));
    tree_->setHeaderLabels({tr("Model"), tr("Family"), tr("Size"), tr("Hash")});
    tree_->setRootIsDecorated(false);
    tree_->setUniformRowHeights(true);
    tree_->header()->setStretchLastSection(false);
    tree_->header()->setSectionResizeMode(NameColumn, QHeaderView::Stretch);
    for (const int column : {FamilyColumn, SizeColumn, HashColumn})
        tree_->header()->setSectionResizeMode(column, QHeaderView::ResizeToContents);
    tree_->headerItem()->setToolTip(HashColumn, tr("A1111's model hash: the first 10 hex digits of the file's SHA-256, "
                                                   "computed when the row is selected"));
    recentGroup_ = makeGroup(tree_, tr("Recent"));
    folderGroup_ = makeGroup(tree_, tr("Models folder"));
    randomGroup_ = makeGroup(tree_, tr("Random weights (timing, no file)"));
    for (const CatalogEntry& entry : ModelCatalog::randomEntries()) addRow(randomGroup_, entry);
    layout->addWidget(tree_, 1);

    buttons_ = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel);
    buttons_->button(QDialogButtonBox::Ok)->setText(tr("Use"));
    buttons_->button(QDialogButtonBox::Ok)->setEnabled(false);
    layout->addWidget(buttons_);
    resize(720, 460);

    connect(buttons_, &QDialogButtonBox::accepted, this, &ModelPicker::accept);
    connect(buttons_, &QDialogButtonBox::rejected, this, &QDialog::reject);
    connect(browse, &QToolButton::clicked, this, &ModelPicker::chooseFolder);
    connect(folderEdit_, &QLineEdit::editingFinished, this, [this] { setModelsFolder(folderEdit_->text().trimmed()); });
    connect(tree_, &QTreeWidget::currentItemChanged, this, [this](QTreeWidgetItem* item) { onCurrentChanged(item); });
    connect(tree_, &QTreeWidget::itemDoubleClicked, this, [this](QTreeWidgetItem* item) {
        if (item && item->parent()) accept();
    });
    connect(catalog_, &ModelCatalog::scanned, this, &ModelPicker::onScanned);
    connect(catalog_, &ModelCatalog::hashed, this, &ModelPicker::onHashed);
    connect(catalog_, &ModelCatalog::hashStopped, this, [this](const QString& path) {
        // Not hashed after all: asked again when the row is selected again.
        for (QTreeWidgetItem* group : {recentGroup_, folderGroup_})
            for (int i = 0; i < group->childCount(); ++i) {
                QTreeWidgetItem* row = group->child(i);
                if (row->data(NameColumn, kPathRole).toString() == path && row->text(HashColumn) == tr("hashing…"))
                    row->setText(HashColumn, QString());
            }
    });
    rescan();
}

void ModelPicker::setModelsFolder(const QString& folder) {
    const QString cleaned = folder.isEmpty() ? QString() : QDir::cleanPath(folder);
    folderEdit_->setText(cleaned);
    if (cleaned == folder_) return;
    folder_ = cleaned;
    emit modelsFolderChanged(folder_);
    rescan();
}

QTreeWidgetItem* ModelPicker::rowOf(const QString& path, int group) const {
    const QTreeWidgetItem* parent = group == 0 ? recentGroup_ : group == 1 ? folderGroup_ : randomGroup_;
    for (int i = 0; i < parent->childCount(); ++i)
        if (parent->child(i)->data(NameColumn, kPathRole).toString() == path) return parent->child(i);
    return nullptr;
}

void ModelPicker::rescan() {
    scanning_ = true;
    folderNote_->setText(folder_.isEmpty() ? tr("No models folder set: Browse… to list one.")
                                           : tr("Listing %1…").arg(QDir::toNativeSeparators(folder_)));
    QStringList recent;
    for (const QString& path : recent_)
        if (!path.startsWith(QStringLiteral("random:"))) recent << path;
    catalog_->scan(folder_, recent);
}

QTreeWidgetItem* ModelPicker::addRow(QTreeWidgetItem* group, const CatalogEntry& entry) {
    auto* row = new QTreeWidgetItem(group, {entry.name, entry.family, sizeCell(entry.bytes), QString()});
    row->setData(NameColumn, kPathRole, entry.path);
    row->setData(NameColumn, kEntryRole, QVariant::fromValue(entry));
    const QString tip = entry.path == entry.name
                            ? entry.details
                            : QDir::toNativeSeparators(entry.path) + QStringLiteral("\n\n") + entry.details;
    for (int column = 0; column < tree_->columnCount(); ++column) row->setToolTip(column, tip);
    row->setTextAlignment(SizeColumn, Qt::AlignRight | Qt::AlignVCenter);
    if (!entry.checkpoint)
        row->setText(HashColumn, entry.bytes < 0 ? QString() : tr("—"));
    else if (const auto hash = catalog_->cachedHash(entry))
        row->setText(HashColumn, *hash);
    if (!entry.error.isEmpty()) {
        row->setForeground(NameColumn, QColor(0xc0, 0x39, 0x2b));
        row->setForeground(FamilyColumn, QColor(0xc0, 0x39, 0x2b));
    }
    return row;
}

void ModelPicker::onScanned(quint64, const CatalogScan& scan) {
    if (scan.folder != folder_) return;  // an answer for a folder left since
    scanning_ = false;
    const QString current =
        tree_->currentItem() ? tree_->currentItem()->data(NameColumn, kPathRole).toString() : QString();
    qDeleteAll(recentGroup_->takeChildren());
    qDeleteAll(folderGroup_->takeChildren());
    for (const QString& path : recent_) {
        if (path.startsWith(QStringLiteral("random:"))) {
            for (const CatalogEntry& random : ModelCatalog::randomEntries())
                if (random.path == path) addRow(recentGroup_, random);
            continue;
        }
        for (const CatalogEntry& entry : scan.others)
            if (entry.path == path) addRow(recentGroup_, entry)->setText(NameColumn, QDir::toNativeSeparators(path));
    }
    for (const CatalogEntry& entry : scan.inFolder) addRow(folderGroup_, entry);
    recentGroup_->setHidden(recentGroup_->childCount() == 0);
    folderGroup_->setText(NameColumn, folder_.isEmpty()
                                          ? tr("Models folder (none set)")
                                          : tr("Models folder: %1").arg(QDir::toNativeSeparators(folder_)));
    if (!scan.folderError.isEmpty())
        folderNote_->setText(scan.folderError);
    else if (folder_.isEmpty())
        folderNote_->setText(tr("No models folder set: Browse… to list one."));
    else
        folderNote_->setText(tr("%n model(s) found; select one to see its hash, hover it for details.", nullptr,
                                static_cast<int>(scan.inFolder.size())));
    for (QTreeWidgetItem* group : {recentGroup_, folderGroup_, randomGroup_})
        for (int i = 0; i < group->childCount(); ++i)
            if (group->child(i)->data(NameColumn, kPathRole).toString() == current)
                tree_->setCurrentItem(group->child(i));
    emit listed();
}

void ModelPicker::onHashed(const QString& path, const QString& shortHash, const QString& error) {
    for (QTreeWidgetItem* group : {recentGroup_, folderGroup_})
        for (int i = 0; i < group->childCount(); ++i) {
            QTreeWidgetItem* row = group->child(i);
            if (row->data(NameColumn, kPathRole).toString() != path) continue;
            row->setText(HashColumn, shortHash.isEmpty() ? tr("?") : shortHash);
            if (!error.isEmpty()) row->setToolTip(HashColumn, error);
        }
}

void ModelPicker::onCurrentChanged(QTreeWidgetItem* item) {
    const bool model = item && item->parent();
    buttons_->button(QDialogButtonBox::Ok)->setEnabled(model);
    const auto entry = model ? item->data(NameColumn, kEntryRole).value<CatalogEntry>() : CatalogEntry();
    if (entry.checkpoint && (item->text(HashColumn).isEmpty() || item->text(HashColumn) == tr("hashing…"))) {
        item->setText(HashColumn, tr("hashing…"));
        catalog_->requestHash(entry);  // stops the hash of the row selected before, if any
    } else {
        catalog_->cancelHash();  // nothing to hash here: the last row's hash is of no use now
    }
}

void ModelPicker::hideEvent(QHideEvent* event) {
    catalog_->cancelHash();  // closed (used, cancelled or closed): no row is waiting for a hash
    QDialog::hideEvent(event);
}

void ModelPicker::chooseFolder() {
    const QString folder = QFileDialog::getExistingDirectory(this, tr("Choose the models folder"), folder_);
    if (!folder.isEmpty()) setModelsFolder(folder);
}

void ModelPicker::accept() {
    QTreeWidgetItem* item = tree_->currentItem();
    if (!item || !item->parent()) return;
    emit modelChosen(item->data(NameColumn, kPathRole).toString());
    QDialog::accept();
}

}  // namespace tessera
