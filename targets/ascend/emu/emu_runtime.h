// opgen AscendC emulation: the runtime (cores as threads, GM registry and race shadow,
// SyncAll barrier, error reporting, the launcher). See kernel_operator.h for the ABI.
#ifndef OPGEN_EMU_RUNTIME_H
#define OPGEN_EMU_RUNTIME_H

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "emu_timing.h"

#ifndef OPGEN_UB_BYTES
#define OPGEN_UB_BYTES 196608
#endif
#ifndef OPGEN_MAX_BUFFERS
#define OPGEN_MAX_BUFFERS 64
#endif

namespace opgen_emu {

constexpr uint64_t kUbBytes = OPGEN_UB_BYTES;
constexpr uint32_t kBlockBytes = 32;    // ONE_BLK_SIZE
constexpr uint32_t kRepeatBytes = 256;  // one vector repeat
constexpr int32_t kMaxRepeat = 255;
constexpr uint32_t kMaxBuffers = OPGEN_MAX_BUFFERS;
constexpr uint32_t kMaxCores = 255;     // the race shadow stores core ids in 8 bits
// CANN's system workspace in front of the user workspace (ops-nn's tilings reserve 16 MB,
// sys_work_space_size / GetLibApiWorkSpaceSize): the kernel's workspace argument points at it
// and only GetUserWorkspace(workspace) yields the user part. Any access to it is an error.
constexpr uint64_t kSysWorkspaceBytes = 16ull * 1024 * 1024;
constexpr int kSysWorkspaceArg = -1;    // GmBuffer::arg of the reserved system workspace

// A rule violation inside a kernel: caught by the core thread, reported by the launcher.
struct EmuError : std::runtime_error {
    using std::runtime_error::runtime_error;
};
// Thrown in a core that must stop because another core failed (not reported itself).
struct EmuAbort {};

template <typename... A>
std::string cat(const A&... parts) {
    std::ostringstream os;
    (os << ... << parts);
    return os.str();
}

struct CoreState;
CoreState* current_core();

[[noreturn]] void fail(const std::string& what);

inline uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// "'inQueueX' (kernel.cpp:40)" from the stringified arguments "inQueueX, 2, len" of an
// InitBuffer call (the text before the first top-level comma) and its location.
inline std::string buffer_name(const char* args, const char* file, int line) {
    std::string text(args), first;
    int depth = 0;
    for (char ch : text) {
        if (ch == '(' || ch == '[' || ch == '<') ++depth;
        if (ch == ')' || ch == ']' || ch == '>') --depth;
        if (ch == ',' && depth <= 0) break;
        first += ch;
    }
    std::string where = cat(file, ":", line);
    return first.empty() ? cat("(", where, ")") : cat("'", first, "' (", where, ")");
}

// ---------------------------------------------------------------- GM registry and shadow
// Every GM buffer the launcher was given, with a per-byte tag of the last writer and
// reader in the current SyncAll epoch; a tag is (epoch+1) << 9 | atomic << 8 | (core+1).
struct GmBuffer {
    uint8_t* base;
    uint64_t size;
    int arg;
    std::vector<uint32_t> write_tag, read_tag;
    // The workspace only: 1 where a byte was written during this launch (empty: all defined).
    std::vector<uint8_t> def;
    bool system() const { return arg == kSysWorkspaceArg; }
    bool defined(uint64_t off, uint64_t bytes) const {
        return def.empty() || std::all_of(def.begin() + off, def.begin() + off + bytes, [](uint8_t v) { return v != 0; });
    }
    void set_defined(uint64_t off, uint64_t bytes) {
        if (!def.empty()) std::fill(def.begin() + off, def.begin() + off + bytes, 1);
    }
};

inline uint32_t make_tag(uint32_t core, uint32_t epoch, bool atomic) {
    return ((epoch + 1) << 9) | (atomic ? 0x100u : 0u) | (core + 1);
}
inline uint32_t tag_core(uint32_t t) { return (t & 0xFFu) - 1; }
inline uint32_t tag_epoch(uint32_t t) { return (t >> 9) - 1; }
inline bool tag_atomic(uint32_t t) { return (t & 0x100u) != 0; }

// ---------------------------------------------------------------- the launch
struct Launch {
    uint32_t block_dim = 0;
    std::vector<GmBuffer> gm;
    // GM bytes a core wrote with GlobalTensor::SetValue and had not flushed from its data cache
    // when it reached SyncAll: (core, begin, end). Guarded by gm_mutex.
    std::vector<std::tuple<uint32_t, const uint8_t*, const uint8_t*>> unflushed;
    std::mutex gm_mutex;  // GM transfers are atomic per call (and atomic adds are atomic)
    // SyncAll barrier
    std::mutex bar_mutex;
    std::condition_variable bar_cv;
    uint32_t bar_waiting = 0, bar_finished = 0, bar_generation = 0;
    bool aborted = false;
    std::atomic<bool> stop{false};  // set with `aborted`: other cores stop at their next API call
    // Traffic and footprint, for opgen_emu_last_stats().
    std::atomic<uint64_t> gm_read{0}, gm_written{0}, vector_elems{0}, ub_peak{0};
    LaunchTiming timing;  // the pipe-level timing model (emu_timing.h)
    std::string first_error;
    int failing_core = -1;
    // The workspace: the kernel is passed sys_ws (reserved), GetUserWorkspace maps it to user_ws.
    uint8_t* sys_ws = nullptr;
    uint8_t* user_ws = nullptr;
    uint64_t tiling_key = 0;  // what the host's TilingFunc set (TILING_KEY_IS)

