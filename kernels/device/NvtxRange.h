// NvtxRange: an NVTX range (Nsight Systems' timeline) open for the lifetime of a scope.
#pragma once

#include <string>

#include <nvtx3/nvToolsExt.h>

namespace tessera {

class NvtxRange {
public:
    explicit NvtxRange(const std::string& name) { nvtxRangePushA(name.c_str()); }
    ~NvtxRange() { nvtxRangePop(); }
    NvtxRange(const NvtxRange&) = delete;
    NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace tessera
