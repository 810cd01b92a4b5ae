"""RmsNorm's peers and tool shapes: none yet.

opgen compare and opgen bench time backward closures (a peer's ``make`` runs a backward);
a forward peer (torch's F.rms_norm) needs those tools to know an op's direction first.
The module-level comparison with torch lives in tests/test_torch_modules.py and
benchmarks/torch_forward.py.
"""
from __future__ import annotations

from opgen.ops.spec import Cases

PEERS = ()
CASES = Cases()
