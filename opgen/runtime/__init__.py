"""Running exported GPU kernels without TVM: launch plans read from disk, executed through
a device API (pyopencl; CuPy for PTX/cubin).

``opgen export`` (a TVM machine) writes, per op x dtype combo x variant, the device code and
a JSON launch plan (docs/launch-plan.md). This package replays such a plan on a machine that
has the device and its driver but no TVM and no opgen compiler: it imports numpy and the
device API only (tests/test_runtime_plan.py checks that importing it loads no TVM), so the
whole of it travels to a GPU machine with the plans.

The plan is data from disk, so nothing in it is ever executed as Python: its expressions
(grid sizes, scalar arguments) are parsed and interpreted over a whitelist
(``opgen.runtime.expr``), file names must be plain names beside the plan.

    from opgen.runtime import plan, backends
    p = plan.load("out/opencl/rms_norm_grad/f32-f32/plan.json")
    plan.run(p, [dy, x, rstd, gamma, dx, dgamma], backends.for_plan(p))
"""
