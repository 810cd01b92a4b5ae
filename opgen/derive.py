"""Symbolic proofs that each op's TE computes the true gradient of its forward.

Why: the kernels are compiled from TE, so the proof must read that very TE, not a retyped
copy of the formula. ``Translator`` walks an op's TE graph (``SPEC.compute(combo)``) and turns
every output element into a sympy expression for small concrete sizes: symbolic extents
(rows/cols, N/G/D/HW) become integers, reductions become explicit finite sums and every input
element becomes a Symbol (``dy_0_1``). Any node it does not know raises ``UnsupportedNode``:
an unknown node must stop the proof, never be guessed.

The truth is built from first principles: the forward in sympy, L = sum(dy * y), and sympy's
derivative of L with respect to every x, gamma (and beta) element. What is symbolic: dy, x,
gamma, the kernel's rstd input and eps, all free; the sizes are concrete. Two bridges join the
forward's statistics to the kernel's inputs:
- rstd: the forward's (var + eps)^(-1/2) is replaced, as an exact subtree, by the kernel's
  positive rstd symbol, so (var + eps)^(-3/2) becomes rstd^3 (eps must then be gone: checked).
- mean (GroupNorm): the kernel's mean input is bound to the forward's mean of x. The other
  direction is unsound: the true gradient uses sum(x - mean) = 0, true only for the real mean.
Then ``expand(kernel - truth)`` must be 0 for every output element: a polynomial identity,
for every value of rstd (stronger than needed; a kernel that relied on rstd^-2 = var + eps
would need that relation added before comparing).

Outside the proof: float rounding. Casts (to float32/float16/bfloat16) translate to identity
and float constants to the exact rational of their stored value; accuracy is the numeric
tests' job, algebra is this module's.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache
from operator import itemgetter

import sympy
from tvm import ir, te, tirx

from opgen.ops import get_op

POSITIVE_INPUTS = frozenset({"rstd"})  # 1/sqrt(...) > 0: lets (rstd^-2)^(-1/2) fold to rstd
EPS = sympy.Symbol("eps", positive=True)


class UnsupportedNode(TypeError):
    """The TE uses a node the translator cannot turn into exact algebra."""


def make_symbol(name: str, idx: tuple[int, ...]) -> sympy.Symbol:
    """The Symbol of one input element, shared by the translator and the forward models."""
    label = "_".join([name, *map(str, idx)])
    return sympy.Symbol(label, positive=True) if name in POSITIVE_INPUTS else sympy.Symbol(label, real=True)


def _key(node) -> int:
    """Identity of a TVM node (Python wrappers are recreated, == builds an expression)."""
    return node.__chandle__()


def _is_float(node) -> bool:
    return str(node.ty).startswith(("float", "bfloat"))


class Translator:
    """TE tensor element -> sympy expression, for one assignment of the symbolic extents."""

    _BINARY = {tirx.Add: lambda a, b: a + b, tirx.Sub: lambda a, b: a - b,
               tirx.Mul: lambda a, b: a * b}

    def __init__(self, sizes: dict[str, int]):
        self.sizes = dict(sizes)
        self._cache: dict[tuple, sympy.Expr] = {}

    def shape(self, tensor: te.Tensor) -> tuple[int, ...]:
        return tuple(self.integer(s, {}) for s in tensor.shape)

    def element(self, tensor: te.Tensor, idx: tuple[int, ...]) -> sympy.Expr:
        """tensor[idx]: a Symbol for a placeholder, the translated body for a compute."""
        idx = tuple(int(i) for i in idx)
        shape = self.shape(tensor)
        if len(idx) != len(shape) or any(not 0 <= i < n for i, n in zip(idx, shape)):
            raise IndexError(f"{tensor.name}{list(idx)} outside shape {list(shape)}")
        key = (_key(tensor.op), tensor.value_index, idx)
        if key not in self._cache:
            self._cache[key] = self._element(tensor, idx)
        return self._cache[key]

    def _element(self, tensor, idx):
        op = tensor.op
        if isinstance(op, te.PlaceholderOp):
            return make_symbol(tensor.name, idx)
        if isinstance(op, te.ComputeOp):
            env = {_key(iv.var): sympy.Integer(i) for iv, i in zip(op.axis, idx)}
            return self.expr(op.body[tensor.value_index], env)
        raise UnsupportedNode(f"tensor {tensor.name}: operation {type(op).__name__} is not translated")

    def integer(self, node, env) -> int:
        value = self.expr(node, env)
        if not value.is_Integer:
            raise UnsupportedNode(f"index/extent {node} did not evaluate to an integer: {value}")
        return int(value)

    def expr(self, node, env) -> sympy.Expr:
        """Dispatch on the node class; anything not listed here is an error, never a guess."""
        kind = type(node)
        if kind in self._BINARY:
            return self._BINARY[kind](self.expr(node.a, env), self.expr(node.b, env))
        if isinstance(node, tirx.Div):
            if not _is_float(node):
                raise UnsupportedNode(f"integer Div (truncating) in {node}")
            return self.expr(node.a, env) / self.expr(node.b, env)
        if isinstance(node, tirx.IntImm):
            return sympy.Integer(node.value)
        if isinstance(node, tirx.FloatImm):
            return sympy.Rational(node.value)  # the exact stored double
        if isinstance(node, tirx.Cast):
            return self._cast(node, env)
        if isinstance(node, ir.Var):
            return self._var(node, env)
        if isinstance(node, tirx.Reduce):
            return self._reduce(node, env)
        if isinstance(node, ir.Call) and isinstance(node.op, ir.Op) and node.op.name == "te.tensor_load":
            tensor, *indices = node.args
            return self.element(tensor, tuple(self.integer(i, env) for i in indices))
        raise UnsupportedNode(f"no sympy translation for {kind.__module__}.{kind.__name__}: {node}")

    def _cast(self, node, env):
        """Casts are identity: rounding to the stored dtype is outside the algebraic proof."""
        if _is_float(node.value) and not _is_float(node):
            raise UnsupportedNode(f"float -> {node.ty} cast truncates: {node}")
        return self.expr(node.value, env)

    def _var(self, node, env):
        if _key(node) in env:
            return env[_key(node)]
        if node.name in self.sizes:
            return sympy.Integer(self.sizes[node.name])
        raise UnsupportedNode(f"free variable {node.name!r}: give its size (known: {sorted(self.sizes)})")

    def _reduce(self, node, env):
        """te.sum over its axes, expanded into an explicit finite sum."""
        _check_sum_combiner(node)
        lows = [self.integer(iv.dom.min, env) for iv in node.axis]
        ranges = [range(lo, lo + self.integer(iv.dom.extent, env)) for lo, iv in zip(lows, node.axis)]
        terms = []
        for point in itertools.product(*ranges):
            inner = {**env, **{_key(iv.var): sympy.Integer(p) for iv, p in zip(node.axis, point)}}
            terms.append(self.expr(node.source[0], inner))
        return sympy.Add(*terms)


def _check_sum_combiner(node) -> None:
    """Only an unconditional x + y reducer with identity 0 is a sum; refuse anything else."""
    comb = node.combiner
    result, ident = comb.result, comb.identity_element
    is_add = (len(result) == 1 and isinstance(result[0], tirx.Add)
              and {_key(result[0].a), _key(result[0].b)} == {_key(comb.lhs[0]), _key(comb.rhs[0])})
    is_zero = len(ident) == 1 and isinstance(ident[0], (tirx.FloatImm, tirx.IntImm)) and ident[0].value == 0
    plain = isinstance(node.condition, tirx.IntImm) and node.condition.value == 1 and len(node.init) == 0
    if not (is_add and is_zero and plain and len(node.source) == 1):
        raise UnsupportedNode(f"reduction is not a plain sum: {comb}")


# ----------------------------------------------------------------------------- forward models

@dataclass(frozen=True)
class Truth:
    """True gradients per output element, and the bindings of kernel inputs to the forward."""

    outputs: dict  # output name -> {index tuple: sympy expr}
    bind: dict     # kernel input Symbol -> forward expression (GroupNorm's mean)


def _grad(loss, wrt: dict, stat: dict) -> dict:
    """d loss / d each symbol of ``wrt``, with each forward (var+eps) subtree -> rstd^-2."""
    out = {idx: sympy.diff(loss, s).xreplace(stat) for idx, s in wrt.items()}
    if any(EPS in g.free_symbols for g in out.values()):
        raise RuntimeError("the forward's (var + eps) survived substitution by rstd: cannot compare")
    return out


def _grid(*dims):
    return list(itertools.product(*(range(d) for d in dims)))


def _symbols(name: str, *dims) -> dict:
    return {i: make_symbol(name, i) for i in _grid(*dims)}


_channel, _group = itemgetter(slice(1, 3)), itemgetter(slice(0, 2))  # (N,G,D,HW) -> (G,D), (N,G)


@lru_cache(maxsize=None)
def rms_norm_truth(rows: int, cols: int) -> Truth:
    """y = x * rstd(x) * gamma, rstd(x) = 1/sqrt(mean_c(x^2) + eps), per row."""
    x, dy, gamma = _symbols("x", rows, cols), _symbols("dy", rows, cols), _symbols("gamma", cols)
    base = {r: sympy.Add(*(x[r, c] ** 2 for c in range(cols))) / cols + EPS for r in range(rows)}
    loss = sympy.Add(*(dy[r, c] * x[r, c] * base[r] ** sympy.Rational(-1, 2) * gamma[c,]
                       for r, c in _grid(rows, cols)))
    stat = {base[r]: make_symbol("rstd", (r,)) ** -2 for r in range(rows)}
    return Truth({"dx": _grad(loss, x, stat), "dgamma": _grad(loss, gamma, stat)}, {})


@lru_cache(maxsize=None)
def group_norm_truth(n: int, g: int, d: int, hw: int) -> Truth:
    """y = (x - mean) * rstd * gamma + beta with mean/var over the D*HW elements of a group."""
    x, dy = _symbols("x", n, g, d, hw), _symbols("dy", n, g, d, hw)
    gamma, beta = _symbols("gamma", g, d), _symbols("beta", g, d)
    members = {ng: [(*ng, c, h) for c, h in _grid(d, hw)] for ng in _grid(n, g)}
    mean = {ng: sympy.Add(*(x[i] for i in m)) / (d * hw) for ng, m in members.items()}
    base = {ng: sympy.Add(*((x[i] - mean[ng]) ** 2 for i in m)) / (d * hw) + EPS
            for ng, m in members.items()}
    loss = sympy.Add(*(dy[i] * ((x[i] - mean[_group(i)]) * base[_group(i)] ** sympy.Rational(-1, 2)
                                * gamma[_channel(i)] + beta[_channel(i)]) for i in x))
    stat = {base[ng]: make_symbol("rstd", ng) ** -2 for ng in members}
    outputs = {"dx": _grad(loss, x, stat), "dgamma": _grad(loss, gamma, stat),
               "dbeta": _grad(loss, beta, stat)}
    return Truth(outputs, {make_symbol("mean", ng): mean[ng] for ng in members})


# ----------------------------------------------------------------------------- the proof

# op -> (names of its symbolic extents, forward model, default cases: small, and one with G=1)
MODELS = {
    "rms_norm_grad": (("rows", "cols"), rms_norm_truth, ((2, 3), (1, 4))),
    "group_norm_backward": (("N", "G", "D", "HW"), group_norm_truth, ((2, 2, 2, 2), (2, 1, 2, 2))),
}


@dataclass(frozen=True)
class CaseResult:
    """One concrete size: how many output elements were compared, which differ, and by what."""

    sizes: dict
    checked: int
    mismatches: tuple[str, ...]  # e.g. "rms_norm_grad_dx[0, 1]"
    residual: str = ""           # expand(kernel - truth) of the first mismatch, for diagnosis

    @property
    def ok(self) -> bool:
        return not self.mismatches


@dataclass(frozen=True)
class ProofReport:
    """``prove``'s answer; ``symbolic`` says what the proof covers and what it leaves out."""

    op: str
    combo: str
    cases: tuple[CaseResult, ...]
    symbolic: str = ("dy, x, gamma, rstd (positive), eps symbolic; mean = the forward's; "
                     "sizes concrete; casts = identity (rounding not proven)")

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.cases)

    def summary(self) -> str:
        lines = [f"{self.op} [{self.combo}]: {'PROVEN' if self.ok else 'MISMATCH'} ({self.symbolic})"]
        for c in self.cases:
            shown = ", ".join(c.mismatches[:4]) + (" ..." if len(c.mismatches) > 4 else "")
            lines.append(f"  {c.sizes}: {c.checked} elements, " + (
                "all equal" if c.ok else f"{len(c.mismatches)} differ: {shown}; first: {c.residual[:160]}"))
        return "\n".join(lines)


