"""How a CANN op's call (its input shapes and attributes) becomes its kernel's sizes.

One declarative description per op (``KernelView``, carried by ``CannOp.view``): which CANN
input the sizes are read from, which of its dims are multiplied into which kernel dim, which
attribute gives a count. ``kernel_sizes`` evaluates it here; the Ascend host
(targets/ascend/host_context.py) prints the same description as the C++ of the emitted
TilingFunc, so the host reads the user's shapes and attributes as the aclnn layer hands
them to the op, and both refuse the same calls with the same words. The expressions:

  Dim(i)            dim i of the tile input
  Prod(start, stop) the product of the tile input's dims [start, stop) (1 when empty)
  Attr(name)        an Int attribute of the op, by its CANN name
  Quot(a, b)        a / b, refused unless b > 0 divides a (GroupNorm's D = C / num_groups)
  Rank(input)       the rank of a CANN input (RmsNorm's gamma: its rank is the normalized dims)
  Numel(input)      the element count of a CANN input, of any rank (a counter summed whole)
  Axis(name)        an Int attribute read as an axis of the tile input (negative: from the end)
  Sub(a, b)         a - b
  RANK              the tile input's rank

What the views follow: ``grouped`` is what hicann/ops-nn's
norm/group_norm_grad/op_host/group_norm_grad_tiling.cpp (CheckInputShape) reads: N =
dy.GetDim(0), C = dy.GetDim(1), G = attrs->GetAttrPointer<int64_t>(0) (num_groups, the
OpDef's first attribute), HxW = the product of dims 2.. (its README: dy is 2-8-D (N, C, *)),
refused unless G divides C. That tiling also refuses empty sizes (N * G == 0, HxW == 0) and
checks mean/rstd/gamma against dy; opgen's kernels tile empty calls themselves, and the
other inputs' shapes are the aclnn layer's checks (opgen.ops.<op>.api), not repeated here.
``trailing`` is the aclnn documents' rule for RmsNorm(Grad), DeepNormGrad and
LayerNormGradV3 (gamma's shape is x's last dims: rows = the dims before, cols = the rest;
ops-nn's rms_norm_grad tiling was not read); ``from_axis`` LayerNormV3's begin_norm_axis;
``segments`` AdaLayerNormGrad's (B..., S, H) (the aclnn document's input: 2-8 dims, scale
per sample); ``channels`` BatchNorm's (N, C, ...) NCHW-family layouts (the channel-last formats, which
CANN reads from the tensor's storage format, are not described).
``canonical`` is the inverse the ascend-emu runner uses when it has only the kernel's sizes:
one user call (shapes and attributes) that the view reads back as exactly those sizes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field


class ViewError(ValueError):
    """A call the view refuses (the emitted TilingFunc returns GRAPH_FAILED with these words)."""


@dataclass(frozen=True)
class Dim:
    index: int


@dataclass(frozen=True)
class Prod:
    start: object
    stop: object


@dataclass(frozen=True)
class Attr:
    name: str


@dataclass(frozen=True)
class Quot:
    num: object
    den: object


@dataclass(frozen=True)
class Rank:
    input: str


@dataclass(frozen=True)
class Numel:
    input: str


@dataclass(frozen=True)
class Axis:
    name: str


@dataclass(frozen=True)
class Sub:
    a: object
    b: object


@dataclass(frozen=True)
class _TileRank:
    pass


RANK = _TileRank()


@dataclass(frozen=True)
class KernelView:
    """``tile``: the CANN input whose shape gives the sizes; ``sizes``: one expression per
    kernel dim of the tile tensor; ``ranks``: the tile ranks the aclnn document allows;
    ``canonical``: the user's tile shape as groups of kernel-dim indices multiplied (an
    empty group: a dim of 1); ``canonical_inputs``: other inputs' shapes the same way;
    ``canonical_attrs``: attribute -> the kernel dim giving it (int), or ("rank-minus", k):
    the canonical tile rank minus k; ``input_ranks``: (input, lo, hi) the other inputs whose
    rank the view reads, and the ranks the aclnn document allows them."""

    tile: str
    sizes: tuple
    ranks: tuple = (1, 8)
    canonical: tuple = ()
    canonical_inputs: tuple = ()          # ((input, groups), ...)
    canonical_attrs: tuple = ()           # ((attribute, kernel dim), ...)
    input_ranks: tuple = ()               # ((input, lo, hi), ...)
    note: str = field(default="", compare=False)

    def inputs(self) -> list[str]:
        """The CANN inputs whose shapes the view reads (the tile first)."""
        found = [self.tile]
        for expr in self.sizes:
            for node in walk(expr):
                if isinstance(node, (Rank, Numel)) and node.input not in found:
                    found.append(node.input)
        return found

    def attrs(self) -> list[str]:
        return list(dict.fromkeys(node.name for e in self.sizes for node in walk(e) if isinstance(node, (Attr, Axis))))

    def kernel_sizes(self, shapes: dict, attrs: dict) -> tuple:
        """The kernel's sizes of a call: ``shapes`` by CANN input name, ``attrs`` by CANN
        attribute name (ViewError: why the call is refused)."""
        tile = shapes.get(self.tile)
        if tile is None:
            raise ViewError(f"input {self.tile} is missing")
        lo, hi = self.ranks
        if not lo <= len(tile) <= hi:
            raise ViewError(f"input {self.tile} has rank {len(tile)}; expected {lo} to {hi}")
        for name, lo, hi in self.input_ranks:
            rank = len(shapes.get(name, ()))
            if not lo <= rank <= hi:
                raise ViewError(f"input {name} has rank {rank}; expected {lo} to {hi}")
        env = _Env(tuple(int(d) for d in tile), shapes, attrs)
        return tuple(env.value(e) for e in self.sizes)

    def user_call(self, sizes) -> tuple[dict, dict]:
        """(shapes, attrs) of one call this view reads as the kernel ``sizes``."""
        sizes = tuple(int(s) for s in sizes)
        def shape(groups):
            return tuple(math.prod(sizes[i] for i in g) for g in groups)
        shapes = {self.tile: shape(self.canonical)}
        shapes.update({name: shape(groups) for name, groups in self.canonical_inputs})
        attrs = {}
        for name, source in self.canonical_attrs:
            attrs[name] = len(self.canonical) - source[1] if isinstance(source, tuple) else sizes[source]
        return shapes, attrs

    def to_json(self) -> dict:
        return {"tile": self.tile, "sizes": [_encode(e) for e in self.sizes], "ranks": list(self.ranks),
                "canonical": [list(g) for g in self.canonical],
                "canonical_inputs": [[n, [list(g) for g in gs]] for n, gs in self.canonical_inputs],
                "canonical_attrs": [[n, list(s) if isinstance(s, tuple) else s] for n, s in self.canonical_attrs],
                "input_ranks": [list(r) for r in self.input_ranks],
                "note": self.note}

    @classmethod
    def from_json(cls, data: dict) -> "KernelView":
        return cls(data["tile"], tuple(_decode(e) for e in data["sizes"]), tuple(data["ranks"]),
                   tuple(tuple(g) for g in data["canonical"]),
                   tuple((n, tuple(tuple(g) for g in gs)) for n, gs in data["canonical_inputs"]),
                   tuple((n, tuple(s) if isinstance(s, list) else s) for n, s in data["canonical_attrs"]),
                   tuple(tuple(r) for r in data["input_ranks"]), data.get("note", ""))


def identity(tile: str, rank: int) -> KernelView:
    """The kernel's own view: the tile input given in the kernel's shape (an op without a
    CANN description, e.g. a toy op in a test)."""
    return KernelView(tile, tuple(Dim(i) for i in range(rank)), (rank, rank), tuple((i,) for i in range(rank)))


def grouped(tile: str, groups: str = "num_groups") -> KernelView:
    """GroupNorm's (N, G, D, HxW) from an (N, C, ...) tile: N = dim 0, G = the attribute,
    D = C / G, HxW = the product of dims 2.. (an (N, C) tile: HxW = 1)."""
    return KernelView(tile, (Dim(0), Attr(groups), Quot(Dim(1), Attr(groups)), Prod(2, RANK)), (2, 8),
                      canonical=((0,), (1, 2), (3,)), canonical_attrs=((groups, 1),),
                      note="NCHW / (N, C, HxW) / (N, C): N = dim 0, C = dim 1, HxW = dims 2.. multiplied")


def channels(tile: str) -> KernelView:
    """BatchNorm's (N, C, HW) from an (N, C, ...) tile: HW = the product of dims 2.."""
    return KernelView(tile, (Dim(0), Dim(1), Prod(2, RANK)), (2, 8), canonical=((0,), (1,), (2,)),
                      note="NC / NCL / NCHW / NCDHW: N = dim 0, C = dim 1, HW = dims 2.. multiplied")


