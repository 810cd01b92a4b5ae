"""aclnnBatchNormBackward: the checks its rules are made of, in the op_api's order, and the
vocabulary they share (which tensors a call asks for, formats read by rank, the channel axis).

Sources (ops-nn, commit e5c3fa9327ea; the digest docs/specs/aclnnBatchNormBackward.md cites
them line by line): ``api`` = norm/batch_norm_grad_v3/op_host/op_api/aclnn_batch_norm_backward.cpp.
Every check returns None or what is wrong, naming the parameter, what was expected and what
was given. Each check after the null check of gradOut/input sees only calls with elements:
an empty input or gradOut returns success before any other check (``api`` l.798-802).
"""
from __future__ import annotations

from opgen import acl
from opgen.apispec import first, shape_str

F32 = "float32"
SUPPORTED = {"AtlasTraining": ("float32", "float16")}          # GetDtypeSupportList l.104-112
DEFAULT_SUPPORTED = ("float32", "float16", "bfloat16")
OUTPUTS = ("gradInput", "gradWeight", "gradBias")
SMALL = ("weight", "runningMean", "runningVar", "saveMean", "saveInvstd")
CHANNEL_LAST = ("NHWC", "NDHWC")
_BY_RANK = {2: "NC", 3: "NCL", 4: "NCHW", 5: "NCDHW"}   # how CANN's ST harness tags tensors by rank
REGBASE = "Ascend950"


def supported(call) -> tuple:
    return SUPPORTED.get(call.product, DEFAULT_SUPPORTED)


def is_empty(call) -> bool:
    """Whether input or gradOut has no elements: CANN then returns success at once."""
    return call["input"].size == 0 or call["gradOut"].size == 0


def with_elements(check):
    """``check`` for calls with elements; an empty call passes every rule after the nulls."""
    def guarded(call):
        return None if is_empty(call) else check(call)
    guarded.__doc__ = check.__doc__
    return guarded


def mask_bit(call, bit: int) -> bool:
    mask = call["outputMask"]
    return mask is not None and bit < len(mask) and bool(mask[bit])


def wanted(call, name: str) -> bool:
    return name not in OUTPUTS or mask_bit(call, OUTPUTS.index(name))


def format_of(arg) -> str:
    """A tensor's format as CANN reads it: an ND tag (every numpy array and torch tensor, and
    aclCreateTensor(..., ACL_FORMAT_ND)) is read by rank, as CANN's ST harness tags tensors:
    2-D NC, 3-D NCL, 4-D NCHW, 5-D NCDHW, 6-8-D ND (reconciliation B8)."""
    return _BY_RANK.get(arg.ndim, "ND") if arg.format == "ND" else arg.format


def channel_axis(call) -> int:
    """GetDimC (l.291-301): the last axis of an NHWC/NDHWC input on the 950, else axis 1."""
    x = call["input"]
    return x.ndim - 1 if call.product == REGBASE and x.format in CHANNEL_LAST else 1


def channels(call) -> int:
    return call["input"].shape[channel_axis(call)]


# ---- nulls and the mask: CheckInputNotNull, CheckMaskNotNull (l.68-102, mapped to 161001 at l.366)

def check_mask_present(call) -> str | None:
    mask = call["outputMask"]
    if mask is None:
        return "outputMask is a null pointer; expected 3 bools (gradInput, gradWeight, gradBias)"
    if len(mask) < 1:
        return "outputMask has 0 elements; expected 3 (gradInput, gradWeight, gradBias)"
    return None


def check_mask_size_950(call) -> str | None:
    n = len(call["outputMask"])
    return None if n == 3 else f"outputMask has {n} elements; expected 3 (gradInput, gradWeight, gradBias)"


def check_mask_size_short(call) -> str | None:
    n = len(call["outputMask"])
    return None if n >= 3 else (f"outputMask has {n} elements; expected 3 (gradInput, gradWeight, gradBias) on "
                                f"{call.product} (more are accepted there, the first 3 used)")


def masked_null(bit: int):
    name = OUTPUTS[bit]

    def check(call) -> str | None:
        if mask_bit(call, bit) and call[name] is None:
            return f"outputMask[{bit}] is true but {name} is a null pointer"
        return None
    return check


# ---- dtypes: CheckDtypeValid, CheckGradDtypeValid, CheckOtherDtypeValid, RegbaseCheckDtypeSame

def _dtype(call, name: str, allowed, why: str) -> str | None:
    got = call[name].dtype
    return None if got in allowed else f"{name} has dtype {got}; expected {' or '.join(allowed)}{why}"


