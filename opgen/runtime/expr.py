"""The expressions of a launch plan, evaluated without eval().

A plan read from disk is data someone could have edited: ``eval`` of its grid sizes would
run whatever Python they wrote (``__import__('os').system(...)``). So each expression is
parsed with ``ast`` and interpreted here, and anything outside a small whitelist is
refused when the plan is loaded, before anything runs: int and float constants, the
plan's own variable names, ``+ - * / // %``, unary ``-`` and ``not``, comparisons,
``and``/``or``, ``a if c else b``, and the calls ``min``, ``max``, ``int``, ``float`` and
``f32`` (rounding to float32, which the host code of a float32 scalar computes).
"""
from __future__ import annotations

import ast
import operator

import numpy as np

MAX_LENGTH = 4096        # characters: longer is not a launch size opgen writes


class PlanError(ValueError):
    """A launch plan (or an expression in it) that the runner refuses."""


def _f32(value: float) -> float:
    """``value`` rounded to float32 (overflow gives inf, as the float32 host code would)."""
    with np.errstate(over="ignore"):
        return float(np.float32(value))


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_COMPARE = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
            ast.Eq: operator.eq, ast.NotEq: operator.ne}
_CALLS = {"min": min, "max": max, "int": int, "float": float, "f32": _f32}
_ARITY = {"min": (2, 2), "max": (2, 2), "int": (1, 1), "float": (1, 1), "f32": (1, 1)}


def _check(node, names: frozenset) -> None:
    """Refuse ``node`` (PlanError) unless it and every node below it is whitelisted."""
    if isinstance(node, ast.Constant):
        if type(node.value) not in (int, float):
            raise PlanError(f"constant {node.value!r} is not a number")
    elif isinstance(node, ast.Name):
        if node.id not in names:
            raise PlanError(f"unknown name {node.id!r}")
    elif isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        _check(node.left, names), _check(node.right, names)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Not)):
        _check(node.operand, names)
    elif isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
        for child in (node.left, *node.comparators):
            _check(child, names)
    elif isinstance(node, ast.BoolOp):
        for child in node.values:
            _check(child, names)
    elif isinstance(node, ast.IfExp):
        _check(node.test, names), _check(node.body, names), _check(node.orelse, names)
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS \
            and not node.keywords:
        low, high = _ARITY[node.func.id]
        if not low <= len(node.args) <= high:
            raise PlanError(f"{node.func.id}() takes {low} argument(s), got {len(node.args)}")
        for child in node.args:
            _check(child, names)
    else:
        raise PlanError(f"{type(node).__name__} is not allowed ({ast.unparse(node)[:80]})")


def _eval(node, env: dict):
    """Interpret a checked node over ``env`` (name -> number)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return env[node.id]
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)](_eval(node.left, env), _eval(node.right, env))
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, env)
        return {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}[type(node.op)](value)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env)
        for op, right_node in zip(node.ops, node.comparators):
            right = _eval(right_node, env)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.BoolOp):
        stop = isinstance(node.op, ast.Or)
        value = None
        for child in node.values:
            value = _eval(child, env)
            if bool(value) == stop:
                return value
        return value
    if isinstance(node, ast.IfExp):
        return _eval(node.body, env) if _eval(node.test, env) else _eval(node.orelse, env)
    return _CALLS[node.func.id](*(_eval(a, env) for a in node.args))   # a checked Call


class Expr:
    """One plan expression: parsed and checked once (at load), evaluated per call."""

    def __init__(self, text, names) -> None:
        if isinstance(text, bool) or not isinstance(text, (str, int)):
            raise PlanError(f"expression {text!r} is not a string or an integer")
        self.text = str(text)
        if len(self.text) > MAX_LENGTH:
            raise PlanError(f"expression of {len(self.text)} characters (at most {MAX_LENGTH})")
        try:
            self.tree = ast.parse(self.text, mode="eval").body
        except (SyntaxError, ValueError, RecursionError, MemoryError) as err:
            raise PlanError(f"expression {self.text[:80]!r} does not parse: {err}") from None
        try:
            _check(self.tree, frozenset(names))
        except RecursionError:
            raise PlanError(f"expression {self.text[:80]!r} is nested too deeply") from None
        except PlanError as err:
            raise PlanError(f"expression {self.text[:80]!r} refused: {err}") from None

    def __call__(self, env: dict):
        """An int (a size, an index) or a float (a float scalar argument)."""
        try:
            value = _eval(self.tree, env)
        except (ArithmeticError, RecursionError) as err:
            raise PlanError(f"expression {self.text[:80]!r}: {type(err).__name__}: {err}") from None
        return value if isinstance(value, float) else int(value)

    def __repr__(self) -> str:
        return f"Expr({self.text!r})"
