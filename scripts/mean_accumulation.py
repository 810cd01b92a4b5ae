"""BatchNorm's float32 saveMean against a float64 reference: opgen's kernel next to numpy
models of other float32 accumulations of the same channel, and ATen's (float64, rounded).

    python scripts/mean_accumulation.py [--draws 20] [--shape 2x16x7x9]

Prints each one's worst max relative error (compare's MARE, opgen.standards' floor) over
the draws, in u = 2^-24. It shows which change to the channel sum closes issue 37's
saveMean rows: the error comes from the condition of the sum (channels whose mean is
~1/100 of their spread), which a plain, pairwise or Kahan float32 sum does not remove, nor
a corrected two-pass mean (its correction sum is float32 too), and a sum carried in twice
float32's precision (TwoSum of each addition, the errors summed on the side: Ogita, Rump
and Oishi's Sum2) or in float64 (what the CPU kernel does now: schedules/llvm.py) does.
"""
from __future__ import annotations

import argparse

import numpy as np

from opgen import baselines
from opgen.standards import FLOOR

U = 2.0 ** -24


def _channels(x: np.ndarray, problem) -> np.ndarray:
    """(C, M) float32: each channel's elements in the kernel's order (n, then hw)."""
    data = np.moveaxis(x.reshape(problem.N, problem.C, problem.HW), 1, 0)
    return data.reshape(problem.C, -1)


def sequential(a: np.ndarray) -> np.ndarray:
    return np.add.accumulate(a, axis=1, dtype=np.float32)[:, -1]


def kahan(a: np.ndarray) -> np.ndarray:
    """Kahan's compensated sum (error <= 2u * sum|x|: no better on a sum that cancels)."""
    s, c = np.zeros(a.shape[0], np.float32), np.zeros(a.shape[0], np.float32)
    for i in range(a.shape[1]):
        y = a[:, i] - c
        t = s + y
        c, s = (t - s) - y, t
    return s - c


def sum2(a: np.ndarray) -> np.ndarray:
    """Sum2: each addition's exact error (TwoSum) summed on the side (error ~ u|sum| +
    (n u)^2 sum|x|: as if accumulated in twice the precision)."""
    s, c = np.zeros(a.shape[0], np.float32), np.zeros(a.shape[0], np.float32)
    for i in range(a.shape[1]):
        x = a[:, i]
        t = s + x
        z = t - s
        c = c + ((s - (t - z)) + (x - z))
        s = t
    return s + c


def shifted(a: np.ndarray) -> np.ndarray:
    """The kernel's mean before issue 37: shift + sum(x - shift)/M, all float32 (sequential)."""
    shift = a[:, 0]
    return shift + sequential(a - shift[:, None]) / np.float32(a.shape[1])


def corrected_two_pass(a: np.ndarray) -> np.ndarray:
    """m1 = shifted mean, then m1 + sum(x - m1)/M in float32: a second pass over x."""
    m1 = shifted(a)
    return m1 + sequential(a - m1[:, None]) / np.float32(a.shape[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=20)
    parser.add_argument("--shape", default="2x16x7x9")
    args = parser.parse_args()
    problem = baselines.parse_problem("batch_norm", args.shape)
    rng = np.random.default_rng(0)
    worst: dict[str, float] = {}
    for _ in range(args.draws):
        inputs = baselines.random_inputs("batch_norm", "f32-f32", problem, rng)
        data = _channels(inputs["x"], problem)
        ref = data.astype(np.float64).mean(axis=1)
        m = np.float32(data.shape[1])
        candidates = {
            "opgen's kernel (CPU: float64 sum(x)/M, rounded)":
                baselines.opgen_call("batch_norm", problem, inputs)()["save_mean"],
            "before, sequential model: shift + sum(x - shift)/M": shifted(data),
            "corrected two-pass, float32": corrected_two_pass(data),
            "sequential float32 sum(x)/M": sequential(data) / m,
            "numpy's pairwise float32 sum(x)/M": data.sum(axis=1, dtype=np.float32) / m,
            "Kahan sum(x)/M": kahan(data) / m,
            "Sum2 (TwoSum) sum(x)/M": sum2(data) / m,
            "float64 sum, rounded (ATen's CPU kernel)": ref.astype(np.float32),
        }
        floor = FLOOR * np.sqrt(np.mean(ref * ref))
        for name, value in candidates.items():
            rel = np.abs(np.asarray(value, np.float64) - ref) / np.maximum(np.abs(ref), floor)
            worst[name] = max(worst.get(name, 0.0), float(rel.max()))
    for name, value in worst.items():
        print(f"{name:50s} {value / U:7.1f}u")


if __name__ == "__main__":
    main()
