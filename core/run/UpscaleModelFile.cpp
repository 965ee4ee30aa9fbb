#include "core/run/UpscaleModelFile.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "core/base/BoundedInput.h"
#include "core/run/ModelName.h"
#include "core/run/RunConfig.h"

namespace tessera {

namespace fs = std::filesystem;

namespace {

constexpr char kField[] = "upscale_model";

[[noreturn]] void refuse(const std::string& message) {
    throw ValidationError(kField, std::string(kField) + ": " + message);
}

bool hasUpscaleExtension(const std::string& name) {
    return hasFileExtension(name, {kUpscaleModelExtensions[0], kUpscaleModelExtensions[1], kUpscaleModelExtensions[2]});
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

constexpr char kHowToPoint[] =
    "give the file's path, or set TESSERA_MODELS to the models folder that holds ESRGAN/ or upscale_models/";

UpscaleModelFile checkedPath(const std::string& given) {
    std::error_code ec;
    const fs::file_status status = fs::status(given, ec);
    if (!fs::exists(status)) {
        const std::string why = ec && ec != std::errc::no_such_file_or_directory ? " (" + ec.message() + ")" : "";
        refuse(shownPath(given) + " does not exist" + why);
    }
    if (fs::is_directory(status)) refuse(shownPath(given) + " is a folder, not an upscale model file");
    if (!fs::is_regular_file(status)) refuse(shownPath(given) + " is not a regular file (a FIFO, device or socket)");
    return UpscaleModelFile{given, false};
}

}  // namespace

std::string upscalerName(std::string_view pathOrName) {
    std::string name(pathOrName);
    while (name.size() > 1 && (name.back() == '/' || name.back() == '\\')) name.pop_back();
    if (const auto slash = name.find_last_of("/\\"); slash != std::string::npos) name.erase(0, slash + 1);
    if (hasUpscaleExtension(name)) name.erase(name.rfind('.'));
    return name;
}

std::vector<std::string> upscaleModelsFolders(std::string_view modelsVariable, const std::string& runModel) {
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

UpscaleModelFile findUpscaleModel(const std::string& given, const std::vector<std::string>& modelsFolders) {
    if (given.empty()) refuse("an upscale model file or name is needed");
    checkPathText(kField, given, "an upscale model path or name");
    std::error_code ec;
    if (given.find('/') != std::string::npos || fs::exists(given, ec)) return checkedPath(given);

    std::vector<std::string> candidates;
    if (hasUpscaleExtension(given)) {
        candidates.push_back(given);
    } else {
        for (const char* extension : kUpscaleModelExtensions) candidates.push_back(given + extension);
    }
    std::vector<std::string> looked;
    for (const std::string& folder : modelsFolders)
        for (const char* sub : kUpscaleModelFolders) {
            const fs::path dir = fs::path(folder) / sub;
            looked.push_back(shownPath(dir));
            for (const std::string& candidate : candidates) {
                const fs::path file = dir / candidate;
                if (fs::is_regular_file(file, ec)) return UpscaleModelFile{file.string(), true};
            }
        }
    if (looked.empty())
        refuse(inQuotes(given) +
               " is not a file here, and no models folder is known to look the name up in: " + kHowToPoint);
    std::vector<std::string> names(candidates.size());
    std::transform(candidates.begin(), candidates.end(), names.begin(),
                   [](const std::string& candidate) { return inQuotes(candidate); });
    refuse("no upscale model named " + inQuotes(given) + " (" + orList(names) + ") in " + orList(looked) + "; " +
           kHowToPoint);
}

}  // namespace tessera
