// opgen AscendC emulation: GlobalTensor, LocalTensor, TPipe, TQue, TBuf and pipe sync.
//
// A LocalTensor refers to a Slot (one UB buffer of a queue or TBuf) plus a generation: after
// FreeTensor or TPipe::Reset the generation moves on and every stale copy is caught on use.
// Each slot remembers the last pipe that wrote it without synchronisation; a read from another
// pipe before EnQue/DeQue, SetFlag/WaitFlag or PipeBarrier<PIPE_ALL> is reported.
#ifndef OPGEN_EMU_TENSOR_H
#define OPGEN_EMU_TENSOR_H

#include "emu_runtime.h"
#include "emu_types.h"

#define __aicore__
#define __global__
#define __gm__
#define __ubuf__
#define __inout_pipe__(p)
typedef __gm__ uint8_t* GM_ADDR;

namespace AscendC {

constexpr uint32_t ONE_BLK_SIZE = 32;
constexpr uint32_t ONE_REPEAT_BYTE_SIZE = 256;
constexpr uint32_t DEFAULT_BLK_NUM = 8;
constexpr uint32_t DEFAULT_BLK_STRIDE = 1;
constexpr uint32_t DEFAULT_REPEAT_STRIDE = 8;
constexpr int32_t MAX_REPEAT_TIMES = 255;

enum class TPosition : uint8_t { GM, A1, A2, B1, B2, C1, C2, CO1, CO2, VECIN, VECOUT, VECCALC, MAX };
using QuePosition = TPosition;

enum pipe_t { PIPE_S = 0, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL, PIPE_FIX };
enum class HardEvent : uint8_t { MTE2_V, V_MTE2, MTE3_V, V_MTE3, V_V, MTE3_MTE2, MTE2_MTE3,
                                 S_V, V_S, S_MTE2, MTE2_S, S_MTE3, MTE3_S, MAX };
enum event_t { EVENT_ID0 = 0, EVENT_ID1, EVENT_ID2, EVENT_ID3, EVENT_ID4, EVENT_ID5, EVENT_ID6,
               EVENT_ID7 };
using TEventID = int8_t;

}  // namespace AscendC

