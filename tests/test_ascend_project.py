"""The CANN custom-op project ascend-emu emits, and its host side run through the emulation.

Per kernel: CANN's names and argument order, the TilingFunc run through the emulated
gert::TilingContext (the runner's own path), InferShape/InferDataType, the user workspace
behind CANN's reserved system workspace. Per op: one OpDef, one kernel entry dispatching on
the tiling key, the files msopgen writes (CMakeLists.txt at the root, in op_host/ and
op_kernel/, CMakePresets.json, build.sh) that cmake configures against a stand-in toolkit
(STANDIN), the prototype JSON, files and entry named as CANN binds the OpType; every C++ file
compiles with -Wall -Werror against the emulation. Nothing here runs a CANN toolkit.

Cost: reuses kernels other ascend tests build (disk cache); cold, ~4 g++ runs (~1 min).
"""
from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
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


def test_op_project_layout_parses_compiles_and_dispatches(tmp_path, rng):
    """Two combos of RmsNormGrad under one op: the CANN op directory's layout, JSON and CMake
    that parse, one OpDef, and a library built from the op-level files alone whose TilingFunc
    picks the combo by dtype (key = 100 * combo + mode) and whose one entry runs it."""
    built = [(tag, kernels.get_kernel(RMS, tag, EMU).module) for tag in ("f32-f32", "f16-f16")]
    files = op_project("rms_norm_grad", built, EMU.hardware)
    for rel in ("op_host/rms_norm_grad_def.cpp", "op_host/rms_norm_grad_tiling.cpp", "op_host/rms_norm_grad_tiling.h",
                "op_kernel/rms_norm_grad.cpp", "CMakeLists.txt", "op_host/CMakeLists.txt", "op_kernel/CMakeLists.txt",
                "CMakePresets.json", "build.sh",
                "RmsNormGrad.json", "README.md"):
        assert rel in files, rel
    assert not [rel for rel in files if rel.startswith("op_host/") and rel.endswith("_tiling_data.h")]
    proto = json.loads(files["RmsNormGrad.json"])
    assert proto[0]["op"] == "RmsNormGrad"
    assert [d["name"] for d in proto[0]["input_desc"]] == ["dy", "x", "rstd", "gamma"]
    assert proto[0]["input_desc"][0]["type"] == ["float", "fp16"]
    presets = json.loads(files["CMakePresets.json"])
    assert presets["configurePresets"][0]["cacheVariables"]["ASCEND_COMPUTE_UNIT"]["value"]
    opdef = files["op_host/rms_norm_grad_def.cpp"]
    assert opdef.count(": public OpDef") == 1
    assert "DataType({ge::DT_FLOAT, ge::DT_FLOAT16})" in opdef
    entry = files["op_kernel/rms_norm_grad.cpp"]
    assert entry.count("REGISTER_TILING_DEFAULT(") == 1     # once; each key's struct in its branch
    keys = re.findall(r'REGISTER_TILING_FOR_TILINGKEY\("TILING_KEY_VAR == (\d+)"', entry)
    assert keys and keys == re.findall(r"TILING_KEY_IS\((\d+)\)", entry)
    tiling = files["op_host/rms_norm_grad_tiling.cpp"]
    assert "ASC_CPU_LOG_ERROR(" in tiling and "OP_LOGE" not in tiling and "log/log.h" not in tiling
    lib = _op_library(files, tmp_path, "rms_norm_grad")
    for i, (tag, module) in enumerate(built):
        per_combo = module.kernel
        op_level = _op_level(per_combo, lib, "rms_norm_grad")
        t, key, _ = op_level.run_tiling({"dy": (33, 40), "gamma": (40,)})
        assert key == 100 * i + t.mode, tag
        dt = np.float32 if tag == "f32-f32" else np.float16
        dy, x = (rng.standard_normal((33, 40)).astype(dt) for _ in range(2))
        ins = [tvm.runtime.tensor(a) for a in (dy, x, np.ones(33, np.float32), np.ones(40, dt))]
        outs = {who: [tvm.runtime.tensor(np.zeros((33, 40), dt)), tvm.runtime.tensor(np.zeros(40, np.float32))]
                for who in ("combo", "op")}
        per_combo(*ins, *outs["combo"])
        op_level(*ins, *outs["op"])           # the launch passes the tiling key the TilingFunc set
        for a, b in zip(outs["combo"], outs["op"]):
            np.testing.assert_array_equal(a.numpy(), b.numpy())


