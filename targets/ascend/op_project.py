"""One CANN custom-op project per op: what msopgen scaffolds, filled with opgen's kernels.

Each dtype combo is emitted (and verified) as its own kernel (targets/ascend/build.py). The op's
project puts them under one op, as a CANN op directory holds one op, named as CANN binds the
OpType (op_file_name: GroupNormGrad -> group_norm_grad):

  <Op>.json                     the op prototype msopgen reads (inputs, outputs, attributes,
                                dtype and format lists)
  CMakeLists.txt, op_host/CMakeLists.txt, op_kernel/CMakeLists.txt, CMakePresets.json,
  build.sh                      every file msopgen writes into a project (after hicann/asc-tools'
                                new_op_project_template/custom_op); the cmake modules, opbuild
                                and the packaging scripts are the toolkit's, found through
                                find_package(ASC)
  op_host/<op>_def.cpp          ONE OpDef: CANN's op type, names, order and attributes, a dtype
                                list entry per combo the product documents, AddConfig(SoC)
  op_host/<op>_tiling.cpp/.h    one TilingFunc: picks the combo by the input dtypes, runs
                                its tiling, tiling key = 100 * combo + mode; InferShape,
                                InferDataType; errors through ASC_CPU_LOG_ERROR
  op_kernel/<op>.cpp            one entry dispatching on the tiling key to each combo's Run,
                                each key's tiling struct registered with
                                REGISTER_TILING_FOR_TILINGKEY
  op_kernel/<op>_tiling_data.h  and each combo's files, included by the two above

Checked here: every C++ file compiles with -Wall -Werror against the emulation's headers,
the TilingFunc runs through the emulated TilingContext, cmake configures the project against a
stand-in toolkit (tests/test_ascend_project.py). Not checked: a real CANN toolkit build (none
is available here).
"""
from __future__ import annotations

import json
import re

from opgen.targets.ascend.cann import GE_DTYPE
from opgen.targets.ascend.host_context import SOCS, def_cpp

JSON_TYPE = {"float32": "float", "float16": "fp16", "bfloat16": "bf16", "int32": "int32", "int8": "int8"}
ATTR_TYPE = {"Int": "int", "Float": "float", "Bool": "bool", "String": "string", "ListBool": "list_bool"}
KEY_STRIDE = 100       # tiling key = KEY_STRIDE * combo index + the combo's mode


def op_file_name(op_type: str) -> str:
    """The file stem and kernel entry CANN binds the OpType to: its snake case (GroupNormGrad ->
    group_norm_grad), the rule ops-nn's op directories and msopgen's generated files follow
    (hicann/ops-nn norm/group_norm_grad/op_kernel/group_norm_grad.cpp, commit e5c3fa93); a
    definition naming another file would need ExtendCfgInfo("opFile.value", ...), which
    opgen's OpDefs do not write."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", op_type).lower()


def op_project(op_name: str, built: list, hw) -> dict:
    """{relative path: text} of the op's project from ``built`` = [(combo tag, EmuModule)]
    (every combo of the op the product documents, emitted for ``hw``). ``op_name`` is opgen's
    name of the op; the files and the kernel entry carry CANN's (op_file_name)."""
    face = built[0][1].kernel.k.face
    stem = op_file_name(face.op_type)
    files = {}
    for _, module in built:       # each combo's sources, included by the op's (not built alone)
        sym = module.symbol
        files[f"op_kernel/{sym}_tiling_data.h"] = module.files[f"op_kernel/{sym}_tiling_data.h"]
        files[f"op_kernel/{sym}_impl.h"] = module.files[f"op_kernel/{sym}.cpp"]
        files[f"op_host/{sym}_tiling.h"] = module.files[f"op_host/{sym}_tiling.h"]
        files[f"op_host/{sym}_tiling_impl.h"] = module.files[f"op_host/{sym}_tiling.cpp"]
    rows = [{p.name: p.dtype for p in m.kernel.k.face.entry} for _, m in built]   # by CANN name: TE names differ per combo
    files[f"op_host/{stem}_tiling.h"] = _host_header(stem)
    files[f"op_host/{stem}_tiling.cpp"] = _host_tiling(stem, built)
    files[f"op_host/{stem}_def.cpp"] = def_cpp(stem, face, {hw.product: rows}, f", for {hw.product} ({hw.soc})")
    files[f"op_kernel/{stem}.cpp"] = _op_kernel(stem, face, built)
    files[f"{face.op_type}.json"] = _prototype(face, rows)
    files.update(scaffold(hw))
    files["README.md"] = README.replace("OP_TYPE", face.op_type).replace("PRODUCT", hw.product).replace(
        "OP_FILE", stem).replace("OPGEN_NAME", op_name)
    return files


