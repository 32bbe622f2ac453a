#!/usr/bin/env bash
# Reproduce on a GPU host with the bundle installed (scripts/gpu/setup.sh); see TRIAGE_REPORT.md.
#   crash_repro/nan-temperature/repro.sh pristine|patched OUT_DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=/dev/null  # written on the GPU host by scripts/gpu/setup.sh
. "${PREFIX:-/tmp/sglang-gemma4}/env-pristine.sh"
PYTHONPATH=$PWD/python:$PYTHONPATH exec python3 -m sglang_gemma4.gpu.checks.repro --case nan-temperature --build "$1" --out "$2"
