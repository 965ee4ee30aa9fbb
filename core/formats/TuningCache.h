// TuningCache: the choices a backend made by timing at prepare (a cuDNN algorithm, a graph
// plan's engine, fused or not), kept in a small JSON file so that a later process on the same
// GPU and software makes the same choices, and so the same bits. Qt-free; the choices are
// opaque text to core (the backend writes and reads them).
//
// File (version kFormatVersion):
//   {"format": "tessera-tuning", "version": 1,
//    "contexts": {"<context key>": {"<op key>": "<choice>", ...}, ...}}
// A context is one device + driver + cuDNN + CUDA runtime + precision (TuningContext::key());
// an op key names one timed choice at one shape, batch included.
//
// Reading is bounded (core/base/BoundedInput.h): a missing file is an empty cache; an unreadable,
// huge, deep, corrupt or wrong-typed file is ignored with one warning naming it (and replaced
// on the next save); a file of a newer format version is ignored and left alone (this build
// does not overwrite what a newer one wrote). Saving merges under a lock file
// ("<path>.lock", flock): the file is re-read, this object's new choices are laid over it
// (last writer wins per key, the other keys kept) and it is written atomically (temporary
// file + rename, core/run/OutputSet.h), so a reader never sees a torn file.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tessera {

struct TuningContext {
    std::string device;             // e.g. "NVIDIA H100 80GB HBM3"
    std::string computeCapability;  // e.g. "9.0"
    int driverVersion = 0;          // cudaDriverGetVersion
    int runtimeVersion = 0;         // cudaRuntimeGetVersion
    int cudnnVersion = 0;           // cudnnGetVersion
    std::string precision;          // "fp16"
    // "NVIDIA H100 80GB HBM3 | sm 9.0 | driver 13000 | runtime 13000 | cudnn 91400 | fp16"
    std::string key() const;
};

namespace tuning_limits {
// A real cache holds a few hundred choices (tens of conv shapes per plan, a few plans per
// model and precision): ~100 bytes each. 4 MiB and 20,000 choices are far beyond that.
inline constexpr std::size_t kFileBytes = 4u << 20;
inline constexpr std::size_t kChoices = 20000;
inline constexpr std::size_t kKeyChars = 512;  // a context or op key, or a choice
// The format nests three levels; anything deeper is not ours.
inline constexpr int kDepth = 8;
}  // namespace tuning_limits

class TuningCache {
public:
    static constexpr int kFormatVersion = 1;

    // Where the cache lives for a run setting (RunConfig::tuningCache): "off" = nowhere
    // (returns ""); a non-empty setting = that path; "" = $TESSERA_TUNING_CACHE when set
    // ("off" there disables it too), else $XDG_CACHE_HOME/tessera/tuning.json (when
    // XDG_CACHE_HOME is an absolute path), else $HOME/.cache/tessera/tuning.json; "" when
    // none of them is set.
    static std::string resolvePath(const std::string& setting);

    // A disabled cache: finds nothing, saves nothing.
    TuningCache() = default;
    // Loads `path` ("" = disabled). Never throws for the file's contents or its absence.
    explicit TuningCache(std::string path);

    bool enabled() const { return !path_.empty(); }
    const std::string& path() const { return path_; }

    // The stored choice, if any.
    std::optional<std::string> find(const std::string& context, const std::string& op) const;
    // Remembers a choice (replacing one found); written by save(). Keys and choices longer
    // than tuning_limits::kKeyChars are not stored (std::invalid_argument).
    void store(const std::string& context, const std::string& op, const std::string& choice);
    // Merges the choices stored since loading into the file (see above). Returns false, with
    // a warning, when it could not be written; the old file is then left as it was. Nothing
    // to write, a disabled cache or a newer-format file: true without writing.
    bool save();

    // What went wrong while loading or saving, one line each, naming the file.
    const std::vector<std::string>& warnings() const { return warnings_; }
    std::size_t size() const;  // choices held (loaded + stored)

private:
    using Contexts = std::map<std::string, std::map<std::string, std::string>>;
    std::string path_;
    Contexts loaded_;  // as read from the file
    Contexts stored_;  // new since loading
    bool newerFormat_ = false;
    std::vector<std::string> warnings_;
};

// Short fingerprint of a set of choices (op key -> choice): the first 16 hex digits of the
// SHA-256 of "<key length>:key=choice\n" lines in key order; "" for an empty set. Two runs whose digests
// are equal made the same choices.
std::string tuningDigest(const std::map<std::string, std::string>& choices);

}  // namespace tessera
