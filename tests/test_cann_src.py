"""opgen compare --against cann-src: CANN's own kernels (an ops-nn checkout) on the emulation.

The first tests need no checkout and run in CI: the command line, the one-line error for a
DIR that is not a checkout, the tiling struct read from a header, the transcribed tiling. The
last ones build CANN's kernels from the checkout named by $OPGEN_CANN_SRC (else ~/ops-nn) and
skip, saying how to run them, when there is none."""
from __future__ import annotations

import argparse
import ctypes
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from opgen import compare
from opgen.ops.rms_norm_grad import cann_tiling
from opgen.targets.ascend import cann_src
from opgen.targets.ascend.build import EMU_DIR, emulation_available

SKIP_NO_CHECKOUT = (f"no hicann/ops-nn checkout: set {cann_src.ENV} to one (git clone "
                    f"https://github.com/hicann/ops-nn) to run CANN's kernels on the emulation")


def _parse(argv):
    parser = argparse.ArgumentParser()
    compare.add_arguments(parser)
    return parser.parse_args(argv)


def test_command_line_takes_the_checkout_after_the_source_name():
    args = _parse(["--against", "cann-src", "/somewhere/ops-nn", "--dtypes", "f16-f16"])
    assert (args.against, args.source_args, args.dtypes) == ("cann-src", ["/somewhere/ops-nn"], ["f16-f16"])
    assert compare.source_for("cann-src").takes_dir
    again = _parse(compare.to_argv(args))       # the rerun in a fresh process keeps DIR
    assert again.source_args == ["/somewhere/ops-nn"]


def test_dir_that_is_not_a_checkout_is_one_line_and_status_2(tmp_path, capsys):
    (tmp_path / "norm").mkdir()
    status = compare.cli(["--against", "cann-src", str(tmp_path), "--omp-wait", "inherit"])
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "is not a hicann/ops-nn checkout" in err and "_grad.cpp is missing" in err


def test_dir_given_to_a_source_that_reads_none_is_refused(capsys):
    assert compare.cli(["--against", "aten", "/tmp", "--omp-wait", "inherit"]) == 2
    assert "takes no DIR" in capsys.readouterr().err


def test_without_a_checkout_the_tests_say_how_to_get_one(monkeypatch, tmp_path):
    monkeypatch.setenv(cann_src.ENV, str(tmp_path / "absent"))
    assert cann_src.found_checkout() is None
    assert cann_src.ENV in SKIP_NO_CHECKOUT


HEADER = """
BEGIN_TILING_DATA_DEF(Other)
TILING_DATA_FIELD_DEF(int64_t, wrong);
END_TILING_DATA_DEF;
BEGIN_TILING_DATA_DEF(ToyTilingData)
TILING_DATA_FIELD_DEF(uint32_t, row);
TILING_DATA_FIELD_DEF(float, avg_factor);
TILING_DATA_FIELD_DEF(uint64_t, big); // a comment
END_TILING_DATA_DEF;
"""


def test_tiling_struct_is_read_from_the_header_and_packed_in_its_order():
    fields = cann_src.tiling_fields(HEADER, "ToyTilingData")
    assert fields == [("uint32_t", "row"), ("float", "avg_factor"), ("uint64_t", "big")]
    assert "uint64_t big;" in cann_src.struct_source("ToyTilingData", fields)
    packed = cann_src.pack_tiling(fields, {"row": 3, "avg_factor": 0.5, "big": 7})
    assert struct.unpack("@IfQ", packed) == (3, 0.5, 7) and len(packed) == 16   # C's natural alignment
    with pytest.raises(ValueError, match="no value for big"):
        cann_src.pack_tiling(fields, {"row": 3, "avg_factor": 0.5})
    with pytest.raises(cann_src.NotACheckout):
        cann_src.tiling_fields(HEADER, "Missing")


