"""The products whose documented rules opgen enforces (the seeds' names), and the default.

Plain data at the bottom of the import graph: the settings (opgen.config), the op specs
and the Ascend hardware descriptions all name products, and none of them may import
another for it.
"""
from __future__ import annotations

PRODUCTS = ("Ascend950", "AtlasA3", "AtlasA2", "AtlasInference", "AtlasTraining")
DEFAULT_PRODUCT = "Ascend950"
