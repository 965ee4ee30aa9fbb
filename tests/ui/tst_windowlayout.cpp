// The window on a 1366 x 768 laptop screen and from the keyboard: it fits the screen with its
// title bar (its minimum height well under 700 px), the History dock grows when its edge is dragged
// (the charts scroll instead of holding the height), long status texts are cut with "…" and kept
// whole in their tooltips without widening the window; View ▸ Go to history puts the keyboard in
// the history, Help ▸ Keyboard shortcuts lists every key, and `tessera --help` answers without a
// display.
#include <QAction>
#include <QDialog>
#include <QDockWidget>
#include <QFileInfo>
#include <QLabel>
#include <QProcess>
#include <QProcessEnvironment>
#include <QStandardPaths>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>

#include "TinyRun.h"
#include "ui/ConfigPanel.h"
#include "ui/HistoryPanel.h"
#include "ui/MainWindow.h"

using namespace tessera;

namespace {

template <typename T>
T* child(QObject* parent, const char* name) {
    T* found = parent->findChild<T*>(QString::fromLatin1(name));
    if (!found) qFatal("no child named %s", name);
    return found;
}

}  // namespace

class TestWindowLayout : public QObject {
    Q_OBJECT

private:
    QTemporaryDir scratch_;
    int count_ = 0;
    std::unique_ptr<MainWindow> freshWindow() {
        ++count_;
        return std::make_unique<MainWindow>(
            std::make_unique<SettingsFile>(scratch_.filePath(QStringLiteral("s-%1.ini").arg(count_))),
            scratch_.filePath(QStringLiteral("history-%1").arg(count_)));
    }

private slots:
    void init() { testing::failOnGuiThreadIo(); }

    void initTestCase() {
        QVERIFY(scratch_.isValid());
        QStandardPaths::setTestModeEnabled(true);
    }

    void fitsA1366x768ScreenWithItsTitleBar() {
        auto window = freshWindow();
        window->show();
        QVERIFY(QTest::qWaitForWindowExposed(window.get()));
        const QSize least = window->minimumSizeHint().expandedTo(window->minimumSize());
        QVERIFY2(least.height() < 700, qPrintable(QStringLiteral("minimum height %1").arg(least.height())));
        QVERIFY2(least.width() <= 1366, qPrintable(QStringLiteral("minimum width %1").arg(least.width())));
        // The charts keep their width beside the canvas.
        QVERIFY(child<QDockWidget>(window.get(), "chartsDock")->minimumSizeHint().width() >= 380);
    }

    void historyDockGrowsWhenDragged() {
        auto window = freshWindow();
        window->resize(1366, 690);
        window->show();
        QVERIFY(QTest::qWaitForWindowExposed(window.get()));
        auto* history = child<QDockWidget>(window.get(), "historyDock");
        const int before = history->height();
        // What dragging the separator above the dock does.
        window->resizeDocks({history}, {400}, Qt::Vertical);
        QTRY_VERIFY2(history->height() >= 380,
                     qPrintable(QStringLiteral("history %1 px high (was %2)").arg(history->height()).arg(before)));
        QVERIFY(!history->isFloating());
        QCOMPARE(window->height(), 690);
    }

    void longStatusTextsAreCutAndWholeInTheirTooltips() {
        auto window = freshWindow();
        window->resize(1366, 690);
        window->show();
        QVERIFY(QTest::qWaitForWindowExposed(window.get()));
        QVERIFY(testing::waitForModelCheck(*window->configPanel()));  // its answer sets the progress text
        QCoreApplication::processEvents();
        const int widthBefore = window->minimumSizeHint().width();
        const QString longText = QStringLiteral(
            "Finished 20 steps, 441 tiles in 812.33 s (40616.5 ms/step) · seams 1.02 (1 = invisible, worst "
            "border 1.31) · precision: fp32 (the cpu backend computes in fp32; fp16 was asked) · text: 2 "
            "chunk(s) of 75 tokens, sd1 text encoder, clip skip 2, cfg 7 · vae: decoded in 36 tiles");
        window->showNote(longText);
        auto* note = child<QLabel>(window.get(), "statusNote");
        QCOMPARE(note->toolTip(), longText);
        QVERIFY(note->width() < note->fontMetrics().horizontalAdvance(longText));
        auto* progress = child<QLabel>(window.get(), "progressText");
        // The progress text with a long phase, as StatusLine sets it.
        progress->setText(longText + longText);
        progress->setToolTip(longText + longText);
        progress->updateGeometry();
        QCoreApplication::processEvents();
        QCOMPARE(window->minimumSizeHint().width(), widthBefore);
        QVERIFY(window->width() <= 1366);
        // It is cut, and the status text keeps its room beside it.
        QTRY_VERIFY(progress->width() < progress->fontMetrics().horizontalAdvance(progress->text()));
        QVERIFY2(note->width() >= 200, qPrintable(QString::number(note->width())));
    }

