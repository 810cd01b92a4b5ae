"""How the emitted kernels synchronise, and that the emulation catches each missing event.

The kernels order pipes with SetFlag/WaitFlag pairs on exactly the dependent pipes
(OpgenSync<HardEvent::X_Y>), PipeBarrier<PIPE_V> between dependent vector ops, and no
PipeBarrier<PIPE_ALL>; split-N issues the next pass's copy-in before the current compute.
Fault injection: dropping every event of one kind from an emitted kernel must make the
emulation stop the launch, naming the two pipes (one test per event kind it can see).

Cost: one g++ run per injected fault (~6 event kinds), plus kernels cached by other tests.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
import tvm

from tiers import tiered

from opgen import kernels
from opgen.ops import get_op
from opgen.targets import get_target
from opgen.targets.ascend import build as emu_build

EMU = get_target("ascend-emu")
pytestmark = pytest.mark.skipif(not EMU.can_build(), reason="g++ or the AscendC emulation header is missing")
RMS, GN = get_op("rms_norm_grad"), get_op("group_norm_backward")


@pytest.mark.parametrize("op,tag", [(RMS, "f32-f32"), (RMS, "bf16-bf16"), (GN, "f32-f32"), (GN, "bf16-bf16")])
def test_no_pipe_all_and_events_between_dependent_pipes(op, tag):
    module = kernels.scheduled_module(op, op.combo(tag), EMU)
    k, files = emu_build.project(module[0][module[1]], module[1], EMU.hardware)
    src = files[f"op_kernel/{module[1]}.cpp"]
    assert "PipeBarrier<PIPE_ALL>" not in src
    events = set(re.findall(r"OpgenSync<HardEvent::(\w+)>", src))
    assert {"V_S", "S_V"} <= events, events
    assert "PipeBarrier<PIPE_V>" in src


def test_split_n_issues_the_next_copy_in_before_the_compute():
    module = kernels.scheduled_module(RMS, RMS.combo("f32-f32"), EMU)
    _, files = emu_build.project(module[0][module[1]], module[1], EMU.hardware)
    body = files[f"op_kernel/{module[1]}.cpp"].split("void SplitN()")[1].split("void SplitD()")[0]
    take, issue, stage = body.index("TakeTiles(n);"), body.index("IssueTiles(row0_ + pn"), body.index("Stage_")
    assert take < issue < stage


def test_bf16_outputs_use_canns_round_mode():
    """GroupNormGrad's kernel casts its bf16 outputs with CAST_ROUND (ops-nn group_norm_grad.h);
    RmsNormGrad's with CAST_RINT."""
    for op, tag, mode in ((GN, "bf16-bf16", "CAST_ROUND"), (RMS, "bf16-bf16", "CAST_RINT")):
        module = kernels.scheduled_module(op, op.combo(tag), EMU)
        _, files = emu_build.project(module[0][module[1]], module[1], EMU.hardware)
        casts = re.findall(r"Cast\(o, [^;]*RoundMode::(\w+)", files[f"op_kernel/{module[1]}.cpp"])
        assert casts and set(casts) == {mode}, (op.name, casts)


# Event removed -> what the emulation must say (the two pipes of the dependency).
FAULTS = {
    "MTE2_V": r"on pipe V \(vector\) right after a write on MTE2",
    "V_MTE3": r"on pipe MTE3 \(UB->GM copy\) right after a write on V",
    "V_S": r"on pipe S \(scalar\) right after a write on V",
    "MTE3_V": r"on pipe V \(vector\) while pipe MTE3 \(UB->GM copy\) may still be reading",
    "V_MTE2": r"on pipe MTE2 \(GM->UB copy\) while pipe V \(vector\) may still be reading",
    "MTE3_MTE2": r"reads GM this core wrote by a UB->GM copy \(MTE3\)",
}


# One of each kind the emulation tells apart: a read after a write across pipes (MTE2 -> V),
# a write after a read (V reading while MTE2 overwrites), and GM read back after an MTE3
# write; the other pairs are the same rules on other pipes (the extended tier).
@pytest.mark.parametrize("event", tiered(sorted(FAULTS), ["MTE2_V", "V_MTE2", "MTE3_MTE2"], sorted(FAULTS)))
def test_a_missing_event_is_caught_by_the_emulation(event, rng):
    """Split-D RmsNormGrad (cores + 1 rows of 12290, deterministic sums: one core has two
    rows, so its workspace row is read back, modified and written) exercises every event
    kind: drop all of one kind and the launch must fail with the emulation's hazard message."""
    kernel = kernels.get_kernel(RMS, "f32-f32", EMU)
    files = dict(kernel.module.files)
    rel = "op_kernel/rms_norm_grad_f32_f32.cpp"
    call = f"OpgenSync<HardEvent::{event}>();"
    assert call in files[rel], event
    files[rel] = files[rel].replace(call, "")
    lib = emu_build.compile_project(files, "rms_norm_grad_f32_f32", EMU.hardware)
    faulty = emu_build.EmuKernel(lib, kernel.module.kernel.k, EMU.hardware)
    rows = EMU.hardware.vector_cores + 1
    shape = (rows, 12290)
    dy, x, dx = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
    arrays = (dy, x, np.ones(rows, np.float32), np.ones(12290, np.float32), dx, np.zeros(12290, np.float32))
    with pytest.raises(RuntimeError, match=FAULTS[event]):
        faulty(*[tvm.runtime.tensor(a) for a in arrays])


def test_whole_group_tasks_issue_the_next_tasks_copy_in_before_the_compute():
    module = kernels.scheduled_module(GN, GN.combo("f32-f32"), EMU)
    _, files = emu_build.project(module[0][module[1]], module[1], EMU.hardware)
    body = files[f"op_kernel/{module[1]}.cpp"].split("void Task(int64_t task)")[1]
    take, issue, stage = body.index("TakeTiles(n);"), body.index("IssueTiles(task + 1"), body.index("TaskStages0();")
    assert take < issue < stage
