#!/usr/bin/env bash
# Reproduce on CPU (no GPU): 0256's tests replay the allocation that killed the server (see
# TRIAGE_REPORT.md). They pass on the series; without 0256 the chunk's allocation raises
# "Out of memory" as on the H200.
#   crash_repro/unified-pool-joint-eviction/repro.sh   (after `make test` built .venv-test)
set -euo pipefail
cd "$(dirname "$0")/../.."
exec .venv-test/bin/python -m pytest -q -m "not gpu" \
  test/patches/test_0256_unified_swa_evicts_for_joint_budget.py