    void keyboardReachesTheHistory() {
        auto window = freshWindow();
        window->show();
        window->activateWindow();
        QVERIFY(QTest::qWaitForWindowActive(window.get()));
        QAction* go = window->focusHistoryAction();
        QCOMPARE(go->shortcut(), QKeySequence(QStringLiteral("Ctrl+H")));
        QTest::keyClick(window.get(), Qt::Key_H, Qt::ControlModifier);
        QTRY_COMPARE(QApplication::focusWidget(), static_cast<QWidget*>(window->historyPanel()->table()));
        // Hidden, the dock comes back for it.
        child<QDockWidget>(window.get(), "historyDock")->hide();
        go->trigger();
        QTRY_VERIFY(child<QDockWidget>(window.get(), "historyDock")->isVisible());
    }

    void helpListsTheKeyboardShortcuts() {
        auto window = freshWindow();
        window->show();
        QAction* shortcuts = window->shortcutsAction();
        QCOMPARE(shortcuts->shortcut(), QKeySequence(QKeySequence::HelpContents));
        shortcuts->trigger();
        auto* dialog = window->findChild<QDialog*>(QStringLiteral("shortcutsDialog"));
        QVERIFY(dialog && dialog->isVisible());
        auto* table = child<QTableWidget>(dialog, "shortcutsTable");
        QStringList rows;
        for (int row = 0; row < table->rowCount(); ++row)
            rows << table->item(row, 0)->text() + QStringLiteral(" = ") + table->item(row, 1)->text();
        const QString all = rows.join('\n');
        for (const QString& expected :
             {QStringLiteral("Ctrl+R = Run ▸ Run"), QStringLiteral("Ctrl+H = View ▸ Go to history"),
              QStringLiteral("Ctrl+Shift+V = Edit ▸ Paste parameters"), QStringLiteral("Esc = Run ▸ Stop"),
              QStringLiteral("Enter = History: open the selected run")})
            QVERIFY2(all.contains(expected), qPrintable(all));
        dialog->close();
    }

    void helpNeedsNoDisplay() {
        const QString gui = QStringLiteral(TESSERA_BINARY_DIR "/ui/tessera");
        if (!QFileInfo::exists(gui)) QSKIP("the tessera executable is not built in this build folder");
        // As on a machine without X: no display, and Qt's default platform, which would need one.
        QProcess tessera;
        QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
        env.remove(QStringLiteral("DISPLAY"));
        env.remove(QStringLiteral("WAYLAND_DISPLAY"));
        env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("xcb"));
        tessera.setProcessEnvironment(env);
        for (const QString& option : {QStringLiteral("--help"), QStringLiteral("--version")}) {
            tessera.start(gui, {option});
            QVERIFY(tessera.waitForFinished(60000));
            const QString out = QString::fromUtf8(tessera.readAllStandardOutput());
            const QString err = QString::fromUtf8(tessera.readAllStandardError());
            QCOMPARE(tessera.exitStatus(), QProcess::NormalExit);
            QVERIFY2(tessera.exitCode() == 0, qPrintable(out + err));
            QVERIFY2(out.contains(option == QStringLiteral("--help") ? QStringLiteral("Usage:")
                                                                     : QStringLiteral("tessera ")),
                     qPrintable(out + err));
        }
    }
};

QTEST_MAIN(TestWindowLayout)
#include "tst_windowlayout.moc"