def channels_and_count(tile: str, counter: str) -> KernelView:
    """``channels`` plus the element count of ``counter`` (any rank, summed whole by the
    kernel: SyncBatchNorm's per-rank counts) as a fourth size."""
    return KernelView(tile, (Dim(0), Dim(1), Prod(2, RANK), Numel(counter)), (2, 8), canonical=((0,), (1,), (2,)),
                      canonical_inputs=((counter, ((3,),)),),
                      note=f"NC / NCL / NCHW / NCDHW: N = dim 0, C = dim 1, HW = dims 2.. multiplied; K = {counter}'s "
                           "elements")


def trailing(tile: str, params: str = "gamma", ranks: tuple = (1, 8), params_ranks: tuple = (1, 8)) -> KernelView:
    """(rows, cols) from a tile whose last rank(``params``) dims are normalized: rows = the
    product of the dims before them, cols = the product of the rest. ``ranks`` and
    ``params_ranks``: the ranks the aclnn document allows the tile and ``params``."""
    split = Sub(RANK, Rank(params))
    return KernelView(tile, (Prod(0, split), Prod(split, RANK)), tuple(ranks), canonical=((0,), (1,)),
                      canonical_inputs=((params, ((1,),)),), input_ranks=((params, *params_ranks),),
                      note=f"ND: rows = dims before {params}'s rank multiplied, cols = the rest")


