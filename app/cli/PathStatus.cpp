#include "app/cli/PathStatus.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "core/base/BoundedInput.h"

namespace tessera {

PathStatus pathStatus(const std::filesystem::path& path) {
    PathStatus status;
    struct stat info {};
    if (::stat(path.c_str(), &info) == 0) {
        status.kind = S_ISDIR(info.st_mode)   ? PathStatus::Kind::Folder
                      : S_ISREG(info.st_mode) ? PathStatus::Kind::File
                                              : PathStatus::Kind::Other;
        return status;
    }
    const int error = errno;
    if (error == ELOOP) {
        status.kind = PathStatus::Kind::LinkLoop;
        status.problem = "is a symbolic-link loop (" + std::generic_category().message(ELOOP) + ")";
        return status;
    }
    if (error == ENOENT || error == ENOTDIR) {
        struct stat link {};
        if (::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
            std::error_code ec;
            const std::filesystem::path target = std::filesystem::read_symlink(path, ec);
            status.kind = PathStatus::Kind::DanglingLink;
            status.problem = "is a dangling symbolic link" +
                             (ec ? std::string() : " (to " + shownPath(target) + ", which does not exist)");
            return status;
        }
        status.kind = PathStatus::Kind::Missing;
        status.problem = "does not exist";
        return status;
    }
    status.kind = PathStatus::Kind::Unreadable;
    status.problem = "cannot be looked at (" + std::generic_category().message(error) + ")";
    return status;
}

}  // namespace tessera
