#!/usr/bin/env bash
# One-shot GPU check of the CUDA reference kernels (docs/kernels.md, "The GPU check"), for the
# device tool:
#
#   dtype-lint verify --emit-variants .dtl_variants       # here first: fixer output + vLLM's functions
#   run(command="bash scripts/gpu_check.sh", carry=[".dtl_variants"], timeout_s=270)
#   bash scripts/gpu_check.sh --device cpu                # the same run on this machine's CPU (dry run)
#
# The GPU machine has nothing of this project installed, no libcst, no vLLM trees and no registry:
# the package is made importable from this checkout by scripts/pkgroot.py, and `.dtl_variants`
# (git-ignored) carries what needs libcst and the trees (the fixer's pre/post/helper of the fixture
# and of vLLM 0.27.1, vLLM 0.28.0's functions). Without it the kernel checks and the fixture's
# matrix still run and the upstream steps are recorded as failed.
# NVRTC is looked up in the CUDA wheels on sys.path (nvidia/cu13, nvidia/cuda_nvrtc), then
# $CUDA_HOME, /usr/local/cuda*, the loader path; cubins are cached in kernels_ref/.build.
# Results: $OUT/gpu_check.json (rewritten after every step, so a run cut short still reports),
# $OUT/gpu_check.log, $OUT/nvidia-smi.csv. Before any device work it prints what it found (Python,
# torch, CUDA, CuPy, NVRTC, libcst, the saved variants, checked) and what it will run, and stops
# with exit 2 if something it needs is missing. It stops starting verify passes after --budget-s
# (default 150 s) and is killed at GPU_CHECK_TIMEOUT (default 240 s): with a machine start, a run
# and one rerun fit in 15 minutes of device time.
# Extra arguments go to gpu_check (e.g. --device cpu for the dry run, --scenarios G2).
set -uo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
export PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
case "$PY" in */*) PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")" ;; esac  # the script changes folder
OUT="${OUT:-/tmp/gpu_check_out}"
mkdir -p "$OUT"
PKG="$(mktemp -d "${TMPDIR:-/tmp}/dtl_pkg.XXXXXX")"
trap 'rm -rf "$PKG"' EXIT
"$PY" "$REPO/scripts/pkgroot.py" "$PKG" >/dev/null || exit 2
export PYTHONPATH="$PKG${PYTHONPATH:+:$PYTHONPATH}"
# Run from the package root: `python -m` puts the current folder first on sys.path, and the
# checkout's own dtype_lint/ (without kernels_ref/) must not win over the assembled package.
cd "$PKG"
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv >"$OUT/nvidia-smi.csv" 2>&1 || true
VARIANTS=()
VARIANTS_DIR="${DTL_VARIANTS:-$REPO/.dtl_variants}"
if [ -f "$VARIANTS_DIR/variants.json" ]; then
  VARIANTS=(--variants "$VARIANTS_DIR")
fi
export GPU_CHECK_TIMEOUT="${GPU_CHECK_TIMEOUT:-240}"
timeout "$GPU_CHECK_TIMEOUT" "$PY" -m dtype_lint.kernels_ref.harness.gpu_check --out "$OUT" "${VARIANTS[@]}" "$@" 2>&1 \
  | tee "$OUT/gpu_check.log"
exit "${PIPESTATUS[0]}"
