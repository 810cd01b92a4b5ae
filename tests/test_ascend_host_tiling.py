"""The emitted Ascend TilingFunc reads the user's call: shapes and attributes as the aclnn and
graph layers hand them to CANN's op, through the op's view (opgen.kernel_view, CannOp.view).

Replay, per op: the op's sample problems and its validation examples (each documented
rule's example violations, on the first sample problem) become aclnn arguments; the aclnn
layer's CANN call (input shapes by CANN name, CANN attributes, ``_cann_call``) runs through
the emitted TilingFunc on the emulated host (op_host sources only, build.compile_host) and
through the view in Python. Where the aclnn API accepts the call, the TilingFunc accepts it
and its tiling data is the Python plan's (schedules' rule.tiling on op.api.kernel_shapes of
the call's Problem, the path opgen's own plan takes); where the view refuses, the C++
refuses with the same words and the aclnn API refuses too. One op per pattern runs in the
default tier (rows, groups, channels, segments), the rest in the extended tier.
"""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest
from tvm import te

from aclnn_helpers import base_args
from opgen import aclnn, kernels
from opgen.apispec import ArgError, Call
from opgen.ops import all_ops, get_op
from opgen.kernel_view import ViewError
from opgen.schedules import default_knobs, schedule_with_rule
from opgen.schedules.ascend_tiling import CopyAlignmentError, UbBudgetError
from opgen.targets import get_target
from opgen.targets.ascend import build as emu_build

EMU = get_target("ascend-emu")
HW = EMU.hardware
pytestmark = pytest.mark.skipif(not EMU.can_build(), reason="g++ or the AscendC emulation header is missing")

PER_PATTERN = ("rms_norm_grad", "group_norm_backward", "batch_norm",     # rows, groups, channels,
               "ada_layer_norm_backward")                               # segments
# Every other registered op (the extended tier): an op added later is replayed without a line here.
OTHERS = tuple(op.name for op in all_ops() if op.name not in PER_PATTERN)

# The CANN attributes a view reads, from the aclnn arguments, as ops-nn's op_api passes them
# to the l0 op (aclnn_group_norm_backward.cpp: group -> num_groups; aclnn_layer_norm.cpp:
# begin_norm_axis = input's rank - len(normalizedShape)).
CANN_ATTRS = {
    "num_groups": lambda args: args["group"] if "group" in args else args["numGroups"],
    "begin_norm_axis": lambda args: np.ndim(args["input"]) - len(args["normalizedShape"]),
}


class Host:
    """One op's emitted TilingFunc (its first combo on the emulated product, or on the first
    product that offers the op), built host-only."""

    def __init__(self, op, folder):
        self.op = op
        self.emu = EMU if HW.product in op.products else EMU.for_product(next(iter(op.products)))
        self.product = self.emu.hardware.product
        self.combo = op.products[self.product][0]
        mod, symbol = kernels.scheduled_module(op, self.combo, self.emu)
        k, files = emu_build.project(mod[symbol], symbol, self.emu.hardware)
        self.tiling = emu_build.HostTiling(emu_build.compile_host(files, symbol, self.emu.hardware, folder), k,
                                           self.emu.hardware)
        self.view = self.tiling.view
        self.tile = next(p.tensor for p in k.face.inputs if p.name == self.view.tile)
        func = te.create_prim_func(op.compute(self.combo))
        self.rule, _ = schedule_with_rule(func, self.emu)
        self.func = func

    def cpp(self, shapes: dict, attrs: dict):
        """The TilingFunc's tiling data, or the reason it refused (a str)."""
        try:
            return self.tiling.run_tiling(shapes, attrs)[0].as_dict()
        except RuntimeError as err:
            return str(err)

    def python_plan(self, problem):
        """The Python plan's tiling data for ``problem`` (op.api.kernel_shapes), as the
        struct's fields; or the UB / alignment refusal (a str)."""
        k = self.tiling.k
        shapes = self.op.api.kernel_shapes(problem)
        try:
            t = self.rule.tiling(self.func, self.emu, default_knobs(self.rule, self.emu),
                                 [shapes[n] for n in self.op.inputs])
        except (UbBudgetError, CopyAlignmentError) as err:
            return str(err)
        plan = {"block_dim": t.block_dim, "block_factor": t.block_factor, "ub_rows": t.ub_rows,
                "ub_cols": t.ub_cols, "pitch": t.pitch, "mode": k.modes[t.mode]}
        plan.update({f: int(v) for f, v in t.fields.items() if f in k.fields})
        return plan


