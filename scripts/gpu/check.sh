#!/usr/bin/env bash
# The GPU check, from the offline bundle alone. Each stage fits one device call (10 min):
#
#   scripts/gpu/check.sh STAGE [STAGE...]
#
#   smoke      the four variants, full size, dummy weights, decode CUDA graphs (patched build):
#              server up, /generate, /v1/chat/completions, KV pool sizes; the bad-input cases on 26b-a4b
#   parity     reduced-layer random-weight checkpoints: pristine and patched vs transformers
#   baseline   pristine 0.5.12 on the 26b-a4b shape: chat 1000/1000, summarization 8000/1000,
#              batch-1 decode
#   baseline-e4b  the same on the e4b shape
#
# Results and logs go to $OUT (default ./gpu-results) and, packed, to $OUT/results.tgz (the device
# tool returns few files); the tables are printed last.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-results}
RESULTS=$OUT
mkdir -p "$RESULTS/results"
trap 'tar -czf "$RESULTS/results.tgz" -C "$RESULTS" results' EXIT
OUT=$RESULTS/results
python3 -m pip list --format=freeze > "$OUT/host-pip-freeze.txt" 2>/dev/null || true
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
bash scripts/gpu/setup.sh dist/bundle 2>&1 | tee "$OUT/setup.log"
export PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1
export SGLANG_GEMMA4_PREFIX=${PREFIX:-/tmp/sglang-gemma4}
# Small capture sets keep each server start short; the benches below use the preset's.
SMOKE_FLAGS=(--cuda-graph-max-bs 8 --piecewise-cuda-graph-max-tokens 512)
for stage in "$@"; do
  case "$stage" in
    smoke) python3 -m sglang_gemma4.harness.smoke --out "$OUT/smoke" --build patched \
             --variants 26b-a4b e4b 31b e2b --bad-input 26b-a4b -- "${SMOKE_FLAGS[@]}" ;;
    parity) python3 -m sglang_gemma4.harness.parity --out "$OUT/parity" ;;
    baseline) python3 -m sglang_gemma4.harness.bench --variant 26b-a4b --builds pristine --out "$OUT/baseline-26b-a4b" ;;
    baseline-e4b) python3 -m sglang_gemma4.harness.bench --variant e4b --builds pristine --out "$OUT/baseline-e4b" ;;
    *) echo "check: unknown stage $stage" >&2; exit 2 ;;
  esac
done
