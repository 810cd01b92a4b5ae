#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU (an H200 in the issue), in under 8 minutes:
#   1. what is there (GPU, driver, nvcc, torch, TVM's CUDA runtime);
#   2. installs what is missing and reachable: opgen itself, a CUDA build of torch, and
#      Liger-Kernel (optional; --no-deps so it cannot replace torch). Each install has a
#      time limit; on a machine without network the script goes on with what it has;
#   3. the CUDA tests (pytest -m gpu, plus the nvcc compile checks);
#   4. the benchmark (scripts/gpu_bench.py): every registered op's benchmark shapes, opgen's
#      kernel and aclnn call vs the CUDA peers each op declares (torch eager, torch.compile,
#      ATen, Liger-Kernel), GB/s and % of the 4.8 TB/s H200 peak, the kernel's output checked
#      against the float64 reference, within the time left (exit 1: a MISMATCH or a failed case).
# Written in a session without a GPU: bash -n and the benchmark's --smoke/--dry-run modes
# were run on the CPU (tests/test_gpu_bench.py); the GPU path itself has not run yet.
set -uo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
BUDGET=${GPU_CHECK_SECONDS:-450}             # 7.5 minutes, install included
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
say() { printf '\n== %s (%ss left)\n' "$*" "$(left)"; }
PY=${PYTHON:-python}

say "machine"
if ! nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; then
    echo "nvidia-smi failed: no NVIDIA GPU here; nothing to check"; exit 2
fi
command -v nvcc >/dev/null && nvcc --version | tail -1 || echo "nvcc: not on PATH (TVM needs it: TVM_CUDA_COMPILE_MODE=nvcc)"
export TVM_CUDA_COMPILE_MODE=${TVM_CUDA_COMPILE_MODE:-nvcc}

say "install"
pipi() {   # GPU_CHECK_NO_INSTALL=1: use what is installed (a dry run on a CPU machine)
    [ -n "${GPU_CHECK_NO_INSTALL:-}" ] && return 1
    timeout "$1" "$PY" -m pip install -q --retries 1 --timeout 15 "${@:2}"
}
"$PY" -c "import opgen" 2>/dev/null || pipi 150 -e ".[test]" || echo "could not install opgen's dependencies"
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    # PyPI's Linux torch wheels are CUDA builds; the pinned CPU build (the torch extra) is not.
    pipi 240 --upgrade "torch>=2.5" || echo "no CUDA torch: torch baselines will be skipped"
fi
"$PY" -c "import liger_kernel" 2>/dev/null || pipi 60 --no-deps liger-kernel || echo "no Liger-Kernel"
"$PY" - <<'EOF'
import tvm, torch
from opgen.targets import cuda
print("torch", torch.__version__, "cuda available:", torch.cuda.is_available())
print("tvm", tvm.__version__, "cuda runtime:", tvm.runtime.enabled("cuda"), "opgen sees a GPU:", cuda.gpu_present())
EOF

say "CUDA tests"
timeout $(( $(left) > 200 ? 180 : $(left) / 2 )) "$PY" -m pytest -q -p no:cacheprovider tests/test_gpu_cuda.py \
    || echo "CUDA tests: FAILED (see above)"

say "benchmark"
if [ "$(left)" -gt 40 ]; then
    timeout $(( $(left) - 10 )) "$PY" scripts/gpu_bench.py --budget $(( $(left) - 30 )) \
        || echo "benchmark: exit $? (1: a kernel MISMATCH or a failed case, see its FAILED lines; 2: torch sees no GPU; 124: out of time)"
else
    echo "no time left for the benchmark"
fi
say "done in $(( $(date +%s) - START )) s"