def scaffold(hw) -> dict:
    """The files of a msopgen project that do not come from the CANN toolkit, for ``hw``'s SoC:
    the build (CMakeLists.txt at the root, in op_host/ and op_kernel/), CMakePresets.json and
    build.sh. The toolkit's own cmake modules (config/func/intf.cmake, the packaging scripts)
    are found through find_package(ASC), not copied (see CMAKE_ROOT)."""
    return {"CMakeLists.txt": CMAKE_ROOT, "op_host/CMakeLists.txt": CMAKE_OP_HOST,
            "op_kernel/CMakeLists.txt": CMAKE_OP_KERNEL, "CMakePresets.json": _presets(hw), "build.sh": BUILD_SH}


def _host_header(op_name: str) -> str:
    guard = f"OPGEN_{op_name.upper()}_OP_TILING_H"
    return (f"// Generated by opgen: the host hooks of the op {op_name}. Do not edit.\n"
            f"#ifndef {guard}\n#define {guard}\n#include \"register/op_def_registry.h\"\n\n"
            "namespace optiling {\nge::graphStatus TilingFunc(gert::TilingContext* context);\n}  // namespace optiling\n"
            "namespace ge {\ngraphStatus InferShape(gert::InferShapeContext* context);\n"
            "graphStatus InferDataType(gert::InferDataTypeContext* context);\n}  // namespace ge\n"
            f"#endif  // {guard}\n")


def _host_tiling(op_name: str, built: list) -> str:
    lines = [f"// Generated by opgen: the op-level tiling of {op_name}: each dtype combo's TilingFunc,",
             "// chosen by the input dtypes; tiling key = 100 * combo + the combo's mode.",
             f"#include \"{op_name}_tiling.h\"", "#include \"utils/log/asc_cpu_log.h\"",
             "#include \"tiling/platform/platform_ascendc.h\""]
    lines += [f"#include \"../op_kernel/{m.symbol}_tiling_data.h\"" for _, m in built]
    for _, m in built:
        lines += [f"namespace opgen_{m.symbol} {{", f"#include \"{m.symbol}_tiling_impl.h\"", "}"]
    lines += ["", "namespace optiling {", "ge::graphStatus TilingFunc(gert::TilingContext* context) {"]
    for i, (tag, m) in enumerate(built):
        ins = m.kernel.k.face.inputs + m.kernel.k.face.extra
        test = " && ".join(f"context->GetInputDesc({j})->GetDataType() == {GE_DTYPE[p.dtype]}"
                           for j, p in enumerate(ins)) or "true"
        lines += [f"    if ({test}) {{   // {tag}",
                  f"        if (opgen_{m.symbol}::optiling::TilingFunc(context) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;",
                  f"        return context->SetTilingKey({KEY_STRIDE * i} + context->GetTilingKey());", "    }"]
    lines += ["    ASC_CPU_LOG_ERROR(\"%s: no kernel for these input dtypes\", context->GetNodeName());", "    return ge::GRAPH_FAILED;", "}",
              "}  // namespace optiling", "", "namespace ge {",
              "graphStatus InferShape(gert::InferShapeContext* context) {",
              f"    return opgen_{built[0][1].symbol}::ge::InferShape(context);   // the same rule for every combo",
              "}", "graphStatus InferDataType(gert::InferDataTypeContext* context) {"]
    for tag, m in built:
        ins = m.kernel.k.face.inputs + m.kernel.k.face.extra
        test = " && ".join(f"context->GetInputDataType({j}) == {GE_DTYPE[p.dtype]}"
                           for j, p in enumerate(ins)) or "true"
        lines.append(f"    if ({test}) return opgen_{m.symbol}::ge::InferDataType(context);   // {tag}")
    return "\n".join(lines + ["    return GRAPH_FAILED;", "}", "}  // namespace ge", ""])


