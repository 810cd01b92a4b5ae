"""The numeric check of what bishengir accepted: its kernels run back on this CPU through IREE.

No Ascend device is here, so bishengir's kernels cannot run where they are meant to. What
can run is the module bishengir itself made of each kernel just before its auto-schedule
(``bishengir.HFUSION_DUMP``, kept with the verdict of the run that reached HIVM): the
kernel after bishengir's normalisations, decompositions (rsqrt, casts) and bf16
legalisation, on whole tensors. ``bishengir-opt --linalg-generalize-named-ops`` (the same
wheel) turns its HFusion ops into upstream ``linalg.generic``; with bishengir's attributes
dropped, IREE compiles every kernel of the op into one module, and ``Chain`` calls them in
order, each kernel's results feeding the kernels that read them, as GM would on the device.

What this checks: the split (which stage sits in which kernel, what crosses between
kernels), the named-op printer (windows, broadcasts, transposes, scalars) and bishengir's
rewrites before tiling. What it does not: bishengir's tiling, UB plan and HIVM
instructions (library calls with no CPU implementation here); those only a device runs.

``Chain`` also counts the bytes its kernels take and return (each kernel reads its
arguments and writes its results once: a lower bound of its GM traffic) against one pass
over the op's inputs and outputs, the cost of the split.
"""
from __future__ import annotations

import re
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from opgen.targets.mlir import bishengir
from opgen.targets.mlir.iree import _host_array, compile_text


# bishengir's whole-tensor ops generalize into dispatches IREE gives bigger stack tiles than
# its 32 KiB default allows (GroupNormBackward's: 66560 bytes, "exceeded stack allocation
# limit"). They run on the calling thread (IREE's local-sync driver), whose stack is the
# process's (8 MiB here), not on a task worker's smaller one: a check, not a benchmark.
STACK_LIMIT = "--iree-llvmcpu-stack-allocation-limit=262144"


@dataclass(frozen=True)
class Step:
    """One kernel's function: what it takes (buffer names, then sizes no buffer of it holds)
    and what it returns (buffer names), as ``named.signature`` printed it."""

    name: str
    reads: tuple
    sizes: tuple
    returns: tuple


def optimizer() -> str:
    """``bishengir-opt``, beside ``bishengir-compile`` in the wheel's bin/."""
    return str(Path(bishengir.compiler()).with_name("bishengir-opt"))


_ATTRIBUTES = re.compile(r" attributes \{(?:[^{}]|\{[^{}]*\})*\}")


# HFusion ops that bishengir-opt 1.2.0's --linalg-generalize-named-ops turns into a copy of
# their operand (``linalg.yield %in``), dropping what they do (so does its
# --execution-engine-convert-hfusion-to-upstream): the logical not of a select's condition
# (bishengir rewrites ``vne`` as ``vnot(veq)``) and a float cast to the same type in a
# rounding mode (nearbyint). ``_explicit`` writes them as linalg.generic first.
_TYPE = r"(tensor<[^>]*>)"
_NOT = re.compile(rf"(%[\w.]+) = hfusion\.elemwise_unary \{{fun = #hfusion\.unary_fn<vnot>\}} "
                  rf"ins\((%[\w.]+) : {_TYPE}\) outs\((%[\w.]+) : {_TYPE}\) -> {_TYPE}")
_ROUND = re.compile(rf"(%[\w.]+) = hfusion\.cast \{{[^{{}}]*round_mode = #hfusion\.round_mode<(\w+)>[^{{}}]*\}} "
                    rf"ins\((%[\w.]+) : {_TYPE}\) outs\((%[\w.]+) : {_TYPE}\) -> {_TYPE}")
ROUNDING = {"rint": "math.roundeven", "round": "math.round", "floor": "math.floor", "ceil": "math.ceil",
            "trunc": "math.trunc"}


def _element(tensor: str) -> str:
    return tensor[len("tensor<"):-1].split("x")[-1]


def _elementwise(result: str, source: str, out: str, typed: str, body: list) -> str:
    """A rank-generic elementwise ``linalg.generic`` of one operand: ``body`` lines compute
    ``%v`` from the element ``%a`` (names prefixed by the result's, unique in the function)."""
    rank = len(typed[len("tensor<"):-1].split("x")) - 1
    dims = ", ".join(f"d{k}" for k in range(rank))
    identity = f"affine_map<({dims}) -> ({dims})>"
    tag = result.lstrip("%").replace(".", "_")
    lines = [line.replace("%a", f"%a_{tag}").replace("%v", f"%v_{tag}").replace("%t", f"%t_{tag}") for line in body]
    element, iterators = _element(typed), ", ".join(['"parallel"'] * rank)
    return (f"{result} = linalg.generic {{indexing_maps = [{identity}, {identity}], iterator_types = "
            f"[{iterators}]}} ins({source} : {typed}) outs({out} : {typed}) {{\n"
            f"^bb0(%a_{tag}: {element}, %o_{tag}: {element}):\n" + "\n".join(lines) +
            f"\nlinalg.yield %v_{tag} : {element}\n}} -> {typed}")