@pytest.mark.parametrize("rows,cols,item,cores,key,expect", [
    # split-N: ceil(192/48) = 4 rows per core, 6080 // 1024 = 5 > 4 rows per pass
    (192, 1024, 2, 48, 1, dict(block_dim=48, block_factor=4, ub_factor=4, ub_calc_loop=1, core_calc_tail=0)),
    # small-D (the tiling test's (130, 16) on 40 cores: 33 cores x 4 rows, the last core 2)
    (130, 16, 2, 40, 1, dict(block_dim=33, block_factor=4, core_calc_tail=2, ub_calc_tail_num=4,
                             ub_calc_tail_tail=2, ub_calc_tail_loop=1)),
    # split-D: 4096-column chunks, a 2-column tail
    (16, 12290, 2, 48, 2, dict(block_dim=16, ub_factor=4096, ub_calc_loop=4, ub_calc_tail=2, ub_split_dim=1)),
])
def test_transcribed_tiling(rows, cols, item, cores, key, expect):
    values, got_key, workspace = cann_tiling.tiling_data(rows, cols, item, False, cores)
    assert got_key == key and workspace == 8 * values["block_dim"] * 4
    assert {k: values[k] for k in expect} == expect
    plan = cann_tiling.rms_norm_grad(rows, cols, item, cores)      # the opgen tiling report's line agrees
    assert (plan["cores"], plan["per_core"]) == (values["block_dim"], values["block_factor"])


CHECKOUT = cann_src.found_checkout()
needs_checkout = pytest.mark.skipif(CHECKOUT is None or not emulation_available(), reason=SKIP_NO_CHECKOUT)


@needs_checkout
@pytest.mark.parametrize("tag", ["f16-f16", "bf16-bf16", "f32-f32", "f16-f32"])
def test_cann_kernel_meets_opgens_tolerances(tag):
    """CANN's RmsNormGrad on every path (split-N, its tail core, small-D, split-D) within
    opgen.verify's tolerances of the float64 reference: the emulation's API semantics hold
    on code opgen did not write (and its hazard checks pass on it)."""
    shapes = {"rms_norm_grad": cann_src.KERNELS["rms_norm_grad"].shapes}
    rows = cann_src.against_cann(CHECKOUT, ["rms_norm_grad"], {"rms_norm_grad": (tag,)}, shapes, seed=3)
    assert len(rows) == 2 * len(shapes["rms_norm_grad"])
    failed = [r.as_dict() for r in rows if not r.cann_tol <= 1.0]
    assert not failed
    assert all(r.cann_us > 0 and r.opgen_us and r.opgen_atomic_us and r.like_us and r.opgen_tol <= 1.0 for r in rows)


@needs_checkout
@pytest.mark.parametrize("tag", ["f32-f32", "f16-f16", "bf16-bf16"])
def test_cann_group_norm_grad_meets_opgens_tolerances(tag):
    """CANN's GroupNormGrad (Atlas A2 path) on each stage-1 mode that runs here: group,
    channel, channels and hw-chunk, deterministic (N > 2) and atomic sums."""
    op = "group_norm_backward"
    shapes = {op: cann_src.KERNELS[op].shapes}
    rows = cann_src.against_cann(CHECKOUT, [op], {op: (tag,)}, shapes, seed=3)
    assert len(rows) == 3 * len(shapes[op])
    failed = [r.as_dict() for r in rows if not r.cann_tol <= 1.0]
    assert not failed
    assert all(r.cann_us > 0 and r.opgen_us and r.opgen_atomic_us and r.like_us and r.opgen_tol <= 1.0 for r in rows)