namespace opgen_emu {

// ---------------------------------------------------------------- UB access primitives
inline CoreState& core() { return *current_core(); }

inline const char* state_problem(SlotState s) {
    switch (s) {
        case SlotState::FREE: return "used after FreeTensor";
        case SlotState::QUEUED: return "used while in a queue (after EnQue, before DeQue)";
        case SlotState::DEAD: return "used after TPipe::Reset";
        default: return nullptr;
    }
}

// Validate a tensor's slot: alive, this generation, not in a queue.
inline void check_slot(const Slot* s, uint32_t gen, const char* api) {
    if (!s) fail(cat(api, ": LocalTensor was never allocated (AllocTensor/DeQue/TBuf::Get)"));
    if (s->state == SlotState::DEAD) fail(cat(api, ": LocalTensor of ", s->owner, " used after TPipe::Reset"));
    if (s->generation != gen)
        fail(cat(api, ": LocalTensor of ", s->owner, " used after FreeTensor (stale tensor)"));
    if (const char* p = state_problem(s->state)) fail(cat(api, ": LocalTensor of ", s->owner, " ", p));
}

#ifdef OPGEN_EMU_AUTO_SCALAR_SYNC
constexpr bool kScalarSync = false;  // the compiler's auto-sync inserts the S <-> other pipe flags
#else
constexpr bool kScalarSync = true;
#endif

// Whether an access on `second` after one on `first` (to the same buffer) needs a sync.
inline bool needs_sync(Pipe first, Pipe second) {
    if (first == Pipe::NONE || first == second) return false;  // one pipe runs in order
    return kScalarSync || (first != Pipe::S && second != Pipe::S);
}

// Read after write: a read by `pipe` of a slot last written by another pipe without sync.
// The read is recorded for the write-after-read check (S reads complete in program order).
inline uint8_t pipe_bit(Pipe p) { return static_cast<uint8_t>(1u << static_cast<int>(p)); }

inline void check_sync_read(Slot* s, Pipe pipe, const char* api) {
    if (needs_sync(s->pending, pipe) && !(s->synced & pipe_bit(pipe)))
        fail(cat(api, ": reads ", s->owner, " on pipe ", pipe_name(pipe), " right after a write on ",
                 pipe_name(s->pending), " with no synchronisation (EnQue/DeQue, SetFlag/WaitFlag or ",
                 "PipeBarrier<PIPE_ALL>)", site_suffix()));
    if (pipe == Pipe::V || pipe == Pipe::MTE3) {
        s->read_seq[static_cast<int>(pipe)] = ++core().seq;
        s->war_synced[static_cast<int>(pipe)] = 0;
    }
}

// Write after read: the asynchronous V and MTE3 pipes may still be reading what another pipe
// is about to overwrite. Opt-in for now (-DOPGEN_EMU_CHECK_WAR): see REQUESTS.md.
#ifdef OPGEN_EMU_CHECK_WAR
constexpr bool kCheckWar = true;
#else
constexpr bool kCheckWar = false;
#endif
inline void check_war(Slot* s, Pipe pipe, const char* api) {
    if (!kCheckWar) return;
    for (Pipe r : {Pipe::V, Pipe::MTE3})
        if (s->read_seq[static_cast<int>(r)] && needs_sync(r, pipe) &&
            !(s->war_synced[static_cast<int>(r)] & pipe_bit(pipe)))
            fail(cat(api, ": writes ", s->owner, " on pipe ", pipe_name(pipe), " while pipe ", pipe_name(r),
                     " may still be reading it (write after read with no SetFlag/WaitFlag or ",
                     "PipeBarrier<PIPE_ALL> in between)"));
}

// Same-pipe order on V. asc-devkit docs/api/context/PipeBarrier(ISASI).md (cannmirror/
// asc-devkit 0a2e47c): "Mul指令的输入dst0Local是Add指令的输出，两个矢量运算指令产生依赖，需要插入
// PipeBarrier保证两条指令的执行顺序" -- a vector instruction reading what an earlier vector
// instruction wrote needs PipeBarrier<PIPE_V> in between (the compiler's auto-sync would insert
// it; with OPGEN_EMU_AUTO_SCALAR_SYNC the emulation trusts it, as for the scalar flags).
// Byte ranges: rows of one buffer written and read independently need no barrier.
#ifdef OPGEN_EMU_AUTO_SCALAR_SYNC
constexpr bool kVectorOrder = false;
#else
constexpr bool kVectorOrder = true;
#endif
struct VectorDst { const Slot* slot = nullptr; uint64_t lo = 0, hi = 0; };
inline thread_local VectorDst tls_vector_dst;  // the running instruction's dst range

inline void check_vector_raw(const Slot* s, uint64_t lo, uint64_t hi, const char* api) {
    if (!kVectorOrder) return;
    for (const auto& w : s->v_writes)
        if (lo < w.hi && w.lo < hi && !(w.call && w.call == tls_site.call))  // not its own stages
            fail(cat(api, ": reads ", s->owner, " on pipe V (vector) right after ", w.api, " (", w.at,
                     ") wrote it on pipe V (vector) with no PipeBarrier<PIPE_V> in between", site_suffix()));
}

// The V pipe ordered against itself: every vector write up to access number `upto` is done.
inline void order_vector_pipe(uint64_t upto = ~uint64_t(0)) {
    for (auto& s : core().slots)
        s.v_writes.erase(std::remove_if(s.v_writes.begin(), s.v_writes.end(),
                                        [&](const Slot::VectorWrite& w) { return w.seq <= upto; }),
                         s.v_writes.end());
}

inline void mark_write(Slot* s, Pipe pipe, const char* api) {
    check_war(s, pipe, api);
    s->pending = pipe;
    s->pending_seq = ++core().seq;
    s->synced = 0;
    if (pipe == Pipe::V && kVectorOrder) {
        VectorDst d = tls_vector_dst;
        if (d.slot != s) d = {s, s->offset, s->offset + s->bytes};  // range unknown: the buffer
        s->v_writes.push_back({d.lo, d.hi, s->pending_seq, tls_site.call, api, site_text()});
    }
    tls_vector_dst = {};
}


inline void reset_sync(Slot* s) {
    s->pending = Pipe::NONE;
    s->synced = 0;
    std::fill(std::begin(s->read_seq), std::end(s->read_seq), 0);
    std::fill(std::begin(s->war_synced), std::end(s->war_synced), 0);
}

// A queue hand-over orders only the queue's two pipes (asc-devkit GetQueEvt: a VECIN tensor
// EnQue'd after its GM->UB copy is handed over with MTE2_V, a VECOUT one with V_MTE3): the
// write stays pending for every other pipe, so a scalar GetValue of data an MTE2 copy wrote
// still needs SetFlag/WaitFlag<MTE2_S> (as CANN's own kernels carry).
inline void hand_over(Slot* s, Pipe to) {
    const Pipe writer = s->pending;
    const uint64_t seq = s->pending_seq;
    reset_sync(s);
    if (writer == Pipe::NONE || writer == to) return;
    s->pending = writer;
    s->pending_seq = seq;
    s->synced = pipe_bit(to);
    s->synced_seq[static_cast<int>(to)] = ++core().seq;
}

// Synchronise accesses by `from` (every pipe for NONE) made up to access number `upto`.
// With `to` (a WaitFlag<from_to>), only pipe `to` is ordered after them: event-level ordering.
// Flags chain: a write another pipe's WaitFlag had made visible to `from` before from's SetFlag
// (S -> MTE3, then MTE3 -> V) is visible to `to` as well; the wait is after the set, the set
// after the write, in each pipe's program order.
inline void clear_pending(Pipe from, uint64_t upto = ~uint64_t(0), Pipe to = Pipe::NONE) {
    const uint64_t now = ++core().seq;  // a SetFlag from here on comes after this wait
    for (auto& s : core().slots) {
        const int f = static_cast<int>(from);
        const bool direct = (from == Pipe::NONE || s.pending == from) && s.pending_seq <= upto;
        const bool chained = from != Pipe::NONE && s.pending != Pipe::NONE &&
                             s.pending_seq <= upto && (s.synced & pipe_bit(from)) && s.synced_seq[f] <= upto;
        if (direct || chained) {
            if (to == Pipe::NONE) s.pending = Pipe::NONE;
            else if (!(s.synced & pipe_bit(to))) {
                s.synced |= pipe_bit(to);
                s.synced_seq[static_cast<int>(to)] = now;
            }
        }
        for (int r = 0; r < 5; ++r) {
            if (!s.read_seq[r] || s.read_seq[r] > upto) continue;
            const bool read_direct = from == Pipe::NONE || f == r;
            const bool read_chained = from != Pipe::NONE && (s.war_synced[r] & pipe_bit(from)) &&
                                      s.war_synced_seq[r][f] <= upto;
            if (!read_direct && !read_chained) continue;
            if (to == Pipe::NONE) s.read_seq[r] = 0;
            else if (!(s.war_synced[r] & pipe_bit(to))) {
                s.war_synced[r] |= pipe_bit(to);
                s.war_synced_seq[r][static_cast<int>(to)] = now;
            }
        }
    }
}

inline void poison(const Slot& s) {
    CoreState& c = core();
    std::fill(c.ub.begin() + s.offset, c.ub.begin() + s.offset + s.bytes, 0xFF);  // NaN bytes
    std::fill(c.ub_def.begin() + s.offset, c.ub_def.begin() + s.offset + s.bytes, 0);
}

inline bool defined(uint64_t ub_off, uint64_t bytes) {
    const uint8_t* d = core().ub_def.data() + ub_off;
    return std::all_of(d, d + bytes, [](uint8_t v) { return v != 0; });
}

inline void set_defined(uint64_t ub_off, uint64_t bytes, bool v) {
    uint8_t* d = core().ub_def.data() + ub_off;
    std::fill(d, d + bytes, v ? 1 : 0);
}

}  // namespace opgen_emu