def _compare(tensor, expected: dict, translator: Translator, bind: dict) -> dict[str, sympy.Expr]:
    """Every element of ``tensor`` against ``expected``; returns the nonzero residuals."""
    if len(expected) != math.prod(translator.shape(tensor)):
        raise ValueError(f"{tensor.name}: truth covers {len(expected)} of {translator.shape(tensor)}")
    bad = {}
    for idx, want in expected.items():
        residual = sympy.expand(translator.element(tensor, idx).xreplace(bind) - want)
        if residual != 0:
            bad[f"{tensor.name}{list(idx)}"] = residual
    return bad


def prove(op_name: str, combo_tag: str = "f32-f32", cases=None) -> ProofReport:
    """Translate the op's TE for each case and compare every output with sympy's gradient."""
    spec = get_op(op_name)
    tensors = spec.compute(spec.combo(combo_tag))
    by_name = dict(zip(spec.inputs + spec.outputs, tensors))
    results = []
    names, model, default_cases = MODELS[op_name]
    for dims in cases or default_cases:
        sizes, truth = dict(zip(names, dims)), model(*dims)
        translator = Translator(sizes)
        bad, checked = {}, 0
        for out in spec.outputs:
            bad.update(_compare(by_name[out], truth.outputs[out], translator, truth.bind))
            checked += len(truth.outputs[out])
        first = str(next(iter(bad.values()))) if bad else ""
        results.append(CaseResult(sizes, checked, tuple(bad), first))
    return ProofReport(op_name, combo_tag, tuple(results))


