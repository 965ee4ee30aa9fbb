// What is at a path a user named (a model, a tokenizer folder), following symbolic links as
// opening it would, told apart without throwing: nothing, a symbolic-link loop, a link to
// nothing, something that cannot be looked at, a folder, a regular file or something else.
// std::filesystem's exists() and is_directory() call all of the first four "not there", and
// their throwing forms let "filesystem error: ..." reach the user. Qt-free.
#pragma once

#include <filesystem>
#include <string>

namespace tessera {

struct PathStatus {
    enum class Kind { Missing, LinkLoop, DanglingLink, Unreadable, Folder, File, Other };
    Kind kind = Kind::Missing;
    // Why nothing usable is there, to follow the quoted path in a message: "does not exist",
    // "is a symbolic-link loop (Too many levels of symbolic links)", "is a dangling symbolic
    // link (to 'x', which does not exist)", "cannot be looked at (Permission denied)"; empty
    // for a folder, a regular file or something else that is there.
    std::string problem;
    bool there() const { return problem.empty(); }
};

// stat() and, where that finds nothing, lstat() of `path`.
PathStatus pathStatus(const std::filesystem::path& path);

}  // namespace tessera
