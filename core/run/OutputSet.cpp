// OutputSet: all-or-nothing sets of output files (temporary files, fsync, renames, manifest
// last), cleaned up on failure and on SIGINT/SIGTERM; the pre-work output folder check.
#include "core/run/OutputSet.h"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <vector>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "core/base/BoundedInput.h"
#include "core/run/RunConfig.h"

namespace tessera::output_detail {

// What a signal handler may touch: fixed storage, atomics and async-signal-safe calls only.
// Each file of a live set holds one slot: its folder (as an open descriptor) and the names of
// its temporary file and target, so the handler can remove them without allocating.
enum SlotState : int { kFree, kFilling, kTemp, kRenaming, kFinal };
constexpr std::size_t kNameBytes = 256;       // NAME_MAX + 1 on Linux
constexpr std::size_t kTempSuffixChars = 13;  // ".tmp-XXXXXXXX"

struct Slot {
    std::atomic<int> state{kFree};
    int dirFd = -1;
    char temp[kNameBytes] = {};
    char target[kNameBytes] = {};
};

constexpr int kSlots = 64;
Slot slots[kSlots];
std::atomic<unsigned> interruptions{0};
constexpr int kSignals[2] = {SIGINT, SIGTERM};
struct sigaction previous[2];
bool installed[2] = {};
std::mutex liveMutex;
int liveSets = 0;

// Removes the files of one slot. Async-signal-safe; also used outside signals.
void removeSlotFiles(Slot& slot) {
    int state = slot.state.load();
    if (state == kTemp || state == kRenaming) {
        if (::unlinkat(slot.dirFd, slot.temp, 0) == 0 || errno != ENOENT) return;
        // No temporary file: not created yet (still kTemp), or renamed meanwhile.
        state = slot.state.load();
        if (state == kTemp) return;
    }
    if (state == kRenaming || state == kFinal) ::unlinkat(slot.dirFd, slot.target, 0);
}

}  // namespace tessera::output_detail

extern "C" {
static void tesseraOutputSetOnSignal(int signal, siginfo_t* info, void* context) {
    using namespace tessera::output_detail;
    const int savedErrno = errno;
    interruptions.fetch_add(1);
    for (Slot& slot : slots) removeSlotFiles(slot);
    // The previous action back in place first, so one that raises the signal again reaches
    // it rather than this handler; the set is finished either way.
    const struct sigaction& before = previous[signal == SIGINT ? 0 : 1];
    ::sigaction(signal, &before, nullptr);
    errno = savedErrno;
    if (before.sa_flags & SA_SIGINFO) {
        before.sa_sigaction(signal, info, context);
    } else if (before.sa_handler == SIG_DFL) {
        ::raise(signal);  // blocked while this handler runs: delivered, with the default action, on return
    } else if (before.sa_handler != SIG_IGN) {
        before.sa_handler(signal);
    }
}
}

namespace tessera {

using namespace output_detail;
namespace fs = std::filesystem;

namespace {

void installSignalHandlers() {
    for (int i = 0; i < 2; ++i) {
        struct sigaction current {};
        ::sigaction(kSignals[i], nullptr, &current);
        // An ignored signal (nohup) stays ignored.
        installed[i] = (current.sa_flags & SA_SIGINFO) || current.sa_handler != SIG_IGN;
        if (!installed[i]) continue;
        previous[i] = current;
        struct sigaction ours {};
        ours.sa_sigaction = tesseraOutputSetOnSignal;
        ours.sa_flags = SA_SIGINFO | SA_RESTART;
        sigemptyset(&ours.sa_mask);
        for (int s : kSignals) sigaddset(&ours.sa_mask, s);
        ::sigaction(kSignals[i], &ours, nullptr);
    }
}

void restoreSignalHandlers() {
    for (int i = 0; i < 2; ++i) {
        if (!installed[i]) continue;
        struct sigaction current {};
        ::sigaction(kSignals[i], nullptr, &current);
        // Only if still ours: whoever replaced it since keeps theirs.
        if ((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == tesseraOutputSetOnSignal)
            ::sigaction(kSignals[i], &previous[i], nullptr);
        installed[i] = false;
    }
}

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

}  // namespace

struct OutputSet::State {
    struct File {
        fs::path target;
        Slot* slot = nullptr;
    };
    std::vector<File> files;
    std::vector<fs::path> createdFolders;  // outermost first
    unsigned interruptionsAtStart = 0;
    bool done = false;

    void checkNotInterrupted() const {
        if (interruptions.load() != interruptionsAtStart)
            throw OutputError("writing was interrupted by a signal; nothing of this output set was kept");
    }

    // Creates the missing folders of `dir`, remembering which, for discard().
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

