"""The CANN custom-op project ascend-emu emits, and its host side run through the emulation.

Per kernel: CANN's names and argument order, the TilingFunc run through the emulated
gert::TilingContext (the runner's own path), InferShape/InferDataType, the user workspace
behind CANN's reserved system workspace. Per op: one OpDef, one kernel entry dispatching on
the tiling key, the scaffold (CMake, presets, build.sh, the prototype JSON) that parses, in a
CANN op directory's layout; every C++ file compiles with -Wall -Werror against the emulation.
Nothing here runs a CANN toolkit: the scaffold is checked against documentation only.

Cost: reuses kernels other ascend tests build (disk cache); cold, ~4 g++ runs (~1 min).
"""
from __future__ import annotations

import ctypes
import json
import re
import subprocess

import numpy as np
import pytest
import tvm

from opgen import kernels
from opgen.ops import get_op
from opgen.targets import get_target
from opgen.targets.ascend import build as emu_build
from opgen.targets.ascend.host_context import SOCS
from opgen.targets.ascend.op_project import op_project

EMU = get_target("ascend-emu")
pytestmark = pytest.mark.skipif(not EMU.can_build(), reason="g++ or the AscendC emulation header is missing")
RMS, GN = get_op("rms_norm_grad"), get_op("group_norm_backward")


def _entry(text: str, symbol: str) -> list[str]:
    """The GM parameter names of the kernel entry ``symbol`` in an op_kernel file."""
    m = re.search(rf"void {symbol}\(([^)]*)\)", text)
    return [p.split()[-1] for p in m.group(1).split(",")]


def test_kernel_entry_and_opdef_follow_canns_names_and_order():
    """GroupNormGrad's CANN order is dy, mean, rstd, x, gamma (opgen's is dy, x, mean, rstd,
    gamma); its outputs are named dx, dgamma, dbeta, not by TE stage; one OpDef with the
    attributes ops-nn declares and AddConfig for the product's SoC only."""
    module = kernels.get_kernel(GN, "f32-f32", EMU).module
    sym = module.symbol
    kernel = module.files[f"op_kernel/{sym}.cpp"]
    assert _entry(kernel, sym) == ["dy", "mean", "rstd", "x", "gamma", "dx", "dgamma", "dbeta", "workspace", "tiling"]
    assert "REGISTER_TILING_DEFAULT(" in kernel and "GET_TILING_DATA_WITH_STRUCT(" in kernel
    assert "GetUserWorkspace(workspace)" in kernel
    opdef = module.files[f"op_host/{sym}_def.cpp"]
    assert opdef.count(": public OpDef") == 1 and "OP_ADD(GroupNormGrad);" in opdef
    names = re.findall(r"this->(?:Input|Output)\(\"(\w+)\"\)", opdef)
    assert names == ["dy", "mean", "rstd", "x", "gamma", "dx", "dgamma", "dbeta"]
    attrs = re.findall(r"this->Attr\(\"(\w+)\"\)", opdef)
    assert attrs == ["num_groups", "data_format", "dx_is_require", "dgamma_is_require", "dbeta_is_require"]
    assert re.findall(r"AddConfig\(\"(\w+)\"\)", opdef) == [SOCS[EMU.hardware.product]]
    # The tiling struct lives beside the kernel, not in op_host/.
    assert f"op_kernel/{sym}_tiling_data.h" in module.files
    assert not any(rel.startswith("op_host/") and "TilingData {" in text for rel, text in module.files.items())


def test_tiling_runs_through_the_tiling_context_with_system_workspace():
    """The runner's tiling is the project's TilingFunc: block dim, tiling key (the mode),
    CANN's 16 MB system workspace plus the user workspace the kernel binds."""
    module = kernels.get_kernel(RMS, "f32-f32", EMU).module
    k = module.kernel
    t, key, ws = k.run_tiling({"dy": (941, 7), "gamma": (7,)})
    assert t.block_dim > 1 and key == t.mode
    assert ws == emu_build.SYSTEM_WORKSPACE_BYTES + k.k.workspace_floats(t) * 4 > emu_build.SYSTEM_WORKSPACE_BYTES
    with pytest.raises(RuntimeError, match=r"input gamma has rank 0; expected 1 to 8"):
        k.run_tiling({"dy": (941, 7)})