namespace AscendC {

template <typename T> class LocalTensor;

template <typename T>
class GlobalTensor {
public:
    // Bind to GM; the range must lie inside one kernel argument (as sized by the launcher).
    void SetGlobalBuffer(__gm__ T* buffer, uint64_t bufferSize) {
        using namespace opgen_emu;
        Launch* l = current_core()->launch;
        GmBuffer* g = l->find_gm(buffer, bufferSize * sizeof(T));
        if (GmBuffer* first = l->find_gm_start(buffer)) reject_system_workspace(*first, "SetGlobalBuffer");
        if (!g) {
            GmBuffer* s = l->find_gm_start(buffer);
            if (s)
                fail(cat("SetGlobalBuffer: ", bufferSize, " elements of ", type_name<T>(),
                         " at byte offset ", reinterpret_cast<uint8_t*>(buffer) - s->base,
                         " overrun argument ", s->arg, " (", s->size, " B)"));
            fail(cat("SetGlobalBuffer: address is not inside any kernel argument buffer"));
        }
        base_ = buffer;
        size_ = bufferSize;
    }
    void SetGlobalBuffer(__gm__ T* buffer) {
        using namespace opgen_emu;
        GmBuffer* g = current_core()->launch->find_gm_start(buffer);
        if (!g) fail("SetGlobalBuffer: address is not inside any kernel argument buffer");
        reject_system_workspace(*g, "SetGlobalBuffer");
        uint64_t left = g->size - static_cast<uint64_t>(reinterpret_cast<uint8_t*>(buffer) - g->base);
        SetGlobalBuffer(buffer, left / sizeof(T));
    }
    uint64_t GetSize() const { return size_; }
    __gm__ T* GetPhyAddr() const { return base_; }
    __gm__ T* GetPhyAddr(uint64_t offset) const { return base_ + offset; }
    GlobalTensor operator[](uint64_t offset) const {
        if (!base_) opgen_emu::fail("GlobalTensor[]: SetGlobalBuffer was not called");
        if (offset > size_)
            opgen_emu::fail(opgen_emu::cat("GlobalTensor[", offset, "]: beyond its ", size_, " elements"));
        GlobalTensor r;
        r.base_ = base_ + offset;
        r.size_ = size_ - offset;
        return r;
    }
    T GetValue(uint64_t i) const {
        using namespace opgen_emu;
        check_range(i, 1, "GlobalTensor::GetValue");
        const uint8_t* at = reinterpret_cast<const uint8_t*>(base_ + i);
        for (auto& r : current_core()->gm_pending)
            if (at < r.second && r.first < at + sizeof(T))
                fail(cat("GlobalTensor::GetValue(", i, "): reads GM this core wrote by a UB->GM copy (MTE3) ",
                         "with no synchronisation in between (SetFlag/WaitFlag<MTE3_S> or PipeBarrier<PIPE_ALL>)"));
        std::lock_guard<std::mutex> lk(current_core()->launch->gm_mutex);
        GmBuffer& g = gm_check(base_ + i, sizeof(T), "GlobalTensor::GetValue");
        uint64_t off = static_cast<uint64_t>(reinterpret_cast<uint8_t*>(base_ + i) - g.base);
        gm_note_read(g, off, sizeof(T), "GlobalTensor::GetValue");
        if (!g.defined(off, sizeof(T)))
            fail(cat("GlobalTensor::GetValue(", i, "): reads workspace never written in this launch"));
        T v;
        std::memcpy(&v, base_ + i, sizeof(T));
        current_core()->clock.scalar(current_core()->launch->timing.p.gm_scalar_cycles);
        return v;
    }
    void SetValue(uint64_t i, const typename std::common_type<T>::type& v) const {
        using namespace opgen_emu;
        check_range(i, 1, "GlobalTensor::SetValue");
        std::lock_guard<std::mutex> lk(current_core()->launch->gm_mutex);
        GmBuffer& g = gm_check(base_ + i, sizeof(T), "GlobalTensor::SetValue");
        gm_note_write(g, reinterpret_cast<uint8_t*>(base_ + i) - g.base, sizeof(T), false,
                      "GlobalTensor::SetValue");
        g.set_defined(static_cast<uint64_t>(reinterpret_cast<uint8_t*>(base_ + i) - g.base), sizeof(T));
        std::memcpy(base_ + i, &v, sizeof(T));
        const uint8_t* p = reinterpret_cast<const uint8_t*>(base_ + i);
        current_core()->clock.scalar(current_core()->launch->timing.p.gm_scalar_cycles);
        auto& dirty = current_core()->gm_dirty;  // in the scalar data cache until flushed
        if (!dirty.empty() && dirty.back().second == p) dirty.back().second = p + sizeof(T);
        else dirty.emplace_back(p, p + sizeof(T));
    }
    // Elements [first, first+count) must lie inside the SetGlobalBuffer range.
    void check_range(uint64_t first, uint64_t count, const char* api) const {
        if (!base_) opgen_emu::fail(opgen_emu::cat(api, ": GlobalTensor without SetGlobalBuffer"));
        if (first + count > size_)
            opgen_emu::fail(opgen_emu::cat(api, ": GM elements [", first, ", ", first + count,
                                           ") beyond the GlobalTensor's ", size_, " elements",
                                           opgen_emu::site_suffix()));
    }

private:
    __gm__ T* base_ = nullptr;
    uint64_t size_ = 0;
};

template <typename T>
class LocalTensor {
public:
    LocalTensor() = default;
    uint32_t GetSize() const { return size_; }
    uint32_t GetLength() const { return size_ * sizeof(T); }
    LocalTensor operator[](uint32_t offset) const {
        opgen_emu::check_slot(slot_, gen_, "LocalTensor[]");
        if (offset > size_)
            opgen_emu::fail(opgen_emu::cat("LocalTensor[", offset, "]: beyond its ", size_, " elements"));
        LocalTensor r = *this;
        r.ub_off_ += uint64_t(offset) * sizeof(T);
        r.size_ -= offset;
        return r;
    }
    template <typename U>
    LocalTensor<U> ReinterpretCast() const {
        LocalTensor<U> r;
        r.slot_ = slot_;
        r.gen_ = gen_;
        r.ub_off_ = ub_off_;
        r.size_ = static_cast<uint32_t>(uint64_t(size_) * sizeof(T) / sizeof(U));
        return r;
    }
    // Scalar access (the S pipe): needs sync after MTE2/V writes; reads must be defined.
    T GetValue(uint32_t i, const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
        using namespace opgen_emu;
        SiteScope site(file, line);
        uint64_t off = elem_off(i, 1, "LocalTensor::GetValue");
        check_sync_read(slot_, Pipe::S, "LocalTensor::GetValue");
        if (!defined(off, sizeof(T)))
            fail(cat("LocalTensor::GetValue(", i, "): reads never-written UB of ", slot_->owner,
                     " (poisoned NaN bytes)"));
        T v;
        std::memcpy(&v, core().ub.data() + off, sizeof(T));
        core().clock.scalar(core().launch->timing.p.scalar_cycles);
        return v;
    }
    void SetValue(uint32_t i, const typename std::common_type<T>::type& v) const {
        using namespace opgen_emu;
        uint64_t off = elem_off(i, 1, "LocalTensor::SetValue");
        std::memcpy(core().ub.data() + off, &v, sizeof(T));
        set_defined(off, sizeof(T), true);
        mark_write(slot_, Pipe::S, "LocalTensor::SetValue");
        core().clock.scalar(core().launch->timing.p.scalar_cycles);
    }
    // UB byte offset of elements [i, i+n) after liveness and bounds checks (emulation use).
    uint64_t elem_off(uint64_t i, uint64_t n, const char* api) const {
        opgen_emu::check_slot(slot_, gen_, api);
        if (i + n > size_)
            opgen_emu::fail(opgen_emu::cat(api, ": UB elements [", i, ", ", i + n, ") beyond the ",
                                           size_, "-element LocalTensor of ", slot_->owner));
        return ub_off_ + i * sizeof(T);
    }
    uint64_t ub_offset() const { return ub_off_; }
    opgen_emu::Slot* slot() const { return slot_; }
    T* raw() const { return reinterpret_cast<T*>(opgen_emu::core().ub.data() + ub_off_); }

