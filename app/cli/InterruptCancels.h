// While alive, SIGINT/SIGTERM (Ctrl-C) ask one engine to cancel; the engine checks between
// tile batches, so its run returns "cancelled" instead of the process dying mid-run. A second
// signal ends the program at once (the first puts the default action back, SA_RESETHAND).
// The engine pointer lives in a process-wide atomic because a signal handler can reach
// nothing else; one guard at a time. The actions in place before are saved and restored whole
// (sigaction), so a handler taking siginfo survives the guard. Scope it around the run only:
// once the outputs are being written, core/run/OutputSet.h's own handler takes the fatal
// signals (SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGPIPE): the set completes or ends with its
// finished image kept, then the action this guard restored (by default, the end of the process).
#pragma once

#include <atomic>
#include <csignal>

#include "core/run/Engine.h"

namespace tessera {

namespace interrupt_detail {
inline std::atomic<Engine*> target{nullptr};
extern "C" inline void onInterrupt(int /*signal*/) {
    if (Engine* engine = target.load()) engine->requestCancel();  // an atomic store
}
}  // namespace interrupt_detail

class InterruptCancels {
public:
    explicit InterruptCancels(Engine& engine) {
        interrupt_detail::target.store(&engine);
        struct sigaction cancel {};
        cancel.sa_handler = interrupt_detail::onInterrupt;
        cancel.sa_flags = SA_RESETHAND | SA_RESTART;
        sigemptyset(&cancel.sa_mask);
        ::sigaction(SIGINT, &cancel, &previousInt_);
        ::sigaction(SIGTERM, &cancel, &previousTerm_);
    }
    ~InterruptCancels() {
        ::sigaction(SIGINT, &previousInt_, nullptr);
        ::sigaction(SIGTERM, &previousTerm_, nullptr);
        interrupt_detail::target.store(nullptr);
    }
    InterruptCancels(const InterruptCancels&) = delete;
    InterruptCancels& operator=(const InterruptCancels&) = delete;

private:
    struct sigaction previousInt_ {};
    struct sigaction previousTerm_ {};
};

}  // namespace tessera
