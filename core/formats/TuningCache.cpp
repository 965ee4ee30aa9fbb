#include "core/formats/TuningCache.h"

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/base/BoundedInput.h"
#include "core/base/Sha256.h"
#include "core/run/OutputSet.h"
#include "core/run/RunRecordIO.h"

namespace tessera {

namespace {

constexpr const char* kFormatName = "tessera-tuning";

std::string envText(const char* name) {
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string();
}

using Contexts = std::map<std::string, std::map<std::string, std::string>>;

enum class LoadStatus { Missing, Loaded, Ignored, Newer };

struct Loaded {
    LoadStatus status = LoadStatus::Missing;
    Contexts contexts;
    std::string why;  // for Ignored / Newer
};

// Throws std::runtime_error naming what is wrong with the parsed file.
Contexts contextsFromJson(const nlohmann::json& j) {
    const auto it = j.find("contexts");
    if (it == j.end() || !it->is_object()) throw std::runtime_error("'contexts' is not an object");
    Contexts contexts;
    std::size_t count = 0;
    for (const auto& [context, ops] : it->items()) {
        if (context.size() > tuning_limits::kKeyChars) throw std::runtime_error("a context key is too long");
        if (!ops.is_object()) throw std::runtime_error("context " + inQuotes(context) + " is not an object");
        auto& target = contexts[context];
        for (const auto& [op, choice] : ops.items()) {
            if (!choice.is_string())
                throw std::runtime_error("the choice for " + inQuotes(op) + " is " + excerptJson(choice) +
                                         ", not a string");
            const auto& text = choice.get_ref<const std::string&>();
            if (op.size() > tuning_limits::kKeyChars || text.size() > tuning_limits::kKeyChars)
                throw std::runtime_error("an op key or choice is longer than " +
                                         std::to_string(tuning_limits::kKeyChars) + " characters");
            if (++count > tuning_limits::kChoices)
                throw std::runtime_error("more than " + std::to_string(tuning_limits::kChoices) + " choices");
            target[op] = text;
        }
    }
    return contexts;
}

Loaded load(const std::string& path) {
    Loaded out;
    std::error_code ec;
    const auto st = std::filesystem::symlink_status(path, ec);
    if (st.type() == std::filesystem::file_type::not_found || ec == std::errc::no_such_file_or_directory ||
        ec == std::errc::not_a_directory)
        return out;  // no cache yet: not a problem
    try {
        const nlohmann::json j =
            readBoundedJson(path, "tuning_cache", tuning_limits::kFileBytes, tuning_limits::kDepth);
        if (!j.is_object()) throw std::runtime_error("not a JSON object");
        const auto format = j.find("format");
        if (format == j.end() || *format != kFormatName) throw std::runtime_error("'format' is not \"tessera-tuning\"");
        const auto version = j.find("version");
        if (version == j.end() || !version->is_number_integer())
            throw std::runtime_error("'version' is not a whole number");
        if (version->get<long long>() > TuningCache::kFormatVersion) {
            out.status = LoadStatus::Newer;
            out.why = "format version " + excerptJson(*version) + " is newer than this build's (" +
                      std::to_string(TuningCache::kFormatVersion) + ")";
            return out;
        }
        if (version->get<long long>() != TuningCache::kFormatVersion)
            throw std::runtime_error("format version " + excerptJson(*version) + " is not supported");
        out.contexts = contextsFromJson(j);
        out.status = LoadStatus::Loaded;
    } catch (const std::exception& e) {
        out.status = LoadStatus::Ignored;
        out.contexts.clear();
        out.why = e.what();
    }
    return out;
}

nlohmann::json toJson(const Contexts& contexts) {
    nlohmann::json all = nlohmann::json::object();
    for (const auto& [context, ops] : contexts) {
        nlohmann::json o = nlohmann::json::object();
        for (const auto& [op, choice] : ops) o[op] = choice;
        all[context] = std::move(o);
    }
    return {{"format", kFormatName}, {"version", TuningCache::kFormatVersion}, {"contexts", std::move(all)}};
}

// An exclusive advisory lock on "<path>.lock" for the life of the object; no lock (and no
// error) where the lock file cannot be made: the write that follows then reports why.
class FileLock {
public:
    explicit FileLock(const std::string& path) {
        fd_ = ::open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd_ >= 0 && ::flock(fd_, LOCK_EX) != 0) {
            ::close(fd_);
            fd_ = -1;
        }
    }
    ~FileLock() {
        if (fd_ >= 0) ::close(fd_);  // closing releases the lock
    }
    FileLock(const FileLock&) = delete;
    FileLock& operator=(const FileLock&) = delete;

private:
    int fd_ = -1;
};

}  // namespace

