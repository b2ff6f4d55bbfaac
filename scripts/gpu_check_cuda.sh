#!/usr/bin/env bash
# The cuda backend on a machine with an NVIDIA GPU, in under 8 minutes on one H200:
#   1. the conformance suite on Device.cuda() (the `cuda` and `cuda+autodiff` params of
#      the `device` fixture) and the cuda tests (tests/cuda_backend: Philox against flex,
#      to_device, memory stats and OOM, cuBLAS, the seed program, CUDA Graph replays);
#   2. the PyTorch-parity, optimizer-trajectory and RNN tests on cuda+autodiff
#      (EMBER_PARITY_DEVICE);
#   3. benchmarks/gpu.py's cuda rows against torch CUDA.
# Nothing is installed: it needs a Python that has numpy, ml_dtypes, llvmlite, pytest,
# pytest-xdist, hypothesis, CuPy (cupy-cuda12x/13x), cuda-bindings and the NVRTC and
# cuBLAS libraries, and torch with CUDA for the parity rows (PYTHON=..., default python3).
# Logs go to $OUT (when set) or ./gpu-check-logs. Exits 0 with a reason where there is no
# GPU; otherwise non-zero if any part failed.
#   bash scripts/gpu_check_cuda.sh            # everything
#   QUICK=1 bash scripts/gpu_check_cuda.sh    # smaller benchmark sizes
set -uo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
LOGS=${OUT:-gpu-check-logs}
mkdir -p "$LOGS"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export EMBER_CUDA_CACHE=${EMBER_CUDA_CACHE:-/tmp/ember-cuda-cache}
WORKERS=${WORKERS:-$(( $(nproc) > 12 ? 12 : $(nproc) ))}

if ! "$PYTHON" - <<'EOF'
import sys
try:
    import cupy
    n = cupy.cuda.runtime.getDeviceCount()
except Exception as error:
    print(f"gpu_check_cuda: no CUDA GPU or CuPy ({error}); nothing to run")
    sys.exit(1)
props = cupy.cuda.runtime.getDeviceProperties(0)
print(f"gpu_check_cuda: {n} device(s); 0 = {props['name'].decode()} (sm_{props['major']}{props['minor']}), "
      f"CuPy {cupy.__version__}")
EOF
then
    exit 0
fi

status=0
run() {  # run NAME SECONDS COMMAND...: a part with a time limit, its log kept
    local name=$1 limit=$2
    shift 2
    local start=$SECONDS
    echo "== $name (limit ${limit}s)"
    timeout "$limit" "$@" > "$LOGS/$name.log" 2>&1
    local rc=$?
    tail -n 25 "$LOGS/$name.log"
    echo "== $name: exit $rc after $((SECONDS - start))s"
    [ $rc -eq 0 ] || status=1
}

# 1. Conformance suite and cuda tests on Device.cuda().
run conformance 240 "$PYTHON" -m pytest -q -n "$WORKERS" -p no:cacheprovider -k cuda \
    tests/tensor tests/nn tests/test_device.py tests/cuda_backend
# 2. Parity, optimizer and RNN tests with autodiff on cuda.
run parity 90 env EMBER_PARITY_DEVICE=cuda+autodiff "$PYTHON" -m pytest -q -n "$WORKERS" -p no:cacheprovider \
    tests/autodiff/test_torch_parity.py tests/optim/test_optimizers_torch.py\
    tests/nn/test_rnn.py
# 3. Benchmarks: cuda against torch cuda.
run benchmark 120 "$PYTHON" benchmarks/gpu.py --cuda ${QUICK:+--quick}

echo "gpu_check_cuda: $([ $status -eq 0 ] && echo passed || echo FAILED) in ${SECONDS}s; logs in $LOGS"
exit $status
