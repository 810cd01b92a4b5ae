"""The CANN face of an emitted kernel: its op type, GM arguments in CANN's order, attributes.

CANN calls a kernel with its OpDef's inputs, then its outputs, then workspace and tiling, in
the order the OpDef declares them. The op package states that order and CANN's names
(``OpSpec.cann``, carried into the scheduled function as the ``opgen.cann`` attribute); the
emitter prints the kernel entry, the OpDef, the TilingContext tiling and InferShape in that
order and with those names, and the runner passes its buffers the same way. A function
without the attribute (a toy op defined in a test) gets a face of its own names in TIR order.

Tensors opgen keeps in GM that CANN carries as attributes (an epsilon, a scale) follow CANN's
inputs as extra kernel arguments: the emitted OpDef declares them as the attributes they are
in CANN, so that one difference from CANN's kernel signature is stated, not hidden.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from opgen.targets.ascend.exprs import EmitError

CANN_ATTR = "opgen.cann"
GE_DTYPE = {"float32": "ge::DT_FLOAT", "float16": "ge::DT_FLOAT16", "bfloat16": "ge::DT_BF16",
            "int32": "ge::DT_INT32", "int8": "ge::DT_INT8"}
GE_CODE = {"float32": 0, "float16": 1, "bfloat16": 27, "int32": 3, "int8": 2}   # ge::DataType values (graph/types.h)


@dataclass
class Param:
    """One GM argument of the kernel entry: CANN's name, the kernel tensor, its dtype."""

    name: str
    tensor: str
    dtype: str
    is_output: bool = False


@dataclass
class CannFace:
    op_type: str
    inputs: list                     # Param, CANN's inputs in CANN's order
    extra: list                      # Param, GM tensors CANN carries as attributes
    outputs: list                    # Param, CANN's outputs in CANN's order
    attrs: list = field(default_factory=list)   # {"name", "kind", "default", "tensor"}
    source: str = ""

    round_modes: dict = field(default_factory=dict)   # output dtype -> RoundMode (CANN's kernels)
    view: dict | None = None         # opgen.kernel_view.KernelView as JSON: user call -> kernel sizes

    def round_mode(self, dtype: str) -> str:
        """The RoundMode CANN's kernel casts a float32 result to ``dtype`` with (CAST_RINT,
        round to nearest even as TVM's reference rounds, where the op package says nothing)."""
        return self.round_modes.get(dtype, "CAST_RINT")

    @property
    def entry(self) -> list:
        """Every GM argument of the kernel entry, in CANN's call order."""
        return self.inputs + self.extra + self.outputs

    def index_of(self, tensor: str) -> int:
        """The TilingContext input index of kernel tensor ``tensor``."""
        for i, p in enumerate(self.inputs + self.extra):
            if p.tensor == tensor:
                return i
        raise EmitError(f"{self.op_type}: tensor {tensor} is not an input of the kernel entry")


def camel(symbol: str) -> str:
    return "".join(part.capitalize() for part in symbol.split("_"))


def written_tensors(k) -> set:
    """The kernel tensors the kernel writes (its outputs), from the pattern's operand lists."""
    groups = [getattr(k.ops, f, ()) for f in ("tiles_out", "col_sums", "col_outs", "chan_sums", "chan_outs", "seg_outs",
                                               "batch_sums")]
    written = {n for group in groups for n, _ in group}
    return {n for n, _, _ in k.args if n in written}


def face_of(func, k) -> CannFace:
    """The CANN face of kernel ``k`` scheduled from ``func`` (see the module docstring)."""
    dtypes = {n: d for n, d, _ in k.args}
    outs = written_tensors(k)
    text = func.attrs.get(CANN_ATTR) if func.attrs is not None else None
    if text is None:
        inputs = [Param(n, n, d) for n, d, _ in k.args if n not in outs]
        outputs = [Param(n, n, d, True) for n, d, _ in k.args if n in outs]
        return CannFace(camel(k.symbol), inputs, [], outputs)
    spec = json.loads(str(text))
    # The op's tensor names -> the function's parameter names (the same order; TE names outputs
    # by their stages).
    param = dict(zip(spec.get("tensors", ()), [b.name for b in func.params]))
    spec["inputs"] = [(n, param.get(t, t)) for n, t in spec["inputs"]]
    spec["outputs"] = [(n, param.get(t, t)) for n, t in spec["outputs"]]
    spec["attrs"] = [{**a, "tensor": param.get(a["tensor"], a["tensor"]) if a.get("tensor") else None}
                     for a in spec["attrs"]]
    known = set(dtypes)
    inputs = [Param(n, t, dtypes.get(t, "float32")) for n, t in spec["inputs"]]
    outputs = [Param(n, t, dtypes[t], True) for n, t in spec["outputs"] if t in known]
    missing = [t for _, t in spec["outputs"] if t not in known]
    if missing:
        raise EmitError(f"{spec['name']}: CANN output(s) {missing} are not tensors of {k.symbol}")
    named = {p.tensor for p in inputs + outputs}
    extra = [Param(a["name"], a["tensor"], dtypes[a["tensor"]]) for a in spec["attrs"]
             if a.get("tensor") and a["tensor"] in known]
    named |= {p.tensor for p in extra}
    stray = sorted(known - named)
    if stray:
        raise EmitError(f"{spec['name']}: kernel tensor(s) {stray} of {k.symbol} have no CANN name")
    return CannFace(spec["name"], inputs, extra, outputs, spec["attrs"], spec.get("source", ""),
                    dict(spec.get("round_modes", {})), spec.get("view"))


def entry_lines(k, cls: str, arg_prefix: str = "") -> list[str]:
    """The kernel entry CANN calls: its GM arguments in the OpDef's order (``k.face``), the
    registered default tiling struct, the user workspace behind CANN's system workspace.
    ``Run`` holds the body so that an op-level project (targets/ascend/op_project.py) can
    include several dtype combos' files, with OPGEN_OP_PROJECT defined, under one entry."""
    face = k.face
    by_tensor = {p.tensor: f"{arg_prefix}{p.name}" for p in face.entry}
    params = ", ".join(f"GM_ADDR {arg_prefix}{p.name}" for p in face.entry)
    names = ", ".join(f"{arg_prefix}{p.name}" for p in face.entry)
    init = ", ".join(by_tensor[n] for n, _, _ in k.args)
    return [f"__aicore__ inline void Run({params}, GM_ADDR workspace, GM_ADDR tiling) {{",
            "#ifndef OPGEN_OP_PROJECT   // an op project registers each key's struct at its entry",
            f"    REGISTER_TILING_DEFAULT({k.struct});", "#endif",
            f"    GET_TILING_DATA_WITH_STRUCT({k.struct}, t, tiling);", f"    {cls} op;",
            "    // The user workspace sits behind CANN's system workspace (the host reserves both).",
            f"    op.Init({init}, GetUserWorkspace(workspace), t);", "    op.Process();", "}", "",
            "#ifndef OPGEN_OP_PROJECT",
            f"extern \"C\" __global__ __aicore__ void {k.symbol}({params}, GM_ADDR workspace, GM_ADDR tiling) {{",
            f"    Run({names}, workspace, tiling);", "}", "",
            "#ifdef OPGEN_EMU", f"OPGEN_EMU_EXPORT({k.symbol}, {len(face.entry) + 2})", "#endif",
            "#endif  // OPGEN_OP_PROJECT", ""]
