// OutputSet: all-or-nothing sets of output files (temporary files, fsync, renames, manifest
// last), ended cleanly on failure and on the fatal signals, stale temporary files of earlier
// runs swept; the pre-work output folder check.
#include "core/run/OutputSet.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>
#include <random>
#include <utility>

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "core/base/BoundedInput.h"
#include "core/run/RunConfig.h"

namespace tessera::output_detail {

// What a signal handler may touch: fixed storage, atomics and async-signal-safe calls only.
// Each file of a live set holds one slot: its folder (as an open descriptor), its temporary
// file (open and locked) and the names of the temporary file, the target and the kept file,
// so the handler can end the set without allocating.
enum SlotState : int {
    kFree,
    kFilling,   // claimed; no temporary file yet
    kTemp,      // the temporary file may exist and is not yet whole
    kWritten,   // the temporary file is whole and on disk
    kRenaming,  // being renamed to the target
    kFinal,     // at the target
    kKept,      // ended: kept under the incomplete name
    kGone,      // ended: removed
};
constexpr std::size_t kNameBytes = 256;       // NAME_MAX + 1 on Linux
constexpr std::size_t kPathBytes = 4096;      // PATH_MAX on Linux
constexpr std::size_t kTempSuffixChars = 13;  // ".tmp-XXXXXXXX"

struct Slot {
    std::atomic<int> state{kFree};
    bool keep = false;
    int dirFd = -1;
    int tempFd = -1;
    char temp[kNameBytes] = {};
    char target[kNameBytes] = {};
    char kept[kNameBytes] = {};
    char keptPath[kPathBytes] = {};  // for the line on stderr
};

constexpr int kSlots = 64;
Slot slots[kSlots];
std::atomic<unsigned> interruptions{0};

constexpr int kSignalCount = 5;
constexpr int kSignals[kSignalCount] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGPIPE};
constexpr const char* kSignalNames[kSignalCount] = {"SIGHUP", "SIGINT", "SIGQUIT", "SIGTERM", "SIGPIPE"};
struct sigaction previous[kSignalCount];
bool installed[kSignalCount] = {};
std::mutex liveMutex;
int liveSets = 0;

// The gate between the sets' file operations and the signal handler, one word so that both
// sides change it with one compare-and-swap: the count of operations under way, whether a
// signal's action is being taken (by one thread; no operation starts meanwhile), and one
// pending bit per signal that arrived while an operation ran. The last operation to end takes
// the pending signals' action, so a signal given to any thread waits for every operation.
constexpr unsigned kBusyMask = 0xffffu;
constexpr unsigned kActing = 1u << 16;
constexpr unsigned kPendingShift = 17;
std::atomic<unsigned> gate{0};

int signalIndex(int signal) {
    for (int i = 0; i < kSignalCount; ++i)
        if (kSignals[i] == signal) return i;
    return -1;
}

// Ends one slot's file: a whole file marked keep goes to its incomplete name, anything else of
// it is removed. Returns whether it was kept now. Async-signal-safe; also used outside signals.
bool endSlot(Slot& slot) {
    const int state = slot.state.load();
    const int dir = slot.dirFd;
    bool kept = false;
    switch (state) {
        case kTemp:
            ::unlinkat(dir, slot.temp, 0);
            break;
        case kWritten:
            kept = slot.keep && ::renameat(dir, slot.temp, dir, slot.kept) == 0;
            if (!kept) ::unlinkat(dir, slot.temp, 0);
            break;
        case kRenaming:  // the rename may have happened: no temporary file then
            if (slot.keep) {
                kept = ::renameat(dir, slot.temp, dir, slot.kept) == 0 ||
                       (errno == ENOENT && ::renameat(dir, slot.target, dir, slot.kept) == 0);
                if (!kept) ::unlinkat(dir, slot.temp, 0);
            } else if (::unlinkat(dir, slot.temp, 0) != 0 && errno == ENOENT) {
                ::unlinkat(dir, slot.target, 0);
            }
            break;
        case kFinal:
            kept = slot.keep && ::renameat(dir, slot.target, dir, slot.kept) == 0;
            if (!kept) ::unlinkat(dir, slot.target, 0);
            break;
        default:
            return false;  // free, being claimed, or already ended
    }
    slot.state.store(kept ? kKept : kGone);
    return kept;
}

