// opgen's emulation of the host log a custom op's TilingFunc has: ASC_CPU_LOG_ERROR/INFO/WARNING/
// DEBUG(format, ...) from "utils/log/asc_cpu_log.h" (CANN 8.5.0 API reference, Ascend C,
// ASC_CPU_LOG: hiascend.com/document/detail/zh/canncommercial/850/API/ascendcopapi/
// atlasascendc_api_07_00151.html; ops-nn's OP_LOGE and log/log.h are ops-nn's own, not in a
// toolkit). An error is kept for the runner (opgen_emu_host_last_error) instead of going to the
// plog; the other levels print nothing. Checked only against that documentation.
#ifndef OPGEN_EMU_HOST_ASC_CPU_LOG_H
#define OPGEN_EMU_HOST_ASC_CPU_LOG_H

#include <cstdio>

#include "log/log.h"

namespace opgen_emu_host {
template <typename... A>
inline void cpu_log_error(const char* fmt, A... args) {
    char buf[1024];
    if constexpr (sizeof...(A) == 0) {
        std::snprintf(buf, sizeof buf, "%s", fmt);
    } else {
        std::snprintf(buf, sizeof buf, fmt, args...);
    }
    last_error() = buf;
}
}  // namespace opgen_emu_host

#define ASC_CPU_LOG_ERROR(format, ...) opgen_emu_host::cpu_log_error(format, ##__VA_ARGS__)
#define ASC_CPU_LOG_WARNING(format, ...) ((void)0)
#define ASC_CPU_LOG_INFO(format, ...) ((void)0)
#define ASC_CPU_LOG_DEBUG(format, ...) ((void)0)

#endif  // OPGEN_EMU_HOST_ASC_CPU_LOG_H