def segments(tile: str) -> KernelView:
    """(B, S, H) from a (B..., S, H) tile: B = the dims before the last two multiplied (1 for a
    2-d tile), S and H the last two (AdaLayerNorm's per-sample rows)."""
    before = Sub(RANK, 2)
    return KernelView(tile, (Prod(0, before), Prod(before, Sub(RANK, 1)), Prod(Sub(RANK, 1), RANK)), (2, 8),
                      canonical=((0,), (1,), (2,)),
                      note="ND: B = dims before the last two multiplied, S = the second last, H = the last")


def from_axis(tile: str, axis: str = "begin_norm_axis") -> KernelView:
    """(rows, cols) from a tile normalized from attribute ``axis`` on (negative: from the end)."""
    return KernelView(tile, (Prod(0, Axis(axis)), Prod(Axis(axis), RANK)), (1, 8), canonical=((0,), (1,)),
                      canonical_attrs=((axis, ("rank-minus", 1)),),
                      note=f"ND: rows = dims before {axis} multiplied, cols = the rest")


def walk(expr):
    yield expr
    for child in _children(expr):
        yield from walk(child)


def _children(expr) -> tuple:
    """The operands of Prod, Quot and Sub (their fields, in order); the leaves have none."""
    return tuple(vars(expr).values()) if isinstance(expr, (Prod, Quot, Sub)) else ()


class _Env:
    """One evaluation: the tile's dims, every input's shape and the attributes."""

    def __init__(self, tile: tuple, shapes: dict, attrs: dict):
        self.tile, self.shapes, self.attrs = tile, shapes, attrs

    def attr(self, name: str) -> int:
        value = self.attrs.get(name)
        if value is None or isinstance(value, bool):
            raise ViewError(f"attribute {name} is not set")
        return int(value)

    def value(self, e) -> int:
        if isinstance(e, int):
            return e
        if e is RANK:
            return len(self.tile)
        if isinstance(e, Dim):
            return self.tile[e.index]
        if isinstance(e, Attr):
            return self.attr(e.name)
        if isinstance(e, Rank):
            shape = self.shapes.get(e.input)
            if shape is None:
                raise ViewError(f"input {e.input} is missing")
            return len(shape)
        if isinstance(e, Numel):
            shape = self.shapes.get(e.input)
            if shape is None:
                raise ViewError(f"input {e.input} is missing")
            return math.prod(shape)
        if isinstance(e, Axis):
            axis = self.attr(e.name)
            rank = len(self.tile)
            if not -rank <= axis < rank:
                raise ViewError(f"attribute {e.name} = {axis} is not an axis of {rank}-dimensional input")
            return axis + rank if axis < 0 else axis
        if isinstance(e, Sub):
            return self.value(e.a) - self.value(e.b)
        if isinstance(e, Quot):
            num, den = self.value(e.num), self.value(e.den)
            if den <= 0 or num % den:
                raise ViewError(f"{num} is not divisible into {den} equal parts")
            return num // den
        if isinstance(e, Prod):
            start, stop = self.value(e.start), self.value(e.stop)
            if not 0 <= start <= stop <= len(self.tile):
                raise ViewError(f"dims [{start}, {stop}) are not dims of {len(self.tile)}-dimensional input")
            return math.prod(self.tile[start:stop])
        raise TypeError(f"not a view expression: {e!r}")


_KINDS = {"dim": Dim, "prod": Prod, "attr": Attr, "quot": Quot, "rank": Rank, "axis": Axis, "sub": Sub,
          "numel": Numel}


def _encode(e):
    if isinstance(e, int):
        return e
    if e is RANK:
        return ["tile-rank"]
    kind = next(k for k, cls in _KINDS.items() if isinstance(e, cls))
    return [kind, *(_encode(v) if not isinstance(v, str) else v for v in vars(e).values())]


def _decode(data):
    if isinstance(data, int):
        return data
    if data[0] == "tile-rank":
        return RANK
    return _KINDS[data[0]](*(v if isinstance(v, str) else _decode(v) for v in data[1:]))