# ----------------------------------------------------------------------------- seed formulas

@dataclass(frozen=True)
class SeedCheck:
    """One formula as a seed prints it (or a named reading of it) against the true gradient."""

    seed: str
    op: str
    output: str
    formula: str
    matches: bool
    detail: str


def _equal(candidate: dict, truth: Truth, output: str) -> bool:
    want = truth.outputs[output]
    return all(sympy.expand(candidate[i].xreplace(truth.bind) - want[i]) == 0 for i in want)


def _rms_seed_checks(rows: int = 2, cols: int = 3) -> list[SeedCheck]:
    """Seed 000 (aclnnRmsNormGrad), with 1/Rms(x) read as the kernel's rstd input."""
    truth = rms_norm_truth(rows, cols)
    x, dy, g = _symbols("x", rows, cols), _symbols("dy", rows, cols), _symbols("gamma", cols)
    inv_rms = _symbols("rstd", rows)
    mean_y = {r: sympy.Add(*(dy[r, c] * g[c,] * x[r, c] * inv_rms[r,] for c in range(cols))) / cols
              for r in range(rows)}
    dx = {(r, c): (dy[r, c] * g[c,] - inv_rms[r,] * x[r, c] * mean_y[r]) * inv_rms[r,] for r, c in x}
    dg = {(c,): sympy.Add(*(inv_rms[r,] * x[r, c] * dy[r, c] for r in range(rows))) for c in range(cols)}
    note = "the rstd tensor is 1/Rms(x) (its table says 'corresponds to Rms(x)': the reciprocal is meant)"
    return [
        SeedCheck("000", "rms_norm_grad", "dx",
                  "dx_i = (dy_i*g_i - x_i/Rms * Mean(y)) / Rms, Mean(y) = mean(dy*g*x/Rms)",
                  _equal(dx, truth, "dx"), note),
        SeedCheck("000", "rms_norm_grad", "dgamma", "dg_i = x_i/Rms * dy_i, summed over rows",
                  _equal(dg, truth, "dgamma"), "the printed per-row term; dgamma sums it over rows"),
    ]


