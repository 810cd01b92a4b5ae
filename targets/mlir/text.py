"""MLIR text shared by the printers: types, constants, and a function body under construction.

Both lowerings (``linalg.py`` for IREE, ``named.py`` for bishengir) print the same scalar
math and the same dynamic sizes; this module holds that part once. It prints text rather
than building MLIR through Python bindings: neither compiler's bindings are needed to
write a kernel, and the text is what ``opgen generate`` saves for a reader.
"""
from __future__ import annotations

import math

from opgen.targets.mlir.stages import UnsupportedStage, kind

VARS = ("Var", "SizeVar")
# Index arithmetic on non-negative sizes and positions (remsi is floormod there).
INDEX_ARITH = {"Add": "arith.addi", "Sub": "arith.subi", "Mul": "arith.muli",
               "FloorDiv": "arith.floordivsi", "FloorMod": "arith.remsi"}

ELEMENT_TYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64",
                 "int64": "i64", "int32": "i32", "int16": "i16", "int8": "i8", "bool": "i1"}


def element_type(dtype) -> str:
    name = str(dtype)
    if name not in ELEMENT_TYPES:
        raise UnsupportedStage(f"no MLIR element type for {name}")
    return ELEMENT_TYPES[name]


def dtype_of(node) -> str:
    """A PrimExpr's dtype (TVM 0.27 names the field ``ty``)."""
    return str(node.dtype if hasattr(node, "dtype") else node.ty)


def is_float(mlir_type: str) -> bool:
    return mlir_type in ("f16", "bf16", "f32", "f64")


def bits(mlir_type: str) -> int:
    return 1 if mlir_type == "i1" else int(mlir_type.lstrip("bfi"))


def tensor_type(shape, element: str) -> str:
    """``tensor<?x8xf32>``: constant extents are static, symbolic ones dynamic."""
    dims = [str(int(e.value)) if kind(e) == "IntImm" else "?" for e in shape]
    return f"tensor<{'x'.join(dims + [element])}>"


_NON_FINITE_BITS = {   # (inf, -inf, nan) bit patterns: MLIR spells these in hex only
    "f32": (0x7F800000, 0xFF800000, 0x7FC00000), "f16": (0x7C00, 0xFC00, 0x7E00),
    "bf16": (0x7F80, 0xFF80, 0x7FC0), "f64": (0x7FF0000000000000, 0xFFF0000000000000, 0x7FF8000000000000)}


def float_literal(value: float, mlir_type: str) -> str:
    """A float constant's text: decimal with an exponent (exact for f64, rounded by the
    parser to narrower types, as TVM's FloatImm was), hex for inf and nan."""
    if math.isfinite(value):
        return f"{value:.17e}"
    inf, ninf, nan = _NON_FINITE_BITS[mlir_type]
    pattern = nan if math.isnan(value) else inf if value > 0 else ninf
    return f"0x{pattern:X}"


class Body:
    """Lines of one region under construction, with fresh SSA names and shared constants.

    ``index(expr)`` gives the ``index`` value of a size expression over the kernel's size
    variables (bound with ``bind_size``), printed once per function.
    """

    def __init__(self, indent: str = "  ", counter: list | None = None, sizes: dict | None = None):
        self.lines: list[str] = []
        self.indent = indent
        self._counter = [0] if counter is None else counter   # shared with nested regions
        self._constants: dict = {}
        self.sizes: dict = {} if sizes is None else sizes      # size Var name -> its index SSA

    def region(self) -> "Body":
        """The body of a nested region: its own lines and constants, this function's SSA
        names (they must not repeat within the function) and sizes (captured from above)."""
        return Body(self.indent + "    ", self._counter, self.sizes)

    def fresh(self, hint: str = "v") -> str:
        self._counter[0] += 1
        return f"%{hint}{self._counter[0]}"

    def emit(self, text: str) -> None:
        self.lines.append(self.indent + text)

    def op(self, text: str, hint: str = "v") -> str:
        """Print ``%new = text`` and return %new."""
        name = self.fresh(hint)
        self.emit(f"{name} = {text}")
        return name

    def constant(self, literal: str, mlir_type: str) -> str:
        key = (literal, mlir_type)
        if key not in self._constants:
            self._constants[key] = self.op(f"arith.constant {literal} : {mlir_type}", "c")
        return self._constants[key]

    def index_constant(self, value: int) -> str:
        return self.constant(str(int(value)), "index")

    def bind_size(self, name: str, value: str) -> None:
        self.sizes[name] = value

    def index(self, expr) -> str:
        """The ``index`` SSA value of a size expression (constants, size Vars, + - * // %)."""
        if kind(expr) == "IntImm":
            return self.index_constant(expr.value)
        if kind(expr) in VARS:
            if expr.name not in self.sizes:
                raise UnsupportedStage(f"size {expr.name} is not bound")
            return self.sizes[expr.name]
        if kind(expr) in INDEX_ARITH:
            a, b = self.index(expr.a), self.index(expr.b)
            return self.op(f"{INDEX_ARITH[kind(expr)]} {a}, {b} : index")
        raise UnsupportedStage(f"no index lowering for the size expression {expr}")

    def dynamic_sizes(self, shape) -> list[str]:
        """The index values of ``shape``'s dynamic extents (``tensor.empty``'s operands)."""
        return [self.index(e) for e in shape if kind(e) != "IntImm"]

