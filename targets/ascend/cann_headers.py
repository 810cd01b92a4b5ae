"""The g++ flags that compile an emitted CANN custom-op project against Huawei's own headers.

opgen's emulation headers (targets/ascend/emu/) stand in for CANN's when the project is built
and run here. Whether the emitted op_host code is right for the real API is a separate
question: ``OPGEN_CANN_HEADERS`` names a folder holding the public repositories that publish
those headers, each extracted at the commit ``PINNED`` names (scripts/fetch_cann_headers.sh
fills it), and the flags below compile against them and nothing of opgen's:

    $OPGEN_CANN_HEADERS/metadef/         hicann/metadef: register/op_def_registry.h, gert::
                                         TilingContext, InferShapeContext, graph/types.h
    $OPGEN_CANN_HEADERS/ge/              hicann/ge: graph/operator_reg.h and the rest of
                                         inc/graph_metadef/external that op_def.h includes
    $OPGEN_CANN_HEADERS/runtime/         hicann/runtime: pkg_inc/platform/soc_spec.h
                                         (platform_ascendc.h) and pkg_inc/base/dlog_pub.h
                                         (asc_cpu_log.h)
    $OPGEN_CANN_HEADERS/asc-devkit/      hicann/asc-devkit: tiling/platform/platform_ascendc.h,
                                         utils/log/asc_cpu_log.h, kernel_operator.h
    $OPGEN_CANN_HEADERS/libboundscheck/  openEuler's libboundscheck: securec.h, which metadef's
                                         continuous_vector.h includes

One header the host code reaches is in none of them: asc_cpu_log.h includes
"aicpu/cust_cpu_utils.h" (the toolkit's AI CPU headers) for its on-device log path
(DEVICE_OP_TILING_LIB with DEVICE_OP_LOG_BY_DUMP), which a host TilingFunc never takes.
``write_missing`` writes the one declaration that path names, so that nothing else is
supplied by opgen; docs/ascend.md lists it.

The kernel side does not go this far: asc-devkit's kernel headers compile either with the
bisheng compiler (``__aicore__`` is ``[aicore]``, ``__gm__`` an address space) or, with
ASCENDC_CPU_DEBUG=1, against the toolkit's CPU-debug library (tikicpulib: stub_def.h and
libtikicpulib), neither of which is public. ``kernel_flags`` are the flags asc-devkit's own
unit tests use (tests/api/basic_api/CMakeLists.txt), for a user who has the toolkit.
"""
from __future__ import annotations

import os
from pathlib import Path

ENV = "OPGEN_CANN_HEADERS"

# name in the folder: (repository, commit). The commits this module's flags were worked out
# and the emitted projects compiled against (docs/ascend.md has the result).
PINNED = {
    "metadef": ("https://github.com/hicann/metadef", "786891c02e5a7f509c6ffffd854e33ddefe3527c"),
    "ge": ("https://github.com/hicann/ge", "ffdcbc9f7496c17a98c1d12762c61ed608ef3503"),
    "runtime": ("https://github.com/hicann/runtime", "681ef7610df13c8128982901142a2c869ddbb53e"),
    "asc-devkit": ("https://github.com/cannmirror/asc-devkit", "0da921b91aeb2abdc6e8d74423b0bbe7040c3fd1"),
    "libboundscheck": ("https://github.com/openeuler-mirror/libboundscheck",
                       "43f394077b34f894aa1e650467426c34378fb460"),
}

# Each include directory, by the header that needs it (dropping any one fails the host
# compile of an emitted project; checked at the pinned commits).
HOST_INCLUDES = (
    "metadef/inc/external/asc",          # register/op_def_registry.h, register/op_def.h
    "metadef/inc/external",              # exe_graph/runtime/tiling_context.h, graph/types.h
    "metadef/inc",                       # "external/ge_common/api_error_codes.h"
    "ge/inc/graph_metadef/external",     # graph/operator_reg.h
    "asc-devkit/include/utils",          # tiling/platform/platform_ascendc.h
    "asc-devkit/include",                # utils/log/asc_cpu_log.h
    "runtime/pkg_inc",                   # platform/soc_spec.h; "../pkg_inc/base/dlog_pub.h"
    "libboundscheck/include",            # securec.h
)

# asc_cpu_log.h's include that no public repository holds, and what its one use needs.
MISSING = {
    "aicpu/cust_cpu_utils.h": (
        "// Not public (the toolkit's AI CPU headers): the one declaration asc_cpu_log.h's\n"
        "// on-device log path names. Written by opgen's cann_headers.write_missing.\n"
        "#pragma once\n#include <cstdint>\n"
        "namespace aicpu {\nclass CustCpuKernelUtils {\npublic:\n"
        "    static void DumpCustomLog(int32_t module_id, int32_t level, const char *fmt, ...);\n"
        "};\n}  // namespace aicpu\n"
    ),
}


def headers_root() -> Path | None:
    """The folder ``OPGEN_CANN_HEADERS`` names, or None when it is unset or empty."""
    value = os.environ.get(ENV, "").strip()
    return Path(value) if value else None


def missing_repos(root: Path) -> list[str]:
    """The pinned repositories absent from ``root`` (empty: all there)."""
    return [name for name in PINNED if not (root / name).is_dir()]


def write_missing(folder: Path) -> Path:
    """Write the non-public headers (MISSING) under ``folder``; returns it, an include dir."""
    for rel, text in MISSING.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return folder


def host_flags(root: Path, missing_dir: Path) -> list[str]:
    """g++ flags compiling op_host sources against the repositories under ``root`` alone
    (plus ``missing_dir`` from write_missing): C++17, as CANN's op_host CMake builds them."""
    return ["-std=c++17", *(f"-I{root / rel}" for rel in HOST_INCLUDES), f"-I{missing_dir}"]


# asc-devkit's unit tests' product defines for a vector core (tests/api/basic_api/CMakeLists.txt).
ARCH_DEFINES = {
    "Ascend910B": ("__NPU_ARCH__=2201", "__DAV_C220__", "__DAV_C220_VEC__", "__DAV_VEC__"),
    "Ascend950": ("__NPU_ARCH__=3510", "__DAV_C310__", "__DAV_C310_VEC__"),
}


def kernel_flags(root: Path, generated: Path, soc: str) -> list[str]:
    """g++ flags for op_kernel sources in asc-devkit's CPU-debug mode, as its unit tests set
    them; ``generated`` holds kernel_tiling/kernel_tiling.h (asc-devkit's
    impl/adv_api/cmake/scripts/gen_kernel_tiling_data_def.py writes it). They stop at
    stub_def.h, which only the toolkit's tikicpulib ships (module docstring)."""
    devkit = root / "asc-devkit"
    return ["-std=c++17", "-DASCENDC_CPU_DEBUG=1", *(f"-D{d}" for d in ARCH_DEFINES[soc]),
            *(f"-I{devkit / rel}" for rel in ("", "include", "include/basic_api", "include/utils",
                                               "impl", "impl/basic_api")),
            f"-I{generated}", f"-I{root / 'runtime/pkg_inc'}", f"-I{root / 'metadef/inc/external'}",
            f"-I{root / 'libboundscheck/include'}"]
