#include "ui/HistoryPanel.h"

#include <QDateTime>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QPixmap>
#include <QPushButton>
#include <QTableWidget>
#include <QVBoxLayout>

#include "app/Exporters.h"

namespace tessera {

namespace {

constexpr int kIdRole = Qt::UserRole + 1;

QTableWidgetItem* textItem(const QString& text, Qt::Alignment align = Qt::AlignLeft | Qt::AlignVCenter) {
    auto* item = new QTableWidgetItem(text);
    item->setTextAlignment(align);
    item->setToolTip(text);
    return item;
}

}  // namespace

HistoryPanel::HistoryPanel(QWidget* parent) : QWidget(parent) {
    setObjectName(QStringLiteral("historyPanel"));
    table_ = new QTableWidget(0, ColumnCount);
    table_->setObjectName(QStringLiteral("historyTable"));
    table_->setHorizontalHeaderLabels({QString(), tr("Label"), tr("Configuration"), tr("Time"), tr("Peak mem."), tr("Graphs")});
    table_->setSelectionBehavior(QAbstractItemView::SelectRows);
    table_->setSelectionMode(QAbstractItemView::ExtendedSelection);
    table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
    table_->setIconSize(QSize(RunHistory::kThumbnailSize, RunHistory::kThumbnailSize));
    table_->verticalHeader()->setVisible(false);
    table_->verticalHeader()->setDefaultSectionSize(RunHistory::kThumbnailSize + 6);
    table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    table_->horizontalHeader()->setSectionResizeMode(ConfigColumn, QHeaderView::Stretch);
    table_->setWordWrap(false);

    compare_ = new QPushButton(tr("Compare"));
    compare_->setObjectName(QStringLiteral("historyCompare"));
    compare_->setToolTip(tr("Select two runs to compare them"));
    restore_ = new QPushButton(tr("Restore settings"));
    restore_->setObjectName(QStringLiteral("historyRestore"));
    remove_ = new QPushButton(tr("Delete"));
    remove_->setObjectName(QStringLiteral("historyDelete"));

    auto* buttons = new QHBoxLayout;
    buttons->addWidget(compare_);
    buttons->addWidget(restore_);
    buttons->addStretch(1);
    buttons->addWidget(remove_);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->addWidget(table_, 1);
    layout->addLayout(buttons);

    connect(table_->selectionModel(), &QItemSelectionModel::selectionChanged, this, &HistoryPanel::updateButtons);
    connect(compare_, &QPushButton::clicked, this, [this] {
        const QStringList ids = selectedIds();
        if (ids.size() == 2) emit compareRequested(ids.at(0), ids.at(1));
    });
    connect(restore_, &QPushButton::clicked, this, [this] {
        const QStringList ids = selectedIds();
        if (ids.size() == 1) emit restoreRequested(ids.at(0));
    });
    connect(remove_, &QPushButton::clicked, this, [this] {
        for (const QString& id : selectedIds()) emit removeRequested(id);
    });
    connect(table_, &QTableWidget::cellDoubleClicked, this, [this](int row, int) {
        if (QTableWidgetItem* item = table_->item(row, LabelColumn)) emit restoreRequested(item->data(kIdRole).toString());
    });
    updateButtons();
}

void HistoryPanel::setEntries(const std::vector<HistoryEntry>& entries) {
    const QStringList selected = selectedIds();
    table_->setRowCount(0);
    table_->setRowCount(static_cast<int>(entries.size()));
    int row = 0;
    // Newest first: the run just finished is at the top.
    for (auto it = entries.rbegin(); it != entries.rend(); ++it, ++row) {
        const HistoryEntry& entry = *it;
        const RunRecord& r = entry.record;
        auto* thumb = new QTableWidgetItem;
        if (!entry.thumbnail.isNull()) thumb->setIcon(QIcon(QPixmap::fromImage(entry.thumbnail)));
        table_->setItem(row, ThumbnailColumn, thumb);
        QString label = QString::fromStdString(r.config.label);
        const QDateTime started = QDateTime::fromString(QString::fromStdString(r.startedAt), Qt::ISODate);
        const QString when = started.isValid() ? started.toLocalTime().toString(QStringLiteral("yyyy-MM-dd HH:mm"))
                                               : QString::fromStdString(r.runId);
        label = label.isEmpty() ? when : label + QStringLiteral("\n") + when;
        auto* labelItem = textItem(label);
        labelItem->setData(kIdRole, entry.id());
        table_->setItem(row, LabelColumn, labelItem);
        QString config = configSummary(r.config) + QStringLiteral(" · seed %1").arg(r.config.seed);
        if (r.status != "finished") config += QStringLiteral(" · ") + QString::fromStdString(r.status);
        table_->setItem(row, ConfigColumn, textItem(config));
        table_->setItem(row, TimeColumn, textItem(QStringLiteral("%1 s").arg(r.totalMs / 1000.0, 0, 'f', 2),
                                                  Qt::AlignRight | Qt::AlignVCenter));
        const double peak = peakMemoryMiB(r);
        table_->setItem(row, MemoryColumn, textItem(peak >= 0 ? QStringLiteral("%1 MiB").arg(peak, 0, 'f', 0) : QStringLiteral("—"),
                                                    Qt::AlignRight | Qt::AlignVCenter));
        // Lanes beside the mode: how many tile batches were in flight (CUDA engine).
        QString graphs = QString::fromStdString(r.graphs.mode);
        if (r.graphs.lanes > 1) graphs += QStringLiteral(" · %1 lanes").arg(r.graphs.lanes);
        table_->setItem(row, GraphsColumn, textItem(graphs));
    }
    selectIds(selected);
    updateButtons();
}

int HistoryPanel::rowCount() const { return table_->rowCount(); }

QStringList HistoryPanel::selectedIds() const {
    QStringList ids;
    for (int row = 0; row < table_->rowCount(); ++row) {
        QTableWidgetItem* item = table_->item(row, LabelColumn);
        if (item && table_->selectionModel()->isRowSelected(row, {})) ids << item->data(kIdRole).toString();
    }
    return ids;
}

void HistoryPanel::selectIds(const QStringList& ids) {
    table_->clearSelection();
    for (int row = 0; row < table_->rowCount(); ++row) {
        QTableWidgetItem* item = table_->item(row, LabelColumn);
        if (item && ids.contains(item->data(kIdRole).toString()))
            table_->selectionModel()->select(table_->model()->index(row, 0),
                                             QItemSelectionModel::Select | QItemSelectionModel::Rows);
    }
    updateButtons();
}

void HistoryPanel::updateButtons() {
    const int selected = static_cast<int>(selectedIds().size());
    compare_->setEnabled(selected == 2);
    restore_->setEnabled(selected == 1);
    remove_->setEnabled(selected > 0);
}

}  // namespace tessera
