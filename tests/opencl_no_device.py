"""A pytest plugin (``-p opencl_no_device``, with tests/ on the path) for a machine where no
OpenCL device builds opgen's probe kernel: every probe fails the way pip's PoCL 3.0 fails
on a CPU LLVM 14 does not know (AMD Zen 5). tests/test_opencl_devices.py runs the opencl
test files under it and expects them to skip, not fail. Importing it changes nothing; the
probe is replaced when pytest loads it as a plugin."""
from __future__ import annotations

ZEN5_LOG = ("RuntimeError: clBuildProgram failed: BUILD_PROGRAM_FAILURE\n\nBuild on <pyopencl.Device>:\n\n"
            "error: unknown target CPU 'generic'")


def _failing_probe(device) -> str:
    return ZEN5_LOG


def pytest_configure(config):
    from opgen.targets import opencl, opencl_devices

    opencl_devices.probe = _failing_probe
    opencl.reset()