def _sum_by(values: dict, key) -> dict:
    """Sum ``values`` over the elements sharing ``key(i)``, broadcast back to every element."""
    parts: dict = {}
    for i, v in values.items():
        parts.setdefault(key(i), []).append(v)
    totals = {k: sympy.Add(*vs) for k, vs in parts.items()}
    return {i: totals[key(i)] for i in values}


def _gn_seed_terms(n, g, d, hw) -> dict:
    """The seed's symbols over x's (N, G, D, HW) grid; per-channel sums are its gradBeta/GammaOut."""
    big = _grid(n, g, d, hw)
    t = {name: {i: make_symbol(name, key(i)) for i in big}
         for name, key in (("dy", tuple), ("x", tuple), ("mean", _group), ("rstd", _group),
                           ("gamma", _channel))}
    t["xhat"] = {i: (t["x"][i] - t["mean"][i]) * t["rstd"][i] for i in big}
    t["dbeta"] = _sum_by(t["dy"], _channel)
    t["dgamma"] = _sum_by({i: t["dy"][i] * t["xhat"][i] for i in big}, _channel)
    return t


def _gn_grad_input_readings(n, g, d, hw) -> list[tuple[str, dict, str]]:
    """The printed gradInput, then readings of it with one more correction each."""
    t = _gn_seed_terms(n, g, d, hw)
    dy, xhat, mean, rstd, gam = t["dy"], t["xhat"], t["mean"], t["rstd"], t["gamma"]
    bracket_n = {i: dy[i] - (t["dbeta"][i] + xhat[i] * t["dgamma"][i]) / n for i in dy}
    s1 = _sum_by(dy, _group)
    s2 = _sum_by({i: dy[i] * xhat[i] for i in dy}, _group)
    w1 = _sum_by({i: gam[i] * dy[i] for i in dy}, _group)
    w2 = _sum_by({i: gam[i] * dy[i] * xhat[i] for i in dy}, _group)
    m = d * hw
    return [
        ("gradInput = mean*rstd*gamma*[gradOut - (gradBetaOut + x_hat*gradGammaOut)/N]  (as printed)",
         {i: mean[i] * rstd[i] * gam[i] * bracket_n[i] for i in dy},
         "as printed, with a stray factor 'mean'"),
        ("rstd*gamma*[gradOut - (gradBetaOut + x_hat*gradGammaOut)/N]  (without 'mean')",
         {i: rstd[i] * gam[i] * bracket_n[i] for i in dy},
         "gradBetaOut/gradGammaOut are per-channel sums over the batch and N is the batch size; "
         "the gradient needs per-(n, group) sums over M = D*HW elements"),
        ("rstd*gamma*[gradOut - (sum_grp gradOut + x_hat*sum_grp gradOut*x_hat)/M]",
         {i: rstd[i] * gam[i] * (dy[i] - (s1[i] + xhat[i] * s2[i]) / m) for i in dy},
         "per-group sums over M, but gamma outside the sums (LayerNorm's form)"),
        ("rstd*[gamma*gradOut - (sum_grp gamma*gradOut + x_hat*sum_grp gamma*gradOut*x_hat)/M]",
         {i: rstd[i] * (gam[i] * dy[i] - (w1[i] + xhat[i] * w2[i]) / m) for i in dy},
         "the op file's formula"),
    ]


