// HistoryPanel: the run history as a table (thumbnail, label, configuration, time, peak
// memory, graph mode), newest first. Select two rows and press Compare; Restore puts a run's
// settings back in the panel; Delete removes it. Holds no history itself: the window passes
// the entries of its RunHistory and acts on the signals.
#pragma once

#include <vector>

#include <QStringList>
#include <QWidget>

#include "app/RunHistory.h"

class QPushButton;
class QTableWidget;

namespace tessera {

class HistoryPanel : public QWidget {
    Q_OBJECT
public:
    enum Column { ThumbnailColumn, LabelColumn, ConfigColumn, TimeColumn, MemoryColumn, GraphsColumn, ColumnCount };

    explicit HistoryPanel(QWidget* parent = nullptr);

    void setEntries(const std::vector<HistoryEntry>& entries);
    int rowCount() const;
    QTableWidget* table() const { return table_; }
    // Run ids of the selected rows, in table order.
    QStringList selectedIds() const;
    void selectIds(const QStringList& ids);

signals:
    void compareRequested(const QString& idA, const QString& idB);
    void restoreRequested(const QString& id);
    void removeRequested(const QString& id);

private:
    void updateButtons();

    QTableWidget* table_ = nullptr;
    QPushButton* compare_ = nullptr;
    QPushButton* restore_ = nullptr;
    QPushButton* remove_ = nullptr;
};

}  // namespace tessera
