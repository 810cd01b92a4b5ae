#!/usr/bin/env bash
# Issue 40's GPU check, without TVM (the GPU machine has none), as one command in under 4
# minutes (the loan's 5, the machine's start included):
#   scripts/gpu_check.sh [EXPORT_DIR] [WHEELS_DIR]      # defaults: gpu-export gpu-wheels
# Prepared on a machine with TVM and nvcc, before the loan (both folders git-ignored; the device
# tool's carry=["gpu-export", "gpu-wheels"]; docs/targets.md, "The GPU check"):
#   opgen export --target cuda --out gpu-export --op rms_norm_grad --op group_norm_backward \
#       --bench rms_norm_grad=8192x4096
#   pip download --no-deps ... -d gpu-wheels liger-kernel==0.8.5      (pure Python, 0.9 MB)
# Steps, each with its own time limit inside GPU_CHECK_SECONDS (default 210):
# 0. the wheels, installed offline (--no-index) into a private folder: Liger's row where they
#    install, a row saying why where not;
# 1. the GPU and the CUDA runtime (CuPy) -- exit 1 when the runtime cannot load;
# 2. every exported plan's golden cases against the float64 reference (128-bit variants too);
# 3. compute-sanitizer memcheck and racecheck on the benchmarked plans with CuPy's memory pool
#    off (an access past an array is then outside any allocation); first a planted
#    out-of-bounds write (scripts/sanitizer_probe.py) that memcheck must report: where it does
#    not (no compute-sanitizer, a sandbox refusing the device), the step says "unavailable";
# (beside 2 and 3: torch.compile's compilations, warming the caches step 4's compile rows read)
# 4. scripts/export_bench.py: the device's name, its spec peak and a device-to-device copy's
#    rate, then per issue-40 case opgen generic, opgen 128-bit, torch eager, torch.compile (in
#    a child process with a bounded budget: "compile timed out" past it) and Liger: ms, GB/s,
#    % of the copy's rate, % of the spec, and the error against torch's float64 autograd.
# Exit 0 only when 2 passes, 3 passes or is unavailable, and 4 ran every row without mismatch.
# Dry run without a GPU (docs/targets.md): PYTHONPATH=scripts/standin OPGEN_STANDIN_OPENCL=
# EXPORT_DIR/opencl runs it all on a CuPy stand-in whose kernels are the same kernels as
# OpenCL C; compute-sanitizer is then "unavailable".
set -uo pipefail
cd "$(dirname "$0")/.."
EXPORT=${1:-gpu-export}/cuda
WHEELS=${2:-gpu-wheels}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}    # opgen.runtime from the tree: no install, no TVM
export PYTHONUNBUFFERED=1
START=$(date +%s)
left() { echo $(( ${GPU_CHECK_SECONDS:-210} - ($(date +%s) - START) )); }
scaled() { echo $(( $1 * ${GPU_CHECK_SECONDS:-210} / 210 )); }    # a step's limit, out of the default 210
say() { printf '\n== %s (%ss left)\n' "$*" "$(left)"; }
FAILED=0
LOG=${TMPDIR:-/tmp}/gpu_check.$$
mkdir -p "$LOG"

say "0. wheels from $WHEELS"
if compgen -G "$WHEELS/*.whl" >/dev/null; then
    if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$LOG/site" \
            "$WHEELS"/*.whl >"$LOG/pip.log" 2>&1; then
        export PYTHONPATH=$PYTHONPATH:$LOG/site; echo "installed: $(cd "$WHEELS" && ls *.whl | tr '\n' ' ')"
    else
        echo "wheels did not install (their rows say why): $(tail -1 "$LOG/pip.log")"
    fi
else
    echo "none (Liger's rows will say it is not installed)"
fi

say "1. machine"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.memory --format=csv,noheader \
    || echo "nvidia-smi: not here"
[ -d "$EXPORT" ] || { echo "FAIL: no exported plans under $EXPORT (opgen export --target cuda --out ...)"; exit 2; }
if ! python3 -c "import cupy; n = cupy.cuda.runtime.getDeviceCount(); assert n > 0, 'no device';
print('CUDA runtime', cupy.cuda.runtime.runtimeGetVersion(), 'devices', n, 'sm', cupy.cuda.Device().compute_capability)"
then
    echo "FAIL: the CUDA runtime cannot load (CuPy, libcudart, a device): nothing below can run"; exit 1