def _op_kernel(op_name: str, face, built: list) -> str:
    params = ", ".join(f"GM_ADDR {p.name}" for p in face.entry)
    names = ", ".join(p.name for p in face.entry)
    lines = [f"// Generated by opgen: the one kernel entry of {op_name}, dispatching on the tiling key",
             "// (100 * dtype combo + mode) to each combo's Run.", "#include \"kernel_operator.h\"",
             "#define OPGEN_OP_PROJECT"]
    lines += [f"#include \"{m.symbol}_tiling_data.h\"" for _, m in built]
    for _, m in built:
        lines += [f"namespace opgen_{m.symbol} {{", f"#include \"{m.symbol}_impl.h\"", "}"]
    lines += ["", f"extern \"C\" __global__ __aicore__ void {op_name}({params}, GM_ADDR workspace, GM_ADDR tiling) {{",
              "    // One tiling struct per key, registered the CANN way (ops-nn e5c3fa93,",
              "    // experimental/norm/sync_batch_norm_gather_stats/op_kernel/common/",
              "    // sync_batch_norm_gather_stats_kernel_base.h): a default, then each key's in its branch.",
              f"    REGISTER_TILING_DEFAULT({built[0][1].kernel.k.struct});"]
    first = True
    for i, (tag, m) in enumerate(built):
        for mode in sorted(set(m.kernel.k.modes.values())):
            key = KEY_STRIDE * i + mode
            lines.append(f"    {'if' if first else '} else if'} (TILING_KEY_IS({key})) {{   // {tag}")
            lines.append(f"        REGISTER_TILING_FOR_TILINGKEY(\"TILING_KEY_VAR == {key}\", {m.kernel.k.struct});")
            lines.append(f"        opgen_{m.symbol}::Run({names}, workspace, tiling);")
            first = False
    lines += ["    }", "}", "", "#ifdef OPGEN_EMU", f"OPGEN_EMU_EXPORT({op_name}, {len(face.entry) + 2})", "#endif", ""]
    return "\n".join(lines)


def _prototype(face, rows: list) -> str:
    """The op prototype JSON msopgen generates a project from."""
    def desc(p):
        return {"name": p.name, "param_type": "required", "format": ["ND"] * len(rows),
                "type": [JSON_TYPE[r.get(p.name, p.dtype)] for r in rows]}
    attrs = []
    for a in face.attrs:
        entry = {"name": a["name"], "param_type": "required" if a.get("default") is None else "optional",
                 "type": ATTR_TYPE[a["kind"]]}
        if a.get("default") is not None:
            entry["default_value"] = list(a["default"]) if isinstance(a["default"], (list, tuple)) else a["default"]
        attrs.append(entry)
    proto = [{"op": face.op_type, "language": "cpp", "input_desc": [desc(p) for p in face.inputs],
              "output_desc": [desc(p) for p in face.outputs], "attr": attrs}]
    return json.dumps(proto, indent=4) + "\n"


ASC_TOOLS = "hicann/asc-tools utils/templates/new_op_project_template/custom_op/ (commit 2113e48f)"


def _presets(hw) -> str:
    """The configure preset of msopgen's template (ASC_TOOLS CMakePresets.json: the same cache
    variables; ASCEND_COMPUTE_UNIT is the product's SoC where the template has a placeholder)."""
    def var(value, kind="STRING"):
        return {"type": kind, "value": value}
    presets = {"version": 1, "cmakeMinimumRequired": {"major": 3, "minor": 16, "patch": 0},
               "configurePresets": [{
                   "name": "default", "displayName": "Default Config",
                   "description": f"opgen's CANN custom-op project for {hw.product}, after {ASC_TOOLS}",
                   "generator": "Unix Makefiles", "binaryDir": "${sourceDir}/build_out",
                   "cacheVariables": {
                       "CMAKE_BUILD_TYPE": var("Release"), "ENABLE_SOURCE_PACKAGE": var("True", "BOOL"),
                       "ENABLE_BINARY_PACKAGE": var("True", "BOOL"), "ASCEND_COMPUTE_UNIT": var(SOCS[hw.product]),
                       "ENABLE_TEST": var("True", "BOOL"), "vendor_name": var("customize"),
                       "ASCEND_CANN_PACKAGE_PATH": var("/usr/local/Ascend/cann", "PATH"),
                       "ASCEND_PYTHON_EXECUTABLE": var("python3"),
                       "CMAKE_INSTALL_PREFIX": var("${sourceDir}/build_out", "PATH"),
                       "ENABLE_CROSS_COMPILE": var("False", "BOOL"),
                       "CMAKE_CROSS_PLATFORM_COMPILER": var("/usr/bin/aarch64-linux-gnu-g++", "PATH"),
                       "ASCEND_PACK_SHARED_LIBRARY": var("False", "BOOL")}}]}
    return json.dumps(presets, indent=4) + "\n"


