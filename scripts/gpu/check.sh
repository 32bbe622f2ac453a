#!/usr/bin/env bash
# The GPU check, from the offline bundle alone. Each stage fits one device call (10 min):
#
#   scripts/gpu/check.sh STAGE[:CHOICE,...] ...
#
# The gates, here:
#   smoke        the four variants, full size, dummy weights, CUDA graphs (patched build):
#                server up, /generate, /v1/chat/completions, KV pool sizes
#   bad-input    malformed and hostile requests against a server (default variant e2b)
#   access       who a patched server lets in (docs/access.md): admin routes, keys, CORS, the
#                websocket, client chat templates, redaction; one server without keys, one with
#                both (default variant e2b)
#   fuzz         generated hostile requests (gpu/fuzz.py) against a patched server (default variant
#                e2b): $FUZZ_REQUESTS (default 600) over /generate, /v1/completions and
#                /v1/chat/completions, streaming and not, seed $FUZZ_SEED (default random, recorded); PASS
#                needs 2xx/4xx answers only, the server alive, its KV pool drained, a good request answered
#   fuzz-routes  fuzzer v2 (gpu/fuzz.py --routes) against a patched server (default variant e2b) started
#                with an admin key: $FUZZ_ROUTE_REQUESTS (default 1000) generated requests to every route
#                of gpu/routes.py (raw HTTP abuse, disconnects, admin routes with and without the key),
#                witnesses alongside, seed $FUZZ_SEED; PASS needs no 5xx, no death, the pool drained, a
#                good request answered and no witness refused or aborted
#   sampling-fuzz  sampling values that can make probabilities NaN/inf (gpu/sampling_fuzz.py), in
#                rounds mixing them with good requests, against a patched server (default variant e2b):
#                $SAMPLING_FUZZ_REQUESTS (default 400), seed $FUZZ_SEED; PASS needs no 5xx, every good
#                request served, the server alive, its KV pool drained
#   gpu-tests    every patch's tests on the GPU against the bundle's patched tree (CUDA kernels
#                for real, and the `gpu`-marked cases CI skips; also the graph-replay timer's), or
#                the test files in $GPU_TESTS
#   serve        `make serve` as a user runs it (patched build): checkpoint made, served, one request
#   parity       reduced-layer random-weight checkpoints: pristine and patched vs transformers
#                (default all four variants, or $PARITY_BUILDS; e.g. parity:e2b,e4b); E2B/E4B also
#                with CUDA graphs off; $PARITY_FLAGS adds launch flags to every server (e.g. the
#                preset's FP8 KV: PARITY_FLAGS="--kv-cache-dtype fp8_e4m3")
#   repro        each crash_repro case (or repro:NAME) against the pristine and the patched build
#   ab           pristine vs patched, same call: chat 1000/1000 and batch-1 decode, or $AB_WORKLOADS
#                (default 26b-a4b; $AB_FLAGS replaces the server flags)
# PATCHED_ENV="KEY=VALUE ..." is given to the patched servers of parity and ab (opt-in switches).
#
# Every other stage is an experiment of python -m sglang_gemma4.gpu.run (its --list says what each
# runs and which knobs it reads): mtp, routing, kernels, profile, step-trace, memory, tp2-parity,
# tp2-ab, mtp-fill, mtp-ab, mtp-greedy, spec-step, yoco, moe-tune, coldstart, tiles, decode-tiles, opt-in-ab, tiles-ab, mm-ab, swa,
# kv-capacity, long, prefill-profile, baseline, verify-attention, gqa-pack, openai-suite, openai-suite-images,
# structured-cost, structured-throughput.
#
# Results and logs go to $OUT (default ./gpu-results) and, packed, to $OUT/results.tgz (the device
# tool returns few files); the tables are printed last. DRY_RUN=1 prints every command instead
# (and the sglang servers each would start), with no GPU and no bundle: test/harness/test_gpu_check.py
# checks them all.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PREFIX=${PREFIX:-/tmp/sglang-gemma4}  # where setup.sh installs the bundle
OUT=${OUT:-$PWD/gpu-results}
dry=${DRY_RUN:-}
# A module of this repository's harness (the servers it starts are what a dry run prints).
harness() { python3 -m "sglang_gemma4.gpu.$1" ${dry:+--dry-run} "${@:2}"; }
# A build's environment (its PYTHONPATH) with this repo's harness package on top; the env scripts are
# written on the GPU host by scripts/gpu/setup.sh.
use_build() {
  # shellcheck source=/dev/null
  [ -n "$dry" ] || . "$PREFIX/env-$1.sh"
  export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
}
if [ -z "$dry" ]; then
  RESULTS=$OUT
  mkdir -p "$RESULTS/results"
  trap 'tar -czf "$RESULTS/results.tgz" -C "$RESULTS" results' EXIT
  OUT=$RESULTS/results
  python3 -m pip list --format=freeze > "$OUT/host-pip-freeze.txt" 2>/dev/null || true
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
  bash scripts/gpu/setup.sh dist/bundle 2>&1 | tee "$OUT/setup.log"