def check_data_dtypes(call) -> str | None:
    """gradOut and input in the product's support list, input == gradOut (l.114-122)."""
    where = f" on {call.product}"
    return first([_dtype(call, "gradOut", supported(call), where), _dtype(call, "input", supported(call), where),
                  _dtype(call, "input", (call["gradOut"].dtype,), " (the same data type as gradOut)")])


def check_output_dtypes(call) -> str | None:
    """Each output asked for in the support list (l.124-139)."""
    return first(_dtype(call, n, supported(call), f" on {call.product}") for n in OUTPUTS
                 if wanted(call, n) and call[n] is not None)


def check_small_dtypes(call) -> str | None:
    """Each non-null weight/runningMean/runningVar/saveMean/saveInvstd in the support list (l.141-161)."""
    return first(_dtype(call, n, supported(call), f" on {call.product}") for n in SMALL if call[n] is not None)


def _same_or_float(call, name: str, ref: str) -> str | None:
    """CheckDtypeMatchReferenceOrFloat (l.303-318): true when either is null."""
    if call[name] is None or call[ref] is None:
        return None
    return _dtype(call, name, tuple(dict.fromkeys((call[ref].dtype, F32))), f" (float32 or the data type of {ref})")


def _same(call, name: str, ref: str) -> str | None:
    if call[name] is None or call[ref] is None:
        return None
    return _dtype(call, name, (call[ref].dtype,), f" (the same data type as {ref})")


def check_regbase_dtypes(call) -> str | None:
    """RegbaseCheckDtypeSame (l.320-359), in its order."""
    def steps():
        for name in ("weight", "runningMean", "runningVar"):
            yield _same_or_float(call, name, "gradOut")
        yield _same(call, "runningVar", "runningMean")
        for name in ("saveMean", "saveInvstd"):
            yield _same_or_float(call, name, "gradOut")
        yield _same(call, "saveInvstd", "saveMean")
        if mask_bit(call, 0):
            yield _same(call, "gradInput", "gradOut")
        for bit, name in ((1, "gradWeight"), (2, "gradBias")):
            if mask_bit(call, bit):
                yield _same_or_float(call, name, "weight")
        yield _same(call, "gradBias", "gradWeight")     # both non-null, even masked off (B13)
    return first(steps())


def check_grad_input_dtype(call) -> str | None:
    """The doc's "input, gradOut, gradInput: dtypes differ" where the op_api does not check it (B7)."""
    return _same(call, "gradInput", "gradOut") if mask_bit(call, 0) else None


def check_kernel_dtypes(call) -> str | None:
    """opgen's kernels: weight, the running pair and the save pair each in gradOut's dtype or
    float32 (each pair alike), gradWeight/gradBias alike in weight's dtype (gradOut's when weight
    is null) or float32: the 950's rows, which opgen offers on every product (B6)."""
    given = {n: call[n].dtype for n in ("gradOut",) + SMALL + OUTPUTS if call[n] is not None and wanted(call, n)}
    g = given["gradOut"]
    w = given.get("weight", g)
    for name in SMALL + ("gradWeight", "gradBias"):
        allowed = tuple(dict.fromkeys((w if name.startswith("grad") else g, F32)))
        if name in given and given[name] not in allowed:
            ref = f"weight {w}" if name.startswith("grad") and "weight" in given else f"gradOut {g}"
            return (f"{name} has dtype {given[name]}; opgen's {call.product} kernels take {' or '.join(allowed)} "
                    f"with {ref}")
    pairs = (("runningVar", "runningMean"), ("saveInvstd", "saveMean"), ("gradBias", "gradWeight"))
    return first(f"{a} has dtype {given[a]}; opgen's kernels take it in {b}'s {given[b]}"
                 for a, b in pairs if a in given and b in given and given[a] != given[b])


# ---- formats: CheckFormat (l.163-200) and the doc's product notes

def _data(call) -> list:
    return ["gradOut", "input"] + (["gradInput"] if mask_bit(call, 0) else [])


def _same_format(a, b) -> bool:
    """CANN compares storage formats; an untagged tensor equals another untagged one, and
    equals an explicit tag when its rank reads as that tag (ND 4-D == NCHW)."""
    return a.format == b.format or format_of(a) == format_of(b)


