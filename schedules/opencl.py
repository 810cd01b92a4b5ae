"""OpenCL schedules: the shared GPU rules (schedules/gpu.py), so PoCL on the CPU runs the
same block/thread structure that CUDA compiles; the OpenCL-specific part (float16 without
cl_khr_fp16, launching) belongs to the target (targets/opencl.py), not to the schedule.
"""
from opgen.schedules.gpu import RULES as GPU_RULES

RULES = list(GPU_RULES)