CMAKE_ROOT = """# Generated by opgen: a CANN custom-op project in the layout msopgen scaffolds.
# After hicann/asc-tools utils/templates/new_op_project_template/custom_op/CMakeLists.txt
# (commit 2113e48f). find_package(ASC) loads the toolkit's ASCConfig.cmake, which includes the
# toolkit's own modules from $ENV{ASCEND_HOME_PATH}/compiler/tikcpp/ascendc_kernel_cmake/
# fwk_modules/ (config.cmake, func.cmake, intf.cmake: npu_op_package, npu_op_code_gen,
# npu_op_library, npu_op_kernel_sources, npu_op_kernel_library, npu_op_package_add; source:
# cannmirror/asc-devkit cmake/asc/ASCConfig.cmake, cmake/asc/fwk_modules/func.cmake). Those
# modules, opbuild and the packaging scripts come with the toolkit; this project has none.
cmake_minimum_required(VERSION 3.16.0)
project(opp)
find_package(ASC REQUIRED)
set(package_name ${vendor_name})

# One .run package holding the op's libraries and kernel binaries.
npu_op_package(${package_name}
    TYPE RUN
    CONFIG
        INSTALL_PATH ${CMAKE_BINARY_DIR}/
)

add_subdirectory(op_host)
add_subdirectory(op_kernel)
"""

CMAKE_OP_HOST = """# Generated by opgen: the host side (OpDef, TilingFunc, InferShape/InferDataType) as three
# libraries: the aclnn API opbuild generates from the OpDef, the graph prototype, the tiling.
# After hicann/asc-tools utils/templates/new_op_project_template/custom_op/op_host/CMakeLists.txt
# (commit 2113e48f). The op's sources are every .cpp here (<op>_def.cpp, <op>_tiling.cpp); the
# per-combo files are headers they include.
aux_source_directory(${CMAKE_CURRENT_SOURCE_DIR} ops_srcs)
npu_op_code_gen(
    SRC ${ops_srcs}
    PACKAGE ${package_name}
    OUT_DIR ${ASCEND_AUTOGEN_PATH}
    JOIN_OP_DEF True
)

file(GLOB autogen_aclnn_src ${ASCEND_AUTOGEN_PATH}/aclnn_*.cpp)
set_source_files_properties(${autogen_aclnn_src} PROPERTIES GENERATED TRUE)
npu_op_library(cust_opapi ACLNN ${autogen_aclnn_src})
target_compile_options(cust_opapi PRIVATE -fvisibility=hidden)

file(GLOB group_proto_src ${ASCEND_AUTOGEN_PATH}/group_op_proto/*.cc)
file(GLOB proto_src ${ASCEND_AUTOGEN_PATH}/op_proto.cc)
set_source_files_properties(${group_proto_src} ${proto_src} PROPERTIES GENERATED TRUE)
npu_op_library(cust_op_proto GRAPH ${ops_srcs} ${group_proto_src} ${proto_src})
target_compile_options(cust_op_proto PRIVATE -fvisibility=hidden)

file(GLOB fallback_src ${ASCEND_AUTOGEN_PATH}/fallback_*.cpp)
set_source_files_properties(${fallback_src} PROPERTIES GENERATED TRUE)
npu_op_library(cust_optiling TILING ${ops_srcs} ${fallback_src})
target_compile_options(cust_optiling PRIVATE -fvisibility=hidden)

npu_op_package_add(${package_name}
    LIBRARY
        cust_optiling
        cust_opapi
        cust_op_proto
)
"""

