// OutputSet: files that appear together or not at all — a render's image, timings and
// manifest; compare's CSV and JSON; one exported file. Each file is written to a temporary
// file beside its target ("<name>.tmp-XXXXXXXX"), flushed to disk with fsync, and only when
// every file of the set is written are they renamed into place, in the order they were
// added (add the manifest last: a manifest then means a complete set). On any failure, on
// destruction without commit(), and on SIGINT/SIGTERM while a set is alive, every temporary
// file and every file of the set already renamed is removed, so nothing of the set remains.
// Qt-free; POSIX.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tessera {

// A file of a set could not be written; what() names the file and the system's reason (for
// a full disk or the file size limit also the bytes the file needed and the bytes free).
class OutputError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

class OutputSet {
public:
    // While any set is alive, SIGINT and SIGTERM first remove every live set's files, then
    // take their previous action (the default one ends the process; an ignored signal stays
    // ignored). A set whose files a signal removed throws OutputError at its next add/commit.
    OutputSet();
    ~OutputSet();  // an uncommitted set is discarded
    OutputSet(const OutputSet&) = delete;
    OutputSet& operator=(const OutputSet&) = delete;

    // Creates `folder` and its missing parents; those it created are removed again (when
    // still empty) if the set is discarded. OutputError naming the folder on failure.
    void createFolders(const std::filesystem::path& folder);
    // Writes `bytes`, stored as given, to a temporary file beside `target` (whose folder must
    // exist). Throws OutputError naming `target`; the set is then discarded.
    void add(const std::filesystem::path& target, std::string_view bytes);
    // Same for a text file (CSV, JSON): stored as valid UTF-8, each invalid byte written as
    // "\xNN" (core/base/BoundedInput.h toValidUtf8), so a Latin-1 label never loses a run.
    void addText(const std::filesystem::path& target, std::string_view text);
    // Renames every file into place in the order added, then flushes the folders. Files
    // already at a target are replaced. On failure every file of the set is removed (a file
    // it replaced is not restored) and OutputError is thrown.
    void commit();
    // Removes what the set wrote so far. Safe to call more than once; never throws.
    void discard() noexcept;

    std::size_t size() const;

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