def _op_library(files: dict, root, stem: str) -> ctypes.CDLL:
    """The op project's three C++ files built into one library against the emulation."""
    emu_build.write_project(files, root)
    sources = [root / f"op_kernel/{stem}.cpp", root / f"op_host/{stem}_tiling.cpp", root / f"op_host/{stem}_def.cpp"]
    lib_path = root / "op.so"
    cmd = ["g++", *emu_build.CXXFLAGS, *emu_build.emu_flags(EMU.hardware), *emu_build.include_flags(root),
           *map(str, sources), "-o", str(lib_path)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    lib = ctypes.CDLL(str(lib_path))
    lib.opgen_emu_host_last_error.restype = ctypes.c_char_p
    lib.opgen_emu_last_error.restype = ctypes.c_char_p
    return lib


def _op_level(per_combo, lib, stem: str):
    """A combo's runner whose tiling and launch are the op library's (the op's one entry)."""
    op_level = emu_build.EmuKernel.__new__(emu_build.EmuKernel)
    op_level.__dict__.update(per_combo.__dict__)
    op_level.lib = lib
    op_level.launch = getattr(lib, f"opgen_emu_launch_{stem}")
    op_level.launch.restype = ctypes.c_int
    return op_level


@pytest.mark.full
def test_a_branch_registering_another_keys_tiling_struct_fails(tmp_path, rng):
    """REGISTER_TILING_FOR_TILINGKEY names the key its branch runs: the op's entry with the
    second combo's branches registering key 0 instead stops at that launch, naming the key."""
    built = [(tag, kernels.get_kernel(RMS, tag, EMU).module) for tag in ("f32-f32", "f16-f16")]
    files = op_project("rms_norm_grad", built, EMU.hardware)
    entry = files["op_kernel/rms_norm_grad.cpp"]
    files["op_kernel/rms_norm_grad.cpp"] = re.sub(r'"TILING_KEY_VAR == 1\d\d"', '"TILING_KEY_VAR == 0"', entry)
    op_level = _op_level(built[1][1].kernel, _op_library(files, tmp_path, "rms_norm_grad"), "rms_norm_grad")
    dy, x = (rng.standard_normal((33, 40)).astype(np.float16) for _ in range(2))
    args = [tvm.runtime.tensor(a) for a in (dy, x, np.ones(33, np.float32), np.ones(40, np.float16),
                                            np.zeros((33, 40), np.float16), np.zeros(40, np.float32))]
    with pytest.raises(RuntimeError, match=r"REGISTER_TILING_FOR_TILINGKEY\(\"TILING_KEY_VAR == 0\".* tiling key 1\d\d"):
        op_level(*args)


def test_op_project_dtype_lists_follow_each_combo_by_canns_names():
    """The OpDef's dtype list of an output comes from each combo (TE names its outputs
    differently per combo: a rounded half dgamma is a cast stage, a float32 one the sum)."""
    built = [(tag, kernels.get_kernel(GN, tag, EMU).module) for tag in ("f32-f32", "f16-f16")]
    files = op_project("group_norm_backward", built, EMU.hardware)
    opdef = files["op_host/group_norm_grad_def.cpp"]
    for name in ("dy", "mean", "dx", "dgamma", "dbeta"):
        assert re.search(rf"\"{name}\"\)\.ParamType\(REQUIRED\)\.DataType\(\{{ge::DT_FLOAT, ge::DT_FLOAT16\}}\)", opdef), name
    proto = json.loads(files["GroupNormGrad.json"])[0]
    assert [d["name"] for d in proto["input_desc"]] == ["dy", "mean", "rstd", "x", "gamma"]
    assert proto["attr"][0] == {"name": "num_groups", "param_type": "required", "type": "int"}


def test_opgen_generate_writes_the_op_project_for_the_product_asked(tmp_path, capsys):
    """opgen generate --target ascend-emu --product AtlasA2: the op's project under
    <op>/project/, AddConfig and the presets naming Atlas A2's SoC (not the default
    product's); an unknown product or dtype combo is one line on stderr."""
    from opgen import cli
    status = cli.main(["generate", "--op", "group_norm_backward", "--target", "ascend-emu", "--product", "AtlasA2",
                       "--dtypes", "f32-f32", "--out", str(tmp_path)])    # one kernel: the project is per op
    assert status == 0, capsys.readouterr().out
    root = tmp_path / "ascend-emu" / "group_norm_backward" / "project"
    opdef = (root / "op_host" / "group_norm_grad_def.cpp").read_text()   # CANN binds GroupNormGrad to group_norm_grad
    assert re.search(r"void group_norm_grad\(", (root / "op_kernel" / "group_norm_grad.cpp").read_text())
    for rel in ("CMakeLists.txt", "op_host/CMakeLists.txt", "op_kernel/CMakeLists.txt", "CMakePresets.json", "build.sh"):
        assert (root / rel).is_file(), rel
    assert re.findall(r"AddConfig\(\"(\w+)\"\)", opdef) == ["ascend910b"]
    presets = json.loads((root / "CMakePresets.json").read_text())
    assert presets["configurePresets"][0]["cacheVariables"]["ASCEND_COMPUTE_UNIT"]["value"] == "ascend910b"
    assert cli.main(["generate", "--target", "ascend-emu", "--product", "Nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown product 'Nope'" in err[0]
    assert cli.main(["generate", "--op", "group_norm_backward", "--dtypes", "f8-f8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown dtype combo 'f8-f8'" in err[0]


# A stand-in for the part of a CANN toolkit a msopgen project's configure step reads, written
# from what the public repositories publish (cannmirror/asc-devkit cmake/asc/ASCConfig.cmake,
# commit 07003937; cmake/asc/fwk_modules/config.cmake, commit 1d5f9613; func.cmake, commit
# 79b84fe3): where ASCConfig.cmake finds the modules, the cache defaults and SoC list of
# config.cmake, and the npu_op_* functions with the arguments func.cmake parses and refuses.
# Their bodies only check and record: opbuild and the kernel compiler are toolkit binaries.
STANDIN = {
    "ASCConfig.cmake": """
set(_modules $ENV{ASCEND_HOME_PATH}/compiler/tikcpp/ascendc_kernel_cmake/fwk_modules)
include(${_modules}/config.cmake)
include(${_modules}/func.cmake)
include(${_modules}/intf.cmake)
""",
    "fwk_modules/config.cmake": """
if(NOT DEFINED vendor_name)
    set(vendor_name customize CACHE STRING "")
endif()
if(NOT DEFINED ASCEND_COMPUTE_UNIT)
    set(ASCEND_COMPUTE_UNIT ascend910b CACHE STRING "")
endif()
set(ASC_VALID_SOC_LIST ascend310b ascend310p ascend610 ascend910 ascend910b ascend910_93 ascend910_95 bs9sx1a
    bs9sx2a ascend610lite ascend910_55 mc61am21a mc62cm12a ascend910_96)
foreach(soc_version ${ASCEND_COMPUTE_UNIT})
    if(NOT soc_version IN_LIST ASC_VALID_SOC_LIST)
        message(FATAL_ERROR "COMPUTE_UNIT ${soc_version} does not support, the support list is ${ASC_VALID_SOC_LIST}")
    endif()
endforeach()
set(ASCEND_AUTOGEN_PATH ${CMAKE_BINARY_DIR}/autogen)
file(MAKE_DIRECTORY ${ASCEND_AUTOGEN_PATH})
""",
    "fwk_modules/intf.cmake": "",
    "fwk_modules/func.cmake": """
function(_standin_strict prefix)
    if(${prefix}_UNPARSED_ARGUMENTS)
        message(FATAL_ERROR "unexpected arguments: ${${prefix}_UNPARSED_ARGUMENTS}")
    endif()
endfunction()
function(_standin_record name)
    string(REPLACE ";" "\\n" text "${ARGN}")
    file(WRITE ${CMAKE_BINARY_DIR}/standin/${name}.txt "${text}\\n")
endfunction()

function(npu_op_package target_package_name)
    cmake_parse_arguments(PACKAGE "" "TYPE" "CONFIG" ${ARGN})
    _standin_strict(PACKAGE)
    set(support_types SHARED STATIC RUN)
    if(NOT PACKAGE_TYPE IN_LIST support_types)
        message(FATAL_ERROR "must provide package type SHARED, STATIC or RUN for npu_op_package")
    endif()
    add_custom_target(${target_package_name})
endfunction()

# opbuild (a toolkit binary) reads the OpDefs and writes op_proto.cc and aclnn_<op>.cpp into
# OUT_DIR at configure time: the stand-in writes them empty, one aclnn file per <op>_def.cpp.
function(npu_op_code_gen)
    cmake_parse_arguments(OPBUILD "" "OUT_DIR;PROJECT_NAME;ACCESS_PREFIX;ENABLE_SOURCE;JOBS;PACKAGE;JOIN_OP_DEF"
                          "SRC;COMPILE_OPTIONS;LINK_OPTIONS;OPTIONS" ${ARGN})
    _standin_strict(OPBUILD)
    if(NOT DEFINED OPBUILD_SRC OR NOT DEFINED OPBUILD_OUT_DIR)
        message(FATAL_ERROR "must provide SRC and OUT_DIR for npu_op_code_gen")
    endif()
    file(WRITE ${OPBUILD_OUT_DIR}/op_proto.cc "")
    foreach(src ${OPBUILD_SRC})
        get_filename_component(name ${src} NAME)
        if(name MATCHES "^(.*)_def\\\\.cpp$")
            file(WRITE ${OPBUILD_OUT_DIR}/aclnn_${CMAKE_MATCH_1}.cpp "")
        endif()
    endforeach()
    _standin_record(code_gen ${OPBUILD_SRC})
endfunction()

function(npu_op_library target_name target_type)
    set(support_types ACLNN TILING GRAPH TF_PLUGIN ONNX_PLUGIN)
    if(NOT target_type IN_LIST support_types)
        message(FATAL_ERROR "target_type ${target_type} does not support")
    endif()
    cmake_parse_arguments(OPLIB "" "" "CONFIG" ${ARGN})
    add_library(${target_name} SHARED ${OPLIB_UNPARSED_ARGUMENTS})
    _standin_record(${target_name} ${OPLIB_UNPARSED_ARGUMENTS})
endfunction()

function(npu_op_kernel_options target_name OP_TYPE)
    cmake_parse_arguments(OP_COMPILE "" "" "COMPUTE_UNIT;OPTIONS" ${ARGN})
    _standin_strict(OP_COMPILE)
endfunction()

function(npu_op_kernel_sources target_name)
    cmake_parse_arguments(KERNEL_SRC "" "KERNEL_FILE;KERNEL_DIR;OP_TYPE" "COMPUTE_UNIT" ${ARGN})
    _standin_strict(KERNEL_SRC)
    if(NOT IS_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/${KERNEL_SRC_KERNEL_DIR})
        message(FATAL_ERROR "KERNEL_DIR ${KERNEL_SRC_KERNEL_DIR} is not a directory")
    endif()
    file(GLOB kernels RELATIVE ${CMAKE_CURRENT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR}/${KERNEL_SRC_KERNEL_DIR}/*.cpp)
    _standin_record(kernel_sources ${kernels})
endfunction()

function(npu_op_kernel_library target_name)
    cmake_parse_arguments(KERNEL "" "SRC_BASE;TILING_LIBRARY" "" ${ARGN})
    _standin_strict(KERNEL)
    if(NOT DEFINED KERNEL_SRC_BASE OR NOT TARGET ${KERNEL_TILING_LIBRARY})
        message(FATAL_ERROR "must provide SRC_BASE and a TILING_LIBRARY target for npu_op_kernel_library")
    endif()
    add_custom_target(${target_name})
endfunction()

function(npu_op_package_add target_package_name)
    cmake_parse_arguments(ADD_TARGET "" "PACKAGE_PATH" "TYPE;LIBRARY;FILES" ${ARGN})
    _standin_strict(ADD_TARGET)
    foreach(lib ${ADD_TARGET_LIBRARY})
        if(NOT TARGET ${lib})
            message(FATAL_ERROR "${lib} is not a target")
        endif()
    endforeach()
    set_property(GLOBAL APPEND PROPERTY standin_package ${ADD_TARGET_LIBRARY})
    get_property(all GLOBAL PROPERTY standin_package)
    _standin_record(package ${all})
endfunction()
""",
}
CMAKE = shutil.which("cmake")


def _configure(project, toolkit, build, presets: dict) -> subprocess.CompletedProcess:
    """cmake -S project -B build with the preset's cache variables as -D options (what the
    toolkit's preset_parse.py does for cmake < 3.19) and the toolkit the stand-in."""
    cache = presets["configurePresets"][0]["cacheVariables"]
    cache["ASCEND_CANN_PACKAGE_PATH"]["value"] = str(toolkit)
    opts = [f"-D{k}:{v['type']}={v['value']}" for k, v in cache.items() if "${" not in v["value"]]
    env = dict(os.environ, ASCEND_HOME_PATH=str(toolkit))
    return subprocess.run([CMAKE, "-S", str(project), "-B", str(build), *opts,
                           f"-DASC_DIR={toolkit}/compiler/tikcpp/ascendc_kernel_cmake"],
                          capture_output=True, text=True, env=env)


@pytest.mark.skipif(CMAKE is None, reason="cmake is missing (pip install -e '.[ascend]')")
def test_op_project_configures_with_cmake_against_a_stand_in_toolkit(tmp_path):
    """The project msopgen would have written: cmake configures it (configure and generate, no
    build) against a stand-in toolkit holding the interface the public repositories publish
    (STANDIN): find_package(ASC) through ASC_DIR and ASCEND_HOME_PATH, the preset's SoC in the
    toolkit's list, every npu_op_* call with arguments the toolkit parses, the op_host sources
    and the one kernel file named as CANN binds GroupNormGrad. Removing the kernel file makes
    the kernel list empty (the control)."""
    target = EMU.for_product("AtlasA2")
    built = [("f32-f32", kernels.get_kernel(GN, "f32-f32", target).module)]
    files = op_project("group_norm_backward", built, target.hardware)
    project, toolkit = tmp_path / "project", tmp_path / "toolkit"
    emu_build.write_project(files, project)
    for rel, text in STANDIN.items():
        path = toolkit / "compiler/tikcpp/ascendc_kernel_cmake" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    presets = json.loads(files["CMakePresets.json"])
    done = _configure(project, toolkit, tmp_path / "build", presets)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    record = tmp_path / "build" / "standin"
    assert (record / "kernel_sources.txt").read_text().split() == ["group_norm_grad.cpp"]
    assert sorted(p.rsplit("/", 1)[-1] for p in (record / "code_gen.txt").read_text().split()) == \
        ["group_norm_grad_def.cpp", "group_norm_grad_tiling.cpp"]
    assert (record / "package.txt").read_text().split() == ["cust_optiling", "cust_opapi", "cust_op_proto", "ascendc_kernels"]
    assert any(p.endswith("aclnn_group_norm_grad.cpp") for p in (record / "cust_opapi.txt").read_text().split())
    (project / "op_kernel/group_norm_grad.cpp").unlink()
    again = _configure(project, toolkit, tmp_path / "build2", presets)
    assert again.returncode == 0 and (tmp_path / "build2/standin/kernel_sources.txt").read_text().split() == []