CMAKE_OP_KERNEL = """# Generated by opgen: the kernel, one entry per op (<op>.cpp; each dtype combo's code is a
# header it includes), compiled per SoC of ASCEND_COMPUTE_UNIT with the tiling library.
# After hicann/asc-tools utils/templates/new_op_project_template/custom_op/op_kernel/CMakeLists.txt
# (commit 2113e48f).
if("${CMAKE_BUILD_TYPE}x" STREQUAL "Debugx")
    npu_op_kernel_options(ascendc_kernels ALL OPTIONS -g -O0)
endif()

npu_op_kernel_sources(ascendc_kernels
    KERNEL_DIR ./
)

npu_op_kernel_library(ascendc_kernels
    SRC_BASE ${CMAKE_CURRENT_SOURCE_DIR}/
    TILING_LIBRARY cust_optiling
)

npu_op_package_add(${package_name}
    LIBRARY ascendc_kernels
)
"""

BUILD_SH = """#!/bin/bash
# Generated by opgen: configure with the preset, build the kernels and the .run package.
# After hicann/asc-tools utils/templates/new_op_project_template/custom_op/build.sh (commit
# 2113e48f): the toolkit is $ASCEND_HOME_PATH (set by the toolkit's set_env.sh, which also lets
# find_package(ASC) find ASCConfig.cmake); cmake older than 3.19 reads no presets, so the
# toolkit's preset_parse.py turns the preset into -D options.
set -e
if [ -n "$BASE_LIBS_PATH" ]; then
    export ASCEND_HOME_PATH=$BASE_LIBS_PATH
elif [ -z "$ASCEND_HOME_PATH" ]; then
    if [ -z "$ASCEND_AICPU_PATH" ]; then
        echo "please set the CANN environment (source <toolkit>/set_env.sh)" >&2
        exit 1
    fi
    export ASCEND_HOME_PATH=$ASCEND_AICPU_PATH
fi
echo "using ASCEND_HOME_PATH: $ASCEND_HOME_PATH"
script_path=$(realpath "$(dirname "$0")")
cd "$script_path"
build_dir=build_out
mkdir -p "$build_dir"
rm -rf "${build_dir:?}"/*
cmake_version=$(cmake --version | awk '/cmake version/ {print $3}')
if [ "$(printf '%s\\n' "$cmake_version" 3.19.0 | sort -V | head -n1)" != 3.19.0 ]; then
    opts=$(python3 "$ASCEND_HOME_PATH/tools/tikcpp/ascendc_kernel_cmake/fwk_modules/util/preset_parse.py" \\
        "$script_path/CMakePresets.json")
    cmake -S . -B "$build_dir" $opts
else
    cmake -S . -B "$build_dir" --preset=default
fi
cmake --build "$build_dir" --target binary package -j"$(nproc)"
"""

README = """# OP_TYPE: a CANN custom-op project generated by opgen for PRODUCT

opgen's op OPGEN_NAME, under CANN's name: op_host/OP_FILE_def.cpp (the OpDef),
op_host/OP_FILE_tiling.cpp (the TilingFunc on gert::TilingContext and PlatformAscendC, with
InferShape/InferDataType), op_kernel/OP_FILE.cpp (the AscendC kernel OP_FILE, one entry
dispatching on the tiling key). Each dtype combo's code is a header the two include.

Build (a CANN toolkit with the AscendC devkit): `source <toolkit>/set_env.sh; bash build.sh`.
The project holds what msopgen writes into a project (CMakeLists.txt here, in op_host/ and
op_kernel/, CMakePresets.json, build.sh, after hicann/asc-tools'
utils/templates/new_op_project_template/custom_op/); the cmake modules, opbuild and the
packaging scripts come from the toolkit through find_package(ASC). No framework/ (TensorFlow
or ONNX plugins): the op is for aclnn and the graph.

What was checked, and how:
- against opgen's emulation (targets/ascend/emu/ and emu/host/): every C++ file compiles with
  g++ -Wall -Werror; the TilingFunc runs through the emulated TilingContext; the kernels run on
  emulated cores and match opgen's float64 reference;
- cmake configures the project against a stand-in toolkit folder holding the public interface
  of the toolkit's modules (the npu_op_* functions with their arguments);
- the op_host sources compile (g++ -fsyntax-only) against Huawei's public headers alone
  (hicann/metadef, ge, runtime, asc-devkit at pinned commits: opgen's docs/ascend.md);
- NOT against a CANN toolkit (none was available): nothing was built with its compilers or
  run on a device; the kernel was not compiled against asc-devkit (that needs bisheng or the
  toolkit's tikicpulib); the op prototype JSON is checked against CANN's documentation only.
"""