def test_infer_shape_and_dtype_run_through_the_emulation():
    module = kernels.get_kernel(RMS, "f16-f32", EMU).module
    lib = module.kernel.lib
    ranks = (ctypes.c_uint32 * 4)(3, 3, 2, 1)
    dims = (ctypes.c_int64 * 9)(2, 3, 8, 2, 3, 8, 2, 3, 8)
    dtypes = (ctypes.c_int32 * 4)(1, 1, 0, 0)
    out_ranks, out_dims, out_dt = (ctypes.c_uint32 * 2)(), (ctypes.c_int64 * 16)(), (ctypes.c_int32 * 2)()
    assert lib.opgen_emu_infer(b"RmsNormGrad", 4, ranks, dims, dtypes, 2, None, out_ranks, out_dims, out_dt) == 0
    assert list(out_ranks) == [3, 1] and list(out_dims[:3]) == [2, 3, 8] and out_dims[8] == 8
    assert list(out_dt) == [1, 0]        # dx float16, dgamma float32


def test_a_kernel_that_ignores_get_user_workspace_fails(rng):
    """The launcher passes CANN's reserved system workspace first: a kernel binding the raw
    workspace argument is stopped with a message naming GetUserWorkspace."""
    kernel = kernels.get_kernel(RMS, "f32-f32", EMU)
    files = dict(kernel.module.files)
    src = files["op_kernel/rms_norm_grad_f32_f32.cpp"]
    files["op_kernel/rms_norm_grad_f32_f32.cpp"] = src.replace("GetUserWorkspace(workspace)", "workspace")
    lib = emu_build.compile_project(files, "rms_norm_grad_f32_f32", EMU.hardware)
    raw = emu_build.EmuKernel(lib, kernel.module.kernel.k, EMU.hardware)
    dy, x, dx = (rng.standard_normal((64, 40)).astype(np.float32) for _ in range(3))
    rstd, gamma, dgamma = np.ones(64, np.float32), np.ones(40, np.float32), np.zeros(40, np.float32)
    args = [tvm.runtime.tensor(a) for a in (dy, x, rstd, gamma, dx, dgamma)]
    with pytest.raises(RuntimeError, match=r"reserved system workspace .*GetUserWorkspace\(workspace\)"):
        raw(*args)
    kernel.module.kernel(*args)     # the emitted kernel itself runs


def _cmake_sane(text: str) -> None:
    """A CMake sanity parse: every command is name(...) with balanced parentheses, and
    if/endif blocks balance."""
    body = re.sub(r"#.*", "", text)
    depth, blocks = 0, 0
    for ch in body:
        depth += (ch == "(") - (ch == ")")
        assert depth >= 0
    assert depth == 0
    for cmd in re.findall(r"^\s*(\w+)\s*\(", body, flags=re.M):
        blocks += {"if": 1, "endif": -1}.get(cmd.lower(), 0)
    assert blocks == 0
    leftovers = re.sub(r"\w+\s*\((?:[^()]|\([^()]*\))*\)", "", body).strip()
    assert not leftovers, leftovers


