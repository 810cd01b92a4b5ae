"""CUDA schedules: the shared GPU rules (schedules/gpu.py); nothing CUDA-specific yet.

What would be CUDA-only (cluster reductions on sm_90, 128-bit ``ld.global.v4``) belongs
here, as rules tried before the shared ones.
"""
from opgen.schedules.gpu import RULES as GPU_RULES

RULES = list(GPU_RULES)
