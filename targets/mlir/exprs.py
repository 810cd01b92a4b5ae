"""A TIR expression as arith/math operations, on scalars or on whole tensors.

The arith and math dialects' elementwise ops take a scalar or a tensor with the same
spelling (``arith.addf %a, %b : f32`` / ``: tensor<?x?xf32>``), so one printer serves the
body of a ``linalg.generic`` (scalars) and a function of whole tensors (the named-op
lowering): ``Values`` says what a leaf (a load, a size, a constant) becomes and how a
type is spelled. Only TVM's expression kinds are named here, never an op.
"""
from __future__ import annotations

from opgen.targets.mlir.stages import LOADS, UnsupportedStage, kind
from opgen.targets.mlir.text import VARS, Body, bits, dtype_of, element_type, float_literal, is_float

FLOAT_BINARY = {"Add": "arith.addf", "Sub": "arith.subf", "Mul": "arith.mulf", "Div": "arith.divf",
                "Max": "arith.maximumf", "Min": "arith.minimumf"}
INT_BINARY = {"Add": "arith.addi", "Sub": "arith.subi", "Mul": "arith.muli", "Div": "arith.divsi",
              "FloorDiv": "arith.floordivsi", "FloorMod": "arith.remsi", "Mod": "arith.remsi",
              "Max": "arith.maxsi", "Min": "arith.minsi", "And": "arith.andi", "Or": "arith.ori"}
COMPARISONS = {"LT": ("olt", "slt"), "LE": ("ole", "sle"), "GT": ("ogt", "sgt"),
               "GE": ("oge", "sge"), "EQ": ("oeq", "eq"), "NE": ("une", "ne")}
# TIR intrinsics with a math-dialect twin (same name, same semantics on floats).
MATH_CALLS = {"tirx.exp": "math.exp", "tirx.exp2": "math.exp2", "tirx.log": "math.log", "tirx.log2": "math.log2",
              "tirx.sqrt": "math.sqrt", "tirx.rsqrt": "math.rsqrt", "tirx.tanh": "math.tanh",
              "tirx.fabs": "math.absf", "tirx.erf": "math.erf", "tirx.floor": "math.floor",
              "tirx.ceil": "math.ceil", "tirx.round": "math.roundeven", "tirx.nearbyint": "math.roundeven",
              "tirx.trunc": "math.trunc", "tirx.sin": "math.sin", "tirx.cos": "math.cos"}


class Values:
    """What the printer's leaves are: override per lowering. ``typed(element)`` is the
    type an expression of that element type has (a scalar type, or a tensor type)."""

    def typed(self, element: str) -> str:
        return element

    def load(self, node, body: Body) -> str:
        raise NotImplementedError

    def constant(self, literal: str, element: str, body: Body) -> str:
        return body.constant(literal, element)

    def size(self, var, body: Body) -> str:
        """A size variable's value as its TIR integer type (TVM sizes are int64)."""
        raise NotImplementedError

    def iterator(self, var, body: Body) -> str | None:
        """An iterator's value as an integer (an index computed in the expression), or
        None when ``var`` is no iterator of the stage."""
        return None


class ExprPrinter:
    def __init__(self, body: Body, values: Values):
        self.body, self.values = body, values

    def print(self, node) -> str:
        """The SSA value of ``node`` (of type ``values.typed(element_type(dtype_of(node))``)."""
        element = element_type(dtype_of(node))
        what = kind(node)
        if what in LOADS:
            return self.values.load(node, self.body)
        if what == "FloatImm":
            return self.values.constant(float_literal(float(node.value), element), element, self.body)
        if what == "IntImm":
            literal = ("true" if node.value else "false") if element == "i1" else str(int(node.value))
            return self.values.constant(literal, element, self.body)
        if what in VARS:
            value = self.values.iterator(node, self.body)
            return value if value is not None else self.values.size(node, self.body)
        if what == "Cast":
            return self.cast(self.print(node.value), element_type(dtype_of(node.value)), element)
        if what in COMPARISONS:
            return self.compare(node)
        if what == "Not":
            true = self.values.constant("true", "i1", self.body)
            return self.body.op(f"arith.xori {self.print(node.a)}, {true} : {self.values.typed('i1')}")
        if what == "Select":
            return self.select(node.condition, node.true_value, node.false_value, element)
        if what == "Call":
            return self.call(node, element)
        table = FLOAT_BINARY if is_float(element) else INT_BINARY
        if what in table:
            a, b = self.print(node.a), self.print(node.b)
            return self.body.op(f"{table[what]} {a}, {b} : {self.values.typed(element)}")
        raise UnsupportedStage(f"no MLIR lowering for {what}: {node}")

    def cast(self, value: str, source: str, target: str) -> str:
        """``value`` converted from element type ``source`` to ``target`` (floats round to
        nearest even, as TVM's casts do; bf16 <-> f16 go through f32)."""
        if source == target:
            return value
        t = self.values.typed
        if is_float(source) and is_float(target):
            if bits(source) == bits(target):   # bf16 <-> f16
                return self.cast(self.cast(value, source, "f32"), "f32", target)
            how = "arith.extf" if bits(target) > bits(source) else "arith.truncf"
            return self.body.op(f"{how} {value} : {t(source)} to {t(target)}")
        if is_float(target):
            how = "arith.uitofp" if source == "i1" else "arith.sitofp"
            return self.body.op(f"{how} {value} : {t(source)} to {t(target)}")
        if is_float(source):
            return self.body.op(f"arith.fptosi {value} : {t(source)} to {t(target)}")
        how = "arith.extsi" if bits(target) > bits(source) else "arith.trunci"
        return self.body.op(f"{how} {value} : {t(source)} to {t(target)}")

    def compare(self, node) -> str:
        element = element_type(dtype_of(node.a))
        float_pred, int_pred = COMPARISONS[kind(node)]
        a, b = self.print(node.a), self.print(node.b)
        if is_float(element):
            return self.body.op(f"arith.cmpf {float_pred}, {a}, {b} : {self.values.typed(element)}")
        return self.body.op(f"arith.cmpi {int_pred}, {a}, {b} : {self.values.typed(element)}")

    def select(self, condition, true_value, false_value, element: str) -> str:
        c, a, b = self.print(condition), self.print(true_value), self.print(false_value)
        t = self.values.typed
        return self.body.op(f"arith.select {c}, {a}, {b} : {t('i1')}, {t(element)}")

    def call(self, node, element: str) -> str:
        name = node.op.name
        t = self.values.typed(element)
        if name in MATH_CALLS and len(node.args) == 1:
            return self.body.op(f"{MATH_CALLS[name]} {self.print(node.args[0])} : {t}")
        if name == "tirx.pow" and len(node.args) == 2:
            return self.body.op(f"math.powf {self.print(node.args[0])}, {self.print(node.args[1])} : {t}")
        if name == "tirx.sigmoid" and len(node.args) == 1:   # math has none: 1 / (1 + exp(-x))
            x = self.print(node.args[0])
            one = self.values.constant(float_literal(1.0, element), element, self.body)
            e = self.body.op(f"math.exp {self.body.op(f'arith.negf {x} : {t}')} : {t}")
            return self.body.op(f"arith.divf {one}, {self.body.op(f'arith.addf {one}, {e} : {t}')} : {t}")
        if name in ("tirx.if_then_else", "prim.if_then_else") and len(node.args) == 3:   # TVM 0.27: prim.
            return self.select(*node.args, element)   # eager: both sides are read (arith.select)
        raise UnsupportedStage(f"no MLIR lowering for the call {name}")