    [[noreturn]] void failWrite(const fs::path& target, int error, std::uintmax_t size,
                                std::uintmax_t freeBefore) const {
        std::string message = "cannot write " + shownPath(target) + ": " + std::strerror(error);
        if (error == ENOSPC || error == EDQUOT)
            message += " (the file needs " + byteCountText(size) + "; " + byteCountText(freeBefore) + " was free)";
        if (error == EFBIG)
            message += " (the file needs " + byteCountText(size) + "; the file size limit, ulimit -f, is " +
                       byteCountText(fileSizeLimit()) + ")";
        throw OutputError(message + "; nothing of this output set was kept");
    }

    // Writes the whole of `bytes` to fd; returns 0 or the errno of the failure.
    static int writeAll(int fd, std::string_view bytes) {
        std::size_t done = 0;
        while (done < bytes.size()) {
            const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
            if (n < 0) {
                if (errno == EINTR) continue;
                return errno;
            }
            done += static_cast<std::size_t>(n);
        }
        return 0;
    }

    void write(const fs::path& target, std::string_view bytes) {
        if (done) throw OutputError("cannot add " + shownPath(target) + ": this output set is already finished");
        checkNotInterrupted();
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
        try {
            slot = &claimSlot();
        } catch (...) {
            ::close(dirFd);
            throw;
        }
        slot->dirFd = dirFd;
        std::snprintf(slot->target, kNameBytes, "%s", name.c_str());
        files.push_back(File{target, slot});

        int fd = -1;
        for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
            slot->state.store(kFilling);
            std::snprintf(slot->temp, kNameBytes, "%s%s", name.c_str(), randomSuffix().c_str());
            slot->state.store(kTemp);  // before the file exists: a signal from now on removes it
            fd = ::openat(dirFd, slot->temp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
            if (fd < 0 && errno != EEXIST) break;
        }
        if (fd < 0) {
            const int error = errno;
            throw OutputError("cannot write " + shownPath(target) +
                              ": no file can be created in its folder: " + std::strerror(error));
        }
        struct statvfs space {};
        const std::uintmax_t freeBefore = ::fstatvfs(fd, &space) == 0 ? freeBytes(space) : 0;
        int error = writeAll(fd, bytes);
        // The data must be on disk before a rename makes it visible, or a crash can leave an empty file.
        if (!error && ::fsync(fd) != 0) error = errno;
        if (::close(fd) != 0 && !error) error = errno;
        if (error) failWrite(target, error, bytes.size(), freeBefore);
        checkNotInterrupted();
    }

    void commit() {
        if (done) throw OutputError("this output set is already finished");
        checkNotInterrupted();
        for (File& file : files) {
            file.slot->state.store(kRenaming);
            if (::renameat(file.slot->dirFd, file.slot->temp, file.slot->dirFd, file.slot->target) != 0) {
                const int error = errno;
                throw OutputError("cannot rename " + shownPath(file.target.parent_path() / file.slot->temp) + " to " +
                                  shownPath(file.target) + ": " + std::strerror(error) +
                                  "; nothing of this output set was kept");
            }
            file.slot->state.store(kFinal);
            checkNotInterrupted();
        }
        // The renames themselves on disk (best effort: some file systems refuse fsync on folders).
        for (const File& file : files) ::fsync(file.slot->dirFd);
        release();
    }

    void discard() noexcept {
        if (done) return;
        for (auto it = files.rbegin(); it != files.rend(); ++it) removeSlotFiles(*it->slot);
        for (auto it = createdFolders.rbegin(); it != createdFolders.rend(); ++it)
            ::rmdir(it->c_str());  // only if empty
        release();
    }

    // The set is finished: slots back to the pool, signal handlers back when it was the last set.
    void release() noexcept {
        for (File& file : files) {
            const int dirFd = file.slot->dirFd;
            file.slot->dirFd = -1;
            file.slot->state.store(kFree);
            closeQuietly(dirFd);
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

void OutputSet::add(const fs::path& target, std::string_view bytes) {
    try {
        state_->write(target, bytes);
    } catch (...) {
        discard();
        throw;
    }
}

void OutputSet::createFolders(const fs::path& folder) {
    try {
        state_->createFolders(folder);
    } catch (...) {
        discard();
        throw;
    }
}

void OutputSet::addText(const fs::path& target, std::string_view text) {
    if (isValidUtf8(text))
        add(target, text);
    else
        add(target, toValidUtf8(text));
}

void OutputSet::commit() {
    try {
        state_->commit();
    } catch (...) {
        discard();
        throw;
    }
}

void OutputSet::discard() noexcept { state_->discard(); }

std::size_t OutputSet::size() const { return state_->files.size(); }

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
