#!/usr/bin/env bash
# The project's check on a machine with a CUDA GPU, as one prepared script (under 8 minutes):
# the device tests on the GPU (tests/test_devices.py, the cuda ones), then the training words/s of
# three presets against fairseq's own models of their size (examples/gpu_check.py), every figure
# in one folder (default work/gpu_check); the exit status is gpu_check.py's (1: a test failed).
# Without a GPU it says so and exits 0 having run nothing.
#   bash examples/gpu_check.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
out=${1:-work/gpu_check}
if ! "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "gpu_check: skipped: torch sees no CUDA device on this machine (torch.cuda.is_available() is False); nothing was run"
  exit 0
fi
mkdir -p "$out"
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  "$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
} > "$out/machine.txt"
status=0
timeout 460 "$python" examples/gpu_check.py --tests "$out/tests.txt" --out "$out/training.tsv" --work "$out/data" \
  || status=$?
cat "$out/machine.txt" "$out/tests.txt" "$out/training.tsv" 2>/dev/null || true
exit "$status"
