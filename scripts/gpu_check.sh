#!/usr/bin/env bash
# The GPU check, without TVM (the GPU machine has none), in under 5 minutes:
#   scripts/gpu_check.sh [EXPORT_DIR]      # default: gpu-export
# EXPORT_DIR is written on a machine with TVM and nvcc, before the GPU loan:
#   opgen export --target cuda --out gpu-export     (git-ignored: send it along, e.g. the device
#   tool's carry=["gpu-export"]; every op x combo with golden cases is 19 MiB, 54 plans)
# Steps: 1. the GPU and the CUDA runtime (CuPy) -- exit 1 when the runtime cannot load;
# 2. every exported plan's golden cases through opgen.runtime against the float64 reference (the
#    128-bit vector/ variants too, each on the cases its selection rule admits);
# 3. compute-sanitizer memcheck, racecheck and synccheck on each op's f32-f32 plan, when present;
# 4. the runner's timings next to torch eager and torch.compile (scripts/export_bench.py).
# Exit 0 only when 2 and 3 pass. Written without a GPU: what ran is the exit on a missing
# runtime (tests/test_export.py) and a dry run with a CuPy stand-in whose kernels were the same
# kernels as OpenCL C on PoCL (54/54 plans PASS, benchmark rows printed); never on CUDA itself.
set -uo pipefail
cd "$(dirname "$0")/.."
EXPORT=${1:-gpu-export}/cuda
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}    # opgen.runtime from the tree: no install, no TVM
START=$(date +%s)
left() { echo $(( ${GPU_CHECK_SECONDS:-280} - ($(date +%s) - START) )); }
say() { printf '\n== %s (%ss left)\n' "$*" "$(left)"; }
FAILED=0

say "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "nvidia-smi: not here"
[ -d "$EXPORT" ] || { echo "FAIL: no exported plans under $EXPORT (opgen export --target cuda --out ...)"; exit 2; }
if ! python3 -c "import cupy; n = cupy.cuda.runtime.getDeviceCount(); assert n > 0, 'no device';
print('CUDA runtime', cupy.cuda.runtime.runtimeGetVersion(), 'device', cupy.cuda.Device().compute_capability)"; then
    echo "FAIL: the CUDA runtime cannot load (CuPy, libcudart, a device): nothing below can run"; exit 1
fi

say "golden cases vs the float64 reference: every plan"
timeout 90 python3 -m opgen.runtime.check "$EXPORT" || { echo "FAIL: golden cases (exit $?)"; FAILED=1; }

say "compute-sanitizer: each op's f32-f32 plan"
if command -v compute-sanitizer >/dev/null; then
    SMALL=("$EXPORT"/*/f32-f32)
    for tool in memcheck racecheck synccheck; do
        [ "$(left)" -gt 60 ] || { echo "FAIL: no time left for $tool"; FAILED=1; continue; }
        timeout 50 compute-sanitizer --tool "$tool" --error-exitcode 3 --print-limit 5 \
            python3 -m opgen.runtime.check "${SMALL[@]}" >/tmp/gpu_check_sanitizer.log 2>&1
        rc=$?
        echo "$tool over ${#SMALL[@]} plans: exit $rc (3: the tool reported errors; 124: out of time)"
        [ $rc -eq 0 ] || { tail -20 /tmp/gpu_check_sanitizer.log; FAILED=1; }
    done
else
    echo "compute-sanitizer: not on PATH, skipped"
fi

say "benchmark"
if [ "$(left)" -gt 20 ]; then
    timeout $(( $(left) - 5 )) python3 scripts/export_bench.py "$EXPORT" --budget $(( $(left) - 20 )) \
        || echo "benchmark: exit $? (1: a plan failed to run; 2: no CUDA runtime; 124: out of time)"
fi
say "done in $(( $(date +%s) - START )) s: $([ $FAILED -eq 0 ] && echo PASS || echo FAIL)"
exit $FAILED
