#include "kernels/backend/CudaSettings.h"

#include <cstdlib>
#include <stdexcept>

#include "core/base/BoundedInput.h"

namespace tessera {

CudaSettings CudaSettings::fromEnvironment() {
    CudaSettings s;
    for (const char* name :
         {"TESSERA_CUDNN_FIND", "TESSERA_CUDNN_API", "TESSERA_CUDNN_FUSE", "TESSERA_CUDNN_RUNTIME_FUSION",
          "TESSERA_CUDA_BETA", "TESSERA_CUDA_SYNC", "TESSERA_CUDA_STREAM", "TESSERA_CUDA_ATTENTION_MIB",
          "TESSERA_CUDA_FLASH", "TESSERA_CUDA_SDPA", "TESSERA_CUDA_DENSE", "TESSERA_CUBLASLT"}) {
        const char* v = std::getenv(name);
        s.values[name] = v ? v : "";
    }
    s.heuristicsOnly = s.values["TESSERA_CUDNN_FIND"] == "0";
    s.legacyOnly = s.values["TESSERA_CUDNN_API"] == "legacy";
    s.fuse = s.values["TESSERA_CUDNN_FUSE"] != "0";
    s.runtimeFusion = s.values["TESSERA_CUDNN_RUNTIME_FUSION"] == "1";
    s.denseViews = s.values["TESSERA_CUDA_DENSE"] == "1";
    s.betaAccumulate = s.values["TESSERA_CUDA_BETA"] == "1";
    s.lt = s.values["TESSERA_CUBLASLT"] != "0";
    s.syncEveryOp = s.values["TESSERA_CUDA_SYNC"] == "op";
    s.nonblockingStream = s.values["TESSERA_CUDA_STREAM"] == "nonblocking";
    const std::string& budget = s.values["TESSERA_CUDA_ATTENTION_MIB"];
    if (!budget.empty()) {
        const bool digits = budget.size() <= 8 && budget.find_first_not_of("0123456789") == std::string::npos;
        const unsigned long mibValue = digits ? std::stoul(budget) : 0;
        if (mibValue < 1 || mibValue > kMaxAttentionScoreMiB)
            throw std::invalid_argument("TESSERA_CUDA_ATTENTION_MIB: " + inQuotes(budget) +
                                        " is not allowed; give a whole number of MiB from 1 to " +
                                        std::to_string(kMaxAttentionScoreMiB));
        s.attentionBudgetBytes = static_cast<std::size_t>(mibValue) << 20;
    }
    const std::string& flash = s.values["TESSERA_CUDA_FLASH"];
    if (flash == "0")
        s.flash = FlashMode::Off;
    else if (flash == "1" || flash == "128" || flash == "128w8") {
        s.flash = FlashMode::On;
        s.flashBlockQueries = flash == "1" ? 64 : 128;
        s.flashWarps = flash == "128w8" ? 8 : 4;
    } else if (!flash.empty() && flash != "auto")
        throw std::invalid_argument("TESSERA_CUDA_FLASH: " + inQuotes(flash) +
                                    " is not allowed; give 0 (the blocked attention path), 1 (the fused kernel "
                                    "wherever it applies), 128 or 128w8 (the fused kernel with 128 query rows "
                                    "per block in 4 or 8 warps) or auto (the fastest per shape)");
    const std::string& sdpa = s.values["TESSERA_CUDA_SDPA"];
    if (sdpa == "0")
        s.sdpa = FlashMode::Off;
    else if (sdpa == "1")
        s.sdpa = FlashMode::On;
    else if (!sdpa.empty() && sdpa != "auto")
        throw std::invalid_argument("TESSERA_CUDA_SDPA: " + inQuotes(sdpa) +
                                    " is not allowed; give 0 (never cuDNN's fused attention), 1 (cuDNN's wherever "
                                    "it offers a plan) or auto (cuDNN's where it times faster)");
    return s;
}

}  // namespace tessera
