#include "app/qt/GuiThreadGuard.h"

#include <atomic>

#include <QCoreApplication>
#include <QGuiApplication>
#include <QLoggingCategory>
#include <QThread>

namespace tessera {

Q_LOGGING_CATEGORY(lcThreads, "tessera.threads")

namespace {

std::atomic<int> violations{0};
std::atomic<const char*> lastViolation{nullptr};

bool onGuiThread() {
    const QCoreApplication* app = QCoreApplication::instance();
    return app && qobject_cast<const QGuiApplication*>(app) && QThread::currentThread() == app->thread();
}

}  // namespace

void assertNotGuiThread(const char* what) {
    if (!onGuiThread()) return;
    violations.fetch_add(1);
    lastViolation.store(what);
    qCWarning(lcThreads).nospace().noquote() << kGuiThreadViolationPrefix << what;
}

int guiThreadViolations() { return violations.load(); }

const char* lastGuiThreadViolation() {
    const char* what = lastViolation.load();
    return what ? what : "";
}

void resetGuiThreadViolations() {
    violations.store(0);
    lastViolation.store(nullptr);
}

}  // namespace tessera