// One line for stderr, built without allocating.
struct Line {
    char text[kPathBytes + 512] = {};
    std::size_t length = 0;
    void append(const char* part) {
        while (part && *part && length < sizeof text) text[length++] = *part++;
    }
};

// Tells where a kept file went; the process may end right after, so there is no other chance.
void tellKept(const Slot& slot, int signalIndex) {
    Line line;
    line.append(program_invocation_short_name);
    line.append(": ");
    line.append(kSignalNames[signalIndex]);
    line.append(" while writing output files: the set is incomplete; its finished '");
    line.append(slot.target);
    line.append("' is kept as '");
    line.append(slot.keptPath);
    line.append("', the rest was removed\n");
    // stderr may be a closed pipe: the SIGPIPE of this write must not replace the signal
    // being handled, so it is ignored for the write.
    struct sigaction ignore {
    }, before{};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    ::sigaction(SIGPIPE, &ignore, &before);
    if (::write(STDERR_FILENO, line.text, line.length) < 0) {
        // nothing more can be said
    }
    ::sigaction(SIGPIPE, &before, nullptr);
}

// Gives signal `index` its previous action: back in place, then raised. In the handler the
// signal is blocked, so it arrives when the handler returns; elsewhere it arrives at once
// (unblocked for the call, in case this thread blocks it). The default action ends the
// process with this signal, as if the set had never been there.
void passOn(int index, bool inHandler) {
    const int signal = kSignals[index];
    ::sigaction(signal, &previous[index], nullptr);
    if (inHandler) {
        ::raise(signal);
        return;
    }
    sigset_t only, before;
    sigemptyset(&only);
    sigaddset(&only, signal);
    ::pthread_sigmask(SIG_UNBLOCK, &only, &before);
    ::raise(signal);
    ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
}

// The action of the signals in `pending` (bits in kSignals order), by the thread holding
// kActing while no file operation runs: every live set ends (whole files marked keep kept),
// then each signal takes its previous action. Signals that arrive meanwhile are taken too.
void takeActions(unsigned pending, bool inHandler) {
    while (pending != 0) {
        interruptions.fetch_add(1);
        int first = 0;
        while ((pending & (1u << first)) == 0) ++first;
        for (Slot& slot : slots)
            if (endSlot(slot)) tellKept(slot, first);
        for (int i = 0; i < kSignalCount; ++i)
            if ((pending & (1u << i)) != 0) passOn(i, inHandler);
        unsigned now = gate.load();
        while (!gate.compare_exchange_weak(now, (now >> kPendingShift) != 0 ? kActing : 0u)) {}
        pending = now >> kPendingShift;
    }
}

// Operations and signals (see gate). Entering waits while a signal's action is taken.
void enterOperation() {
    unsigned now = gate.load();
    for (;;) {
        if ((now & kActing) != 0) {
            ::sched_yield();
            now = gate.load();
        } else if (gate.compare_exchange_weak(now, now + 1)) {
            return;
        }
    }
}

void leaveOperation() noexcept {
    unsigned now = gate.load();
    for (;;) {
        const unsigned pending = now >> kPendingShift;
        if ((now & kBusyMask) == 1 && pending != 0) {
            if (gate.compare_exchange_weak(now, kActing)) {
                takeActions(pending, false);
                return;
            }
        } else if (gate.compare_exchange_weak(now, now - 1)) {
            return;
        }
    }
}

}  // namespace tessera::output_detail

extern "C" {
static void tesseraOutputSetOnSignal(int signal) {
    using namespace tessera::output_detail;
    const int savedErrno = errno;
    const int index = signalIndex(signal);
    unsigned now = gate.load();
    bool taken = index < 0;
    while (!taken) {
        if ((now & (kBusyMask | kActing)) != 0) {
            // An operation (or an action) is under way: whoever ends it takes this signal.
            taken = gate.compare_exchange_weak(now, now | (1u << (kPendingShift + index)));
        } else if (gate.compare_exchange_weak(now, kActing)) {
            takeActions(1u << index, true);
            taken = true;
        }
    }
    errno = savedErrno;
}
}

