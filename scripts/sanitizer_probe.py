"""A planted out-of-bounds write, for scripts/gpu_check.sh: compute-sanitizer counts as
available only where its memcheck reports this one (exit 3 with --error-exitcode 3).

    compute-sanitizer --tool memcheck --error-exitcode 3 python3 scripts/sanitizer_probe.py

CuPy's memory pool is off, as in the checks it vouches for (check --no-pool): the 4-float
allocation is then exactly 16 bytes, and the 64 writes run past it into memory no
allocation owns. Without the sanitizer the writes land in the allocation's padding and the
probe exits 0; a sandbox that refuses the device (seen under gVisor: "Device not supported",
then error 999 at the first allocation) exits otherwise, and the check says "unavailable".
"""
import cupy

cupy.cuda.set_allocator(None)
array = cupy.empty(4, cupy.float32)
planted = cupy.RawKernel(r'extern "C" __global__ void planted(float* a) { a[threadIdx.x] = 1.0f; }', "planted")
planted((1,), (64,), (array,))
cupy.cuda.runtime.deviceSynchronize()
print("the planted out-of-bounds write ran")
