"""RmsNormGradQuant's truth for ``opgen prove``: RmsNorm's forward in sympy (RmsNormGrad's
model, opgen.ops.rms_norm_grad.model), its gradients, and dx quantized as the document
prints it, saturated: Min(Max(dx / scales_x + offset_x, -128), 127) with divMode, dx *
scales_x otherwise. The rounding itself is identity in the proof (opgen.symbolic), as every
cast is: the numeric tests check it (round half to even), the proof checks what is rounded.

The proof's third "extent" ``div_mode`` names no TE variable: it is the value the truth binds
the kernel's div_mode input to, so each case proves one branch of the kernel's select.
"""
from __future__ import annotations

from functools import lru_cache

import sympy

from opgen.ops.rms_norm_grad.model import rms_norm_truth
from opgen.symbolic import ProofModel, SeedCheck, Truth, equal, make_symbol, symbols

COVERS = ("dy, x, gamma, rstd (positive), eps, scales_x, offset_x symbolic; dgamma and dx's value before "
          "rounding equal to the gradient, quantized by the document's formula and saturated to int8; "
          "div_mode bound per case; sizes concrete; rounding = identity (round half to even not proven)")


def quantized(dx: dict, div_mode: int) -> dict:
    """The document's dx_quant before rounding, saturated to int8's range."""
    scale, offset = make_symbol("scales_x", (0,)), make_symbol("offset_x", (0,))
    return {i: sympy.Min(sympy.Max((v / scale if div_mode else v * scale) + offset, -128), 127)
            for i, v in dx.items()}


@lru_cache(maxsize=None)
def truth(rows: int, cols: int, div_mode: int) -> Truth:
    grads = rms_norm_truth(rows, cols)
    outputs = {"dx": quantized(grads.outputs["dx"], div_mode), "dgamma": grads.outputs["dgamma"]}
    return Truth(outputs, {**grads.bind, make_symbol("div_mode", (0,)): sympy.Integer(div_mode)})


def seed_checks(rows: int = 2, cols: int = 3) -> list[SeedCheck]:
    """The document's dx formula (as RmsNormGrad's) then its quantization, per divMode."""
    x, dy, g = symbols("x", rows, cols), symbols("dy", rows, cols), symbols("gamma", cols)
    inv_rms = symbols("rstd", rows)
    mean_y = {r: sympy.Add(*(dy[r, c] * g[c,] * x[r, c] * inv_rms[r,] for c in range(cols))) / cols
              for r in range(rows)}
    dx = {(r, c): (dy[r, c] * g[c,] - inv_rms[r,] * x[r, c] * mean_y[r]) * inv_rms[r,] for r, c in x}
    note = "1/Rms(x) read as the rstd input; round() and int8 saturation as opgen's kernel applies them"
    return [SeedCheck("doc", "rms_norm_grad_quant", "dx",
                      f"dx_quant = round(dx {'/' if div else '*'} scales_x + offset_x) (divMode={bool(div)})",
                      equal(quantized(dx, div), truth(rows, cols, div), "dx"), note) for div in (1, 0)]


MODEL = ProofModel(("rows", "cols", "div_mode"), truth, ((2, 3, 1), (2, 3, 0), (1, 4, 1)), seed_checks, COVERS,
                   combo="f32-f32-f32-i8")
