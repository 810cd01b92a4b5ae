// opgen AscendC emulation: TPipe (UB allocation), pipe synchronisation, core intrinsics.
#ifndef OPGEN_EMU_PIPE_H
#define OPGEN_EMU_PIPE_H

#include "emu_tensor.h"

namespace AscendC {

// ---------------------------------------------------------------- synchronisation
namespace detail {
// The pipe that waits in event e (its second half: MTE2_V -> V).
inline opgen_emu::Pipe event_target(HardEvent e) {
    using opgen_emu::Pipe;
    switch (e) {
        case HardEvent::MTE2_V: case HardEvent::MTE3_V: case HardEvent::S_V: return Pipe::V;
        case HardEvent::V_MTE2: case HardEvent::MTE3_MTE2: case HardEvent::S_MTE2: return Pipe::MTE2;
        case HardEvent::V_MTE3: case HardEvent::MTE2_MTE3: case HardEvent::S_MTE3: return Pipe::MTE3;
        case HardEvent::V_S: case HardEvent::MTE2_S: case HardEvent::MTE3_S: return Pipe::S;
        case HardEvent::V_V: return Pipe::V;
        default: return Pipe::NONE;
    }
}
inline opgen_emu::Pipe event_source(HardEvent e) {
    using opgen_emu::Pipe;
    switch (e) {
        case HardEvent::MTE2_V: case HardEvent::MTE2_MTE3: case HardEvent::MTE2_S: return Pipe::MTE2;
        case HardEvent::V_MTE2: case HardEvent::V_MTE3: case HardEvent::V_V: case HardEvent::V_S: return Pipe::V;
        case HardEvent::MTE3_V: case HardEvent::MTE3_MTE2: case HardEvent::MTE3_S: return Pipe::MTE3;
        case HardEvent::S_V: case HardEvent::S_MTE2: case HardEvent::S_MTE3: return Pipe::S;
        default: return Pipe::NONE;
    }
}
struct Flag { int event; int id; uint64_t seq; double time; };
inline const char* event_name(int e) {
    static const char* names[] = {"MTE2_V", "V_MTE2", "MTE3_V", "V_MTE3", "V_V", "MTE3_MTE2", "MTE2_MTE3",
                                  "S_V", "V_S", "S_MTE2", "MTE2_S", "S_MTE3", "MTE3_S"};
    return e >= 0 && e < static_cast<int>(HardEvent::MAX) ? names[e] : "?";
}
inline int event_dest(HardEvent e) {  // the waiting pipe, as a timing-model index
    switch (e) {
        case HardEvent::MTE2_V: case HardEvent::MTE3_V: case HardEvent::V_V: case HardEvent::S_V: return opgen_emu::kTV;
        case HardEvent::V_MTE2: case HardEvent::MTE3_MTE2: case HardEvent::S_MTE2: return opgen_emu::kTMte2;
        case HardEvent::V_MTE3: case HardEvent::MTE2_MTE3: case HardEvent::S_MTE3: return opgen_emu::kTMte3;
        case HardEvent::V_S: case HardEvent::MTE2_S: case HardEvent::MTE3_S: return opgen_emu::kTS;
        default: return opgen_emu::kTS;
    }
}
inline std::vector<Flag>& flags() {
    static thread_local std::vector<Flag> f;  // set and not yet waited for
    return f;
}
}  // namespace detail

class TPipe {
public:
    TPipe() {
        opgen_emu::CoreState& c = opgen_emu::core();
        if (c.live_pipe)
            opgen_emu::fail("TPipe: a second TPipe while one is alive (one TPipe per kernel owns the UB)");
        c.live_pipe = this;
    }
    TPipe(const TPipe&) = delete;
    TPipe& operator=(const TPipe&) = delete;
    ~TPipe() {
        opgen_emu::CoreState* c = opgen_emu::tls_core;
        if (!c) return;
        if (std::uncaught_exceptions() == 0) check_drained(*c);
        if (c->live_pipe == this) c->live_pipe = nullptr;
    }