fi
# The harness itself (checkpoints, transformers reference, bench client) runs on the pristine build's
# packages, so transformers is the release sglang pins on both sides of every comparison.
use_build pristine
preset() { python3 -m sglang_gemma4.gpu.presets "$1"; }  # a flag set of gpu/presets.py
small=$(preset SMALL_GRAPHS) bench=$(preset BENCH_GRAPHS)
mapfile -t small_graphs <<< "$small"
mapfile -t bench_graphs <<< "$bench"
read -ra patched_env <<< "${PATCHED_ENV:-}"
status=0  # a failing stage is reported, and the next stage still runs
for arg in "$@"; do
  stage=${arg%%:*}
  choice=()
  [ "$arg" = "$stage" ] || IFS=, read -ra choice <<< "${arg#*:}"
  case "$stage" in
    smoke) defaults=(26b-a4b e4b 31b e2b)
           harness smoke --out "$OUT/smoke" --build patched --variants "${choice[@]:-${defaults[@]}}" \
             -- "${small_graphs[@]}" || status=1 ;;
    bad-input) harness bad_input --start "${choice[0]:-e2b}" --out "$OUT/bad-input" || status=1 ;;
    access) harness access_check --variant "${choice[0]:-e2b}" --out "$OUT/access" || status=1 ;;
    fuzz) harness fuzz --start "${choice[0]:-e2b}" --out "$OUT/fuzz" --requests "${FUZZ_REQUESTS:-600}" \
            ${FUZZ_SEED:+--seed "$FUZZ_SEED"} || status=1 ;;
    fuzz-routes) harness fuzz --routes --start "${choice[0]:-e2b}" --out "$OUT/fuzz-routes" \
                   --requests "${FUZZ_ROUTE_REQUESTS:-1000}" ${FUZZ_SEED:+--seed "$FUZZ_SEED"} || status=1 ;;
    sampling-fuzz) harness sampling_fuzz --start "${choice[0]:-e2b}" --out "$OUT/sampling-fuzz" \
                     --requests "${SAMPLING_FUZZ_REQUESTS:-400}" ${FUZZ_SEED:+--seed "$FUZZ_SEED"} || status=1 ;;
    gpu-tests) tree=$PREFIX-tree  # the layout the tests expect: TREE/python/sglang
               read -ra tests <<< "${GPU_TESTS:-test/patches test/harness/test_cuda_timing.py}"
               if [ -n "$dry" ]; then
                 echo "patched: SGLANG_GEMMA4_TREE=$tree python3 -m pytest -q -p no:cacheprovider ${tests[*]}"
               else
                 mkdir -p "$tree/python" && ln -sfn "$PREFIX/patched/sglang" "$tree/python/sglang"
                 ( use_build patched
                   SGLANG_GEMMA4_TREE=$tree python3 -m pytest -q -p no:cacheprovider "${tests[@]}" ) 2>&1 |
                   tee "$OUT/gpu-tests.log" | tail -15 || status=1
               fi ;;
    serve) if [ -n "$dry" ]; then
             echo make serve "SERVE_FLAGS=-- ${small_graphs[*]}"
           else
             # shellcheck source=/dev/null
             ( . "$PREFIX/env-patched.sh"; exec setsid make serve SERVE_FLAGS="-- ${small_graphs[*]}" ) \
               > "$OUT/serve.log" 2>&1 &
             serve_pid=$!
             harness ask 2>&1 | tee "$OUT/serve-check.txt" || status=1
             kill -- -"$serve_pid" 2>/dev/null || true; wait "$serve_pid" 2>/dev/null || true
           fi ;;
    parity) defaults=(e2b e4b 26b-a4b 31b)
            read -ra builds <<< "${PARITY_BUILDS:-pristine patched}"
            harness parity --out "$OUT/parity" --variants "${choice[@]:-${defaults[@]}}" --builds "${builds[@]}" \
              --patched-env "${patched_env[@]}" --eager-variants e2b e4b --server-flags "${PARITY_FLAGS:-}" || status=1 ;;
    repro) read -ra cases <<< "$(python3 -c 'from sglang_gemma4.gpu.repro import CASES; print(*CASES)')"
           for case in "${choice[@]:-${cases[@]}}"; do
             for build in pristine patched; do
               # the pristine build is expected to crash: only the patched one must survive
               harness repro --case "$case" --build "$build" --out "$OUT/repro" ||
                 { [ "$build" = pristine ] || status=1; }
             done
           done ;;
    ab) read -ra workloads <<< "${AB_WORKLOADS:-chat batch1}"
        read -ra flags <<< "${AB_FLAGS:-${bench_graphs[*]}}"
        for v in "${choice[@]:-26b-a4b}"; do
          harness bench --variant "$v" --builds pristine patched --workloads "${workloads[@]}" \
            --out "$OUT/ab-$v" --patched-env "${patched_env[@]}" -- "${flags[@]}" || status=1
        done ;;
    *) harness run "$arg" --out "$OUT" || status=1 ;;
  esac
done
exit $status
