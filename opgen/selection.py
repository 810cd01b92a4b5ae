"""Which kernel a call runs, decided once per plan: resolve the knobs, then build.

    select(op, combo, target, shapes) -> Selection

1. the op's PrimFunc and the rule that matches it on the target (pattern matching only);
2. the tuning records of the call's key, best first (opgen.tune.lookup: data);
3. ``opgen.schedules.resolve``: the rule's defaults, its problem-size defaults, then the
   best tuned record that is a valid point of the rule's space (a refused record is
   warned about once, naming its file and line, and never built);
4. ``opgen.kernels.get_kernel`` at that full point: scheduled once, built once, cached.

The aclnn layer calls this on a plan-cache miss only, never on a warm call. What was
chosen and why is printed by ``opgen explain`` and, with ``OPGEN_LOG=kernels``, logged to
stderr for every selection (logger ``opgen.kernels``), like Triton's
TRITON_PRINT_AUTOTUNING.
"""
from __future__ import annotations

import logging
import os
import sys
import threading
import warnings
from dataclasses import dataclass

from opgen import kernels, schedules
from opgen.tune import database, lookup

LOG = logging.getLogger("opgen.kernels")


def _configure_log() -> None:
    """``OPGEN_LOG=kernels`` (a comma list; ``all`` too) sends selections to stderr."""
    wanted = {w.strip() for w in os.environ.get("OPGEN_LOG", "").split(",")}
    if wanted & {"kernels", "all"} and not LOG.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("opgen: %(message)s"))
        LOG.addHandler(handler)
        LOG.setLevel(logging.INFO)


_configure_log()


@dataclass(frozen=True)
class Selection:
    """A call's kernel and how it was chosen."""

    kernel: object                 # opgen.kernels.Kernel
    resolution: object             # opgen.schedules.Resolution (None: the target has no rules)
    bucket: str                    # the shape bucket the tuning database keys on

    @property
    def by_alignment(self) -> bool:
        """Whether the choice can depend on where the call's tensors lie (the rule has knobs
        only the call decides, such as the GPU's vector variant, and these shapes leave the
        choice to the addresses: ScheduleRule.alignment_matters): the aclnn plan cache then
        keys the plan on the tensors' alignment too."""
        return self.resolution is not None and self.resolution.by_alignment

    @property
    def knobs(self) -> dict:
        return self.resolution.knobs if self.resolution is not None else {}


_warned: set = set()
_warned_lock = threading.Lock()


def _warn_refused(op, combo, target, refused) -> None:
    """One warning per refused record per process, naming its file and line."""
    for record, reason in refused:
        source = record.get("_source", "a tuning record") if isinstance(record, dict) else "a tuning record"
        with _warned_lock:
            if (source, reason) in _warned:
                continue
            _warned.add((source, reason))
        warnings.warn(f"{source}: ignoring the tuned record for {op.name} {combo.tag} on {target.name}: {reason}",
                      stacklevel=3)


def resolve(op, combo, target, shapes: dict, alignments: dict | None = None):
    """(resolution, bucket) for a call of ``op`` with these kernel shapes on ``target``;
    ``alignments``: kernel tensor -> alignment of the address it is handed (None: unknown;
    see ScheduleRule.knobs_for_call)."""
    bucket = database.bucket_for(op, shapes)
    if kernels.matching_rule(op, combo, target) is None:
        return None, bucket
    tuned = lookup.records_for(op.name, combo.tag, target, bucket)
    resolution = schedules.resolve(kernels.prim_func(op, combo), target, shapes, tuned, alignments)
    _warn_refused(op, combo, target, resolution.refused)
    return resolution, bucket


def select(op, combo, target, shapes: dict, alignments: dict | None = None) -> Selection:
    """The kernel for a call of ``op`` with these kernel shapes (tensor name -> shape) and,
    when known, the alignments of the addresses its tensors are handed."""
    resolution, bucket = resolve(op, combo, target, shapes, alignments)
    kernel = kernels.get_kernel(op, combo, target, knobs=resolution.knobs if resolution else None)
    selection = Selection(kernel, resolution, bucket)
    if LOG.isEnabledFor(logging.INFO):
        LOG.info(one_line(selection))
    return selection


def one_line(selection: Selection) -> str:
    """The selection in one log line: kernel, rule, each knob with its source."""
    k, r = selection.kernel, selection.resolution
    if r is None:
        return f"{k.symbol} on {k.target.name}: no schedule rules (the target's compiler schedules)"
    knobs = ", ".join(f"{n}={v!r} ({r.sources[n]})" for n, v in r.knobs.items())
    return f"{k.symbol} on {k.target.name}, bucket {selection.bucket}: {type(r.rule).__name__}({knobs})"


def explain(selection: Selection) -> str:
    """What ``opgen explain`` prints: target, rule, knobs and where each came from, the
    refused records, the cache key and the artifact path."""
    k, r = selection.kernel, selection.resolution
    lines = [f"kernel     {k.symbol}  ({k.op.name} {k.combo.tag})",
             f"target     {k.target.name}: {k.target.description}",
             f"bucket     {selection.bucket}  (tuning key: op, dtypes, target, hardware, bucket)"]
    if r is None:
        lines.append("rule       none: the target's compiler schedules for itself")
    else:
        lines.append(f"rule       {type(r.rule).__name__}")
        width = max((len(n) for n in r.knobs), default=0)
        for name, value in r.knobs.items():
            lines.append(f"  {name:<{width}}  {value!r:<10} {r.sources[name]}")
        if r.record is not None:
            lines.append(f"tuned      {r.record.get('median_ms', '?')} ms median, run {r.record.get('run', '?')}")
        for record, reason in r.refused:
            lines.append(f"refused    {record.get('_source', '?') if isinstance(record, dict) else '?'}: {reason}")
    lines.append(f"cache key  {k.op.name}, {k.combo.tag}, {k.target.name}, {k.variant}, "
                 f"{sorted(selection.knobs.items())}")
    where = k.library_path if k.library_path is not None else "in memory only (not exported to the disk cache)"
    lines.append(f"artifact   {where}{'  (loaded from the disk cache)' if k.from_disk else ''}")
    return "\n".join(lines)