def test_op_project_layout_parses_compiles_and_dispatches(tmp_path, rng):
    """Two combos of RmsNormGrad under one op: the CANN op directory's layout, JSON and CMake
    that parse, one OpDef, and a library built from the op-level files alone whose TilingFunc
    picks the combo by dtype (key = 100 * combo + mode) and whose one entry runs it."""
    built = [(tag, kernels.get_kernel(RMS, tag, EMU).module) for tag in ("f32-f32", "f16-f16")]
    files = op_project("rms_norm_grad", built, EMU.hardware)
    for rel in ("op_host/rms_norm_grad_def.cpp", "op_host/rms_norm_grad_tiling.cpp", "op_host/rms_norm_grad_tiling.h",
                "op_kernel/rms_norm_grad.cpp", "CMakeLists.txt", "CMakePresets.json", "build.sh",
                "RmsNormGrad.json", "README.md"):
        assert rel in files, rel
    assert not [rel for rel in files if rel.startswith("op_host/") and rel.endswith("_tiling_data.h")]
    proto = json.loads(files["RmsNormGrad.json"])
    assert proto[0]["op"] == "RmsNormGrad"
    assert [d["name"] for d in proto[0]["input_desc"]] == ["dy", "x", "rstd", "gamma"]
    assert proto[0]["input_desc"][0]["type"] == ["float", "fp16"]
    presets = json.loads(files["CMakePresets.json"])
    assert presets["configurePresets"][0]["cacheVariables"]["ASCEND_COMPUTE_UNIT"]["value"]
    _cmake_sane(files["CMakeLists.txt"])
    opdef = files["op_host/rms_norm_grad_def.cpp"]
    assert opdef.count(": public OpDef") == 1
    assert "DataType({ge::DT_FLOAT, ge::DT_FLOAT16})" in opdef
    emu_build.write_project(files, tmp_path)
    sources = [tmp_path / "op_kernel/rms_norm_grad.cpp", tmp_path / "op_host/rms_norm_grad_tiling.cpp",
               tmp_path / "op_host/rms_norm_grad_def.cpp"]
    lib_path = tmp_path / "op.so"
    cmd = ["g++", *emu_build.CXXFLAGS, *emu_build.emu_flags(EMU.hardware), *emu_build.include_flags(tmp_path),
           *map(str, sources), "-o", str(lib_path)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    lib = ctypes.CDLL(str(lib_path))
    for i, (tag, module) in enumerate(built):
        per_combo = module.kernel
        op_level = emu_build.EmuKernel.__new__(emu_build.EmuKernel)
        op_level.__dict__.update(per_combo.__dict__)
        op_level.lib = lib
        lib.opgen_emu_host_last_error.restype = ctypes.c_char_p
        t, key, _ = op_level.run_tiling({"dy": (33, 40), "gamma": (40,)})
        assert key == 100 * i + t.mode, tag
        op_level.launch = lib.opgen_emu_launch_rms_norm_grad
        op_level.launch.restype = ctypes.c_int
        dt = np.float32 if tag == "f32-f32" else np.float16
        dy, x = (rng.standard_normal((33, 40)).astype(dt) for _ in range(2))
        ins = [tvm.runtime.tensor(a) for a in (dy, x, np.ones(33, np.float32), np.ones(40, dt))]
        outs = {who: [tvm.runtime.tensor(np.zeros((33, 40), dt)), tvm.runtime.tensor(np.zeros(40, np.float32))]
                for who in ("combo", "op")}
        per_combo(*ins, *outs["combo"])
        op_level(*ins, *outs["op"])           # the launch passes the tiling key the TilingFunc set
        for a, b in zip(outs["combo"], outs["op"]):
            np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_op_project_dtype_lists_follow_each_combo_by_canns_names():
    """The OpDef's dtype list of an output comes from each combo (TE names its outputs
    differently per combo: a rounded half dgamma is a cast stage, a float32 one the sum)."""
    built = [(tag, kernels.get_kernel(GN, tag, EMU).module) for tag in ("f32-f32", "f16-f16")]
    files = op_project("group_norm_backward", built, EMU.hardware)
    opdef = files["op_host/group_norm_backward_def.cpp"]
    for name in ("dy", "mean", "dx", "dgamma", "dbeta"):
        assert re.search(rf"\"{name}\"\)\.ParamType\(REQUIRED\)\.DataType\(\{{ge::DT_FLOAT, ge::DT_FLOAT16\}}\)", opdef), name
    proto = json.loads(files["GroupNormGrad.json"])[0]
    assert [d["name"] for d in proto["input_desc"]] == ["dy", "mean", "rstd", "x", "gamma"]
    assert proto["attr"][0] == {"name": "num_groups", "param_type": "required", "type": "int"}


def test_opgen_generate_writes_the_op_project_for_the_product_asked(tmp_path, capsys):
    """opgen generate --target ascend-emu --product AtlasA2: the op's project under
    <op>/project/, AddConfig and the presets naming Atlas A2's SoC (not the default
    product's); an unknown product is one line on stderr."""
    from opgen import cli
    status = cli.main(["generate", "--op", "group_norm_backward", "--target", "ascend-emu", "--product", "AtlasA2",
                       "--out", str(tmp_path)])
    assert status == 0, capsys.readouterr().out
    root = tmp_path / "ascend-emu" / "group_norm_backward" / "project"
    opdef = (root / "op_host" / "group_norm_backward_def.cpp").read_text()
    assert re.findall(r"AddConfig\(\"(\w+)\"\)", opdef) == ["ascend910b"]
    presets = json.loads((root / "CMakePresets.json").read_text())
    assert presets["configurePresets"][0]["cacheVariables"]["ASCEND_COMPUTE_UNIT"]["value"] == "ascend910b"
    assert cli.main(["generate", "--target", "ascend-emu", "--product", "Nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown product 'Nope'" in err[0]