    opgen_emu::Slot* slot_ = nullptr;
    uint32_t gen_ = 0;
    uint64_t ub_off_ = 0;
    uint32_t size_ = 0;
};

class TPipe;

// Common part of TQue and TBuf: the UB slots handed out by TPipe::InitBuffer.
class TQueBase {
public:
    std::vector<opgen_emu::Slot*> slots_;
    std::deque<opgen_emu::Slot*> fifo_;  // TQue: enqueued, oldest first
    size_t next_ = 0;                     // TQue: where AllocTensor looks first (round robin)
    std::string name_;
};

template <TPosition pos, int32_t depth = 1>
class TQue : public TQueBase {
    static_assert(pos == TPosition::VECIN || pos == TPosition::VECOUT || pos == TPosition::VECCALC,
                  "the opgen emulation models the vector core: TQue positions VECIN/VECOUT/VECCALC");
    static_assert(depth >= 1, "TQue depth must be at least 1");

public:
    template <typename T>
    LocalTensor<T> AllocTensor() {
        using namespace opgen_emu;
        if (slots_.empty()) fail("AllocTensor: queue has no buffers (TPipe::InitBuffer not called)");
        for (size_t k = 0; k < slots_.size(); ++k) {
            Slot* s = slots_[(next_ + k) % slots_.size()];
            if (s->state != SlotState::FREE) continue;
            next_ = (next_ + k + 1) % slots_.size();
            s->state = SlotState::ALLOCATED;
            reset_sync(s);  // FreeTensor/AllocTensor order the previous users before the new one
            s->v_writes.clear();
            if (producer() != consumer()) core().clock.wait_flag(producer(), s->free_time);
            poison(*s);
            return make<T>(s);
        }
        fail(cat("AllocTensor on ", name_, ": all ", slots_.size(),
                 " buffers are in use (missing FreeTensor; the hardware would wait forever)"));
    }
    template <typename T>
    bool EnQue(const LocalTensor<T>& t) {
        using namespace opgen_emu;
        check_slot(t.slot_, t.gen_, "EnQue");
        check_mine(t.slot_, "EnQue");
        if (fifo_.size() >= static_cast<size_t>(depth))
            fail(cat("EnQue on a full queue ", name_, " (depth ", depth, ", holds ", fifo_.size(), ")"));
        t.slot_->state = SlotState::QUEUED;
        hand_over(t.slot_, pos == TPosition::VECOUT ? Pipe::MTE3 : Pipe::V);  // producer before consumer
        if (producer() != consumer()) t.slot_->enq_time = core().clock.set_flag(producer());
        if (pos == TPosition::VECIN) core().mte2_ub.clear();  // EnQue after a copy-in: MTE2 flag
        fifo_.push_back(t.slot_);
        return true;
    }
    template <typename T>
    LocalTensor<T> DeQue() {
        using namespace opgen_emu;
        if (fifo_.empty()) fail(cat("DeQue on an empty queue ", name_, " (no EnQue before it)"));
        Slot* s = fifo_.front();
        fifo_.pop_front();
        s->state = SlotState::DEQUEUED;
        if (producer() != consumer()) core().clock.wait_flag(consumer(), s->enq_time);
        return make<T>(s);
    }
    template <typename T>
    void FreeTensor(LocalTensor<T>& t) {
        using namespace opgen_emu;
        if (!t.slot_) fail("FreeTensor: LocalTensor was never allocated");
        if (t.slot_->generation != t.gen_ || t.slot_->state == SlotState::FREE)
            fail(cat("FreeTensor: tensor of ", t.slot_->owner, " was already freed"));
        check_mine(t.slot_, "FreeTensor");
        if (t.slot_->state == SlotState::QUEUED)
            fail(cat("FreeTensor: tensor of ", t.slot_->owner, " is still in the queue (not DeQue'd)"));
        t.slot_->state = SlotState::FREE;
        ++t.slot_->generation;
        if (producer() != consumer()) t.slot_->free_time = core().clock.set_flag(consumer());
        if (pos == TPosition::VECOUT) core().mte3_gm.clear();  // after a copy-out: MTE3 flag
    }
    bool HasTensorInQue() const { return !fifo_.empty(); }
    int32_t GetTensorCountInQue() const { return static_cast<int32_t>(fifo_.size()); }

private:
    // The pipes a queue hands tensors between (timing model): VECIN MTE2 -> V, VECOUT V -> MTE3.
    static constexpr int producer() { return pos == TPosition::VECIN ? opgen_emu::kTMte2 : opgen_emu::kTV; }
    static constexpr int consumer() { return pos == TPosition::VECOUT ? opgen_emu::kTMte3 : opgen_emu::kTV; }
    template <typename T>
    LocalTensor<T> make(opgen_emu::Slot* s) {
        LocalTensor<T> t;
        t.slot_ = s;
        t.gen_ = s->generation;
        t.ub_off_ = s->offset;
        t.size_ = static_cast<uint32_t>(s->bytes / sizeof(T));
        return t;
    }
    void check_mine(opgen_emu::Slot* s, const char* api) {
        if (std::find(slots_.begin(), slots_.end(), s) == slots_.end())
            opgen_emu::fail(opgen_emu::cat(api, " on ", name_, ": the tensor belongs to ", s->owner));
    }
};

template <TPosition pos = TPosition::VECCALC>
class TBuf : public TQueBase {
    static_assert(pos == TPosition::VECIN || pos == TPosition::VECOUT || pos == TPosition::VECCALC,
                  "the opgen emulation models the vector core: TBuf positions VECIN/VECOUT/VECCALC");

public:
    template <typename T>
    LocalTensor<T> Get() {
        return Get<T>(static_cast<uint32_t>(slot("TBuf::Get")->bytes / sizeof(T)));
    }
    template <typename T>
    LocalTensor<T> Get(uint32_t len) {
        using namespace opgen_emu;
        Slot* s = slot("TBuf::Get");
        if (uint64_t(len) * sizeof(T) > s->bytes)
            fail(cat("TBuf::Get<", type_name<T>(), ">(", len, ") on ", name_, ": ", len * sizeof(T),
                     " B exceeds the buffer's ", s->bytes, " B"));
        LocalTensor<T> t;
        t.slot_ = s;
        t.gen_ = s->generation;
        t.ub_off_ = s->offset;
        t.size_ = len;
        return t;
    }

