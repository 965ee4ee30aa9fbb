// VaeReplacement: `render --vae` / `plan --vae`, a separate VAE in place of a Stable Diffusion
// model's own (core/models/sd/SingleFileVae.h), as A1111's "SD VAE" setting: found from the run's
// vae (core/run/VaeFile.h: a path, or a name in the models folders' VAE/), checked against the
// model's VAE configuration with the run's other checks, before any weights are read; then loaded
// with the model, whose VAE it replaces in the model the engine is given (Engine::setSdModel). The
// run record and the PNG's parameters name it as A1111 does ("VAE hash", "VAE"). Qt-free.
#pragma once

#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include "core/base/LoadProgress.h"
#include "core/models/sd/SdModel.h"
#include "core/models/sd/SingleFileVae.h"
#include "core/run/RunConfig.h"
#include "core/run/RunRecord.h"

namespace tessera {

class VaeReplacement {
public:
    // Finds config.vae in the models folders (cliModelsFolders of config.model) and checks it
    // against the VAE configuration of config.model (a resolved Stable Diffusion model: its
    // config files or header), without reading tensor data. ValidationError on "vae" naming the
    // file (and the model, for a VAE that does not fit it). Where the model's configurations cannot
    // be read, the check is left to load(), after the model's own load says what is wrong.
    explicit VaeReplacement(const RunConfig& config);

    // The file (or folder) found.
    const std::string& path() const { return path_; }
    // Checked against the model already (its configurations were readable).
    bool checked() const { return modelVae_.has_value(); }
    // The header's findings (sha256 not yet computed), where checked.
    const SingleFileVaeInfo& info() const { return info_; }

    // Loads config.model (loadSdModel, progress to `progress`) and the VAE (its digest computed
    // while it is read), and gives the model with its VAE replaced. ModelError from the model's
    // load; ValidationError on "vae" for the VAE.
    std::shared_ptr<const SdModel> load(const RunConfig& config, const LoadProgressCallback& progress);

    // What the record keeps (after load(): with the file's SHA-256).
    const VaeFileRecord& record() const { return record_; }
    // A finished run's record gets the VAE (vaeFile) and its line among the messages.
    void addTo(RunRecord& record) const;

private:
    std::string path_;
    std::string modelName_;
    std::optional<VaeConfig> modelVae_;  // nullopt: the model's configurations were unreadable
    SingleFileVaeInfo info_;
    VaeFileRecord record_;
};

// "model: 'x.ckpt' is a PyTorch checkpoint (zip), a pickle read as data by the restricted reader
// (nothing executed): ..." for a Stable Diffusion model file that is a pickle, which `record` then
// marks (modelPickle) and keeps among its messages; "" (and nothing marked) for safetensors files,
// folders and random:* models.
std::string recordModelReader(const std::string& modelPath, RunRecord& record);

}  // namespace tessera