fi

# torch.compile's compilations, started now, beside steps 2 and 3 (which time nothing): their
# inductor and Triton caches make step 4's bounded torch.compile rows cache hits where it finished.
export TORCHINDUCTOR_CACHE_DIR=$LOG/inductor TRITON_CACHE_DIR=$LOG/triton
python3 scripts/export_bench.py "$EXPORT" --peers torch.compile --jsonl --warmup 1 --repeats 1 \
    --budget "$(scaled 100)" >"$LOG/compile-warm.jsonl" 2>&1 &
WARM=$!

say "2. golden cases vs the float64 reference: every plan"
timeout $(scaled 60) python3 -m opgen.runtime.check "$EXPORT" \
    || { echo "FAIL: golden cases (exit $?: 1 a mismatch, 2 a plan that cannot run, 124 out of time)"; FAILED=1; }

say "3. compute-sanitizer memcheck, racecheck (CuPy's memory pool off)"
BENCHED=()
for op in rms_norm_grad group_norm_backward; do
    for tags in bf16-bf16 f32-f32; do [ -d "$EXPORT/$op/$tags" ] && BENCHED+=("$EXPORT/$op/$tags"); done
done
SANITIZER=unavailable
if ! command -v compute-sanitizer >/dev/null; then
    echo "compute-sanitizer: unavailable (not on PATH)"
else
    timeout $(scaled 40) compute-sanitizer --tool memcheck --error-exitcode 3 --print-limit 3 \
        python3 scripts/sanitizer_probe.py >"$LOG/probe.log" 2>&1
    rc=$?
    if [ $rc -eq 3 ] && grep -q "Invalid __global__ write" "$LOG/probe.log"; then
        SANITIZER=available; echo "probe: memcheck reported the planted out-of-bounds write (as it must)"
    else
        echo "compute-sanitizer: unavailable (the planted out-of-bounds write was not reported; exit $rc):"
        grep -v "^\s*$" "$LOG/probe.log" | tail -4
    fi
fi
if [ $SANITIZER = available ]; then
    for tool in memcheck racecheck; do
        [ "$(left)" -gt "$(scaled 100)" ] || { echo "FAIL: $tool not run: too little time left"; FAILED=1; continue; }
        timeout $(scaled 50) compute-sanitizer --tool "$tool" --error-exitcode 3 --print-limit 5 \
            python3 -m opgen.runtime.check --no-pool "${BENCHED[@]}" >"$LOG/$tool.log" 2>&1
        rc=$?
        summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$LOG/$tool.log" | tail -1)
        echo "$tool over $(grep -c "checks" "$LOG/$tool.log") plans: exit $rc ${summary:+($summary)}"
        [ $rc -eq 0 ] || { echo "FAIL: $tool (3: errors reported; 124: out of time)"; tail -20 "$LOG/$tool.log"; FAILED=1; }
    done
fi

say "4. benchmark (CUDA events around the launches; plans evaluated once)"
if kill -0 "$WARM" 2>/dev/null; then
    echo "torch.compile warm-up still running: stopped ($(grep -c '"ms": [0-9]' "$LOG/compile-warm.jsonl") cases compiled)"
    kill "$WARM"; wait "$WARM" 2>/dev/null
else
    echo "torch.compile warm-up done: $(grep -c '"ms": [0-9]' "$LOG/compile-warm.jsonl") cases compiled"
fi
BUDGET=$(( $(left) - 15 ))
if [ "$BUDGET" -gt 30 ]; then
    timeout $(( BUDGET + 10 )) python3 scripts/export_bench.py "$EXPORT" --budget "$BUDGET" \
        --compile-seconds $(( BUDGET / 2 < 90 ? BUDGET / 2 : 90 )) ${GPU_CHECK_BENCH_ARGS:-}
    rc=$?
    [ $rc -eq 0 ] || { echo "FAIL: benchmark exit $rc (1: a row failed or mismatched; 2: no CUDA runtime; 124: out of time)"; FAILED=1; }
else
    echo "FAIL: benchmark not run: ${BUDGET}s left"; FAILED=1
fi
say "done in $(( $(date +%s) - START )) s: $([ $FAILED -eq 0 ] && echo PASS || echo FAIL) (compute-sanitizer: $SANITIZER)"
exit $FAILED
