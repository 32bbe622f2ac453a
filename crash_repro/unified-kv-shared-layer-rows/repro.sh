#!/usr/bin/env bash
# Reproduce on CPU (no GPU): 0266's test gives a KV-shared layer's extend the unified pool's
# page-major views (see TRIAGE_REPORT.md). It passes on the series; without 0266 the rows reach
# the kernels 4-D (page size 1) or the index runs past the pages (page size 4).
#   crash_repro/unified-kv-shared-layer-rows/repro.sh   (after `make test` built .venv-test)
set -euo pipefail
cd "$(dirname "$0")/../.."
exec .venv-test/bin/python -m pytest -q -m "not gpu" \
  test/patches/test_0266_unified_kv_shared_layers_read_rows.py
