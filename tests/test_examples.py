"""The two seed C programs, ported to examples/, run as scripts; every printed number is
checked against the float64 reference of the same data."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from opgen.verify import compare
from opgen.ops.group_norm_backward import reference as gn_ref
from opgen.ops.rms_norm_grad import reference as rms_ref

ROOT = Path(__file__).resolve().parents[1]
LINE = re.compile(r"^(\w+)\[(\d+)\] is: (-?\d+\.\d{6})$")


def _run(script: str) -> dict[str, list[float]]:
    out = subprocess.run([sys.executable, str(ROOT / "examples" / script)], capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    blocks: list[tuple[str, list[float]]] = []
    for line in out.stdout.splitlines():
        m = LINE.match(line)
        assert m, f"unexpected output line {line!r}"
        name, index, value = m.group(1), int(m.group(2)), float(m.group(3))
        if index == 0:
            blocks.append((name, []))
        assert blocks[-1][0] == name and len(blocks[-1][1]) == index
        blocks[-1][1].append(value)
    return blocks


def _check(name, printed, ref):
    ref = np.asarray(ref, np.float64).reshape(-1)
    got = np.asarray(printed)
    assert got.shape == ref.shape, name
    # %f prints 6 decimals: half a unit of the last one on top of the float32 tolerance
    c = compare(name, got, np.round(ref, 6), "float32", "float32")
    assert c.ratio <= 1.0 or np.max(np.abs(got - ref)) <= 5e-6, (name, c)


def test_rms_norm_grad_example():
    blocks = _run("rms_norm_grad.py")
    assert [n for n, _ in blocks] == ["result", "result"]
    data = np.arange(1, 33, dtype=np.float64).reshape(2, 1, 16)
    dx, dgamma = rms_ref.rms_norm_grad(data, data, np.array([1.0, 2.0]), np.arange(1, 17, dtype=np.float64))
    _check("dx", blocks[0][1], dx)
    _check("dgamma", blocks[1][1], dgamma)


def test_group_norm_backward_example():
    blocks = _run("group_norm_backward.py")
    assert [n for n, _ in blocks] == ["gradInputResultData", "gradGammaOutResultData", "gradBetaOutResultData"]
    data = np.arange(1, 25, dtype=np.float64).reshape(2, 3, 4)
    outs = gn_ref.group_norm_backward(data, data, np.array([6.5, 18.5]), np.array([0.2896827] * 2),
                                         np.ones(3), 1)
    for (name, printed), ref in zip(blocks, outs):
        _check(name, printed, ref)
