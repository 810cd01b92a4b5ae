"""The algebra under opgen's proofs: TE -> sympy, and the pieces of a forward model.

``Translator`` walks an op's TE graph (``SPEC.compute(combo)``) and turns every output
element into a sympy expression for small concrete sizes: symbolic extents become integers,
reductions become explicit finite sums and every input element becomes a Symbol
(``dy_0_1``). Any node it does not know raises ``UnsupportedNode``: an unknown node must stop
the proof, never be guessed. Casts translate to identity and float constants to the exact
rational of their stored value: rounding is the numeric tests' job, algebra is this one's.
A quantizing stage (round to an integer, saturate, cast to an integer dtype) translates the
same way: the rounding call is identity, the saturation Max/Min, and the float -> integer
cast is allowed only of a value so rounded (any other truncates, and stops the proof). A
condition on data (a mode flag read from a (1,) input) becomes a Piecewise, which the
truth's bindings of that input decide.

The rest is what an op's forward model (its package's ``model.py``) is written with:
symbols over a grid, sympy's gradient of L = sum(dy * y) with each (var + eps) subtree
replaced by the kernel's rstd, ``Truth`` (per-element true gradients and the bindings of
kernel inputs to the forward), ``ProofModel`` (what ``opgen.derive`` needs of an op) and
``SeedCheck`` (a formula as a document prints it, judged against the truth). Nothing here
names an op; opgen.derive runs the proofs over the registered ops.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable

import sympy
from tvm import ir, te, tirx

# What a forward op's proof covers (ProofModel.covers): its outputs themselves, no derivative.
FORWARD_COVERS = ("x, gamma, beta, eps symbolic; every output (statistics included) equal to the forward's "
                  "own formula; sizes concrete; casts = identity (rounding not proven)")
POSITIVE_INPUTS = frozenset({"rstd"})  # 1/sqrt(...) > 0: lets (rstd^-2)^(-1/2) fold to rstd
EPS = sympy.Symbol("eps", positive=True)


# Float intrinsics with an exact sympy meaning (te.exp, te.sigmoid, te.rsqrt, te.sqrt).
MATH_CALLS = {
    "tirx.exp": sympy.exp,
    "tirx.sigmoid": lambda a: 1 / (1 + sympy.exp(-a)),
    "tirx.rsqrt": lambda a: 1 / sympy.sqrt(a),
    "tirx.sqrt": sympy.sqrt,
}
# Rounding to an integer (te.nearbyint, te.round): identity, as a cast is; what it rounds is proved.
ROUNDING_CALLS = frozenset({"tirx.nearbyint", "tirx.round"})


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
               tirx.Mul: lambda a, b: a * b, tirx.Max: sympy.Max, tirx.Min: sympy.Min}

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
        if isinstance(node, ir.Call) and isinstance(node.op, ir.Op) and node.op.name in MATH_CALLS:
            (arg,) = node.args
            return MATH_CALLS[node.op.name](self.expr(arg, env))
        if isinstance(node, ir.Call) and isinstance(node.op, ir.Op) and node.op.name in ROUNDING_CALLS:
            (arg,) = node.args
            return self.expr(arg, env)
        if isinstance(node, ir.Call) and isinstance(node.op, ir.Op) and node.op.name.endswith("if_then_else"):
            return self._if_then_else(node, env)
        raise UnsupportedNode(f"no sympy translation for {kind.__module__}.{kind.__name__}: {node}")

    _COMPARE = {tirx.GT: sympy.Gt, tirx.GE: sympy.Ge, tirx.LT: sympy.Lt,
                tirx.LE: sympy.Le, tirx.EQ: sympy.Eq, tirx.NE: sympy.Ne}

    def _if_then_else(self, node, env):
        """``if_then_else(cond, a, b)`` whose condition compares integers the concrete sizes
        decide (a guard such as ``N * HW > 0`` around a load that an empty tensor would put
        out of bounds): the branch it takes. A condition on data (a mode flag input) is a
        Piecewise of both branches; the truth's bindings of that input decide it."""
        cond, then, other = node.args
        compare = self._COMPARE.get(type(cond))
        if compare is None:
            raise UnsupportedNode(f"if_then_else condition {cond} is no comparison")
        relation = compare(self.expr(cond.a, env), self.expr(cond.b, env))
        if relation in (sympy.true, sympy.false):
            return self.expr(then if relation == sympy.true else other, env)
        return sympy.Piecewise((self.expr(then, env), relation), (self.expr(other, env), True))

    def _cast(self, node, env):
        """Casts are identity: rounding to the stored dtype is outside the algebraic proof. A
        float -> integer cast is allowed only of a value rounded to an integer first (a
        quantization: ``_rounded``); any other truncates."""
        if _is_float(node.value) and not _is_float(node) and not _rounded(node.value):
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


