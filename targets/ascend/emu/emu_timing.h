// opgen AscendC emulation: the pipe-level timing model.
//
// Why: the emulation checks that a kernel is correct; this says how long it would take, so that
// pipelining (events, double buffering) can be judged and tuned without a device. It is a model
// of the issue and pipe structure, not a cycle simulator: each core has one clock per pipe
// (MTE2 GM->UB, V vector, MTE3 UB->GM, S scalar), every instruction is charged to its pipe, and
// the pipes run concurrently except where the code synchronises them.
//
//   issue      the scalar unit issues in program order: an instruction on pipe P starts at
//              max(t[P], t[S]) (t[S] only moves with scalar work, scalar waits and barriers)
//   copies     MTE2/MTE3: dma_latency + bytes / the pipe's per-core bandwidth; and the bytes
//              pass the core's share of the aggregate GM bandwidth (aggregate / block_dim: all
//              cores stream at once), one share for reads and writes together, so no schedule
//              of copies moves GM bytes faster than the aggregate bandwidth
//   vector     V: vec_head + repeats x cycles per repeat (by instruction class and dtype)
//   scalar     S: scalar_cycles per LocalTensor Get/SetValue, gm_scalar_cycles per GlobalTensor one
//   SetFlag<A_B>   on pipe A: event_cycles; records t[A]
//   WaitFlag<A_B>  on pipe B: t[B] = max(t[B], that SetFlag's time) + event_cycles
//   EnQue / DeQue  a SetFlag / WaitFlag between the queue's producer and consumer pipes
//                  (VECIN: MTE2 -> V, VECOUT: V -> MTE3); FreeTensor / AllocTensor the reverse
//                  flag for buffer reuse (VECIN: V -> MTE2, VECOUT: MTE3 -> V), as AscendC's
//                  TQue implements them
//   PipeBarrier<PIPE_X>  barrier_cycles on X; PIPE_ALL joins every pipe (S too) at the latest
//   SyncAll    joins every pipe of every core at the latest core's time + sync_all_cycles
// A kernel's time is the latest core's latest pipe; busy % is each pipe's charged cycles over
// block_dim x that time; the GM bound is the launch's GM bytes over the aggregate bandwidth.
//
// OPGEN_EMU_TIMING_IGNORE_SYNC (tests only) ablates the ordering: waits, PIPE_ALL and SyncAll
// joins are ignored, their fixed costs kept. tests/test_ascend_timing.py shows that such a
// model fails its predictions.
//
// Parameters (cycles and bytes per cycle of one vector core) are set per launching thread by
// opgen_emu_set_timing() from the product's hardware description (targets/ascend/hardware.py);
// the defaults below are Atlas A2's, each sourced in docs/ascend-timing.md.
#ifndef OPGEN_EMU_TIMING_H
#define OPGEN_EMU_TIMING_H

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