def _gn_seed_checks(n: int = 2, g: int = 2, d: int = 2, hw: int = 2) -> list[SeedCheck]:
    """Seed 002 (aclnnGroupNormBackward): gradBeta/GammaOut as printed, gradInput in readings.

    A reading that differs is also tried with gamma constant within each group, which tells a
    gamma-placement error apart from a wrong structure.
    """
    truth = group_norm_truth(n, g, d, hw)
    t = _gn_seed_terms(n, g, d, hw)
    per_channel = {name: {_channel(i): v for i, v in t[name].items()} for name in ("dbeta", "dgamma")}
    checks = [
        SeedCheck("002", "group_norm_backward", "dbeta", "gradBetaOut = sum gradOut",
                  _equal(per_channel["dbeta"], truth, "dbeta"), "summed over batch and HxW per channel"),
        SeedCheck("002", "group_norm_backward", "dgamma", "gradGammaOut = sum gradOut * x_hat",
                  _equal(per_channel["dgamma"], truth, "dgamma"), "summed over batch and HxW per channel"),
    ]
    flat = {make_symbol("gamma", c): make_symbol("gamma", (c[0], 0)) for c in _grid(g, d)}
    flat_truth = Truth({"dx": {i: e.xreplace(flat) for i, e in truth.outputs["dx"].items()}}, truth.bind)
    for formula, candidate, note in _gn_grad_input_readings(n, g, d, hw):
        ok = _equal(candidate, truth, "dx")
        if not ok:
            flat_ok = _equal({i: e.xreplace(flat) for i, e in candidate.items()}, flat_truth, "dx")
            note += ("; it holds only when gamma is constant within each group" if flat_ok
                     else "; wrong even with gamma constant within each group")
        checks.append(SeedCheck("002", "group_norm_backward", "dx", formula, ok, note))
    return checks


def check_seed_formulas() -> list[SeedCheck]:
    """Every formula the seeds print, judged against sympy's derivative of the forward."""
    return _rms_seed_checks() + _gn_seed_checks()


def main() -> int:
    """``python -m opgen.derive``: both proofs and the seed-formula report; 1 if a proof fails."""
    reports = [prove(name) for name in MODELS]
    for report in reports:
        print(report.summary())
    print("\nseed formulas vs the true gradient:")
    for c in check_seed_formulas():
        print(f"  [{c.seed}] {c.op}.{c.output}: {'matches' if c.matches else 'DIFFERS'}  {c.formula}\n"
              f"        {c.detail}")
    return 0 if all(r.ok for r in reports) else 1


if __name__ == "__main__":
    raise SystemExit(main())
