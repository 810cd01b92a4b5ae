"""Static measures of the GPU row kernels, generic vs vector variant (no GPU needed: nvcc +
cuobjdump, see targets/cuda_sass.py and targets/gpu_traffic.py).

    python benchmarks/sass_per_element.py [--ops rms_norm_grad layer_norm_backward] [--dtypes bf16-f32 f32-f32]

Prints, per op x dtype combo x variant x architecture: the HBM bytes per element of the
hot loops' global accesses of data-rank buffers (and the bytes of lower-rank ones, served
by L2), SASS instructions per element of the storing loop and over every pass (``-``: the
passes and the machine code's loops did not pair up), and per kernel ptxas's registers.
"""
from __future__ import annotations

import argparse

from opgen import kernels
from opgen.ops import get_op
from opgen.targets import cuda_sass, get_target, gpu_traffic
from opgen.targets import cuda as cuda_target


def measure(op_name: str, tag: str, vector: bool) -> list[str]:
    """One line per architecture."""
    target = get_target("cuda")
    op = get_op(op_name)
    knobs = {"vector": vector}
    mod, _ = kernels.scheduled_module(op, op.combo(tag), target, knobs=knobs)
    func = next(iter(mod.functions.values()))
    traffic, hot = gpu_traffic.traffic(func), gpu_traffic.hot_loops(func)
    kernel = kernels.get_kernel(op, op.combo(tag), target, knobs=knobs)
    source = target.source_of(kernel.module)[1]
    lines = []
    for report in target.compile_check(kernel.module):
        cubin = cuda_target._compile_cached(source, report.arch)[1]
        every = cuda_sass.all_passes(cuda_sass.sass(cubin), hot)
        registers = " ".join(str(regs) for _, (regs, _) in sorted(report.kernels.items()))
        lines.append(f"{op_name:<20} {tag:<9} {'vector' if vector else 'generic':<8} {report.arch:<6} "
                     f"{traffic.bytes_per_element():>5.0f} {traffic.l2_bytes_per_element():>4.0f} "
                     f"{report.sass_per_element:>7.1f} {'-' if every is None else f'{every:.1f}':>7} {registers}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", nargs="+", default=["rms_norm_grad", "layer_norm_backward"])
    parser.add_argument("--dtypes", nargs="+", default=["f32-f32", "bf16-f32"])
    args = parser.parse_args()
    if cuda_sass.missing():
        raise SystemExit(cuda_sass.missing())
    print(f"{'op':<20} {'dtypes':<9} {'variant':<8} {'arch':<6} {'HBM':>5} {'L2':>4} {'store':>7} {'passes':>7} "
          "registers (kernel, kernel_1, ...)")
    for name in args.ops:
        for tag in args.dtypes:
            for vector in (False, True):
                print("\n".join(measure(name, tag, vector)), flush=True)


if __name__ == "__main__":
    main()