_HOSTS: dict = {}


@pytest.fixture
def host(request, tmp_path_factory):
    name = request.param
    if name not in _HOSTS:
        _HOSTS[name] = Host(get_op(name), tmp_path_factory.mktemp(name))
    return _HOSTS[name]


def _cann_call(op, args: dict) -> tuple[dict, dict]:
    """(input shapes by CANN name, CANN attributes) of an aclnn call: each CANN input is
    the aclnn tensor of the same kernel tensor, as given (a null one: rank 0, as the
    emulated context holds every input the OpDef declares)."""
    by_kernel = {p.kernel: p.name for p in op.api.params if p.role == "input" and p.kernel}
    def shape(tensor):
        value = args.get(by_kernel.get(tensor, tensor))
        return () if value is None else tuple(np.shape(value))
    shapes = {name: shape(tensor) for name, tensor in op.cann.inputs}
    attrs = {a.name: a.default for a in op.cann.attrs if a.kind == "Int" and a.default is not None}
    for a in op.cann.attrs:
        if a.kind == "Int" and a.name in CANN_ATTRS:
            try:
                attrs[a.name] = int(CANN_ATTRS[a.name](args))
            except (TypeError, ValueError):     # an aclnn argument it cannot come from (a null normalizedShape):
                pass                            # the OpDef default (or none), as the aclnn API refuses anyway
    return shapes, attrs


def _calls(op, combo, rng, prod: str):
    """(what, aclnn arguments) of the sample problems, then of each documented rule's
    example violations on the first of them (those that apply on the product)."""
    base = None
    for problem in op.problems:
        if getattr(problem, "channel_last", False):   # NHWC: CANN reads the storage format, which
            continue                                   # the emulated context does not carry
        args, _ = base_args(op, problem, combo, rng)
        base = base or args
        yield f"problem {problem}", args
    for rule in op.api.rules:
        if rule.products is not None and prod not in rule.products:
            continue
        for v in rule.violations:
            if v.products is None or prod in v.products:
                args = copy.deepcopy(base)
                v.mutate(args)
                yield f"violation {v.description!r}", args


def _verdict(op, args, prod: str):
    """(the aclnn API's refusal or None, the Call)."""
    values = aclnn._describe_all(op, tuple(args[p.name] for p in op.api.params))
    call = Call(op, prod, values)
    return aclnn._check_call(call), call


def _replay(host, rng) -> dict:
    """Replays every call; returns counts by outcome (so a test can say the replay covered
    accepted and refused calls)."""
    op = host.op
    seen = {"accepted": 0, "refused by both": 0, "refused by aclnn only": 0}
    for what, args in _calls(op, host.combo, rng, host.product):
        try:
            verdict, call = _verdict(op, args, host.product)
        except ArgError as err:       # an argument the aclnn layer cannot read at all (a bad kind)
            verdict, call = (err.status, err.message), None
        shapes, attrs = _cann_call(op, args)
        cpp = host.cpp(shapes, attrs)
        try:
            sizes, why = host.view.kernel_sizes(shapes, attrs), None
        except ViewError as err:
            sizes, why = None, str(err)
        if why is not None:            # the view refuses: so does the C++, in the same words, and the aclnn API
            assert isinstance(cpp, str) and why in cpp, (op.name, what, cpp, why)
            assert verdict is not None, (op.name, what, "the TilingFunc refuses a call the aclnn API accepts", why)
            seen["refused by both"] += 1
            continue
        if verdict is not None:
            seen["refused by aclnn only"] += 1
            continue
        problem = op.api.problem(call)
        assert sizes == _python_sizes(host, op.api.kernel_shapes(problem)), (op.name, what, sizes)
        plan = host.python_plan(problem)
        if isinstance(plan, str):      # beyond the UB or the copy alignment: the C++ refuses too
            assert isinstance(cpp, str), (op.name, what, cpp, plan)
        else:
            assert not isinstance(cpp, str) and {f: cpp[f] for f in plan} == plan, (op.name, what, cpp, plan)
        seen["accepted"] += 1
    return seen


