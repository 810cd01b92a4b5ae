"""What the process's environment allows: the CPUs it may use, and numeric settings read from
environment variables. Imported by the core and the targets alike (opgen.config, which
imports the target registry, could not be), and light: the standard library only."""
from __future__ import annotations

import os
import warnings


def usable_cpus() -> int:
    """CPUs this process may run on (affinity/cgroup aware where the OS tells): what sizes
    TVM's thread pool, generate's build pool and a project's g++ jobs."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def positive_setting(name: str, parse, default, unit: str):
    """Environment variable ``name`` read by ``parse`` (int, float) when it is set and positive,
    else ``default``; a value that is not a positive ``unit`` is warned about and ignored."""
    text = os.environ.get(name)
    if not text:
        return default
    try:
        value = parse(text)
    except ValueError:
        value = None
    if value is not None and value > 0:
        return value
    warnings.warn(f"opgen: {name}={text!r} is not a positive {unit}; using {default:g}", stacklevel=3)
    return default