@needs_checkout
def test_cli_prints_both_kernels(capsys):
    status = compare.cli(["--against", "cann-src", str(CHECKOUT), "--op", "rms_norm_grad",
                          "--shape", "rms_norm_grad=64x1024",
                          "--dtypes", "f16-f16", "--omp-wait", "inherit"])
    out = capsys.readouterr().out
    assert status == 0 and "CANN ulps" in out and "2 of 2 rows" in out


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found: the AscendC emulation needs a C++17 compiler")
def test_emulation_apis_cann_kernels_use(tmp_path):
    """emu_cann.h without a checkout (tests/ascend_emu_cases/cann_apis.cpp): the mask register
    read by isSetMask = false, BroadCast on both axes, and CANN's in-place widening Cast,
    refused unless the build is one of CANN's kernels (OPGEN_EMU_CANN_IDIOMS)."""
    source = Path(__file__).parent / "ascend_emu_cases" / "cann_apis.cpp"
    libs = {}
    for name, flags in (("plain", []), ("cann", ["-DOPGEN_EMU_CANN_IDIOMS"])):
        libs[name] = tmp_path / f"{name}.so"
        subprocess.run(["g++", "-Wall", "-Werror", "-std=c++17", "-O1", "-pthread", "-shared", "-fPIC",
                        f"-I{EMU_DIR}", *flags, str(source), "-o", str(libs[name])], check=True)

    def run(name, mode):
        lib = ctypes.CDLL(str(libs[name]))
        lib.opgen_emu_last_error.restype = ctypes.c_char_p
        src, out = np.arange(1, 65, dtype=np.float32), np.zeros(64, np.float32)
        arrays = [src, out, np.zeros(8, np.uint8), np.array([mode, 0], np.int32)]
        fn = lib.opgen_emu_launch_cann_apis
        fn.argtypes = [ctypes.c_uint32, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_uint64),
                       ctypes.c_uint32]
        status = fn(1, (ctypes.c_void_p * 4)(*[a.ctypes.data for a in arrays]),
                    (ctypes.c_uint64 * 4)(*[a.nbytes for a in arrays]), 4)
        return status, lib.opgen_emu_last_error().decode(), src, out

    status, _, src, out = run("plain", 0)
    assert status == 0 and out[0] == src[:10].sum()
    assert (out[8:40] == np.repeat(src[:4], 8)).all() and (out[40:64] == np.tile(src[:8], 3)).all()
    status, error, _, _ = run("plain", 1)
    assert status == 1 and "nothing set the vector mask" in error
    status, error, _, _ = run("plain", 2)
    assert status == 1 and "partially overlaps" in error
    status, _, src, out = run("cann", 2)
    assert status == 0 and (out == src.view(np.float16)[:64].astype(np.float32)).all()
    status, _, src, out = run("plain", 3)                   # Copy's mask and strides, ToFloat
    assert status == 0 and (out[:16] == src[:16]).all() and (out[16:32] == src[32:48]).all()
    assert (out[32:40] == 1.5).all() and (out[40:] == 0).all()
    assert run("plain", 4)[0] == 0                          # S -> MTE3 -> V: the flags chain
    status, error, _, _ = run("plain", 5)
    assert status == 1 and "right after a write on S" in error


@pytest.mark.parametrize("n,c,hxw,g,dtype,cores,key,expect", [
    # hw-chunk (3), deterministic: 384 groups on 48 cores, 16256-element chunks (CASES' first)
    (12, 64, 16384, 32, "float32", 48, 10, dict(Tiling_key=3, block_dim=48, task_num_per_core=8,
                                                mode2_ub_capacity_ele=16256, mode2_ub_iteration_num=2,
                                                mode2_ub_tail_num=128, workSpaceSize=384, castEleNum=64,
                                                stage2CoreUsed=1, coreBatchParts=3, repeatTime4Stage2=1)),
    # channels (2), N = 1: atomic sums, no workspace; 71 groups on 36 cores, the last 35 take one
    (1, 2130, 1664, 71, "float32", 48, 0, dict(Tiling_key=2, block_dim=36, task_num_per_core=2,
                                               task_num_per_tail_core=1, tail_core=35, mode1_ub_cap_C_num=9,
                                               mode1_ub_iter_C_num=4, mode1_ub_tail_C_num=3, workSpaceSize=0)),
    # HxW == 1 (5); group (0) for float16 with its cast stage
    (32, 64, 1, 64, "float32", 48, 10, dict(Tiling_key=5, block_dim=48, task_num_per_core=43, tail_core=32)),
    (4, 32, 64, 8, "float16", 48, 11, dict(Tiling_key=0, block_dim=32, workSpaceSize=64, castEleNum=64)),
])
def test_transcribed_group_norm_grad_tiling(n, c, hxw, g, dtype, cores, key, expect):
    from opgen.ops.group_norm_backward import cann_tiling as gn

    values, got_key, workspace = gn.tiling_data(n, c, hxw, g, dtype, cores)
    assert got_key == key and workspace == 2 * values["workSpaceSize"] * 4
    assert {k: values[k] for k in expect} == expect
    item = 4 if dtype == "float32" else 2
    plan = gn.group_norm_grad(n, c, hxw, g, item, cores)     # the opgen tiling report's line agrees
    assert plan["mode"].endswith(f"({values['Tiling_key']})") and plan["cores"] == values["block_dim"]
