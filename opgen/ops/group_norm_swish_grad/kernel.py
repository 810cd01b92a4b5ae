"""aclnnGroupNormSwishGrad: the math in TE and what a kernel sees: tensors, dtype combos, problem sizes.

The formulas and stage names are in the package docstring (opgen.ops.group_norm_swish_grad).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from opgen.dtypes import BFLOAT16, FLOAT16, FLOAT32, numpy_dtype
from opgen.lazy import te
from opgen.ops.spec import DtypeCombo, ProblemBase, as_float32

# swishScale is an attribute (a double in the C API, float32 in CANN's op definition): the
# kernel is built once per dtype combo over symbolic sizes, so it reaches the kernel as data,
# a float32 input the aclnn layer fills from the attribute (ApiSpec.attribute_inputs). It is
# shaped (N, G), one copy per (n, g) task, not (1,): a per-task value is what every target's
# group pattern already reads (mean, rstd), so the AscendC emitter holds it in a scalar
# register like them, where a (1,) tensor has no home. Last, so that inputs[0] is the data
# tensor the tools read the compute dtype from.
INPUTS = ("dy", "mean", "rstd", "x", "gamma", "beta", "swish_scale")
OUTPUTS = ("dx", "dgamma", "dbeta")
STAGE = "group_norm_swish_grad"
EPS = 1e-5              # the eps random_inputs makes mean/rstd with (aclnnGroupNormSwish's default)


def _combo(dtype: str) -> DtypeCombo:
    """One column of the op definition: every tensor in ``dtype`` (swish_scale is float32)."""
    dtypes = {name: dtype for name in INPUTS + OUTPUTS}
    dtypes["swish_scale"] = FLOAT32
    return DtypeCombo(tuple(dtypes.items()), key_tensors=("dy", "mean"))


# group_norm_swish_grad_def.cpp l.21-74: three columns, one dtype for all nine tensors.
F32_F32 = _combo(FLOAT32)
F16_F16 = _combo(FLOAT16)
BF16_BF16 = _combo(BFLOAT16)
COMBOS = (F32_F32, F16_F16, BF16_BF16)
PRODUCTS = {                       # def l.80-93; Atlas inference and training do not offer the op
    "Ascend950": COMBOS,
    "AtlasA3": COMBOS,
    "AtlasA2": COMBOS,
}


def _rounded(acc: te.Tensor, dtype: str, name: str) -> te.Tensor:
    if dtype == FLOAT32:
        return acc
    return te.compute(acc.shape, lambda *i: acc(*i).astype(dtype), name=name)


def _channel_sum(name: str, n, g, d, body):
    """Reduction over the leading (batch) axis: one deterministic column sum per channel."""
    j = te.reduce_axis((0, n), name="j")
    return te.compute((g, d), lambda gi, di: te.sum(body(j, gi, di), axis=j), name=name)


def _prologue(dy, mean, rstd, x, gamma, beta, scale):
    """The elementwise stages before the group pattern: y (the forward's GroupNorm output,
    recomputed from the inputs) and dy_eff = dy * d(y * sigmoid(s*y))/dy.

    dy_eff is written (1 + z*(1 - sig)) * (dy * sig), z = s*y, sig = sigmoid(z): evaluated
    left first, the AscendC emitter needs two float32 tile temporaries for it (its budget),
    where dy * sig * (...) needs three."""
    f32 = as_float32
    shape = x.shape
    y = te.compute(shape, lambda a, b, c, i: (f32(x[a, b, c, i]) - f32(mean[a, b])) * f32(rstd[a, b])
                   * f32(gamma[b, c]) + f32(beta[b, c]), name=f"{STAGE}_y")

    def dy_eff(a, b, c, i):
        z = scale[a, b] * y[a, b, c, i]
        sig = te.sigmoid(z)
        return (1.0 + z * (1.0 - sig)) * (f32(dy[a, b, c, i]) * sig)
    return te.compute(shape, dy_eff, name=f"{STAGE}_dy_eff")


def _group_scalars(ds, db, mean, rstd, gamma, n, g, d, hw):
    """Per-(n, g) scalars: dx = rstd*gamma*dy_eff + c2*x + c3 (GroupNorm's backward of dy_eff)."""
    f32 = as_float32
    e = te.reduce_axis((0, d), name="e")
    sum_ds = te.compute((n, g), lambda a, b: te.sum(ds[a, b, e] * f32(gamma[b, e]), axis=e), name=f"{STAGE}_sum_ds")
    e2 = te.reduce_axis((0, d), name="e")
    sum_db = te.compute((n, g), lambda a, b: te.sum(db[a, b, e2] * f32(gamma[b, e2]), axis=e2),
                        name=f"{STAGE}_sum_db")
    inv_m = 1.0 / (d * hw).astype("float32")
    c2 = te.compute(
        (n, g),
        lambda a, b: (sum_db[a, b] * f32(mean[a, b]) - sum_ds[a, b]) * f32(rstd[a, b])
        * f32(rstd[a, b]) * f32(rstd[a, b]) * inv_m,
        name=f"{STAGE}_c2",
    )
    c3 = te.compute((n, g), lambda a, b: -c2[a, b] * f32(mean[a, b]) - sum_db[a, b] * f32(rstd[a, b]) * inv_m,
                    name=f"{STAGE}_c3")
    return c2, c3


def compute(combo: DtypeCombo) -> list[te.Tensor]:
    """TE over symbolic (N, G, D, HW); returns dy, mean, rstd, x, gamma, beta, swish_scale,
    dx, dgamma, dbeta."""
    n, g, d, hw = (te.var(v, "int64") for v in ("N", "G", "D", "HW"))
    big, task, chan = (n, g, d, hw), (n, g), (g, d)
    dy = te.placeholder(big, combo["dy"], name="dy")
    mean = te.placeholder(task, combo["mean"], name="mean")
    rstd = te.placeholder(task, combo["rstd"], name="rstd")
    x = te.placeholder(big, combo["x"], name="x")
    gamma = te.placeholder(chan, combo["gamma"], name="gamma")
    beta = te.placeholder(chan, combo["beta"], name="beta")
    scale = te.placeholder(task, combo["swish_scale"], name="swish_scale")
    f32 = as_float32

    dy_eff = _prologue(dy, mean, rstd, x, gamma, beta, scale)
    k = te.reduce_axis((0, hw), name="k")
    ds = te.compute((n, g, d), lambda a, b, c: te.sum(dy_eff[a, b, c, k] * f32(x[a, b, c, k]), axis=k),
                    name=f"{STAGE}_ds")
    k2 = te.reduce_axis((0, hw), name="k")
    db = te.compute((n, g, d), lambda a, b, c: te.sum(dy_eff[a, b, c, k2], axis=k2), name=f"{STAGE}_db")
    c2, c3 = _group_scalars(ds, db, mean, rstd, gamma, n, g, d, hw)
    dx = te.compute(
        big,
        lambda a, b, c, i: (f32(rstd[a, b]) * f32(gamma[b, c]) * dy_eff[a, b, c, i]
                            + c2[a, b] * f32(x[a, b, c, i]) + c3[a, b]).astype(combo["dx"]),
        name=f"{STAGE}_dx",
    )
    dgamma_acc = _channel_sum(f"{STAGE}_dgamma_acc", n, g, d,
                              lambda j, b, c: (ds[j, b, c] - db[j, b, c] * f32(mean[j, b])) * f32(rstd[j, b]))
    dbeta_acc = _channel_sum(f"{STAGE}_dbeta_acc", n, g, d, lambda j, b, c: db[j, b, c])
    dgamma = _rounded(dgamma_acc, combo["dgamma"], f"{STAGE}_dgamma")
    dbeta = _rounded(dbeta_acc, combo["dbeta"], f"{STAGE}_dbeta")
    return [dy, mean, rstd, x, gamma, beta, scale, dx, dgamma, dbeta]


_FLAGS = {"1": True, "true": True, "0": False, "false": False}


@dataclass(frozen=True)
class Problem(ProblemBase):
    """One call: x's shape (N, C, spatial...) and the aclnn attributes under their aclnn names.

    Spelling (every ``--shape``): ``X,G[,S[,DGAMMA,DBETA[,FORMAT]]]``: x's dims joined by
    'x', numGroups, swishScale, the two IsRequire flags (1/0) and dataFormatOptional, e.g.
    ``2x320x32x32,32`` (swishScale 1.0), ``2x64x941,8,0.5``, ``4x8,2,1.0,1,0``."""

    x_shape: tuple[int, ...]
    numGroups: int
    swishScale: float = 1.0
    dgammaIsRequire: bool = True
    dbetaIsRequire: bool = True
    dataFormatOptional: str | None = None

    @property
    def N(self) -> int:
        return self.x_shape[0]

    @property
    def C(self) -> int:
        return self.x_shape[1]

    @property
    def HxW(self) -> int:
        """The spatial elements per channel (1 for a 2-D x)."""
        return math.prod(self.x_shape[2:])

    @property
    def D(self) -> int:
        """Channels per group."""
        return self.C // self.numGroups

    @classmethod
    def parse(cls, text: str) -> "Problem":
        """``2x320x32x32,32`` or ``2x64x941,8,0.5,1,0,NCHW`` (ValueError: what is wrong)."""
        parts = [p.strip() for p in str(text).strip().strip("()").split(",")]
        if not 2 <= len(parts) <= 6 or len(parts) == 4 or not all(parts):
            raise ValueError(f"cannot read {text!r} as Problem: expected X,G[,S[,DGAMMA,DBETA[,FORMAT]]], e.g. "
                             f"2x320x32x32,32 or 2x64x941,8,0.5,1,0")
        try:
            shape = tuple(int(d) for d in parts[0].lower().split("x"))
            groups = int(parts[1])
            scale = float(parts[2]) if len(parts) > 2 else 1.0
            flags = tuple(_FLAGS[p.lower()] for p in parts[3:5])
        except (ValueError, KeyError):
            raise ValueError(f"cannot read {text!r} as Problem: x's dims are integers joined by 'x', numGroups an "
                             f"integer, swishScale a number, the IsRequire flags 1/0 or true/false") from None
        return cls(shape, groups, scale, *flags, *(parts[5:]))

    def label(self) -> str:
        """The spelling ``parse`` reads back, without the defaults at the end."""
        parts = ["x".join(map(str, self.x_shape)), str(self.numGroups), repr(float(self.swishScale)),
                 str(int(self.dgammaIsRequire)), str(int(self.dbetaIsRequire)), self.dataFormatOptional]
        if parts[5] is None:
            parts.pop()
            if parts[3:] == ["1", "1"]:
                del parts[3:]
                if self.swishScale == 1.0:
                    parts.pop()
        return ",".join(parts)

    def __str__(self) -> str:
        return f"x{list(self.x_shape)} G={self.numGroups} s={self.swishScale}"


def with_scale(problem: Problem, scale: float) -> Problem:
    """The same sizes with another swishScale."""
    return dataclasses.replace(problem, swishScale=float(scale))


def scale_array(problem: Problem, shape=None) -> np.ndarray:
    """swishScale as the kernel reads it: float32 (CANN's attribute is a Float, def l.77; a
    double beyond float32's range becomes inf, as a C cast), one copy per (n, g) task."""
    with np.errstate(over="ignore"):
        value = np.float32(problem.swishScale)
    return np.full((problem.N, problem.numGroups) if shape is None else shape, value, np.float32)


def statistics(x, groups: int, eps: float = EPS):
    """(mean, rstd) of x (N, C, ...) per (n, group), in float64, as the forward saves them;
    zeros/ones where a group has no elements."""
    x = np.asarray(x, np.float64)
    n = x.shape[0]
    xg = x.reshape(n, groups, -1) if x.size else np.zeros((n, groups, 0))
    if xg.shape[2] == 0:
        return np.zeros((n, groups)), np.ones((n, groups))
    return xg.mean(axis=2), 1.0 / np.sqrt(xg.var(axis=2) + eps)


def random_inputs(problem: Problem, combo: DtypeCombo, rng: np.random.Generator) -> dict:
    """Inputs in the user's shapes; mean/rstd are the true statistics of the rounded x (the
    forward's, eps 1e-5), rounded to their dtype, as aclnnGroupNormSwish saves them."""
    x = (rng.standard_normal(problem.x_shape) * 2.0 + 0.5).astype(numpy_dtype(combo["x"]))
    dy = rng.standard_normal(problem.x_shape).astype(numpy_dtype(combo["dy"]))
    gamma = rng.uniform(0.5, 1.5, problem.C).astype(numpy_dtype(combo["gamma"]))
    beta = rng.uniform(-0.5, 0.5, problem.C).astype(numpy_dtype(combo["beta"]))
    mean, rstd = statistics(x, problem.numGroups)
    stat = numpy_dtype(combo["mean"])
    return {"dy": dy, "mean": mean.astype(stat), "rstd": rstd.astype(stat), "x": x, "gamma": gamma, "beta": beta,
            "swish_scale": scale_array(problem)}


def kernel_shapes(problem: Problem) -> dict:
    """The kernel's (N, G, D, HW) / (N, G) / (G, D) shape of each tensor."""
    g = problem.numGroups
    big, task, chan = (problem.N, g, problem.D, problem.HxW), (problem.N, g), (g, problem.D)
    return {"dy": big, "mean": task, "rstd": task, "x": big, "gamma": chan, "beta": chan, "swish_scale": task,
            "dx": big, "dgamma": chan, "dbeta": chan}


def output_shapes(problem: Problem) -> dict:
    """The outputs a caller allocates: dx like x, dgamma and dbeta like gamma (C,)."""
    return {"dx": problem.x_shape, "dgamma": (problem.C,), "dbeta": (problem.C,)}


def kernel_args(problem: Problem, arrays: dict) -> dict:
    """View user-shaped arrays in the kernel's shapes; swish_scale comes from the problem
    when the arrays do not carry it (a golden dump, a caller's own inputs)."""
    shapes = kernel_shapes(problem)
    arrays = {"swish_scale": scale_array(problem), **arrays}
    return {name: np.reshape(a, shapes[name]) for name, a in arrays.items()}