    // len elements starting bufOffset bytes into the buffer (bufOffset 32-byte aligned).
    template <typename T>
    LocalTensor<T> GetWithOffset(uint32_t len, uint32_t bufOffset) {
        using namespace opgen_emu;
        Slot* s = slot("TBuf::GetWithOffset");
        if (bufOffset % kBlockBytes != 0)
            fail(cat("TBuf::GetWithOffset on ", name_, ": offset ", bufOffset, " B is not 32-byte aligned"));
        if (bufOffset + uint64_t(len) * sizeof(T) > s->bytes)
            fail(cat("TBuf::GetWithOffset<", type_name<T>(), ">(", len, ", ", bufOffset, ") on ", name_,
                     ": exceeds the buffer's ", s->bytes, " B"));
        LocalTensor<T> t = Get<T>(0);
        t.ub_off_ += bufOffset;
        t.size_ = len;
        return t;
    }

private:
    opgen_emu::Slot* slot(const char* api) {
        if (slots_.empty()) opgen_emu::fail(opgen_emu::cat(api, ": TPipe::InitBuffer not called"));
        if (slots_[0]->state == opgen_emu::SlotState::DEAD)
            opgen_emu::fail(opgen_emu::cat(api, " on ", name_, ": buffer released by TPipe::Reset"));
        return slots_[0];
    }
};

}  // namespace AscendC

#endif  // OPGEN_EMU_TENSOR_H
