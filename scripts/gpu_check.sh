#!/usr/bin/env bash
# First, on a machine with an NVIDIA GPU, the cuda backend's checks (scripts/gpu_check_cuda.sh:
# the conformance suite, parity and optimizer tests on Device.cuda() and benchmarks/gpu.py's
# cuda rows, within 8 minutes; logs in OUT_DIR/cuda; EMBER_SKIP_CUDA=1 leaves them out).
# Then it runs benchmarks/gpu.py on a real GPU through Vulkan, when this machine has one:
# ember's generated kernels against the hand-written references, each matmul template
# forced on each shape (the data behind kernels/matmul.py's thresholds), 4096^3 against
# PyTorch's cuBLAS when torch has CUDA, and optionally the kernels of another checkout.
#
#   bash scripts/gpu_check.sh [OUT_DIR] [extra benchmarks/gpu.py arguments...]
#
# OUT_DIR (default: artifacts/gpu) receives gpu.json and gpu.log. Environment:
#   PYTHON          the interpreter (default: python3); it needs numpy and ml_dtypes
#   EMBER_WHEELS    wheel files to install when wgpu is missing (default: .whl/)
#   EMBER_DEBS      Vulkan loader .deb files to unpack when it is missing (default: .gl/)
#   EMBER_BASELINE  another ember checkout to time as "today" (optional)
#   EMBER_ALLOW_CPU=1  run even when the only adapter is a CPU one (to try this script)
#
# It needs no package registry: a missing wgpu is installed with pip --no-index from
# the wheel files alone (wgpu, cffi, pycparser, rendercanvas) into a temporary
# directory, and a missing Vulkan loader is unpacked from .deb files (as root). Fetch
# them beforehand where a registry is reachable, for the target's Python and platform:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
#       -d .whl wgpu==0.32.0 cffi pycparser rendercanvas
# Without wgpu, a Vulkan loader or a GPU adapter it says what is missing and exits 0:
# nothing depends on this script.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python3}
OUT=${1:-artifacts/gpu}
[ $# -gt 0 ] && shift
mkdir -p "$OUT"
WHEELS=${EMBER_WHEELS:-.whl}
DEBS=${EMBER_DEBS:-.gl}
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

CUDA_STATUS=0
if [ "${EMBER_SKIP_CUDA:-0}" != 1 ]; then
    OUT="$OUT/cuda" PYTHON="$PY" bash scripts/gpu_check_cuda.sh || CUDA_STATUS=1
fi
trap '[ "$CUDA_STATUS" = 0 ] || exit 1' EXIT  # a failed cuda check fails the script, whatever follows

if ! "$PY" -c "import wgpu" 2>/dev/null; then
    if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
        SITE=$(mktemp -d)
        echo "gpu_check: installing $(ls "$WHEELS"/*.whl | xargs -n1 basename | tr '\n' ' ')into $SITE"
        PIP_ROOT_USER_ACTION=ignore "$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps \
            --no-compile --no-cache-dir --target "$SITE" "$WHEELS"/*.whl \
            || { echo "gpu_check: the wheels in $WHEELS did not install; nothing run"; exit 0; }
        export PYTHONPATH="$ROOT:$SITE${PYTHONPATH#"$ROOT"}"
    else
        echo "gpu_check: $PY has no wgpu and $WHEELS holds no wheels; nothing run"
        exit 0
    fi
fi

if command -v ldconfig >/dev/null && ! ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1'; then
    if [ "$(id -u)" = 0 ] && command -v dpkg >/dev/null && ls "$DEBS"/*.deb >/dev/null 2>&1; then
        for f in "$DEBS"/*.deb; do dpkg -x "$f" /; done
        ldconfig
    fi
    if ! ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1'; then
        echo "gpu_check: no Vulkan loader (libvulkan.so.1) and none to unpack from $DEBS; nothing run"
        exit 0
    fi
fi

probe() {  # prints one line per adapter: type, backend, name
    "$PY" - <<'EOF' 2>/dev/null
import wgpu
for a in wgpu.gpu.enumerate_adapters_sync():
    i = a.info
    print(i.get("adapter_type"), i.get("backend_type"), i.get("device") or i.get("description"), sep=" | ")
EOF
}
has_gpu() { grep -E -q '^(DiscreteGPU|IntegratedGPU|VirtualGPU) \| Vulkan' <<<"$1"; }

ADAPTERS=$(probe)
NV_ICD=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if ! has_gpu "$ADAPTERS" && [ -f "$NV_ICD" ] && [ -z "${VK_DRIVER_FILES:-}" ]; then
    # NVIDIA's container runtime mounts its Vulkan driver outside the loader's search path.
    export VK_DRIVER_FILES=$NV_ICD VK_ICD_FILENAMES=$NV_ICD
    NV_EGL=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
    [ -f "$NV_EGL" ] && export __EGL_VENDOR_LIBRARY_FILENAMES=$NV_EGL
    ADAPTERS=$(probe)
fi
echo "gpu_check: adapters:"
echo "${ADAPTERS:-  (none)}" | sed 's/^/  /'
ARGS=(--variants --json "$OUT/gpu.json")
if has_gpu "$ADAPTERS"; then
    KIND=default  # a discrete GPU first, then an integrated or virtual one
    ARGS+=(--large --kind "$KIND")
elif [ "${EMBER_ALLOW_CPU:-0}" = 1 ] && [ -n "$ADAPTERS" ]; then
    ARGS+=(--quick)
    echo "gpu_check: no GPU adapter; EMBER_ALLOW_CPU=1: running on the CPU adapter (a proxy, quick sizes)"
else
    echo "gpu_check: no GPU adapter on Vulkan; nothing run (EMBER_ALLOW_CPU=1 runs on a CPU adapter)"
    exit 0
fi
[ -n "${EMBER_BASELINE:-}" ] && ARGS+=(--baseline "$EMBER_BASELINE")
echo "gpu_check: $PY benchmarks/gpu.py ${ARGS[*]} $*"
"$PY" benchmarks/gpu.py "${ARGS[@]}" "$@" 2>&1 | grep -v 'XDG_RUNTIME_DIR' | tee "$OUT/gpu.log"
exit "${PIPESTATUS[0]}"
