"""Static measures of the GPU row kernels (no GPU): global-memory traffic per element counted
in the scheduled TIR (targets/gpu_traffic.py) and SASS instructions per element over every
pass (targets/cuda_sass.all_passes). The figures and the goal they measure: docs/targets.md,
"Row pattern on a GPU: static measures"."""
from __future__ import annotations

import pytest

from opgen import kernels
from opgen.ops import get_op
from opgen.targets import cuda as cuda_target
from opgen.targets import cuda_sass, get_target, gpu_traffic

CUDA = get_target("cuda")
needs_sass = pytest.mark.skipif(cuda_target.nvcc() is None or cuda_sass.missing() is not None,
                                reason=f"nvcc or cuobjdump missing: {cuda_sass.missing()}")


def _func(name: str, tag: str, vector: bool = False):
    op = get_op(name)
    mod, _ = kernels.scheduled_module(op, op.combo(tag), CUDA, knobs={"vector": vector})
    return next(iter(mod.functions.values()))


SASS = """
        Function : k_kernel
        /*0000*/                   STG.E desc[UR4][R2.64], RZ ;
        /*0010*/               @P0 BRA 0x0 ;
        /*0020*/                   LDG.E.U16 R4, desc[UR4][R2.64] ;
        /*0030*/                   LDG.E R5, desc[UR4][R6.64] ;
        /*0040*/                   LDG.E.U16 R7, desc[UR4][R2.64] ;
        /*0050*/                   LDG.E R8, desc[UR4][R6.64] ;
        /*0060*/                   FFMA R9, R4, R5, R9 ;
        /*0070*/               @P1 BRA 0x20 ;
        /*0080*/                   LDG.E.U16 R4, desc[UR4][R2.64] ;
        /*0090*/                   FMUL R4, R4, R4 ;
        /*00a0*/                   STG.E.U16 desc[UR4][R8.64], R4 ;
        /*00b0*/               @P2 BRA 0x80 ;
        /*00c0*/                   EXIT ;
        Function : k_kernel_1
        /*0000*/                   LDG.E R4, desc[UR4][R2.64] ;
        /*0010*/               @P0 BRA 0x0 ;
"""


def test_all_passes_pairs_the_tirs_passes_with_the_loops_that_load():
    functions = {name: [(int(a, 16), t) for a, t in cuda_sass._INSTRUCTION.findall(body)]
                 for name, body in (part.split("\n", 1) for part in SASS.split("Function : ")[1:])}
    reduction = gpu_traffic.HotLoop(kernel=0, loaded=6, stored=0)   # 2 elements a trip: 6 instructions
    output = gpu_traffic.HotLoop(kernel=0, loaded=2, stored=2)      # 1 element a trip (its stores): 4
    # the zeroing loop (stores only) and kernel_1 (no pass over the data) are not counted
    assert cuda_sass.all_passes(functions, [reduction, output]) == 6 / 2 + 4 / 1
    assert cuda_sass.all_passes(functions, [output]) is None   # a load-only loop, no such pass


UNUSED_LOADS = """
        Function : k_kernel
        /*0000*/                   LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0010*/                   LDG.E.128 R4, desc[UR4][R2.64+0x10] ;
        /*0020*/               @P0 BRA 0x0 ;
        /*0030*/                   LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0040*/                   FFMA R9, R4, R5, R9 ;
        /*0050*/                   FFMA R9, R6, R7, R9 ;
        /*0060*/               @P1 BRA 0x30 ;
"""


def test_of_several_loops_for_one_pass_the_one_that_computes_is_counted():
    """ptxas made two loops of one load-only pass, one of loads whose values nothing uses
    (seen in the vector variant on sm_90): the loop with the arithmetic is the pass."""
    functions = {"k_kernel": [(int(a, 16), t) for a, t in cuda_sass._INSTRUCTION.findall(UNUSED_LOADS)]}
    reduction = gpu_traffic.HotLoop(kernel=0, loaded=16, stored=0)   # a 16-byte load an element
    assert cuda_sass.all_passes(functions, [reduction]) == 4 / 1


@pytest.mark.parametrize("name,tag,reductions,partials", [
    ("rms_norm_grad", "bf16-f32", 1, ["rms_norm_grad_dgamma.rf"]),
    ("layer_norm_backward", "f32-f32", 2, ["layer_norm_backward_dbeta.rf", "layer_norm_backward_dgamma.rf"]),
])
def test_todays_row_pass_reads_the_row_again_and_its_partials_per_row(name, tag, reductions, partials):
    """What the restructured row kernel (issue 40) is to remove, counted: each row reduction
    and the output pass read dy from global memory, and the column partials are read and
    written once per element (a read-modify-write per row). dx is written once."""
    traffic = gpu_traffic.traffic(_func(name, tag))
    found = traffic.buffers
    assert found["dy"].reads == reductions + 1 and found["x"].reads >= 2
    assert found[f"{name}_dx"].writes == 1 and found[f"{name}_dx"].reads == 0
    for partial in partials:
        assert found[partial].reads == 1 and found[partial].writes == 1
    assert traffic.bytes_per_element() > 2 * sum(found[n].bits // 8 for n in ("dy", "x", f"{name}_dx"))


def test_the_final_sum_and_the_zeroing_of_the_partials_are_not_per_element():
    found = gpu_traffic.traffic(_func("rms_norm_grad", "f32-f32")).buffers
    assert "rms_norm_grad_dgamma" not in found   # the final sum reads partial rows, not the data
    assert found["rms_norm_grad_dgamma.rf"].writes == 1   # the output pass's, not the zeroing's


@needs_sass
@pytest.mark.parametrize("tag,vector,expected", [("bf16-f32", False, 56.5), ("f32-f32", False, 51.2),
                                                 ("bf16-f32", True, 21.0)])
def test_all_passes_sass_of_todays_row_pass_on_sm_90(tag, vector, expected):
    """The baseline of issue 40's goal (at most half over all passes): the reduction pass
    plus the output pass of the generic kernel, counted by hand from the disassembly as 55
    (bf16) and 50 (f32) before the final sum was split over partials (the row kernel no
    longer shares ceil(cols / threads) with it as a parameter: ptxas allocates it anew,
    56.5 and 51.25 now); 13.5 + 7.5 for the vector one."""
    op = get_op("rms_norm_grad")
    kernel = kernels.get_kernel(op, op.combo(tag), CUDA, knobs={"vector": vector})
    _, cubin = cuda_target._compile_cached(CUDA.source_of(kernel.module)[1], "sm_90")
    hot = gpu_traffic.hot_loops(_func("rms_norm_grad", tag, vector))
    assert [h.stored for h in hot] == [0, {"bf16-f32": 6, "f32-f32": 8}[tag]]
    assert cuda_sass.all_passes(cuda_sass.sass(cubin), hot) == pytest.approx(expected, abs=0.05)
