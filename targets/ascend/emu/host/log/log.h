// opgen's emulation of ops-nn's host logging (OP_LOGE): the message of a refused tiling is kept
// for the runner (opgen_emu_host_last_error) instead of going to CANN's log. Checked only against
// ops-nn's sources, not a CANN toolkit.
#ifndef OPGEN_EMU_HOST_LOG_H
#define OPGEN_EMU_HOST_LOG_H

#include <cstdio>
#include <string>

#include "graph/types.h"

namespace opgen_emu_host {
inline std::string& last_error() {
    static thread_local std::string text;
    return text;
}
inline const char* node_of(const char* name) { return name; }
template <typename C>
inline const char* node_of(const C* context) { return context->GetNodeName(); }

template <typename N, typename... A>
inline void log_error(N node, const char* fmt, A... args) {
    char buf[1024];
    if constexpr (sizeof...(A) == 0) {
        std::snprintf(buf, sizeof buf, "%s", fmt);
    } else {
        std::snprintf(buf, sizeof buf, fmt, args...);
    }
    last_error() = std::string(node_of(node)) + ": " + buf;
}
}  // namespace opgen_emu_host

#define OP_LOGE(node, ...) opgen_emu_host::log_error(node, __VA_ARGS__)

#endif  // OPGEN_EMU_HOST_LOG_H