def _rounded(node) -> bool:
    """Whether ``node`` is a rounding call, or a Max/Min (saturation) of rounded values and
    constants: a value whose cast to an integer dtype is exact."""
    if isinstance(node, (tirx.Max, tirx.Min)):
        return all(isinstance(arm, (tirx.FloatImm, tirx.IntImm)) or _rounded(arm) for arm in (node.a, node.b))
    return isinstance(node, ir.Call) and isinstance(node.op, ir.Op) and node.op.name in ROUNDING_CALLS


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


@dataclass(frozen=True)
class Truth:
    """True gradients per output element, and the bindings of kernel inputs to the forward."""

    outputs: dict  # output name -> {index tuple: sympy expr}
    bind: dict     # kernel input Symbol -> forward expression (GroupNorm's mean)


def grad(loss, wrt: dict, stat: dict) -> dict:
    """d loss / d each symbol of ``wrt``, with each forward (var+eps) subtree -> rstd^-2."""
    out = {idx: sympy.diff(loss, s).xreplace(stat) for idx, s in wrt.items()}
    if any(EPS in g.free_symbols for g in out.values()):
        raise RuntimeError("the forward's (var + eps) survived substitution by rstd: cannot compare")
    return out


def grid(*dims):
    return list(itertools.product(*(range(d) for d in dims)))


def symbols(name: str, *dims) -> dict:
    return {i: make_symbol(name, i) for i in grid(*dims)}




def sum_by(values: dict, key) -> dict:
    """Sum ``values`` over the elements sharing ``key(i)``, broadcast back to every element."""
    parts: dict = {}
    for i, v in values.items():
        parts.setdefault(key(i), []).append(v)
    totals = {k: sympy.Add(*vs) for k, vs in parts.items()}
    return {i: totals[key(i)] for i in values}


@dataclass(frozen=True)
class SeedCheck:
    """One formula as a document prints it (or a named reading of it) against the true gradient."""

    seed: str
    op: str
    output: str
    formula: str
    matches: bool
    detail: str


def equal(candidate: dict, truth: Truth, output: str) -> bool:
    """Whether ``candidate`` (index -> expr) is the true gradient ``output`` element by element."""
    want = truth.outputs[output]
    return all(sympy.expand(candidate[i].xreplace(truth.bind) - want[i]) == 0 for i in want)


@dataclass(frozen=True)
class ProofModel:
    """What opgen.derive needs of an op: the names of its TE's symbolic extents, the forward
    model (sizes -> Truth), the sizes proved by default (small ones, and a degenerate one),
    and the checks of the formulas its documents print (no arguments -> [SeedCheck]).
    ``covers``: what the proof takes as symbolic, for its report (None: a backward's
    default wording, opgen.derive.ProofReport). ``combo``: the tag of the dtype combo
    proved (the all-float32 one). An extent that names no TE variable (a mode the truth
    binds an input to, e.g. RmsNormGradQuant's ``div_mode``) is passed to ``truth`` and
    ignored by the translator."""

    extents: tuple
    truth: Callable
    cases: tuple
    seed_checks: Callable | None = None
    covers: str | None = None
    combo: str = "f32-f32"
