// ModelPicker: the dialog behind the Model group's "Pick…" button. Three lists in one tree:
// Recent (the models used last, newest first), the models folder's checkpoints and diffusers
// folders (the folder is a setting: Browse… changes it), and the random-weight models. Each row
// shows the family, the size and, for checkpoints, A1111's short hash, computed off the GUI
// thread when the row is selected (ModelCatalog caches it) and stopped when another row is
// selected or the picker closes; the row's tooltip is its info-style description. Double-click
// or "Use" picks the model (modelChosen).
#pragma once

#include <QDialog>
#include <QStringList>

#include "app/qt/ModelCatalog.h"

class QDialogButtonBox;
class QLabel;
class QLineEdit;
class QTreeWidget;
class QTreeWidgetItem;

namespace tessera {

class ModelPicker : public QDialog {
    Q_OBJECT
public:
    // Columns of the tree.
    enum Column { NameColumn, FamilyColumn, SizeColumn, HashColumn };
    // Roles of a model row's name cell.
    static constexpr int kPathRole = Qt::UserRole + 1;

    ModelPicker(ModelCatalog* catalog, const QString& modelsFolder, const QStringList& recent,
                QWidget* parent = nullptr);

    QString modelsFolder() const { return folder_; }
    // Lists another folder (what Browse… does); modelsFolderChanged tells the owner.
    void setModelsFolder(const QString& folder);
    // The tree's top-level groups: Recent, the models folder, Random weights.
    QTreeWidget* tree() const { return tree_; }
    // The row of `path` in `group` (0: recent, 1: folder, 2: random); null when not listed.
    QTreeWidgetItem* rowOf(const QString& path, int group) const;
    bool isScanning() const { return scanning_; }

signals:
    void modelChosen(const QString& path);
    void modelsFolderChanged(const QString& folder);
    // A scan's answer is shown.
    void listed();

private:
    void rescan();
    void onScanned(quint64 jobId, const CatalogScan& scan);
    void onHashed(const QString& path, const QString& shortHash, const QString& error);
    void onCurrentChanged(QTreeWidgetItem* item);
    void chooseFolder();
    void accept() override;
    void hideEvent(QHideEvent* event) override;
    QTreeWidgetItem* addRow(QTreeWidgetItem* group, const CatalogEntry& entry);

    ModelCatalog* catalog_ = nullptr;
    QString folder_;
    QStringList recent_;
    QLineEdit* folderEdit_ = nullptr;
    QLabel* folderNote_ = nullptr;
    QTreeWidget* tree_ = nullptr;
    QTreeWidgetItem* recentGroup_ = nullptr;
    QTreeWidgetItem* folderGroup_ = nullptr;
    QTreeWidgetItem* randomGroup_ = nullptr;
    QDialogButtonBox* buttons_ = nullptr;
    bool scanning_ = false;
};

}  // namespace tessera
