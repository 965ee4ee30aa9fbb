#include "app/qt/JobQueue.h"

#include <algorithm>

namespace tessera {

JobQueue::JobQueue(int maxThreads, QObject* parent) : QObject(parent) {
    pool_.setMaxThreadCount(std::max(1, maxThreads));
    pool_.setObjectName(QStringLiteral("tessera-jobs"));
}

JobQueue::~JobQueue() { pool_.waitForDone(); }

}  // namespace tessera
