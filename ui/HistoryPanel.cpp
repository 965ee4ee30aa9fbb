#include "ui/HistoryPanel.h"

#include <QDateTime>
#include <QDir>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QPixmap>
#include <QPushButton>
#include <QShortcut>
#include <QStyle>
#include <QTableWidget>
#include <QVBoxLayout>

#include "app/qt/Exporters.h"
#include "core/base/BoundedInput.h"

namespace tessera {

namespace {

constexpr int kIdRole = Qt::UserRole + 1;

QTableWidgetItem* textItem(const QString& text, Qt::Alignment align = Qt::AlignLeft | Qt::AlignVCenter) {
    auto* item = new QTableWidgetItem(text);
    item->setTextAlignment(align);
    item->setToolTip(text);
    return item;
}

QPushButton* makeButton(const QString& text, const char* name, const QString& tip) {
    auto* button = new QPushButton(text);
    button->setObjectName(QString::fromLatin1(name));
    button->setToolTip(tip);
    return button;
}

}  // namespace

QString HistoryPanel::statusText(const RunRecord& r) {
    switch (r.status) {
        case RunStatus::Finished:
            return tr("finished");
        case RunStatus::Cancelled:
            return tr("cancelled at step %1 of %2").arg(r.stepsRun).arg(r.config.steps);
        case RunStatus::Failed:
            return tr("failed");
    }
    return {};  // every RunStatus is handled above
}

QString HistoryPanel::modelText(const RunRecord& r) {
    if (!r.modelName.empty()) return QString::fromStdString(toValidUtf8(r.modelName));
    QString given = QString::fromStdString(toValidUtf8(r.config.model));
    if (given.isEmpty()) return tr("default");
    if (given.startsWith(QStringLiteral("random:"))) return given;
    const QFileInfo file(QDir::cleanPath(given));
    // A checkpoint by its file name without the suffix (as A1111 names a model), a folder by its name.
    return file.suffix().isEmpty() ? file.fileName() : file.completeBaseName();
}

HistoryPanel::HistoryPanel(QWidget* parent) : QWidget(parent) {
    setObjectName(QStringLiteral("historyPanel"));
    table_ = new QTableWidget(0, ColumnCount);
    table_->setObjectName(QStringLiteral("historyTable"));
    table_->setHorizontalHeaderLabels({QString(), tr("Label"), tr("Status"), tr("Model"), tr("Configuration"),
                                       tr("Time"), tr("Peak mem."), tr("Graphs")});
    table_->setSelectionBehavior(QAbstractItemView::SelectRows);
    table_->setSelectionMode(QAbstractItemView::ExtendedSelection);
    table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
    table_->setIconSize(QSize(RunHistory::kThumbnailSize, RunHistory::kThumbnailSize));
    table_->verticalHeader()->setVisible(false);
    table_->verticalHeader()->setDefaultSectionSize(RunHistory::kThumbnailSize + 6);
    table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    table_->horizontalHeader()->setSectionResizeMode(ConfigColumn, QHeaderView::Stretch);
    table_->setWordWrap(false);

    open_ = makeButton(tr("Open"), "historyOpen",
                       tr("Show the run again: its image at full resolution, its charts and its settings (Enter, "
                          "double-click)"));
    compare_ = makeButton(tr("Compare"), "historyCompare", tr("Select two runs to compare them"));
    copyParameters_ = makeButton(tr("Copy parameters"), "historyCopyParameters",
                                 tr("Copy the run's settings as A1111's PNG Info text (prompt, steps, sampler, seed, "
                                    "size, tiles…)"));
    showInFolder_ = makeButton(tr("Show in folder"), "historyShowInFolder",
                               tr("Open the folder that holds the run's image, manifest and start image"));
    undo_ = makeButton(tr("Undo delete"), "historyUndo", QString());
    remove_ = makeButton(tr("Delete"), "historyDelete",
                         tr("Move the selected runs to the trash (Del); Undo brings them back"));

    auto* buttons = new QHBoxLayout;
    for (QPushButton* button : {open_, compare_, copyParameters_, showInFolder_}) buttons->addWidget(button);
    buttons->addStretch(1);
    buttons->addWidget(undo_);
    buttons->addWidget(remove_);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->addWidget(table_, 1);
    layout->addLayout(buttons);

    connect(table_->selectionModel(), &QItemSelectionModel::selectionChanged, this, &HistoryPanel::updateButtons);
    connect(open_, &QPushButton::clicked, this, [this] {
        if (const QString id = singleSelection(); !id.isEmpty()) emit openRequested(id);
    });
    connect(compare_, &QPushButton::clicked, this, [this] {
        const QStringList ids = selectedIds();
        if (ids.size() == 2) emit compareRequested(ids.at(0), ids.at(1));
    });
    connect(copyParameters_, &QPushButton::clicked, this, [this] {
        if (const QString id = singleSelection(); !id.isEmpty()) emit copyParametersRequested(id);
    });
    connect(showInFolder_, &QPushButton::clicked, this, [this] {
        if (const QString id = singleSelection(); !id.isEmpty()) emit showInFolderRequested(id);
    });
    connect(remove_, &QPushButton::clicked, this, [this] {
        if (const QStringList ids = selectedIds(); !ids.isEmpty()) emit removeRequested(ids);
    });
    connect(undo_, &QPushButton::clicked, this, &HistoryPanel::undoRemoveRequested);
    connect(table_, &QTableWidget::cellDoubleClicked, this, [this](int row, int) {
        if (QTableWidgetItem* item = table_->item(row, LabelColumn)) emit openRequested(item->data(kIdRole).toString());
    });
    // Keys while the table has the focus: Enter opens, Delete deletes.
    for (const auto& [key, button] :
         {std::pair{QKeySequence(Qt::Key_Return), open_}, std::pair{QKeySequence(Qt::Key_Enter), open_},
          std::pair{QKeySequence(QKeySequence::Delete), remove_}}) {
        auto* shortcut = new QShortcut(key, table_, nullptr, nullptr, Qt::WidgetShortcut);
        connect(shortcut, &QShortcut::activated, button, &QPushButton::click);
    }
    setUndoText({});
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
        if (!entry.thumbnail.isNull())
            thumb->setIcon(QIcon(QPixmap::fromImage(entry.thumbnail)));
        else if (r.status == RunStatus::Failed)
            thumb->setIcon(style()->standardIcon(QStyle::SP_MessageBoxCritical));
        table_->setItem(row, ThumbnailColumn, thumb);
        QString label = QString::fromStdString(r.config.label);
        const QDateTime started = QDateTime::fromString(QString::fromStdString(r.startedAt), Qt::ISODate);
        const QString when = started.isValid() ? started.toLocalTime().toString(QStringLiteral("yyyy-MM-dd HH:mm"))
                                               : QString::fromStdString(r.runId);
        label = label.isEmpty() ? when : label + QStringLiteral("\n") + when;
        auto* labelItem = textItem(label);
        labelItem->setData(kIdRole, entry.id());
        table_->setItem(row, LabelColumn, labelItem);
        auto* status = textItem(statusText(r));
        if (r.status == RunStatus::Failed) {
            status->setForeground(QColor(0xc0, 0x39, 0x2b));
            status->setToolTip(tr("Failed: %1").arg(QString::fromStdString(toValidUtf8(r.error))));
        } else if (r.status == RunStatus::Cancelled) {
            status->setForeground(QColor(0xa0, 0x5a, 0x00));
            status->setToolTip(entry.imagePath.isEmpty() ? tr("Stopped before the first step ended: no image")
                                                         : tr("Stopped early: the image is what the last step made"));
        }
        table_->setItem(row, StatusColumn, status);
        // Which model made it (or failed): an SD run and a default-model run look alike otherwise.
        auto* model = textItem(modelText(r));
        model->setToolTip(r.config.model.empty() ? tr("The default model")
                                                 : QString::fromStdString(toValidUtf8(r.config.model)));
        table_->setItem(row, ModelColumn, model);
        QString config = configSummary(r) + QStringLiteral(" · seed %1").arg(r.config.seed);
        if (!entry.startImagePath.isEmpty()) config += tr(" · from an image, strength %1").arg(r.config.strength);
        if (r.upscaleModel) {
            const QString upscaler = QString::fromStdString(r.upscaleModel->name);
            config = r.upscaleModel->alone ? tr("%1×%2 · upscale model %3 alone · %4")
                                                 .arg(r.config.width)
                                                 .arg(r.config.height)
                                                 .arg(upscaler, QString::fromStdString(r.upscaleModel->architecture))
                                           : config + tr(" · upscaler %1").arg(upscaler);
        }
        table_->setItem(row, ConfigColumn, textItem(config));
        // A failed run measured nothing worth comparing.
        const bool failed = r.status == RunStatus::Failed;
        table_->setItem(
            row, TimeColumn,
            textItem(failed ? QStringLiteral("—") : QStringLiteral("%1 s").arg(r.totalMs / 1000.0, 0, 'f', 2),
                     Qt::AlignRight | Qt::AlignVCenter));
        const double peak = peakMemoryMiB(r);
        table_->setItem(row, MemoryColumn,
                        textItem(peak >= 0 ? QStringLiteral("%1 MiB").arg(peak, 0, 'f', 0) : QStringLiteral("—"),
                                 Qt::AlignRight | Qt::AlignVCenter));
        // Lanes beside the mode: how many tile batches were in flight (CUDA engine).
        QString graphs =
            failed && r.environment.backend.empty() ? QStringLiteral("—") : QString::fromStdString(r.graphs.mode);
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

QString HistoryPanel::singleSelection() const {
    const QStringList ids = selectedIds();
    return ids.size() == 1 ? ids.front() : QString();
}

void HistoryPanel::selectIds(const QStringList& ids) {
    table_->clearSelection();
    for (int row = 0; row < table_->rowCount(); ++row) {
        QTableWidgetItem* item = table_->item(row, LabelColumn);
        if (item && ids.contains(item->data(kIdRole).toString())) {
            table_->selectionModel()->select(table_->model()->index(row, 0),
                                             QItemSelectionModel::Select | QItemSelectionModel::Rows);
            if (ids.size() == 1) table_->scrollToItem(item);
        }
    }
    updateButtons();
}

void HistoryPanel::setUndoText(const QString& what) {
    undo_->setEnabled(!what.isEmpty());
    undo_->setToolTip(
        what.isEmpty()
            ? tr("Nothing deleted to bring back")
            : tr("Bring back %1 from the trash (Ctrl+Z); the trash is emptied when Tessera closes").arg(what));
}

void HistoryPanel::updateButtons() {
    const int selected = static_cast<int>(selectedIds().size());
    for (QPushButton* single : {open_, copyParameters_, showInFolder_}) single->setEnabled(selected == 1);
    compare_->setEnabled(selected == 2);
    remove_->setEnabled(selected > 0);
}

}  // namespace tessera