def _python_sizes(host, kernel_shapes: dict) -> tuple:
    """The view's sizes as the Python path has them: the tile's kernel shape, then the sizes
    the view reads from other inputs (``canonical_inputs``: a counter's element count)."""
    sizes = tuple(kernel_shapes[host.tile])
    for name, groups in host.view.canonical_inputs:
        extra = [i for g in groups for i in g if i >= len(sizes)]
        if extra:
            sizes += (math.prod(kernel_shapes[name]),)
    return sizes


def _check_replay(host, rng):
    seen = _replay(host, rng)
    assert seen["accepted"] >= 1 and seen["refused by aclnn only"] + seen["refused by both"] >= 1, seen


@pytest.mark.parametrize("host", PER_PATTERN, indirect=True)
def test_the_tiling_func_replays_the_python_plan(host, rng):
    _check_replay(host, rng)


@pytest.mark.full
@pytest.mark.parametrize("host", OTHERS, indirect=True)
def test_the_tiling_func_replays_the_python_plan_for_every_op(host, rng):
    _check_replay(host, rng)


@pytest.mark.parametrize("host", ["group_norm_backward"], indirect=True)
def test_group_norm_grad_reads_nchw_and_num_groups(host):
    """The issue's case: an NCHW dy (2, 64, 8, 8) with num_groups = 32 tiles as N=2, G=32,
    D=2, HxW=64 (not G=64, D=8 from reading the dims as the kernel's view); (N, C, HxW) and
    (N, C) are accepted; what the aclnn document refuses is refused."""
    nchw = host.cpp({"dy": (2, 64, 8, 8)}, {"num_groups": 32})
    assert (nchw["N"], nchw["G"], nchw["D"], nchw["HW"]) == (2, 32, 2, 64), nchw
    plan = host.python_plan(type(host.op.problems[0])(2, 64, 64, 32))
    assert {f: nchw[f] for f in plan} == plan
    assert host.cpp({"dy": (2, 64, 64)}, {"num_groups": 32}) == nchw
    flat = host.cpp({"dy": (2, 64)}, {"num_groups": 32})
    assert (flat["G"], flat["D"], flat["HW"]) == (32, 2, 1), flat
    for shapes, attrs, why in (({"dy": (128,)}, {"num_groups": 32}, "input dy has rank 1; expected 2 to 8"),
                               ({"dy": (1,) * 9}, {"num_groups": 1}, "input dy has rank 9; expected 2 to 8"),
                               ({"dy": (2, 60, 8)}, {"num_groups": 32}, "60 is not divisible into 32 equal parts"),
                               ({"dy": (2, 64, 8)}, {"num_groups": 0}, "64 is not divisible into 0 equal parts")):
        refused = host.cpp(shapes, attrs)
        assert isinstance(refused, str) and why in refused, (shapes, attrs, refused)


@pytest.mark.parametrize("host", ["rms_norm_grad"], indirect=True)
def test_rms_norm_grad_reads_bsh_and_gamma_rank(host):
    """(B, S, H) with a (H,) gamma tiles as rows = B*S, cols = H; a (S, H) gamma as rows = B,
    cols = S*H; gamma of higher rank than dy, a 0-d gamma and rank 9 are refused."""
    bsh = host.cpp({"dy": (2, 3, 48), "gamma": (48,)}, {})
    assert (bsh["rows"], bsh["cols"]) == (6, 48), bsh
    assert bsh == host.cpp({"dy": (6, 48), "gamma": (48,)}, {})
    two = host.cpp({"dy": (2, 3, 48), "gamma": (3, 48)}, {})
    assert (two["rows"], two["cols"]) == (2, 144), two
    for shapes, why in (({"dy": (48,), "gamma": (2, 48)}, "dims [0, -1) are not dims of 1-dimensional input"),
                        ({"dy": (2, 48)}, "input gamma has rank 0; expected 1 to 8"),
                        ({"dy": (1,) * 9, "gamma": (1,)}, "input dy has rank 9; expected 1 to 8")):
        refused = host.cpp(shapes, {})
        assert isinstance(refused, str) and why in refused, (shapes, refused)
