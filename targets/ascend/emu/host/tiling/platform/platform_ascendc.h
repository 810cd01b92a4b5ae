// opgen's emulation of CANN's PlatformAscendC (tiling/platform/platform_ascendc.h): core counts
// and memory sizes of the product the tiling runs for, read from the PlatFormInfos the
// emulation's TilingContext carries (filled from opgen's hardware description of the product).
// Declared as asc-devkit's include/utils/tiling/platform/platform_ascendc.h declares what it
// has (0da921b9; tests/test_ascend_cann_headers.py); not run against a CANN toolkit.
#ifndef OPGEN_EMU_HOST_PLATFORM_ASCENDC_H
#define OPGEN_EMU_HOST_PLATFORM_ASCENDC_H

#include <cstdint>

#include "graph/types.h"

namespace platform_ascendc {

enum class CoreMemType { L0_A = 0, L0_B, L0_C, L1, L2, UB, HBM, FB, BT, RESERVED };   // asc-devkit's order

// CANN's system workspace for its library APIs: ops-nn's tilings reserve 16 MB
// (sys_work_space_size / GetLibApiWorkSpaceSize); the emulation's kernels see it reserved.
constexpr uint32_t kLibApiWorkSpaceBytes = 16u * 1024u * 1024u;

class PlatformAscendC {
public:
    // A non-const pointer, as asc-devkit declares it (what gert::TilingContext::GetPlatformInfo returns).
    explicit PlatformAscendC(fe::PlatFormInfos* info) : info_(info) {}
    // Vector (AIV) cores: the cores a vector-only kernel's block dim is split over.
    uint32_t GetCoreNumAiv() const { return info_->vector_cores; }
    uint32_t GetCoreNum() const { return info_->vector_cores; }
    uint32_t GetCoreNumAic() const { return info_->vector_cores / 2; }
    void GetCoreMemSize(const CoreMemType& type, uint64_t& size) const {
        size = type == CoreMemType::UB ? info_->ub_bytes : 0;  // only UB is described
    }
    uint32_t GetLibApiWorkSpaceSize() const { return kLibApiWorkSpaceBytes; }

private:
    const fe::PlatFormInfos* info_;
};

}  // namespace platform_ascendc

#endif  // OPGEN_EMU_HOST_PLATFORM_ASCENDC_H