namespace tessera {

using namespace output_detail;
namespace fs = std::filesystem;

namespace {

void installSignalHandlers() {
    for (int i = 0; i < kSignalCount; ++i) {
        struct sigaction current {};
        ::sigaction(kSignals[i], nullptr, &current);
        // An ignored signal (nohup) stays ignored.
        installed[i] = (current.sa_flags & SA_SIGINFO) || current.sa_handler != SIG_IGN;
        if (!installed[i]) continue;
        previous[i] = current;
        struct sigaction ours {};
        ours.sa_handler = tesseraOutputSetOnSignal;
        ours.sa_flags = SA_RESTART;
        sigemptyset(&ours.sa_mask);
        for (int s : kSignals) sigaddset(&ours.sa_mask, s);
        ::sigaction(kSignals[i], &ours, nullptr);
    }
}

void restoreSignalHandlers() {
    for (int i = 0; i < kSignalCount; ++i) {
        if (!installed[i]) continue;
        struct sigaction current {};
        ::sigaction(kSignals[i], nullptr, &current);
        // Only if still ours: whoever replaced it since keeps theirs.
        if (!(current.sa_flags & SA_SIGINFO) && current.sa_handler == tesseraOutputSetOnSignal)
            ::sigaction(kSignals[i], &previous[i], nullptr);
        installed[i] = false;
    }
}

// One file operation of a set: the fatal signals wait until it ends (see gate).
class FileOperation {
public:
    FileOperation() { enterOperation(); }
    ~FileOperation() { leaveOperation(); }
    FileOperation(const FileOperation&) = delete;
    FileOperation& operator=(const FileOperation&) = delete;
};

std::string randomSuffix() {
    thread_local std::mt19937 bits{std::random_device{}()};
    char text[16];
    std::snprintf(text, sizeof text, ".tmp-%08x", static_cast<unsigned>(bits()));
    return text;
}

std::uintmax_t freeBytes(const struct statvfs& v) {
    return static_cast<std::uintmax_t>(v.f_bavail) * static_cast<std::uintmax_t>(v.f_frsize);
}

// The soft file size limit (ulimit -f) in bytes; 0 when there is none.
std::uintmax_t fileSizeLimit() {
    struct rlimit limit {};
    if (::getrlimit(RLIMIT_FSIZE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 0;
    return static_cast<std::uintmax_t>(limit.rlim_cur);
}

void closeQuietly(int fd) {
    if (fd >= 0) ::close(fd);
}

// Removes the stale temporary files in the folder `dirFd`: regular files of exactly the
// temporary naming, unlocked (their writer is gone: a writer holds its lock until its set
// ends, and flock locks belong to open files, so this process's own are seen as taken too)
// and last written more than kStaleTemporarySeconds ago. Anything else is left alone.
void removeStaleTemporaries(int dirFd) {
    const int listFd = ::openat(dirFd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (listFd < 0) return;
    DIR* list = ::fdopendir(listFd);
    if (list == nullptr) {
        ::close(listFd);
        return;
    }
    const std::time_t now = std::time(nullptr);
    while (const dirent* entry = ::readdir(list)) {
        if (!OutputSet::isTemporaryName(entry->d_name) || (entry->d_type != DT_REG && entry->d_type != DT_UNKNOWN))
            continue;
        const int fd = ::openat(dirFd, entry->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd < 0) continue;
        struct stat opened {
        }, named{};
        // Still the same file under that name once locked: only that one is removed.
        if (::fstat(fd, &opened) == 0 && S_ISREG(opened.st_mode) &&
            now - opened.st_mtime > OutputSet::kStaleTemporarySeconds && ::flock(fd, LOCK_EX | LOCK_NB) == 0 &&
            ::fstatat(dirFd, entry->d_name, &named, AT_SYMLINK_NOFOLLOW) == 0 && named.st_dev == opened.st_dev &&
            named.st_ino == opened.st_ino)
            ::unlinkat(dirFd, entry->d_name, 0);
        ::close(fd);
    }
    ::closedir(list);
}

constexpr const char* kInterrupted = "writing was interrupted by a signal";

}  // namespace

struct OutputSet::State {
    struct File {
        fs::path target;
        Slot* slot = nullptr;
    };
    std::vector<File> files;
    std::vector<fs::path> createdFolders;                  // outermost first
    std::vector<std::pair<dev_t, ino_t>> sweptFolders;     // stale temporary files removed there
    std::vector<std::pair<fs::path, fs::path>> keptFiles;  // target, where it was kept
    std::vector<fs::path> keptPaths;
    std::function<void(WriteStep, const fs::path&)> observer;
    unsigned interruptionsAtStart = 0;
    bool done = false;

    bool interrupted() const { return interruptions.load() != interruptionsAtStart; }

    void notify(WriteStep step, const fs::path& target) const {
        if (observer) observer(step, target);
    }

    // Runs `body` as one file operation (signals held until it ends). On failure, and when a
    // signal's action ended the set meanwhile (its handler returned), the set ends and the
    // OutputError says what remains.
    void operate(const std::function<void()>& body) {
        {
            const FileOperation operation;
            try {
                if (!done && interrupted()) throw OutputError(kInterrupted);
                body();
            } catch (const OutputError& e) {
                const bool wasDone = done;
                end();
                throw OutputError(e.what() + (wasDone ? std::string() : remains()));
            } catch (...) {
                end();
                throw;
            }
        }
        if (!done && interrupted()) {
            const FileOperation operation;
            end();
            throw OutputError(kInterrupted + remains());
        }
    }

    // The end of a failure message: what of the set remains.
    std::string remains() const {
        if (keptFiles.empty()) return "; nothing of this output set was kept";
        std::string text = "; this output set is incomplete:";
        for (const auto& kept : keptFiles)
            text += " its finished " + inQuotes(kept.first.filename().string()) + " was kept as " +
                    inQuotes(kept.second.string(), input_limits::kPathChars) + ";";
        return text + " nothing else of it was kept";
    }

    // Creates the missing folders of `dir`, remembering which, for end().
    void createFolders(const fs::path& dir) {
        if (done) throw OutputError("cannot create " + shownPath(dir) + ": this output set is already finished");
        std::vector<fs::path> missing;
        for (fs::path p = dir; !p.empty(); p = p.parent_path()) {
            struct stat st {};
            if (::stat(p.c_str(), &st) == 0) break;
            missing.push_back(p);
            if (p == p.parent_path()) break;
        }
        for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
            if (::mkdir(it->c_str(), 0777) == 0) {
                createdFolders.push_back(*it);
            } else if (errno != EEXIST) {
                const int error = errno;
                throw OutputError("cannot create the folder " + shownPath(*it) + ": " + std::strerror(error));
            }
        }
    }

    Slot& claimSlot() {
        for (Slot& slot : slots) {
            int expected = kFree;
            if (slot.state.compare_exchange_strong(expected, kFilling)) return slot;
        }
        throw OutputError("more than " + std::to_string(kSlots) + " output files are being written at once");
    }

    [[noreturn]] static void failWrite(const fs::path& target, int error, std::uintmax_t size,
                                       std::uintmax_t freeBefore) {
        std::string message = "cannot write " + shownPath(target) + ": " + std::strerror(error);
        if (error == ENOSPC || error == EDQUOT)
            message += " (the file needs " + byteCountText(size) + "; " + byteCountText(freeBefore) + " was free)";
        if (error == EFBIG)
            message += " (the file needs " + byteCountText(size) + "; the file size limit, ulimit -f, is " +
                       byteCountText(fileSizeLimit()) + ")";
        throw OutputError(message);
    }

    // Writes the whole of `bytes` to fd; returns 0 or the errno of the failure.
    static int writeAll(int fd, std::string_view bytes) {
        std::size_t written = 0;
        while (written < bytes.size()) {
            const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
            if (n < 0) {
                if (errno == EINTR) continue;
                return errno;
            }
            written += static_cast<std::size_t>(n);
        }
        return 0;
    }

    // The sweep of stale temporary files, once per folder and set.
    void sweepOnce(int dirFd) {
        struct stat st {};
        if (::fstat(dirFd, &st) != 0) return;
        const std::pair<dev_t, ino_t> folder{st.st_dev, st.st_ino};
        if (std::find(sweptFolders.begin(), sweptFolders.end(), folder) != sweptFolders.end()) return;
        sweptFolders.push_back(folder);
        removeStaleTemporaries(dirFd);
    }

    // Creates the slot's temporary file, locked; -1 (errno set) when none can be created.
    static int createTemporary(Slot& slot, const std::string& name) {
        for (int attempt = 0; attempt < 16; ++attempt) {
            slot.state.store(kFilling);
            std::snprintf(slot.temp, kNameBytes, "%s%s", name.c_str(), randomSuffix().c_str());
            slot.state.store(kTemp);  // before the file exists: from now on the set's end removes it
            const int fd = ::openat(slot.dirFd, slot.temp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
            if (fd < 0) {
                const int error = errno;
                slot.state.store(kFilling);  // a file of that name is not ours to remove
                if (error == EEXIST) continue;
                errno = error;
                return -1;
            }
            // Locked until the set ends, so no other run's sweep takes it for stale (where the
            // file system has no locks, the sweep's age limit still spares it).
            const bool taken = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
            struct stat st {};
            // Removed by a sweep between the creation and the lock: another name.
            if (taken || (::fstat(fd, &st) == 0 && st.st_nlink == 0)) {
                ::close(fd);
                if (taken) ::unlinkat(slot.dirFd, slot.temp, 0);
                errno = EEXIST;
                continue;
            }
            return fd;
        }
        return -1;
    }

    void write(const fs::path& target, std::string_view bytes, bool keep) {
        if (done) throw OutputError("cannot add " + shownPath(target) + ": this output set is already finished");
        const std::string name = target.filename().string();
        if (name.empty() || name == "." || name == "..")
            throw OutputError("cannot write " + shownPath(target) + ": it does not name a file");
        if (name.size() + kTempSuffixChars >= kNameBytes)
            throw OutputError("cannot write " + shownPath(target) + ": the file name is " +
                              std::to_string(name.size()) + " bytes long; at most " +
                              std::to_string(kNameBytes - 1 - kTempSuffixChars) + " are allowed");
        const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
        const int dirFd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dirFd < 0) {
            const int error = errno;
            throw OutputError("cannot write " + shownPath(target) +
                              ": its folder cannot be opened: " + std::strerror(error));
        }
        Slot* slot = nullptr;
        fs::path kept;
        try {
            kept = incompletePath(target);
            sweepOnce(dirFd);
            files.reserve(files.size() + 1);
            slot = &claimSlot();
        } catch (...) {
            ::close(dirFd);
            throw;
        }
        files.push_back(File{target, slot});
        slot->dirFd = dirFd;
        slot->keep = keep;
        std::snprintf(slot->target, kNameBytes, "%s", name.c_str());
        std::snprintf(slot->kept, kNameBytes, "%s", kept.filename().c_str());
        std::snprintf(slot->keptPath, kPathBytes, "%s", kept.c_str());

        const int fd = createTemporary(*slot, name);
        if (fd < 0) {
            const int error = errno;
            throw OutputError("cannot write " + shownPath(target) +
                              ": no file can be created in its folder: " + std::strerror(error));
        }
        slot->tempFd = fd;
        struct statvfs space {};
        const std::uintmax_t freeBefore = ::fstatvfs(fd, &space) == 0 ? freeBytes(space) : 0;
        int error = writeAll(fd, bytes);
        if (!error) notify(WriteStep::TemporaryWritten, target);
        // The data must be on disk before a rename makes it visible, or a crash can leave an empty file.
        if (!error && ::fsync(fd) != 0) error = errno;
        if (error) failWrite(target, error, bytes.size(), freeBefore);
        slot->state.store(kWritten);
        notify(WriteStep::TemporarySynced, target);
    }

    void commit() {
        if (done) throw OutputError("this output set is already finished");
        for (File& file : files) {
            notify(WriteStep::Renaming, file.target);
            file.slot->state.store(kRenaming);
            if (::renameat(file.slot->dirFd, file.slot->temp, file.slot->dirFd, file.slot->target) != 0) {
                const int error = errno;
                throw OutputError("cannot rename " + shownPath(file.target.parent_path() / file.slot->temp) + " to " +
                                  shownPath(file.target) + ": " + std::strerror(error));
            }
            file.slot->state.store(kFinal);
            notify(WriteStep::Renamed, file.target);
        }
        notify(WriteStep::FoldersSyncing, {});
        // The renames themselves on disk (best effort: some file systems refuse fsync on folders).
        for (const File& file : files) ::fsync(file.slot->dirFd);
        release();
    }

    // Ends an uncommitted set: whole files marked keep are kept, everything else removed.
    void end() noexcept {
        if (done) return;
        for (auto it = files.rbegin(); it != files.rend(); ++it) {
            endSlot(*it->slot);
            if (it->slot->state.load() != kKept) continue;
            try {
                const fs::path kept = incompletePath(it->target);
                keptFiles.emplace_back(it->target, kept);
                keptPaths.push_back(kept);
            } catch (...) {  // only the message loses it
            }
        }
        std::reverse(keptFiles.begin(), keptFiles.end());
        std::reverse(keptPaths.begin(), keptPaths.end());
        for (auto it = createdFolders.rbegin(); it != createdFolders.rend(); ++it)
            ::rmdir(it->c_str());  // only if empty
        release();
    }

    // The set is finished: slots back to the pool, signal handlers back when it was the last set.
    void release() noexcept {
        for (File& file : files) {
            Slot& slot = *file.slot;
            closeQuietly(slot.tempFd);  // and its lock
            closeQuietly(slot.dirFd);
            slot.tempFd = -1;
            slot.dirFd = -1;
            slot.keep = false;
            slot.state.store(kFree);
        }
        files.clear();
        done = true;
        const std::lock_guard lock(liveMutex);
        if (--liveSets == 0) restoreSignalHandlers();
    }
};

OutputSet::OutputSet() : state_(std::make_unique<State>()) {
    const std::lock_guard lock(liveMutex);
    if (liveSets++ == 0) installSignalHandlers();
    state_->interruptionsAtStart = interruptions.load();
}

OutputSet::~OutputSet() { discard(); }

void OutputSet::add(const fs::path& target, std::string_view bytes, IfIncomplete ifIncomplete) {
    state_->operate([&] { state_->write(target, bytes, ifIncomplete == IfIncomplete::Keep); });
}

void OutputSet::createFolders(const fs::path& folder) {
    state_->operate([&] { state_->createFolders(folder); });
}

void OutputSet::addText(const fs::path& target, std::string_view text, IfIncomplete ifIncomplete) {
    if (isValidUtf8(text))
        add(target, text, ifIncomplete);
    else
        add(target, toValidUtf8(text), ifIncomplete);
}

void OutputSet::commit() {
    state_->operate([&] { state_->commit(); });
}

void OutputSet::discard() noexcept {
    const FileOperation operation;
    state_->end();
}

std::size_t OutputSet::size() const { return state_->files.size(); }

const std::vector<fs::path>& OutputSet::keptFiles() const { return state_->keptPaths; }

void OutputSet::setStepObserver(std::function<void(WriteStep, const fs::path&)> observer) {
    state_->observer = std::move(observer);
}

fs::path OutputSet::incompletePath(const fs::path& target) {
    const fs::path name = target.filename();
    return target.parent_path() / (name.stem().string() + ".incomplete" + name.extension().string());
}

bool OutputSet::isTemporaryName(std::string_view name) {
    if (name.size() <= kTempSuffixChars) return false;  // the target's name comes first
    const std::string_view suffix = name.substr(name.size() - kTempSuffixChars);
    return suffix.substr(0, 5) == ".tmp-" && std::all_of(suffix.begin() + 5, suffix.end(), [](char c) {
               return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
           });
}

void writeFileAtomically(const std::string& path, std::string_view bytes) {
    OutputSet set;
    set.add(path, bytes);
    set.commit();
}

void writeTextFileAtomically(const std::string& path, std::string_view text) {
    OutputSet set;
    set.addText(path, text);
    set.commit();
}

std::string byteCountText(std::uintmax_t bytes) {
    if (bytes < 1024) return std::to_string(bytes) + (bytes == 1 ? " byte" : " bytes");
    const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    double value = static_cast<double>(bytes) / 1024.0;
    int unit = 0;
    while (value >= 1024.0 && unit < 4) {
        value /= 1024.0;
        ++unit;
    }
    char text[48];
    std::snprintf(text, sizeof text, "%.1f %s", value, units[unit]);
    return std::string(text) + " (" + std::to_string(bytes) + " bytes)";
}

namespace {

// What stops files needing `needs` from being created in `asked` (or, when it does not exist
// yet, in its nearest existing folder, where it would be created); "" when nothing does.
// `it` is how the message refers to `asked` itself: "it" or its quoted name.
std::string folderProblem(const fs::path& asked, const std::string& it, const OutputNeeds& needs) {
    if (asked.native().size() > input_limits::kPathChars)
        return "the path is " + std::to_string(asked.native().size()) + " characters long; at most " +
               std::to_string(input_limits::kPathChars) + " are allowed";
    fs::path existing = asked;
    for (;;) {
        struct stat st {};
        if (::stat(existing.c_str(), &st) == 0) {
            if (!S_ISDIR(st.st_mode))
                return (existing == asked ? it : shownPath(existing)) + " is a file, not a folder";
            break;
        }
        const int error = errno;
        const fs::path parent = existing.has_relative_path() ? existing.parent_path() : existing;
        if ((error != ENOENT && error != ENOTDIR) || parent == existing)
            return (existing == asked ? it : shownPath(existing)) + " cannot be used: " + std::strerror(error);
        existing = parent.empty() ? fs::path(".") : parent;
    }
    const std::string where = existing == asked ? it : shownPath(existing) + " (where the folder would be created)";
    // An unnamed file (O_TMPFILE) vanishes on close, so even a signal leaves nothing behind.
    int probe = ::open(existing.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
    if (probe < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
        const fs::path named = existing / (".tessera-probe" + randomSuffix());
        probe = ::open(named.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (probe >= 0) ::unlink(named.c_str());
    }
    if (probe < 0) {
        const int error = errno;
        return "no file can be created in " + where + ": " + std::strerror(error);
    }
    struct statvfs space {};
    const bool haveSpace = ::fstatvfs(probe, &space) == 0;
    ::close(probe);
    const std::string whatFor = needs.what.empty() ? std::string() : " (" + needs.what + ")";
    if (haveSpace && freeBytes(space) < needs.totalBytes)
        return byteCountText(freeBytes(space)) + " free in " + where + "; these outputs need about " +
               byteCountText(needs.totalBytes) + whatFor;
    const std::uintmax_t limit = fileSizeLimit();
    if (limit > 0 && limit < needs.largestBytes)
        return "the file size limit (ulimit -f) is " + byteCountText(limit) + "; the largest output file needs about " +
               byteCountText(needs.largestBytes) + whatFor;
    return {};
}

}  // namespace

void checkOutputFolder(const fs::path& folder, std::string_view field, const OutputNeeds& needs) {
    const fs::path asked = folder.empty() ? fs::path(".") : folder;
    const std::string problem = folderProblem(asked, "it", needs);
    if (!problem.empty())
        throw ValidationError(std::string(field), std::string(field) + ": " + shownPath(asked) + ": " + problem);
}

void checkOutputFile(const fs::path& file, std::string_view field, const OutputNeeds& needs) {
    const auto fail = [&](const std::string& why) {
        throw ValidationError(std::string(field),
                              std::string(field) + ": cannot write " + shownPath(file) + ": " + why);
    };
    const std::string name = file.filename().string();
    if (name.empty() || name == "." || name == "..") fail("a file name is needed, not a folder");
    if (name.size() + kTempSuffixChars >= kNameBytes)
        fail("the file name is " + std::to_string(name.size()) + " bytes long; at most " +
             std::to_string(kNameBytes - 1 - kTempSuffixChars) + " are allowed");
    struct stat st {};
    if (::stat(file.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) fail("it is a folder; a file name is needed");
    const fs::path folder = file.parent_path().empty() ? fs::path(".") : file.parent_path();
    if (::stat(folder.c_str(), &st) != 0) {
        const int error = errno;
        fail("its folder " + shownPath(folder) + " cannot be used: " + std::strerror(error));
    }
    const std::string problem = folderProblem(folder, "its folder " + shownPath(folder), needs);
    if (!problem.empty()) fail(problem);
}

}  // namespace tessera
