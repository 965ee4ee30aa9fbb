// While alive, SIGINT/SIGTERM (Ctrl-C) ask one engine to cancel; the engine checks between
// tile batches, so its run returns "cancelled" instead of the process dying mid-write. A
// second signal ends the program at once (the default action is restored by the first).
// The engine pointer lives in a process-wide atomic because a signal handler can reach
// nothing else; one guard at a time. Scope it around the run only: once the outputs are being
// written, core/OutputSet's own handler takes SIGINT/SIGTERM (it removes the unfinished set,
// then takes the action this guard restored, by default ending the process).
#pragma once

#include <atomic>
#include <csignal>

#include "core/run/Engine.h"

namespace tessera {

namespace interrupt_detail {
inline std::atomic<Engine*> target{nullptr};
extern "C" inline void onInterrupt(int signal) {
    if (Engine* engine = target.load()) engine->requestCancel();
    std::signal(signal, SIG_DFL);
}
}  // namespace interrupt_detail

class InterruptCancels {
public:
    explicit InterruptCancels(Engine& engine) {
        interrupt_detail::target.store(&engine);
        previousInt_ = std::signal(SIGINT, interrupt_detail::onInterrupt);
        previousTerm_ = std::signal(SIGTERM, interrupt_detail::onInterrupt);
    }
    ~InterruptCancels() {
        std::signal(SIGINT, previousInt_);
        std::signal(SIGTERM, previousTerm_);
        interrupt_detail::target.store(nullptr);
    }
    InterruptCancels(const InterruptCancels&) = delete;
    InterruptCancels& operator=(const InterruptCancels&) = delete;

private:
    void (*previousInt_)(int) = SIG_DFL;
    void (*previousTerm_)(int) = SIG_DFL;
};

}  // namespace tessera
