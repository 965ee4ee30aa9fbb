#include "core/run/ModelFileLookup.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <system_error>

#include "core/base/BoundedInput.h"
#include "core/run/ModelName.h"
#include "core/run/RunConfig.h"

namespace tessera {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void refuse(const ModelFileKind& kind, const std::string& message) {
    throw ValidationError(std::string(kind.field), std::string(kind.field) + ": " + message);
}

// "a, b or c".
std::string orList(const std::vector<std::string>& items) {
    std::string text;
    for (std::size_t i = 0; i < items.size(); ++i) {
        if (i > 0) text += i + 1 == items.size() ? " or " : ", ";
        text += items[i];
    }
    return text;
}

// "give the file's path, or set TESSERA_MODELS to the models folder that holds ESRGAN/ or upscale_models/".
std::string howToPoint(const ModelFileKind& kind) {
    std::vector<std::string> subfolders;
    for (const std::string_view sub : kind.subfolders) subfolders.push_back(std::string(sub) + "/");
    return std::string("give the file's path, or set ") + kModelsFolderVariable + " to the models folder that holds " +
           orList(subfolders);
}

ModelFile checkedPath(const ModelFileKind& kind, const std::string& given) {
    std::error_code ec;
    const fs::file_status status = fs::status(given, ec);
    if (!fs::exists(status)) {
        const std::string why = ec && ec != std::errc::no_such_file_or_directory ? " (" + ec.message() + ")" : "";
        refuse(kind, shownPath(given) + " does not exist" + why);
    }
    if (fs::is_directory(status) && !kind.folders)
        refuse(kind, shownPath(given) + " is a folder, not " + std::string(kind.aWhat) + " file");
    if (!fs::is_regular_file(status) && !fs::is_directory(status))
        refuse(kind, shownPath(given) + " is not a regular file (a FIFO, device or socket)");
    return ModelFile{given, false};
}

}  // namespace

std::vector<std::string> modelsFolders(std::string_view modelsVariable, const std::string& runModel) {
    std::vector<std::string> folders;
    const auto add = [&folders](const std::string& folder) {
        if (!folder.empty() && std::find(folders.begin(), folders.end(), folder) == folders.end())
            folders.push_back(folder);
    };
    add(std::string(modelsVariable));
    if (!runModel.empty() && runModel.rfind(kRandomModelPrefix, 0) != 0) {
        std::error_code ec;
        fs::path model = fs::absolute(runModel, ec).lexically_normal();
        if (!ec) {
            if (!model.has_filename()) model = model.parent_path();  // "models/sd15/"
            add(model.parent_path().parent_path().string());
        }
    }
    return folders;
}

bool hasModelFileExtension(const ModelFileKind& kind, const std::string& name) {
    return std::any_of(kind.extensions.begin(), kind.extensions.end(), [&name](std::string_view extension) {
        return name.size() > extension.size() &&
               std::equal(extension.begin(), extension.end(),
                          name.end() - static_cast<std::ptrdiff_t>(extension.size()), [](char a, char b) {
                              return std::tolower(static_cast<unsigned char>(a)) ==
                                     std::tolower(static_cast<unsigned char>(b));
                          });
    });
}

ModelFile findModelFile(const ModelFileKind& kind, const std::string& given, const std::vector<std::string>& folders) {
    if (given.empty()) refuse(kind, std::string(kind.aWhat) + " file or name is needed");
    checkPathText(kind.field, given, std::string(kind.aWhat) + " path or name");
    std::error_code ec;
    if (given.find('/') != std::string::npos || fs::exists(given, ec)) return checkedPath(kind, given);

    std::vector<std::string> candidates;
    if (hasModelFileExtension(kind, given)) {
        candidates.push_back(given);
    } else {
        for (const std::string_view extension : kind.extensions) candidates.push_back(given + std::string(extension));
    }
    std::vector<std::string> looked;
    for (const std::string& folder : folders)
        for (const std::string_view sub : kind.subfolders) {
            const fs::path dir = fs::path(folder) / sub;
            looked.push_back(shownPath(dir));
            for (const std::string& candidate : candidates) {
                const fs::path file = dir / candidate;
                if (fs::is_regular_file(file, ec)) return ModelFile{file.string(), true};
            }
            if (kind.folders && fs::is_directory(dir / given, ec)) return ModelFile{(dir / given).string(), true};
        }
    if (looked.empty())
        refuse(kind, inQuotes(given) + " is not a file here, and no models folder is known to look the name up in: " +
                         howToPoint(kind));
    std::vector<std::string> names(candidates.size());
    std::transform(candidates.begin(), candidates.end(), names.begin(),
                   [](const std::string& candidate) { return inQuotes(candidate); });
    refuse(kind, "no " + std::string(kind.what) + " named " + inQuotes(given) + " (" + orList(names) + ") in " +
                     orList(looked) + "; " + howToPoint(kind));
}

}  // namespace tessera
