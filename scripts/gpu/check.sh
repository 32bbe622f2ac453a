#!/usr/bin/env bash
# The GPU check, from the offline bundle alone. Each stage fits one device call (10 min):
#
#   scripts/gpu/check.sh STAGE[:CHOICE,...][:KEY=VALUE]... ...
#
# e.g. `check.sh smoke parity:e2b,e4b fuzz:requests=1000:seed=7`. The stages, what each runs and its
# arguments: python/sglang_gemma4/gpu/stages/table.py, or `PYTHONPATH=python python3 -m
# sglang_gemma4.gpu.run --list`. The gates: smoke, bad-input, access, fuzz, fuzz-routes, sampling-fuzz,
# gpu-tests, serve, parity, repro, ab; every other stage is an experiment.
#
# Results and logs go to $OUT/results (default OUT=./gpu-results) and, packed after each stage and when
# the run ends or is stopped, to $OUT/results.tgz (the device tool returns few files); the tables are
# printed last. DRY_RUN=1 prints every command instead (and the sglang servers each would start), with
# no GPU and no bundle: test/gpu/test_run.py checks them all. $PREFIX: where setup.sh installs
# the bundle (default /tmp/sglang-gemma4). $SGLANG_GEMMA4_PORT: where its servers listen (default
# 30000): another port and CUDA_VISIBLE_DEVICES let a second run share a machine's other GPUs.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PREFIX=${PREFIX:-/tmp/sglang-gemma4}
export SGLANG_GEMMA4_PREFIX=$PREFIX  # where the harness finds each build's env script
PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH} exec python3 -m sglang_gemma4.gpu.run \
  --out "${OUT:-$PWD/gpu-results}" ${DRY_RUN:+--dry-run} --host-setup "$@"
