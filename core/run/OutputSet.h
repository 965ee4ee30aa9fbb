// OutputSet: files that appear together or not at all — a render's image, timings and
// manifest; compare's CSV and JSON; one exported file. Each file is written to a temporary
// file beside its target ("<name>.tmp-XXXXXXXX", eight lowercase hex digits), flushed to disk
// with fsync, and only when every file of the set is written are they renamed into place, in
// the order they were added (add the manifest last: a manifest then means a complete set).
//
// A set that is not completed (a failed write or rename, destruction without commit(), or one
// of the fatal signals SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGPIPE) leaves no temporary file and
// none of its files under their names; a file added with IfIncomplete::Keep (a render's image)
// that was written whole is kept as "<stem>.incomplete<ext>" (run.png -> run.incomplete.png),
// and the error, or for a signal a line on stderr, says where. The signals while a set is alive:
// - during one of its file operations (one file's write and fsync, the renames of commit, a
//   discard) a signal is held until the operation ends: a signal during commit() lets the set
//   complete; one during add() lets that file's write finish;
// - then, or at once between operations, every live set is ended as above and the signal takes
//   its previous action: the default one ends the process by that signal (the exit status
//   names it), a handler runs, an ignored signal (nohup) stays ignored and is never caught.
// Whichever thread the system gives a process-directed signal to, a commit under way on any
// thread completes first. SIGPIPE: the files are regular files created here, so writing them
// never raises it; one that arrives (another thread writing to a closed pipe, kill -PIPE) is
// handled like the others, and a program whose report goes to a closed stdout ends by SIGPIPE
// after the set is complete.
// Stale temporary files: the temporary file is locked (flock) by its writer until its set ends,
// so a lock that can be taken means its writer is gone (killed, or the machine went down). The
// first file a set adds to a folder removes every regular file there named exactly
// "<name>.tmp-XXXXXXXX" whose lock can be taken and that was last written more than
// kStaleTemporarySeconds ago (the age also spares writers that take no lock); nothing else.
// Qt-free; POSIX.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

// A file of a set could not be written; what() names the file and the system's reason (for
// a full disk or the file size limit also the bytes the file needed and the bytes free).
class OutputError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

class OutputSet {
public:
    // What becomes of a file when its set is not completed.
    enum class IfIncomplete {
        Remove,  // removed with the rest of the set
        Keep,    // once written whole, kept as "<stem>.incomplete<ext>" beside its target
    };
    // The steps of the final write, for tests (setStepObserver). Every step runs while the
    // fatal signals are held.
    enum class WriteStep {
        TemporaryWritten,  // a file's bytes are in its temporary file; its fsync comes next
        TemporarySynced,   // the temporary file is on disk; the file's add() ends next
        Renaming,          // commit() renames the file into place next
        Renamed,           // the file is in place
        FoldersSyncing,    // every file is in place; the folders are flushed next
    };
    // A temporary file of this naming unlocked and untouched for this long is stale. The lock
    // alone tells a live writer of this code; the age spares writers that hold no lock (a file
    // system without flock, another program using the same naming) and a network file
    // system's clock running behind, while a killed run's files still go at a run soon after.
    static constexpr int kStaleTemporarySeconds = 600;

    // Installs the handlers of the fatal signals (those not ignored) while any set is alive.
    // A set that a signal ended throws OutputError at its next add/commit.
    OutputSet();
    ~OutputSet();  // an uncommitted set is discarded
    OutputSet(const OutputSet&) = delete;
    OutputSet& operator=(const OutputSet&) = delete;

    // Creates `folder` and its missing parents; those it created are removed again (when
    // still empty) if the set is discarded. OutputError naming the folder on failure.
    void createFolders(const std::filesystem::path& folder);
    // Writes `bytes`, stored as given, to a temporary file beside `target` (whose folder must
    // exist). Throws OutputError naming `target` and what was kept; the set is then discarded.
    void add(const std::filesystem::path& target, std::string_view bytes,
             IfIncomplete ifIncomplete = IfIncomplete::Remove);
    // Same for a text file (CSV, JSON): stored as valid UTF-8, each invalid byte written as
    // "\xNN" (core/base/BoundedInput.h toValidUtf8), so a Latin-1 label never loses a run.
    void addText(const std::filesystem::path& target, std::string_view text,
                 IfIncomplete ifIncomplete = IfIncomplete::Remove);
    // Renames every file into place in the order added, then flushes the folders. Files
    // already at a target are replaced. On failure the set is discarded (a file it replaced is
    // not restored) and OutputError is thrown.
    void commit();
    // Ends an uncommitted set: removes what it wrote, keeps IfIncomplete::Keep files written
    // whole (keptFiles()). Safe to call more than once; never throws.
    void discard() noexcept;

    std::size_t size() const;
    // Where the files kept by an incomplete set are ("<stem>.incomplete<ext>"); empty while
    // the set is alive, after commit, and when nothing was kept.
    const std::vector<std::filesystem::path>& keptFiles() const;
    // Tests: `observer` is called at each step of this set's final write with the file's target
    // (empty for FoldersSyncing). It may raise a signal or throw.
    void setStepObserver(std::function<void(WriteStep, const std::filesystem::path&)> observer);

    // "run.incomplete.png" for "run.png": the name a kept file gets.
    static std::filesystem::path incompletePath(const std::filesystem::path& target);
    // Whether `name` (a file name, no folder) is of the temporary files' naming.
    static bool isTemporaryName(std::string_view name);

private:
    struct State;
    std::unique_ptr<State> state_;
};

// Writes one file through an OutputSet: readers see the old file or the whole new one.
// OutputError naming the file on failure.
void writeFileAtomically(const std::string& path, std::string_view bytes);
// The same for a text file: stored as valid UTF-8 (OutputSet::addText).
void writeTextFileAtomically(const std::string& path, std::string_view text);

// What a set of new files will need in one folder.
struct OutputNeeds {
    std::uintmax_t totalBytes = 0;    // all files together (temporary files exist side by side)
    std::uintmax_t largestBytes = 0;  // the largest single file (checked against `ulimit -f`)
    std::string what;                 // for messages, e.g. "image 1.1 MiB, timings 20 KiB, manifest 50 KiB"
};

// Checks, before any work, that files needing `needs` can be created in `folder`: the folder,
// or when it does not exist yet its nearest existing ancestor (the caller then creates it with
// OutputSet::createFolders), must be a folder in which a file can be created (tested by creating and
// removing a probe file: this also catches read-only file systems, which stop root too), with
// `needs.totalBytes` free for this user and a file size limit (RLIMIT_FSIZE) of at least
// `needs.largestBytes`. Creates nothing that remains. Throws ValidationError(field, ...)
// saying what is wrong, what was needed and what is free.
void checkOutputFolder(const std::filesystem::path& folder, std::string_view field, const OutputNeeds& needs);

// checkOutputFolder for the folder of `file`, which must exist; `file` must not be a folder.
void checkOutputFile(const std::filesystem::path& file, std::string_view field, const OutputNeeds& needs);

// "1.2 MiB" / "512 bytes": byte counts for messages, with the exact count above 1 KiB
// ("1.2 MiB (1258291 bytes)").
std::string byteCountText(std::uintmax_t bytes);

}  // namespace tessera
