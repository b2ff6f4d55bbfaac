#!/usr/bin/env bash
# Checks that the compiler's tests can see a broken lowering (issue 25, item 5): for
# each target (LLVM, WGSL, CUDA C), its lowering is made to raise (tests/break_lowering.py)
# and its tests must fail; a plan whose lowering raises replays op by op, which is
# those tests' oracle, so tests that still pass would not be testing the lowering.
# CI runs it after the suite (.ci/run). Usage: bash scripts/check_lowering_breaks.sh [python]
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON="${1:-.venv/bin/python}"

declare -A TESTS=(
  [llvm]="tests/fusion/test_library.py tests/fusion/test_donation.py tests/capture/test_compile.py"
  [wgsl]="tests/fusion/test_wgsl.py tests/capture/test_compile_wgpu.py"
  [cuda]="tests/cuda_backend/test_fused_lowering.py tests/cuda_backend/test_recording.py"
)
# The fewest failures each target must show (measured: most of each file's tests lower).
declare -A MIN_FAILED=([llvm]=50 [wgsl]=10 [cuda]=3)

status=0
for target in llvm wgsl cuda; do
  # shellcheck disable=SC2086
  out=$(EMBER_TEST_BREAK_LOWERING=$target "$PYTHON" -m pytest -p tests.break_lowering -p no:cacheprovider \
    -q -n 2 -m "not slow" ${TESTS[$target]} 2>&1)
  summary=$(printf '%s\n' "$out" | tail -n 1)
  failed=$(printf '%s\n' "$summary" | grep -oE '[0-9]+ (failed|error)' | awk '{s += $1} END {print s + 0}')
  if [ "$failed" -lt "${MIN_FAILED[$target]}" ]; then
    echo "check_lowering_breaks: $target: only $failed test(s) failed with the lowering broken (want >= ${MIN_FAILED[$target]}): $summary"
    status=1
  else
    echo "check_lowering_breaks: $target: $failed test(s) failed with the lowering broken, as they must ($summary)"
  fi
done
exit $status