    // num buffers of len bytes each (rounded up to 32 B) for a TQue. kernel_operator.h turns
    // every `InitBuffer(args)` call into InitBufferNamed("args", args) so messages can name the
    // buffer by its variable; InitBuffer itself remains for explicit template arguments.
    template <TPosition pos, int32_t depth>
    bool InitBufferNamed(const char* args, TQue<pos, depth>& que, uint8_t num, uint32_t len,
                         const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
        if (num == 0) opgen_emu::fail("InitBuffer: num must be at least 1");
        add(que, num, len, "TQue", opgen_emu::buffer_name(args, file, line));
        return true;
    }
    template <TPosition pos>
    bool InitBufferNamed(const char* args, TBuf<pos>& buf, uint32_t len,
                         const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
        add(buf, 1, len, "TBuf", opgen_emu::buffer_name(args, file, line));
        return true;
    }
    template <TPosition pos, int32_t depth>
    bool InitBuffer(TQue<pos, depth>& que, uint8_t num, uint32_t len,
                    const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
        return InitBufferNamed("", que, num, len, file, line);
    }
    template <TPosition pos>
    bool InitBuffer(TBuf<pos>& buf, uint32_t len, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
        return InitBufferNamed("", buf, len, file, line);
    }
    // Release every buffer: tensors and queues from before are invalid afterwards.
    void Reset() {
        for (opgen_emu::Slot* s : slots_) {
            s->state = opgen_emu::SlotState::DEAD;
            ++s->generation;
        }
        for (TQueBase* q : queues_) {
            q->slots_.clear();
            q->fifo_.clear();
            q->next_ = 0;
        }
        slots_.clear();
        queues_.clear();
        used_ = 0;
        count_ = 0;
        listing_.clear();
    }
    void Destroy() { Reset(); }
    TEventID FetchEventID(HardEvent) { return 0; }
    template <HardEvent evt> TEventID FetchEventID() { return 0; }
    TEventID AllocEventID(HardEvent) { return 0; }
    template <HardEvent evt> TEventID AllocEventID() { return 0; }
    template <HardEvent evt> void ReleaseEventID(TEventID) {}

private:
    void add(TQueBase& q, uint32_t num, uint32_t len, const char* kind, const std::string& name) {
        using namespace opgen_emu;
        if (!q.slots_.empty()) fail(cat("InitBuffer: ", name, " was already given buffers"));
        if (len == 0) fail(cat("InitBuffer: ", name, " with length 0"));
        uint64_t each = round_up(len, kBlockBytes);
        if (count_ + num > kMaxBuffers)
            fail(cat("InitBuffer: ", name, " would make ", count_ + num, " buffers; at most ",
                     kMaxBuffers, " are allowed"));
        std::string entry = cat(kind, " ", name, ": ", num, " x ", each, " B");
        if (used_ + num * each > kUbBytes)
            fail(cat("InitBuffer: UB over-allocation: ", used_ + num * each, " B > ", kUbBytes,
                     " B of UB. Buffers: ", listing_, listing_.empty() ? "" : "; ", entry));
        listing_ += (listing_.empty() ? "" : "; ") + entry;
        CoreState& c = core();
        for (uint32_t i = 0; i < num; ++i) {
            c.slots.emplace_back();
            Slot* s = &c.slots.back();
            s->offset = used_;
            s->bytes = each;
            s->state = std::string(kind) == "TBuf" ? SlotState::TBUF : SlotState::FREE;
            s->owner = num > 1 ? cat(kind, " ", name, " buffer ", i + 1, "/", num) : cat(kind, " ", name);
            used_ += each;
            note_ub_peak(used_);
            if (s->state == SlotState::TBUF) poison(*s);
            q.slots_.push_back(s);
            slots_.push_back(s);
        }
        q.name_ = cat(kind, " ", name);
        queues_.push_back(&q);
        count_ += num;
    }
    static void note_ub_peak(uint64_t used) {
        auto& peak = opgen_emu::core().launch->ub_peak;
        uint64_t seen = peak.load();
        while (used > seen && !peak.compare_exchange_weak(seen, used)) {
        }
    }
    // At kernel end every queue must be empty, every tensor freed and every SetFlag waited for
    // (asc-devkit SetFlag/WaitFlag docs: SetFlag/WaitFlag必须成对出现).
    void check_drained(opgen_emu::CoreState& c) {
        for (const detail::Flag& f : detail::flags())
            c.deferred.push_back(opgen_emu::cat("kernel ended with SetFlag<HardEvent::", detail::event_name(f.event),
                                                ">(", f.id, ") never waited for (a SetFlag without its WaitFlag: ",
                                                "the event stays set into the next kernel)"));
        detail::flags().clear();
        for (opgen_emu::Slot* s : slots_) {
            if (s->state == opgen_emu::SlotState::QUEUED)
                c.deferred.push_back(opgen_emu::cat("kernel ended with a tensor of ", s->owner,
                                                    " still in its queue (EnQue without DeQue)"));
            else if (s->state == opgen_emu::SlotState::ALLOCATED || s->state == opgen_emu::SlotState::DEQUEUED)
                c.deferred.push_back(opgen_emu::cat("kernel ended with a tensor of ", s->owner,
                                                    " never freed (missing FreeTensor)"));
        }
    }

