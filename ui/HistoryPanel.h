// HistoryPanel: the run history as a table (thumbnail, label, status, model, configuration,
// time, peak memory, graph mode), newest first. Finished, cancelled and failed runs are all listed;
// the Status column says which (a failed run's error in its tooltip). Open (or double-click,
// or Enter) reopens a run; select two rows and press Compare; Copy parameters, Show in folder;
// Delete moves the selected runs to the trash and Undo brings the last deleted back. Holds no
// history itself: the window passes the entries of its HistoryStore and acts on the signals.
#pragma once

#include <vector>

#include <QStringList>
#include <QWidget>

#include "app/qt/RunHistory.h"

class QPushButton;
class QTableWidget;

namespace tessera {

class HistoryPanel : public QWidget {
    Q_OBJECT
public:
    enum Column {
        ThumbnailColumn,
        LabelColumn,
        StatusColumn,
        ModelColumn,
        ConfigColumn,
        TimeColumn,
        MemoryColumn,
        GraphsColumn,
        ColumnCount
    };

    explicit HistoryPanel(QWidget* parent = nullptr);

    void setEntries(const std::vector<HistoryEntry>& entries);
    int rowCount() const;
    QTableWidget* table() const { return table_; }
    // Run ids of the selected rows, in table order.
    QStringList selectedIds() const;
    void selectIds(const QStringList& ids);
    // Enables Undo; `what` (e.g. "2 runs") goes into its tooltip. Empty: nothing to undo.
    void setUndoText(const QString& what);
    // The row's text in the Status column ("finished", "cancelled at step 3 of 20", "failed").
    static QString statusText(const RunRecord& record);
    // The row's text in the Model column: the model the run loaded (its name in the record), or,
    // for a run that failed before it loaded one, the file or folder it was given ("default" for
    // the default model, random:sd15 as it is).
    static QString modelText(const RunRecord& record);

signals:
    void openRequested(const QString& id);
    void compareRequested(const QString& idA, const QString& idB);
    void copyParametersRequested(const QString& id);
    void showInFolderRequested(const QString& id);
    void removeRequested(const QStringList& ids);
    void undoRemoveRequested();

private:
    void updateButtons();
    QString singleSelection() const;

    QTableWidget* table_ = nullptr;
    QPushButton* open_ = nullptr;
    QPushButton* compare_ = nullptr;
    QPushButton* copyParameters_ = nullptr;
    QPushButton* showInFolder_ = nullptr;
    QPushButton* undo_ = nullptr;
    QPushButton* remove_ = nullptr;
};

}  // namespace tessera
