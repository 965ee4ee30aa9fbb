// SingleFilePlan: which tensor of a single-file checkpoint each tensor of one of its models comes
// from (diffusers' name and shape -> the file's name, q/k/v part, layout), every binding checked
// against the header before any data is read; then the tensors read, upcast to float32 and checked.
// Internal to the single-file loader (SingleFileCheckpoint.h). Qt-free.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/base/LoadProgress.h"
#include "core/formats/ModelWeights.h"
#include "core/formats/TensorFile.h"
#include "core/models/sd/SingleFileCheckpoint.h"
#include "core/models/sd/SingleFileConfigs.h"

namespace tessera::single_file {

// One tensor of a model and the tensor of the file that holds it.
struct Binding {
    std::string name;                 // the model's (diffusers) name
    std::vector<std::int64_t> shape;  // the model's shape
    std::string stored;               // the file's name
    int part = 0, parts = 1;          // row block `part` of `parts` (OpenCLIP's fused q/k/v in_proj)
    bool squeeze = false;             // the file may add trailing 1-sized axes (LDM's 1x1-conv VAE attention)
    bool transpose = false;           // stored as the transpose of a 2-D model tensor (OpenCLIP's text_projection)
};

// The bindings of one model (the UNet, the VAE or a text encoder) of the file.
struct SingleFilePlan {
    const char* what;  // "UNet", "VAE", "text encoder"
    std::vector<Binding> bindings;
    std::vector<std::string> structural;  // prefixes whose unused tensors mean a configuration mismatch
    std::string allowedUnused;            // ... except this one (SD 2.x's dropped OpenCLIP block)
};

// The VAE's bindings in LDM names under `prefix` ("first_stage_model.", "vae." or "" for a VAE file
// of its own; diffusers' convert_ldm_vae_checkpoint read backwards, LdmNames.h vaeLdmName).
SingleFilePlan ldmVaePlan(const std::string& prefix, const VaeConfig& config);

// The plans of the UNet, the VAE and the text encoder(s), in that order.
std::vector<SingleFilePlan> makePlans(const Layout& layout, const Configs& configs);

// The shape the file stores a binding's tensor with (q/k/v parts fused, text_projection transposed).
std::vector<std::int64_t> storedShape(const Binding& b);

// Presence, dtype and shape of every bound tensor; the counts and dtypes of the component.
// ModelError naming `where` and, for a tensor, its name in the file and in the model.
SingleFileComponent checkPlan(const TensorFile& file, const SingleFilePlan& plan, const std::string& where);

// Every tensor of the file no model reads: an error inside a model's structure (its configuration
// does not describe this file), otherwise ignored (EMA copies, schedule buffers, position_ids, ...).
std::vector<std::string> unusedTensors(const TensorFile& file, const std::vector<SingleFilePlan>& plans,
                                       const std::string& where);

// The stored bytes of the tensors a plan reads (a fused tensor once).
std::uint64_t planBytes(const TensorFile& file, const SingleFilePlan& plan);

// Reads, upcasts and checks every bound tensor, in the file's order (one sequential pass over the
// disk). The plan must have passed checkPlan. ModelError for a non-finite value.
std::map<std::string, HostTensor> readPlan(const TensorFile& file, const SingleFilePlan& plan, const std::string& where,
                                           LoadMeter& meter);

}  // namespace tessera::single_file