namespace opgen_emu {

// Pipe indices as in enum class Pipe (emu_runtime.h): NONE 0, MTE2 1, V 2, MTE3 3, S 4.
constexpr int kPipes = 5;
constexpr int kTMte2 = 1, kTV = 2, kTMte3 = 3, kTS = 4;

// The order of the fields is the ABI of opgen_emu_set_timing (hardware.py's PipeTiming.params()).
// Each default is Atlas A2's row of the constants table, targets/ascend/timing_constants.py
// (docs/ascend-timing.md: value, unit, public source or assumed range);
// tests/test_ascend_timing_constants.py checks these against it.
struct TimingParams {
    double clock_hz = 1.8e9;             // row clock_hz
    double mte2_bytes_per_cycle = 46.5;  // row mte2_bytes_per_cycle
    double mte3_bytes_per_cycle = 65.6;  // row mte3_bytes_per_cycle
    double dma_latency = 210;            // row dma_latency
    double gm_bytes_per_cycle = 768;     // row gm_bytes_per_cycle
    double vec_head = 2;                 // row vec_head
    double vec_simple_elems = 256;       // row vec_simple_elems
    double vec_slow_elems = 32;          // row vec_slow_elems
    double vec_cast_elems = 64;          // row vec_cast_elems
    double vec_reduce_cycles = 7;        // row vec_reduce_cycles
    double scalar_cycles = 1;            // row scalar_cycles
    double gm_scalar_cycles = 210;       // row gm_scalar_cycles
    double event_cycles = 1;             // row event_cycles
    double barrier_cycles = 1;           // row barrier_cycles
    double sync_all_cycles = 3600;       // row sync_all_cycles
    static constexpr int kCount = 15;
    void set(const double* v, int n) {
        using P = TimingParams;
        static constexpr double P::*fields[kCount] = {
            &P::clock_hz, &P::mte2_bytes_per_cycle, &P::mte3_bytes_per_cycle, &P::dma_latency,
            &P::gm_bytes_per_cycle, &P::vec_head, &P::vec_simple_elems, &P::vec_slow_elems,
            &P::vec_cast_elems, &P::vec_reduce_cycles, &P::scalar_cycles, &P::gm_scalar_cycles,
            &P::event_cycles, &P::barrier_cycles, &P::sync_all_cycles};
        for (int i = 0; i < n && i < kCount; ++i) this->*fields[i] = v[i];
    }
};
static_assert(sizeof(TimingParams) == TimingParams::kCount * sizeof(double), "every TimingParams field is set()");

// Set by opgen_emu_set_timing on the launching thread; each launch copies it.
inline thread_local TimingParams tls_timing_params;

// Cycles one vector instruction takes on V: `repeats` 256-byte repeats of `esize`-byte lanes.
inline double vector_cycles(const TimingParams& p, const char* api, uint32_t esize, uint64_t repeats) {
    auto is = [api](const char* n) { return std::strcmp(api, n) == 0; };
    const double lanes = 256.0 / esize;
    double per_repeat;
    if (is("Exp") || is("Ln") || is("Sqrt") || is("Rsqrt") || is("Div") || is("Reciprocal"))
        per_repeat = lanes / p.vec_slow_elems;
    else if (is("Cast"))
        per_repeat = lanes / p.vec_cast_elems;
    else if (is("ReduceSum") || is("WholeReduceSum") || is("BlockReduceSum") || is("ReduceMax") || is("ReduceMin"))
        per_repeat = p.vec_reduce_cycles;
    else
        per_repeat = 256.0 / p.vec_simple_elems;
    return p.vec_head + double(repeats) * std::max(1.0, per_repeat);
}

// One core's pipe clocks (cycles since the launch) and charged cycles.
struct CoreClock {
    const TimingParams* p = nullptr;
    double t[kPipes] = {};
    double busy[kPipes] = {};
    int dma_depth = 0;     // inside a copy API: its bursts make one instruction
    int dma_pipe = 0;
    uint64_t dma_bytes = 0;
    double mte2_bpc = 0, mte3_bpc = 0;  // the DMA pipes' per-core bandwidths
    double share_bpc = 0;               // this core's share of the aggregate GM bandwidth
    double gm_t = 0;                    // when the core's GM share is free again