std::string TuningContext::key() const {
    return device + " | sm " + computeCapability + " | driver " + std::to_string(driverVersion) + " | runtime " +
           std::to_string(runtimeVersion) + " | cudnn " + std::to_string(cudnnVersion) + " | " + precision;
}

std::string TuningCache::resolvePath(const std::string& setting) {
    if (setting == "off") return {};
    if (!setting.empty()) return setting;
    std::string env = envText("TESSERA_TUNING_CACHE");
    if (env == "off") return {};
    if (!env.empty()) return env;
    const std::string xdg = envText("XDG_CACHE_HOME");
    if (!xdg.empty() && xdg.front() == '/') return xdg + "/tessera/tuning.json";
    const std::string home = envText("HOME");
    if (!home.empty()) return home + "/.cache/tessera/tuning.json";
    return {};
}

TuningCache::TuningCache(std::string path) : path_(std::move(path)) {
    if (path_.empty()) return;
    Loaded l = load(path_);
    loaded_ = std::move(l.contexts);
    newerFormat_ = l.status == LoadStatus::Newer;
    if (l.status == LoadStatus::Ignored)
        warnings_.push_back("tuning cache: " + shownPath(path_) + " ignored (" + l.why +
                            "); it is rebuilt from this run");
    else if (newerFormat_)
        warnings_.push_back("tuning cache: " + shownPath(path_) + " ignored (" + l.why +
                            "); left as it is, so this run's choices are not stored");
}

std::optional<std::string> TuningCache::find(const std::string& context, const std::string& op) const {
    for (const Contexts* c : {&stored_, &loaded_}) {
        const auto ctx = c->find(context);
        if (ctx == c->end()) continue;
        const auto it = ctx->second.find(op);
        if (it != ctx->second.end()) return it->second;
    }
    return std::nullopt;
}

void TuningCache::store(const std::string& context, const std::string& op, const std::string& choice) {
    if (context.size() > tuning_limits::kKeyChars || op.size() > tuning_limits::kKeyChars ||
        choice.size() > tuning_limits::kKeyChars)
        throw std::invalid_argument("TuningCache::store: a key or choice is longer than " +
                                    std::to_string(tuning_limits::kKeyChars) + " characters");
    stored_[context][op] = choice;
}

std::size_t TuningCache::size() const {
    Contexts all = loaded_;
    for (const auto& [context, ops] : stored_)
        for (const auto& [op, choice] : ops) all[context][op] = choice;
    std::size_t n = 0;
    for (const auto& [context, ops] : all) n += ops.size();
    return n;
}

bool TuningCache::save() {
    if (path_.empty() || stored_.empty() || newerFormat_) return true;
    try {
        const std::filesystem::path parent = std::filesystem::path(path_).parent_path();
        if (!parent.empty()) std::filesystem::create_directories(parent);
        const FileLock lock(path_);
        // What other processes wrote since we loaded, then ours over it.
        Loaded current = load(path_);
        if (current.status == LoadStatus::Newer) {
            warnings_.push_back("tuning cache: " + shownPath(path_) + " was replaced by a newer format (" +
                                current.why + "); this run's choices are not stored");
            return true;
        }
        Contexts merged = std::move(current.contexts);
        std::size_t count = 0;
        for (const auto& [context, ops] : merged) count += ops.size();
        for (const auto& [context, ops] : stored_)
            for (const auto& [op, choice] : ops) {
                auto& slot = merged[context];
                if (slot.find(op) == slot.end()) ++count;
                slot[op] = choice;
            }
        // Full (the cache only grows with new shapes and software): start again from ours.
        if (count > tuning_limits::kChoices) merged = stored_;
        writeTextFileAtomically(path_, jsonText(toJson(merged), 1) + "\n");
        loaded_ = std::move(merged);
        stored_.clear();
        return true;
    } catch (const std::exception& e) {
        warnings_.push_back("tuning cache: could not write " + shownPath(path_) + " (" + excerpt(e.what(), 300) +
                            "); the choices are not stored");
        return false;
    }
}

std::string tuningDigest(const std::map<std::string, std::string>& choices) {
    if (choices.empty()) return {};
    Sha256 h;
    for (const auto& [op, choice] : choices) {
        const std::string line = std::to_string(op.size()) + ":" + op + "=" + choice + "\n";
        h.update(line.data(), line.size());
    }
    return h.hexDigest().substr(0, 16);
}

}  // namespace tessera