    GmBuffer* find_gm(const void* p, uint64_t bytes) {
        auto* b = static_cast<const uint8_t*>(p);
        for (auto& g : gm)
            if (b >= g.base && b + bytes <= g.base + g.size) return &g;
        return nullptr;
    }
    GmBuffer* find_gm_start(const void* p) {
        auto* b = static_cast<const uint8_t*>(p);
        for (auto& g : gm)
            if (b >= g.base && b < g.base + g.size) return &g;
        return nullptr;
    }
    void record_error(int core, const std::string& msg) {
        std::lock_guard<std::mutex> lk(bar_mutex);
        if (!aborted) { aborted = true; first_error = msg; failing_core = core; }
        stop.store(true, std::memory_order_relaxed);
        bar_cv.notify_all();
    }
};

// ---------------------------------------------------------------- per-core state
enum class Pipe : uint8_t { NONE, MTE2, V, MTE3, S };
inline const char* pipe_name(Pipe p) {
    switch (p) {
        case Pipe::MTE2: return "MTE2 (GM->UB copy)";
        case Pipe::V: return "V (vector)";
        case Pipe::MTE3: return "MTE3 (UB->GM copy)";
        case Pipe::S: return "S (scalar)";
        default: return "none";
    }
}

// The kernel source line of the AscendC call now running ("op_kernel/k.cpp:212"), set by the
// APIs that take the caller's __builtin_FILE/__builtin_LINE (GetValue, the vector APIs' count
// forms, ReduceSum, WholeReduceSum, Cast) and cleared when the instruction has been recorded.
struct Site { const char* file = nullptr; int line = 0; uint64_t call = 0; };
inline thread_local Site tls_site;
inline thread_local uint64_t tls_calls = 0;
inline std::string site_text() {
    return tls_site.file ? cat(tls_site.file, ":", tls_site.line) : std::string("an unknown line");
}
inline std::string site_suffix() {  // " (kernel line k.cpp:212)" where the call's line is known
    return tls_site.file ? cat(" (kernel line ", tls_site.file, ":", tls_site.line, ")") : std::string();
}
struct SiteScope {  // the call's site for the duration of one API call
    Site saved;
    SiteScope(const char* file, int line) : saved(tls_site) {
        if (!saved.file) tls_site = {file, line, ++tls_calls};  // the outermost API call names the line
    }
    ~SiteScope() { tls_site = saved; }
};

// One UB buffer of a TQue or TBuf. Records live as long as the core (tensors point here).
enum class SlotState : uint8_t { FREE, ALLOCATED, QUEUED, DEQUEUED, TBUF, DEAD };
struct Slot {
    uint64_t offset = 0, bytes = 0;
    SlotState state = SlotState::FREE;
    uint32_t generation = 0;  // bumped on FreeTensor/Reset: stale tensor copies are caught
    Pipe pending = Pipe::NONE;  // last unsynchronised writer pipe
    uint64_t pending_seq = 0;   // when it wrote (core's access counter), for SetFlag snapshots
    uint64_t read_seq[5] = {};  // per Pipe: when V / MTE3 last read it without sync (0: none)
    // Event-level ordering: the pipes a SetFlag/WaitFlag<pending_X> made the pending write
    // visible to (bit per Pipe), and per reader pipe those a WaitFlag<reader_X> ordered after
    // its last read. A WaitFlag<MTE2_V> lets V read, not S or MTE3.
    uint8_t synced = 0;
    uint64_t synced_seq[5] = {};  // per Pipe: when the pending write became visible to it
    uint8_t war_synced[5] = {};
    uint64_t war_synced_seq[5][5] = {};  // [reader][pipe]: when that read became ordered before it
    std::string owner;          // "TQue 'inQueueX' (kernel.cpp:40) buffer 1/2"
    // Same-pipe order on V: the byte ranges vector instructions wrote since the V pipe was last
    // ordered against itself (PipeBarrier<PIPE_V>/<PIPE_ALL>, a WaitFlag<V_S> on the scalar
    // unit that issues every later instruction). A vector instruction reading one of them
    // needs a PipeBarrier<PIPE_V> first (see check_vector_raw in emu_tensor.h).
    struct VectorWrite { uint64_t lo, hi, seq, call; const char* api; std::string at; };
    std::vector<VectorWrite> v_writes;
    double enq_time = 0;        // timing: when its EnQue's producer pipe was done
    double free_time = 0;       // timing: when its FreeTensor's consumer pipe was done
};

struct CoreState {
    Launch* launch;
    uint32_t idx;
    uint32_t epoch = 0;  // SyncAll count passed
    std::vector<uint8_t> ub;     // the unified buffer
    std::vector<uint8_t> ub_def; // 1 where the byte was written since allocation
    std::deque<Slot> slots;      // stable addresses
    const void* live_pipe = nullptr;
    const char* atomic_type = "";  // "" or the type name of SetAtomicAdd<T>
    // GM byte ranges written by MTE3 not yet synchronised (MTE3_MTE2 / PIPE_ALL / SyncAll):
    // reading them back on MTE2 is a hazard.
    std::vector<std::pair<const uint8_t*, const uint8_t*>> gm_pending;
    // GM bytes written by GlobalTensor::SetValue (the scalar data cache) not yet flushed with
    // DataCacheCleanAndInvalid: a DMA copy of them would see stale memory.
    std::vector<std::pair<const uint8_t*, const uint8_t*>> gm_dirty;
    uint64_t seq = 0;  // counts pipe writes to UB
    // Same-pipe order: UB bytes written by MTE2 and GM bytes written (non-atomically) by MTE3
    // since that pipe was last ordered (PipeBarrier<PIPE_MTE2/3/ALL>, a SetFlag from it, a
    // queue hand-over). The DMA engines may reorder copies, so overlapping ones need a barrier.
    std::vector<std::pair<uint64_t, uint64_t>> mte2_ub;
    std::vector<std::pair<const uint8_t*, const uint8_t*>> mte3_gm;
    std::vector<std::string> deferred;  // errors found in destructors
    CoreClock clock;                    // pipe clocks of the timing model
    // The vector mask register (Normal mode; mask[1] high lanes 64..127, mask[0] low lanes):
    // count-form APIs leave it all ones (asc-devkit dav_c220 impl: set_mask_norm then
    // set_vector_mask(-1, -1)), a repeat form with isSetMask = true leaves its own mask, and
    // SetVectorMask / AscendCUtils::SetMask set it. Unknown at kernel start: an API with
    // isSetMask = false before anything set it is an error.
    uint64_t vector_mask[2] = {0, 0};
    bool vector_mask_known = false;
    CoreState(Launch* l, uint32_t i) : launch(l), idx(i), ub(kUbBytes, 0xFF), ub_def(kUbBytes, 0) {
        l->timing.attach(clock);
    }
};

inline thread_local CoreState* tls_core = nullptr;
inline CoreState* current_core() {
    if (!tls_core) throw EmuError("AscendC API called outside a kernel launched by opgen_emu_launch_*");
    return tls_core;
}

// Called by the APIs that move or compute data: once a core has failed the others stop early.
inline void poll_abort() {
    if (tls_core && tls_core->launch->stop.load(std::memory_order_relaxed)) throw EmuAbort{};
}

[[noreturn]] inline void fail(const std::string& what) {
    CoreState* c = tls_core;
    throw EmuError(c ? cat("core ", c->idx, ": ", what) : what);
}

// ---------------------------------------------------------------- GM access checks
// The reserved system workspace belongs to CANN's runtime: a kernel that binds or copies it
// took the raw workspace argument instead of GetUserWorkspace(workspace).
inline void reject_system_workspace(const GmBuffer& g, const char* api) {
    if (g.system())
        fail(cat(api, ": touches CANN's reserved system workspace (", kSysWorkspaceBytes >> 20,
                 " MB in front of the user workspace): take the workspace with GetUserWorkspace(workspace)"));
}

// The launcher-given buffer holding all of [p, p+bytes); an error naming the argument when the
// range overruns it. Called with launch->gm_mutex held (gm_note_* then record the access).
inline GmBuffer& gm_check(const void* p, uint64_t bytes, const char* api) {
    Launch* l = current_core()->launch;
    GmBuffer* g = l->find_gm(p, bytes);
    if (!g) {
        GmBuffer* s = l->find_gm_start(p);
        if (s)
            fail(cat(api, ": GM access of ", bytes, " B at offset ",
                     static_cast<const uint8_t*>(p) - s->base, " of argument ", s->arg,
                     " overruns its ", s->size, " B"));
        fail(cat(api, ": GM address ", p, " is not inside any kernel argument buffer"));
    }
    reject_system_workspace(*g, api);
    return *g;
}

inline std::string race_msg(const char* api, const GmBuffer& g, uint64_t off, uint32_t other,
                            const char* what) {
    return cat(api, ": GM race on argument ", g.arg, " byte ", off, ": ", what, " by core ",
               tag_core(other), " in the same SyncAll epoch ", tag_epoch(other),
               " (add SyncAll between them, or use SetAtomicAdd for accumulation)");
}

// The shadow is allocated on a buffer's first access: untouched arguments cost nothing.
inline void gm_shadow(GmBuffer& g) {
    if (g.write_tag.empty()) {
        g.write_tag.assign(g.size, 0);
        g.read_tag.assign(g.size, 0);
    }
}

inline void gm_note_read(GmBuffer& g, uint64_t off, uint64_t bytes, const char* api) {
    gm_shadow(g);
    CoreState* c = current_core();
    uint32_t mine = make_tag(c->idx, c->epoch, false);
    for (uint64_t i = off; i < off + bytes; ++i) {
        uint32_t w = g.write_tag[i];
        if (w && tag_epoch(w) == c->epoch && tag_core(w) != c->idx)
            fail(race_msg(api, g, i, w, "read of bytes written"));
        g.read_tag[i] = mine;
    }
}

inline void gm_note_write(GmBuffer& g, uint64_t off, uint64_t bytes, bool atomic, const char* api) {
    gm_shadow(g);
    CoreState* c = current_core();
    uint32_t mine = make_tag(c->idx, c->epoch, atomic);
    for (uint64_t i = off; i < off + bytes; ++i) {
        uint32_t w = g.write_tag[i], r = g.read_tag[i];
        bool same_epoch_other = w && tag_epoch(w) == c->epoch && tag_core(w) != c->idx;
        if (same_epoch_other && !(atomic && tag_atomic(w)))
            fail(race_msg(api, g, i, w, atomic ? "atomic add to bytes written non-atomically"
                                               : "write to bytes also written"));
        if (r && tag_epoch(r) == c->epoch && tag_core(r) != c->idx)
            fail(race_msg(api, g, i, r, "write to bytes read"));
        g.write_tag[i] = mine;
    }
}

// Drop a core's entries from the unflushed list (call with gm_mutex held).
inline void forget_unflushed(Launch& l, uint32_t core) {
    auto& u = l.unflushed;
    u.erase(std::remove_if(u.begin(), u.end(), [&](const auto& e) { return std::get<0>(e) == core; }), u.end());
}

// ---------------------------------------------------------------- SyncAll barrier
inline void core_finished(Launch* l) {
    std::lock_guard<std::mutex> lk(l->bar_mutex);
    ++l->bar_finished;
    l->bar_cv.notify_all();
}

inline void sync_all_barrier() {
    CoreState* c = current_core();
    Launch* l = c->launch;
    std::unique_lock<std::mutex> lk(l->bar_mutex);
    if (l->aborted) throw EmuAbort{};
    uint32_t gen = l->bar_generation;
    if (++l->bar_waiting == l->block_dim) {
        l->bar_waiting = 0;
        ++l->bar_generation;
        l->bar_cv.notify_all();
    } else {
        l->bar_cv.wait(lk, [&] {
            return l->aborted || l->bar_generation != gen ||
                   (l->bar_finished > 0 && l->bar_waiting + l->bar_finished == l->block_dim);
        });
        if (l->aborted) throw EmuAbort{};
        if (l->bar_generation == gen) {
            lk.unlock();
            fail(cat("SyncAll: ", l->bar_finished, " core(s) returned from the kernel without "
                     "reaching this SyncAll (every core must call SyncAll the same number of "
                     "times; the hardware would hang)"));
        }
    }
    ++c->epoch;
}

// ---------------------------------------------------------------- the launcher
inline thread_local std::string tls_last_error;
// The tiling key of the next launch on this thread (opgen_emu_set_tiling_key).
inline thread_local uint64_t tls_tiling_key = 0;
inline uint64_t tiling_key() { return current_core()->launch->tiling_key; }
// Of the last launch on this thread: GM bytes read by copies into UB, GM bytes written from UB
// (atomic adds included), UB bytes allocated by the largest TPipe of any core, and vector
// element operations (one per destination element of each vector or reduction call).
inline thread_local uint64_t tls_last_stats[4] = {0, 0, 0, 0};

using KernelThunk = void (*)(void* const* args);

// CANN's kernel signature ends (..., workspace, tiling). Device workspace holds garbage, so the
// launcher fills it with NaN bytes and tracks which bytes the kernel writes: data read from
// never-written workspace stays "never written" in UB, and an atomic add into it is an error.
inline void poison_workspace(Launch& l, void* const* args, const uint64_t* sizes, uint32_t nargs) {
    if (nargs < 2 || !args[nargs - 2] || !sizes[nargs - 2]) return;
    for (auto& g : l.gm) {
        if (g.arg != static_cast<int>(nargs - 2)) continue;
        std::fill(g.base, g.base + g.size, 0xFF);
        g.def.assign(g.size, 0);
    }
}

// One process-wide reserved block stands for every launch's system workspace: nothing may
// read or write it (each access fails first), so its pages are never touched or shared.
inline uint8_t* reserved_system_workspace() {
    static uint8_t* block = new uint8_t[kSysWorkspaceBytes];
    return block;
}

// The kernel's arguments with the workspace replaced by the system workspace in front of it;
// the user workspace stays registered under its own argument index.
inline std::vector<void*> with_system_workspace(Launch& l, void* const* args, uint32_t nargs) {
    std::vector<void*> out(args, args + nargs);
    if (nargs < 2) return out;
    l.user_ws = static_cast<uint8_t*>(args[nargs - 2]);
    l.sys_ws = reserved_system_workspace();
    l.gm.push_back({l.sys_ws, kSysWorkspaceBytes, kSysWorkspaceArg, {}, {}, {}});
    out[nargs - 2] = l.sys_ws;
    return out;
}

// AscendC's GetUserWorkspace: the user part of the kernel's workspace argument.
inline uint8_t* user_workspace(const void* workspace) {
    Launch* l = current_core()->launch;
    if (!l->sys_ws || workspace != l->sys_ws)
        fail("GetUserWorkspace: the argument is not the kernel's workspace argument");
    return l->user_ws;
}

inline void run_core(Launch* l, uint32_t idx, KernelThunk thunk, void* const* args) {
    CoreState core(l, idx);
    tls_core = &core;
    try {
        thunk(args);
        if (core.atomic_type[0])
            core.deferred.push_back(cat("kernel ended with SetAtomicAdd<", core.atomic_type,
                                        "> still on (call SetAtomicNone)"));
        if (!core.deferred.empty()) throw EmuError(cat("core ", idx, ": ", core.deferred.front()));
        l->timing.core_done(core.clock);
    } catch (const EmuError& e) {
        l->record_error(static_cast<int>(idx), e.what());
    } catch (const EmuAbort&) {
    } catch (const std::exception& e) {
        l->record_error(static_cast<int>(idx), cat("core ", idx, ": C++ exception: ", e.what()));
    } catch (...) {
        l->record_error(static_cast<int>(idx), cat("core ", idx, ": unknown C++ exception"));
    }
    tls_core = nullptr;
    core_finished(l);
}

inline int launch_cores(const char* kernel, uint32_t expected_nargs, KernelThunk thunk,
                        uint32_t block_dim, void* const* args, const uint64_t* sizes, uint32_t nargs);

// Runs `thunk` on block_dim cores (one thread each). Returns 0, or nonzero with the message in
// opgen_emu_last_error(). Nothing may escape: this is called through a C ABI from Python.
inline int launch(const char* kernel, uint32_t expected_nargs, KernelThunk thunk,
                  uint32_t block_dim, void* const* args, const uint64_t* sizes, uint32_t nargs) {
    try {
        return launch_cores(kernel, expected_nargs, thunk, block_dim, args, sizes, nargs);
    } catch (const std::exception& e) {
        tls_last_error = cat(kernel, ": emulation failure: ", e.what());
    } catch (...) {
        tls_last_error = cat(kernel, ": emulation failure");
    }
    return 3;
}

inline int launch_cores(const char* kernel, uint32_t expected_nargs, KernelThunk thunk,
                        uint32_t block_dim, void* const* args, const uint64_t* sizes, uint32_t nargs) {
    tls_last_error.clear();
    if (nargs != expected_nargs) {
        tls_last_error = cat(kernel, ": launched with ", nargs, " arguments, the kernel takes ",
                             expected_nargs);
        return 2;
    }
    if (block_dim == 0 || block_dim > kMaxCores) {
        tls_last_error = cat(kernel, ": block_dim ", block_dim, " outside [1, ", kMaxCores, "]");
        return 2;
    }
    Launch l;
    l.block_dim = block_dim;
    l.tiling_key = tls_tiling_key;
    for (uint32_t i = 0; i < nargs; ++i) {
        if (!args[i] || !sizes[i]) continue;  // a null or empty argument: any access fails
        l.gm.push_back({static_cast<uint8_t*>(args[i]), sizes[i], static_cast<int>(i), {}, {}, {}});
    }
    poison_workspace(l, args, sizes, nargs);
    l.timing.begin(tls_timing_params, block_dim);
    std::vector<void*> kernel_args = with_system_workspace(l, args, nargs);
    std::vector<std::thread> cores;
    try {
        for (uint32_t i = 0; i < block_dim; ++i) cores.emplace_back(run_core, &l, i, thunk, kernel_args.data());
    } catch (const std::exception& e) {
        l.record_error(-1, cat("could not start core threads: ", e.what()));
    }
    for (auto& t : cores) t.join();
    tls_last_stats[0] = l.gm_read;
    tls_last_stats[1] = l.gm_written;
    tls_last_stats[2] = l.ub_peak;
    tls_last_stats[3] = l.vector_elems;
    finish_timing(l.timing, l.gm_read + l.gm_written);
    if (!l.aborted) return 0;
    tls_last_error = cat(kernel, ": ", l.first_error);
    return 1;
}

}  // namespace opgen_emu

#endif  // OPGEN_EMU_RUNTIME_H