    double start_on(int pipe) const { return std::max(t[pipe], t[kTS]); }
    void run(int pipe, double cycles) {
        t[pipe] = start_on(pipe) + cycles;
        busy[pipe] += cycles;
    }
    void wait(int pipe, double until) {
#ifdef OPGEN_EMU_TIMING_IGNORE_SYNC
        until = 0;
#endif
        t[pipe] = std::max(start_on(pipe), until);
    }
    // A flag: set on `from` (returns its time), awaited on `to`.
    double set_flag(int from) {
        run(from, p->event_cycles);
        return t[from];
    }
    void wait_flag(int to, double set_time) {
        wait(to, set_time);
        run(to, p->event_cycles);
    }
    double end() const { return *std::max_element(t + 1, t + kPipes); }
    // Every pipe continues at `at` (which includes the join's fixed cost `fixed`).
    void join_all(double at, double fixed) {
#ifdef OPGEN_EMU_TIMING_IGNORE_SYNC
        for (int i = 1; i < kPipes; ++i) t[i] += fixed;  // the ablation: the fixed cost, no join
        return;
#endif
        (void)fixed;
        for (int i = 1; i < kPipes; ++i) t[i] = at;
    }
    void barrier(int pipe) { run(pipe, p->barrier_cycles); }
    void barrier_all() { join_all(end() + p->barrier_cycles, p->barrier_cycles); }  // waits: charges no pipe
    void vector(const char* api, uint32_t esize, uint64_t repeats) { run(kTV, vector_cycles(*p, api, esize, repeats)); }
    void scalar(double cycles) {
        if (dma_depth == 0) run(kTS, cycles);  // DataCopyPad's pad values are the DMA's, not S's
    }
    void dma_open(int pipe) {
        if (dma_depth++ == 0) { dma_pipe = pipe; dma_bytes = 0; }
    }
    void dma_close() {
        if (--dma_depth > 0 || dma_bytes == 0) return;
        const double start = start_on(dma_pipe), bytes = double(dma_bytes);
        const double own = start + p->dma_latency + bytes / (dma_pipe == kTMte2 ? mte2_bpc : mte3_bpc);
        gm_t = std::max(gm_t, start + p->dma_latency) + bytes / share_bpc;
        run(dma_pipe, std::max(own, gm_t) - start);
    }
};

// The launch's side: parameters, SyncAll joins, and every core's final clock.
struct LaunchTiming {
    TimingParams p;
    uint32_t block_dim = 1;
    double share_bpc = 0;
    std::mutex m;
    std::map<uint32_t, double> joins;  // SyncAll epoch -> the latest core's time on arrival
    std::vector<CoreClock> done;

    void begin(const TimingParams& params, uint32_t cores) {
        p = params;
        block_dim = cores;
        share_bpc = p.gm_bytes_per_cycle / std::max(1u, cores);
    }
    void attach(CoreClock& c) const {
        c.p = &p;
        c.mte2_bpc = p.mte2_bytes_per_cycle;
        c.mte3_bpc = p.mte3_bytes_per_cycle;
        c.share_bpc = share_bpc;
    }
    void arrive(uint32_t epoch, double t) {
        std::lock_guard<std::mutex> lk(m);
        double& j = joins[epoch];
        j = std::max(j, t);
    }
    double joined(uint32_t epoch) {
        std::lock_guard<std::mutex> lk(m);
        return joins[epoch];
    }
    void core_done(const CoreClock& c) {
        std::lock_guard<std::mutex> lk(m);
        done.push_back(c);
    }
};

// Of the last launch on this thread: [0] modelled cycles, [1] seconds, [2..5] busy fraction of
// MTE2, V, MTE3, S (charged cycles / (block_dim x time)), [6] GM bytes, [7] the GM-bandwidth
// bound in seconds, [8] bound / time, [9] block_dim.
constexpr int kTimingOut = 10;
inline thread_local double tls_last_timing[kTimingOut] = {};

inline void finish_timing(LaunchTiming& l, uint64_t gm_bytes) {
    double cycles = 0, busy[kPipes] = {};
    for (const CoreClock& c : l.done) {
        cycles = std::max(cycles, c.end());
        for (int i = 1; i < kPipes; ++i) busy[i] += c.busy[i];
    }
    double* o = tls_last_timing;
    o[0] = cycles;
    o[1] = cycles / l.p.clock_hz;
    for (int i = 1; i < kPipes; ++i) o[1 + i] = cycles > 0 ? busy[i] / (cycles * l.block_dim) : 0;
    o[6] = double(gm_bytes);
    o[7] = double(gm_bytes) / (l.p.gm_bytes_per_cycle * l.p.clock_hz);
    o[8] = o[1] > 0 ? o[7] / o[1] : 0;
    o[9] = l.block_dim;
}

}  // namespace opgen_emu

#endif  // OPGEN_EMU_TIMING_H