    std::vector<opgen_emu::Slot*> slots_;
    std::vector<TQueBase*> queues_;
    uint64_t used_ = 0;
    uint32_t count_ = 0;
    std::string listing_;
};

inline TPipe* GetTPipePtr() {
    auto* p = static_cast<const TPipe*>(opgen_emu::core().live_pipe);
    if (!p) opgen_emu::fail("GetTPipePtr: no TPipe is alive");
    return const_cast<TPipe*>(p);
}


// SetFlag covers the writes its source pipe made before it; WaitFlag makes them visible.
template <HardEvent evt>
inline void SetFlag(int32_t eventId) {
    opgen_emu::Pipe src = detail::event_source(evt);  // a SetFlag waits for its pipe's earlier work
    double when = opgen_emu::core().clock.set_flag(static_cast<int>(src));
    detail::flags().push_back({static_cast<int>(evt), eventId, opgen_emu::core().seq, when});
    if (src == opgen_emu::Pipe::MTE2) opgen_emu::core().mte2_ub.clear();
    if (src == opgen_emu::Pipe::MTE3) opgen_emu::core().mte3_gm.clear();
}

template <HardEvent evt>
inline void WaitFlag(int32_t eventId) {
    auto& f = detail::flags();
    auto it = std::find_if(f.begin(), f.end(), [&](const detail::Flag& x) {
        return x.event == static_cast<int>(evt) && x.id == eventId;
    });
    if (it == f.end())
        opgen_emu::fail(opgen_emu::cat("WaitFlag(event ", static_cast<int>(evt), ", id ", eventId,
                                       ") without a matching SetFlag (the hardware would hang)"));
    uint64_t upto = it->seq;
    opgen_emu::core().clock.wait_flag(detail::event_dest(evt), it->time);
    f.erase(it);
    opgen_emu::Pipe src = detail::event_source(evt), dst = detail::event_target(evt);
    // Only `dst` is ordered after src's earlier work; but the scalar unit issues every pipe's
    // instructions in program order (asc-devkit docs, guide 抽象硬件架构: Scalar 把矢量计算、
    // 数据搬运、同步指令发射给对应单元), so a wait on S orders them before all later work.
    opgen_emu::clear_pending(src, upto, dst == opgen_emu::Pipe::S ? opgen_emu::Pipe::NONE : dst);
    // GM this core wrote on MTE3 may be read back by MTE2 (or GetValue) once they waited for it.
    if (src == opgen_emu::Pipe::MTE3 && (dst == opgen_emu::Pipe::MTE2 || dst == opgen_emu::Pipe::S))
        opgen_emu::core().gm_pending.clear();
    // The scalar unit waiting for V issues every later vector instruction after V's earlier
    // work is done: the same order as a PipeBarrier<PIPE_V> (and V_V is one, asc-devkit
    // SetFlagImpl: case HardEvent::V_V: PipeBarrierInternal<PIPE_V>()).
    if (src == opgen_emu::Pipe::V && (dst == opgen_emu::Pipe::S || dst == opgen_emu::Pipe::V))
        opgen_emu::order_vector_pipe(upto);
}

template <pipe_t p>
inline void PipeBarrier() {
    opgen_emu::CoreState& c = opgen_emu::core();
    if (p == PIPE_ALL) {
        opgen_emu::clear_pending(opgen_emu::Pipe::NONE);
        c.gm_pending.clear();
        c.clock.barrier_all();
    }
    if (p == PIPE_V) c.clock.barrier(opgen_emu::kTV);
    if (p == PIPE_V || p == PIPE_ALL) opgen_emu::order_vector_pipe();
    if (p == PIPE_MTE2) c.clock.barrier(opgen_emu::kTMte2);
    if (p == PIPE_MTE3) c.clock.barrier(opgen_emu::kTMte3);
    if (p == PIPE_ALL || p == PIPE_MTE2) c.mte2_ub.clear();
    if (p == PIPE_ALL || p == PIPE_MTE3) c.mte3_gm.clear();
}
inline void pipe_barrier(pipe_t p) {
    if (p == PIPE_ALL) PipeBarrier<PIPE_ALL>();
    if (p == PIPE_V) PipeBarrier<PIPE_V>();
    if (p == PIPE_MTE2) PipeBarrier<PIPE_MTE2>();
    if (p == PIPE_MTE3) PipeBarrier<PIPE_MTE3>();
}

// ---------------------------------------------------------------- cores
inline int64_t GetBlockIdx() { return opgen_emu::core().idx; }
inline int64_t GetBlockNum() { return opgen_emu::core().launch->block_dim; }

// All cores meet here; GM written before it is visible to every core after it.
template <bool isAIVOnly = true>
inline void SyncAll() {
#ifdef OPGEN_VECTOR_CORES
    if (GetBlockNum() > OPGEN_VECTOR_CORES)
        opgen_emu::fail(opgen_emu::cat("SyncAll with block_dim ", GetBlockNum(), " > ", OPGEN_VECTOR_CORES,
                                       " vector cores: not every core is resident, the hardware would hang"));
#endif
    PipeBarrier<PIPE_ALL>();
    opgen_emu::CoreState& c = opgen_emu::core();
    {
        std::lock_guard<std::mutex> lk(c.launch->gm_mutex);
        opgen_emu::forget_unflushed(*c.launch, c.idx);
        for (auto& r : c.gm_dirty) c.launch->unflushed.emplace_back(c.idx, r.first, r.second);
    }
    c.launch->timing.arrive(c.epoch, c.clock.end());
    opgen_emu::sync_all_barrier();  // every core arrived: the join of this epoch is final
    const double sync_cost = c.launch->timing.p.sync_all_cycles;
    c.clock.join_all(c.launch->timing.joined(c.epoch - 1) + sync_cost, sync_cost);
}
template <bool isAIVOnly = true>
inline void SyncAll(const GlobalTensor<int32_t>&, const LocalTensor<int32_t>&, int32_t usedCores = 0) {
    if (usedCores != 0 && usedCores != GetBlockNum())
        opgen_emu::fail("SyncAll: usedCores other than the block dim is not emulated");
    SyncAll<isAIVOnly>();
}

// Atomic accumulation of UB->GM copies (DataCopy, DataCopyPad) until SetAtomicNone.
template <typename T>
inline void SetAtomicAdd() {
    static_assert(std::is_same<T, float>::value || std::is_same<T, half>::value ||
                      std::is_same<T, int32_t>::value || std::is_same<T, int16_t>::value,
                  "SetAtomicAdd supports float, half, int32_t, int16_t");
    opgen_emu::core().atomic_type = opgen_emu::type_name<T>();
}
inline void SetAtomicNone() { opgen_emu::core().atomic_type = ""; }

// The user part of the workspace: the launcher passes the kernel CANN's reserved system
// workspace (opgen_emu::kSysWorkspaceBytes, any access fails) with the user part behind it.
inline GM_ADDR GetUserWorkspace(GM_ADDR workspace) { return opgen_emu::user_workspace(workspace); }
inline GM_ADDR GetSysWorkSpacePtr() { return opgen_emu::current_core()->launch->sys_ws; }

}  // namespace AscendC

#endif  // OPGEN_EMU_PIPE_H
