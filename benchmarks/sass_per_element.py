"""SASS instructions per element of the GPU row kernels, generic vs vector variant (no GPU
needed: nvcc + cuobjdump, see targets/cuda_sass.py).

    python benchmarks/sass_per_element.py [--op rms_norm_grad] [--dtypes bf16-f32 f32-f32]

Prints, per op x dtype combo x architecture, the instructions per element of the
elementwise loop of each variant and the ratio.
"""
from __future__ import annotations

import argparse

from opgen import kernels
from opgen.ops import get_op
from opgen.targets import cuda_sass, get_target


def measure(op_name: str, tag: str) -> dict:
    """{(variant, arch): SASS per element}."""
    target = get_target("cuda")
    op = get_op(op_name)
    found = {}
    for vector in (False, True):
        kernel = kernels.get_kernel(op, op.combo(tag), target, knobs={"vector": vector})
        for report in target.compile_check(kernel.module):
            found[("vector" if vector else "generic", report.arch)] = report.sass_per_element
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", default="rms_norm_grad")
    parser.add_argument("--dtypes", nargs="+", default=["bf16-f32", "f32-f32"])
    args = parser.parse_args()
    if cuda_sass.missing():
        raise SystemExit(cuda_sass.missing())
    print(f"{'op':<16} {'dtypes':<10} {'arch':<6} {'generic':>8} {'vector':>8} {'ratio':>6}")
    for tag in args.dtypes:
        found = measure(args.op, tag)
        for arch in get_target("cuda").archs:
            g, v = found[("generic", arch)], found[("vector", arch)]
            print(f"{args.op:<16} {tag:<10} {arch:<6} {g:>8.1f} {v:>8.1f} {v / g:>6.2f}")


if __name__ == "__main__":
    main()