def _explicit(text: str) -> str:
    """``text`` with the ops its generalization would drop (``_NOT``, ``_ROUND``) written out."""
    def logical_not(m):
        result, source, typed, out = m.group(1), m.group(2), m.group(3), m.group(4)
        element = _element(typed)
        ones = "true" if element == "i1" else f"-1 : {element}"
        return _elementwise(result, source, out, typed, [f"%t = arith.constant {ones}",
                                                         f"%v = arith.xori %a, %t : {element}"])

    def rounding(m):
        result, mode, source, typed, out, out_typed = m.group(1), m.group(2), m.group(3), m.group(4), m.group(5), m.group(6)
        if typed != out_typed or mode not in ROUNDING or _element(typed)[0] not in "fb":
            return m.group(0)                     # a cast between types: generalized correctly
        return _elementwise(result, source, out, typed, [f"%v = {ROUNDING[mode]} %a : {_element(typed)}"])

    return _ROUND.sub(rounding, _NOT.sub(logical_not, text))


def upstream(hfusion: str, timeout: float = 60.0) -> str:
    """The functions of one bishengir module (before auto-schedule) as upstream MLIR: its
    named HFusion ops generalized (those the generalization drops written out first,
    ``_explicit``), its module and function attributes (hacc, hfusion, dlti: dialects IREE
    does not know) dropped. Refuses a text that still names one."""
    done = subprocess.run([optimizer(), "-", "--linalg-generalize-named-ops", "--mlir-print-local-scope"],
                          input=_explicit(hfusion), capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"bishengir-opt: {done.stderr.strip()[-300:]}")
    text = _ATTRIBUTES.sub("", done.stdout)
    left = sorted(set(re.findall(r"\b(hfusion|hacc|hivm|annotation)\.\w+", text)))
    if left:
        raise NotImplementedError(f"no upstream form for {', '.join(left)} (bishengir's module before "
                                  f"{bishengir.HFUSION_DUMP})")
    body = text[text.index("{") + 1:text.rindex("}")]
    return body.strip("\n")


class Chain:
    """The op's kernels run in order on IREE; call it with TVM tensors, inputs then outputs
    (the op's parameter order, ``params``)."""

    def __init__(self, steps: list, hfusion: list, params: tuple, n_inputs: int, size_places: dict, flags: tuple):
        self.steps, self.params, self.n_inputs = steps, params, n_inputs
        self.size_places = size_places          # size name -> (parameter name, axis)
        self.text = "module {\n" + "\n".join(upstream(t) for t in hfusion) + "\n}\n"
        self.vmfb = compile_text(self.text, "llvm-cpu", flags + (STACK_LIMIT,))
        self._local = threading.local()
        self.traffic: tuple | None = None       # (kernels' bytes, one pass's bytes) of the largest call

    def _module(self):
        module = getattr(self._local, "module", None)
        if module is None:
            import iree.runtime as rt

            config = rt.Config("local-sync")
            module = rt.load_vm_module(rt.VmModule.copy_buffer(config.vm_instance, self.vmfb), config)
            self._local.module = module
        return module

    def __call__(self, *tensors) -> None:
        values = {name: _host_array(t) for name, t in zip(self.params, tensors)}
        module, moved = self._module(), 0
        for step in self.steps:
            args = [values[n] for n in step.reads]
            args += [int(values[self.size_places[s][0]].shape[self.size_places[s][1]]) for s in step.sizes]
            results = module[step.name](*args)
            results = (results,) if len(step.returns) == 1 else tuple(results)
            values.update({n: r.to_host() for n, r in zip(step.returns, results)})
            moved += sum(values[n].nbytes for n in step.reads) + sum(values[n].nbytes for n in step.returns)
        self._record(moved, sum(values[n].nbytes for n in self.params))
        for name, out in zip(self.params[self.n_inputs:], tensors[self.n_inputs:]):
            host = values[name].reshape(tuple(out.shape))   # a flat store's rank-1 result: same bytes
            try:
                np.copyto(np.from_dlpack(out), host, casting="no")
            except (TypeError, BufferError, RuntimeError):
                out.copyfrom(host)

    def _record(self, moved: int, one_pass: int) -> None:
        if self.traffic is None or one_pass > self.traffic[1]:
            self.traffic = (moved, one_pass)
