#!/usr/bin/env bash
# Reproduce on CPU (no GPU): the three patches' tests that replay what killed the server (see
# TRIAGE_REPORT.md). They pass on the series; revert a fix in work/sglang to see its error.
#   crash_repro/unified-pool-long-prompt/repro.sh   (after `make test` built .venv-test)
set -euo pipefail
cd "$(dirname "$0")/../.."
exec .venv-test/bin/python -m pytest -q -m "not gpu" \
  test/patches/test_0185_triton_extend_attention_gemm.py::test_the_unified_pools_buffers \
  test/patches/test_0163_swa_free_window_without_sync.py::test_the_unified_pool_frees_the_passed_window_of_a_request \
  test/patches/test_0105_triton_extend_attention_gqa_packed.py::test_the_unified_pools_buffers_match_float32