def check_formats_equal(call) -> str | None:
    out = call["gradOut"]
    return first(f"{n} has format {call[n].format} (read as {format_of(call[n])}); expected gradOut's "
                 f"{out.format} (read as {format_of(out)})"
                 for n in ("input", "gradInput") if n in _data(call) and not _same_format(call[n], out))


def check_5d_format(call) -> str | None:
    return first(f"{n} has 5 dimensions and format {format_of(call[n])}; expected NCDHW or NDHWC"
                 for n in ("input", "gradInput") if n in _data(call) and call[n].ndim == 5
                 and format_of(call[n]) not in ("NCDHW", "NDHWC"))


def check_private_format(call) -> str | None:
    return first(f"{n} has the private format {call[n].format}; expected NC, NCL, NCHW or NCDHW (or ND)"
                 for n in ("gradOut", "input") if call[n].format not in acl.PLAIN_FORMATS)


def check_channel_last_absent(call) -> str | None:
    return first(f"{n} has format {call[n].format}; {call.product} does not support NHWC or NDHWC"
                 for n in _data(call) if call[n].format in CHANNEL_LAST)


def check_channel_last_rank(call) -> str | None:
    ranks = {"NHWC": 4, "NDHWC": 5}
    return first(f"{n} has format {call[n].format} with {call[n].ndim} dimensions; expected {ranks[call[n].format]}"
                 for n in _data(call) if call[n].format in ranks and call[n].ndim != ranks[call[n].format])


def check_4d_format_950(call) -> str | None:
    """The 950's kernel tilings take a 4-D tensor only as NCHW or NHWC (B8)."""
    if not any(mask_bit(call, b) for b in range(3)):
        return None   # every bit false: the op_api returns before any kernel (l.808-814)
    return first(f"{n} has 4 dimensions and format {call[n].format}; the Ascend950 kernel tiling takes NCHW or "
                 f"NHWC (Not supported format)" for n in _data(call)
                 if call[n].ndim == 4 and format_of(call[n]) not in ("NCHW", "NHWC"))


# ---- shapes: CheckShape, CheckOtherShape, CheckSaveMeanSaveInvstdShape, CheckGradWeightGradBiasShape

def check_ranks(call) -> str | None:
    return first(f"{n} has {call[n].ndim} dimensions; expected 2 to 8" for n in _data(call)
                 if not 2 <= call[n].ndim <= 8)


def check_same_shapes(call) -> str | None:
    want = call["gradOut"].shape
    return first(f"{n} has shape {shape_str(call[n].shape)}; expected gradOut's {shape_str(want)}"
                 for n in ("input", "gradInput") if n in _data(call) and call[n].shape != want)


def _per_channel(call, name: str, allow_empty: bool = False) -> str | None:
    arg, c = call[name], channels(call)
    if arg is None or (arg.shape == (c,)) or (allow_empty and arg.shape == (0,)):
        return None
    also = " (or (0,) when training is false)" if name.startswith("save") else ""
    return (f"{name} has shape {shape_str(arg.shape)}; expected ({c},): 1 dimension of the length of input's "
            f"channel axis (axis {channel_axis(call)} of {shape_str(call['input'].shape)}){also}")


def check_running_shapes(call) -> str | None:
    return first(_per_channel(call, n) for n in ("weight", "runningMean", "runningVar"))


def check_save_shapes(call) -> str | None:
    return first(_per_channel(call, n, allow_empty=not call["training"]) for n in ("saveMean", "saveInvstd"))


def check_grad_shapes(call) -> str | None:
    return first(_per_channel(call, n) for n in ("gradWeight", "gradBias") if wanted(call, n))


# ---- the 950's kernel tiling (561103 through CHECK_RET(... != nullptr, ACLNN_ERR_INNER_NULLPTR))

def check_running_pair_950(call) -> str | None:
    """B15: a null runningMean or runningVar is filled float32; with the other one and weight
    16-bit the training kernel's dtype tuple is not in its list (tiling l.87-101, l.159-179)."""
    rm, rv, w = call["runningMean"], call["runningVar"], call["weight"]
    if not call["training"] or (rm is None) == (rv is None) or w is None or w.dtype == F32:
        return None
    if not any(mask_bit(call, b) for b in range(3)):
        return None
    present, missing = ("runningMean", "runningVar") if rv is None else ("runningVar", "runningMean")
    if call[present].dtype == F32:
        return None
    return (f"{missing} is null (filled as float32) while {present} is {call[present].dtype} and weight "
            f"{w.dtype}: the Ascend950 training kernel has no such dtype combination (dtype of inputs are invalid)")

