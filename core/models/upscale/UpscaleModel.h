// UpscaleModel: a super-resolution model read from a file: its architecture detected from the keys
// and shapes (in spandrel's registry order, spandrel __helpers/main_registry.py), its
// hyperparameters inferred and checked (every expected key with its shape and no key left over),
// its float32 weights, its graph, and the input sizes it accepts. Families Tessera runs: ESRGAN
// (all three layouts, ESRGAN+, pixel-unshuffled inputs), Real-ESRGAN Compact, SPAN
// (core/models/upscale/UpscaleConfig.h). A file of a family spandrel knows but Tessera does not run
// (DAT, SwinIR, HAT, OmniSR, ...) is refused with that family's name; a file of none with the keys
// that matched nothing. Qt-free.
#pragma once

#include <string>

#include "core/formats/ModelWeights.h"
#include "core/graph/Backend.h"
#include "core/graph/ModelGraph.h"
#include "core/models/upscale/StateDict.h"
#include "core/models/upscale/UpscaleConfig.h"

namespace tessera {

// The family a state dict's keys name (spandrel's detection key sets, in its registry order):
// "ESRGAN", "Compact", "SPAN" for the ones Tessera runs, the name of another family spandrel knows
// ("SwinIR", "DAT", "HAT", ...), or "" for none.
std::string detectUpscaleFamily(const StateDict& dict);

class UpscaleModel {
public:
    // Detects, infers and checks the architecture and reads every weight (float32). Throws
    // ModelError naming the file and: the family it is but Tessera does not run; the keys that
    // matched no family; the missing, mis-shaped or unexpected keys of the detected one.
    static UpscaleModel load(const StateDict& dict);
    // A safetensors file or a PyTorch checkpoint (.pth/.pt/.ckpt, zip or legacy), told apart by
    // their first bytes; a checkpoint is read by the restricted reader (core/formats/TorchCheckpoint.h),
    // never executed. Opened without blocking (a FIFO or device is refused before a byte is read).
    static UpscaleModel loadFile(const std::string& path);

    const UpscaleConfig& config() const { return config_; }
    // "ESRGAN 4x, 64 features, 23 blocks".
    std::string description() const { return config_.describe(); }
    int scale() const { return config_.scale; }
    int inputChannels() const { return config_.inChannels; }
    int outputChannels() const { return config_.outChannels; }
    SizeRequirements sizeRequirements() const { return config_.sizeRequirements(); }
    // Input tiles (after padding to the size requirements) must be multiples of this: the pixel
    // unshuffle's factor (1 otherwise).
    int inputMultiple() const { return config_.unshuffle; }
    // Where the weights came from ("file.safetensors", "tensors").
    const std::string& source() const { return source_; }
    // How the file was read, for the run record: empty for safetensors; for a PyTorch checkpoint,
    // the reader's description ("... a pickle read as data by the restricted reader ...").
    const std::string& readNote() const { return readNote_; }

    // The weights by graph parameter name, held for as long as the model.
    const TensorMap& tensors() const { return tensors_; }
    // The graph as built (input "image" of divisor scale(), one output at divisor 1), and after
    // fuseForExecution: what the backends run. Prepared at the OUTPUT size (input x scale).
    const ModelGraph& graph() const { return graph_; }
    const ModelGraph& executionGraph() const { return execution_; }

    // An UpscaleModel made from a configuration and weights already named like graph()'s (tests).
    UpscaleModel(UpscaleConfig config, TensorMap tensors, std::string source);

private:
    UpscaleConfig config_;
    TensorMap tensors_;
    std::string source_;
    std::string readNote_;
    ModelGraph graph_, execution_;
};

// The graph of a configuration (ESRGAN, Compact or SPAN builder).
ModelGraph buildUpscaleGraph(const UpscaleConfig& config);

}  // namespace tessera
