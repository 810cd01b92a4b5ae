"""BatchNorm's peers and tool shapes: none yet.

opgen compare and opgen bench time backward closures (a peer's ``make`` runs a backward);
ATen's native_batch_norm joins them once those tools know an op's direction. The module
comparison with torch is in tests/test_torch_modules.py and benchmarks/torch_forward.py.
"""
from __future__ import annotations

from opgen.ops.spec import Cases

PEERS = ()
CASES = Cases()
