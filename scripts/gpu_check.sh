#!/usr/bin/env bash
# One-shot GPU check of the CUDA reference kernels (KERNELS_SPEC.md §5-§7), for the device tool:
#
#   run(command="bash scripts/gpu_check.sh", carry=[".whl"], timeout_s=420)
#
# Carry `.whl` (git-ignored) holding a libcst wheel for the GPU image's Python 3.12: its image has
# no libcst and nothing can be installed there, and the verify step's fixer needs it. Make it here
# once (pyyaml, libcst's only requirement, is on the image):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .whl libcst==1.9.0
# Without it the kernel checks still run and the verify steps are reported as failed.
# Nothing else needs carrying: NVRTC compiles kernels_ref/cuda there in seconds (cache:
# kernels_ref/.build, git-ignored). Results: $OUT/gpu_check.json (written after every step, so a
# run cut short still reports), $OUT/gpu_check.log, $OUT/nvidia-smi.csv. Extra arguments go to
# gpu_check.py (e.g. --cuda-backends all, --scenarios G2, --skip-verify).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
OUT="${OUT:-/tmp/gpu_check_out}"
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/dtl_site .whl/*.whl \
    && export PYTHONPATH="/tmp/dtl_site${PYTHONPATH:+:$PYTHONPATH}"
fi
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv >"$OUT/nvidia-smi.csv" 2>&1 || true
timeout "${GPU_CHECK_TIMEOUT:-400}" "$PY" kernels_ref/harness/gpu_check.py --out "$OUT" "$@" 2>&1 | tee "$OUT/gpu_check.log"
exit "${PIPESTATUS[0]}"
