#!/usr/bin/env bash
# The GPU check, from the offline bundle alone. Each stage fits one device call (10 min):
#
#   scripts/gpu/check.sh STAGE[:VARIANT,...] ...
#
#   smoke        the four variants, full size, dummy weights, CUDA graphs (patched build):
#                server up, /generate, /v1/chat/completions, KV pool sizes
#   mtp          the MTP preset: 26B-A4B-shaped target + assistant draft, full size, dummy weights
#                (pristine, then patched)
#   bad-input    malformed and hostile requests against a server (default variant e2b)
#   gpu-tests    every patch's tests on the GPU against the bundle's patched tree (CUDA kernels
#                for real, and the `gpu`-marked cases CI skips; also the graph-replay timer's), or
#                the test files in $GPU_TESTS
#   routing      patch 0020's kernel vs the torch routing ops, CUDA-graph replayed, T = 1..512
#   serve        `make serve` as a user runs it (patched build): checkpoint made, served, one request
#   parity       reduced-layer random-weight checkpoints: pristine and patched vs transformers
#                (default all four variants; e.g. parity:e2b,e4b); E2B/E4B also with CUDA graphs off
#   repro        each crash_repro case (or repro:NAME) against the pristine and the patched build
#   ab           pristine vs patched, same call: chat 1000/1000 and batch-1 decode, or $AB_WORKLOADS
#                (default 26b-a4b)
#   kernels      the fused kernels (0020, 0030, 0040) off vs on, patched build, same call:
#                batch-1 decode and chat 1000/1000, or $KERNEL_WORKLOADS (default 26b-a4b; graphs up
#                to batch 64, as decode-burst runs 64 requests); $KERNELS_OFF replaces the kill
#                switches of the "unfused" side, e.g. one patch's switch alone; $KERNEL_FLAGS the server flags
#   profile      one decode step at batch 1, 4, 16, 64: graph step time and per-kernel attribution,
#                pristine then patched or $PROFILE_BUILDS (default 26b-a4b; e.g. profile:26b-a4b,31b,e4b); $PROFILE_ENV
#                (KEY=VALUE ...) adds a third, patched with that environment, e.g. a kill switch; $PROFILE_BATCH_SIZES
#                replaces the batch sizes (31B at batch 64 does not fit one H100's KV pool: "1 4 16 32")
#   step-trace   one request decoding on the served build, torch profiler (GPU activity) over 60 scheduler
#                steps: per step the period, the CUDA graph's span, kernels outside it and the GPU's idle
#                time, i.e. whether a decode step waits on the GPU or on the scheduler (harness/step_trace.py);
#                pristine then patched, or the setups in $TRACE_SETUPS ('NAME=BUILD [KEY=VALUE ...]', ';'
#                between them; default variant 26b-a4b)
#   memory       weight memory and KV pool per build, model runner only (harness/memory.py): the
#                conditional class at --mem-fraction-static 0.85 (towers built or not, default 31b,e4b),
#                then dense causal 31B with sglang's own memory settings (patch 0011's defaults)
#   tp2-parity   tensor parallel 2 (nvidia-h200-x2), patched build, reduced-layer 31B vs transformers:
#                FlashInfer allreduce + RMSNorm fusion on (0060/0070) and off
#   tp2-ab       tensor parallel 2, full 31B shape, patched build: setups fused (default), unfused
#                (--enforce-disable-flashinfer-allreduce-fusion), no-custom-ar (--disable-custom-all-reduce;
#                patch 0003's JIT all-reduce off); e.g. tp2-ab:fused,unfused; $TP2_WORKLOADS (default chat)
#   mtp-fill     issue #6's GPU check: the MTP preset (26B-A4B target + assistant draft, patched build)
#                under summarization 8000/1000 x 80, which fills the SWA pool, and chat 1000/1000; MTP off
#                then on, same call ($MTP_WORKLOADS picks workloads, $MTP_SETUPS the order or one side,
#                $MTP_ENV adds KEY=VALUE pairs, e.g. SGLANG_TRTLLM_MHA_DEBUG=1); pool usage over time
#   yoco         patch 0080 (on by default): E2B/E4B (default both) parity vs transformers with
#                SGLANG_GEMMA4_YOCO=1 (graphs off, so prefills are eligible), whole and in 256-token
#                chunks, then A/B off vs on with the radix cache and piecewise graphs off: prefill
#                30 x 7000/10 and decode 64 x 100/1000 ($YOCO_WORKLOADS)
#   moe-tune     the fused-MoE kernel configs for 26B-A4B on this GPU (sglang_gemma4.gpu.tune_gemma4_moe,
#                $MOE_TUNE_ARGS), then batch-1 and chat with sglang's shipped configs vs the tuned file
#                (SGLANG_MOE_CONFIG_DIR), patched build, same call
#   coldstart    issue #10 part 3: the server started with the launch preset's own capture sizes (default variant
#                26b-a4b; $COLDSTART_FLAGS adds flags); $COLDSTART_STARTS picks and orders the starts (default
#                cold-no-prebuild cold warm): cold-pristine (pristine build, no prebuild) and cold-no-prebuild /
#                cold (patched, prebuild off / on) on empty compile caches (Triton, sglang's JIT, FlashInfer's JIT,
#                inductor), warm (patched) on the caches the last start filled. The caches live under /tmp, not
#                $OUT, so a warm start may follow in the next call while the machine is held. Start-time
#                breakdown of each and what the last start compiled (harness/compile_caches.py)
#   tiles        the Triton extend-attention kernel on Gemma-4 shapes: a grid of tiles vs the shipped one
#                (sglang_gemma4.gpu.bench_extend_attention_tiles; $TILE_CASES picks cases)
#   decode-tiles the Triton decode attention (stage 1's tile, the KV-split cap) on Gemma-4 shapes at batch
#                1-64 and contexts 256-8000 vs the shipped launch (sglang_gemma4.gpu.bench_decode_attention_tiles)
#   opt-in-ab    the patched build as it is (setup "off"), then with each switch of $OPT_IN alone
#                (KEY=VALUE, e.g. a kill switch SGLANG_OPT_GEMMA4_MOE_DUAL_STREAM=0, or a --server-flag,
#                e.g. sglang's --enable-fused-moe-sum-all-reduce), same call: batch-1 decode and
#                chat, or $OPT_IN_WORKLOADS (default variant 26b-a4b)
#   tiles-ab     patch 0100 (Hopper extend-attention tiles) off vs on, patched build, same call, on the full
#                26B-A4B shape: MTP off (tiles-ab:off) and/or on (tiles-ab:on), default both;
#                $TILES_AB_WORKLOADS (default summarization)
#   mm-ab        pristine vs patched, same call, serving images (patch 0090: batched vision encoder): a
#                config-only --arch conditional checkpoint with its processor (default variant e2b),
#                dummy weights, $MM_WORKLOADS (default images-6: 6 random 720p images per prompt); a third
#                setup, patched with YOCO and the PLE tail off, leaves mostly 0090 against pristine
#   swa          issue #9's SWA pool study on the full 26B-A4B shape, patched build: summarization
#                8000/1000 x 80 and chat 1000/1000 per setup (default r0.8,r0.15; the others add
#                the leaf-lock release (-leaf) or --disable-radix-cache (-noradix)), into $OUT/swa;
#                piecewise graphs off for a shorter start (prefill speed is not what it compares);
#                $SWA_WORKLOADS picks workloads
#   baseline     pristine sglang benchmarks: chat 1000/1000, summarization 8000/1000, batch-1
#                decode (default variant 26b-a4b; e.g. baseline:e4b)
#
# PATCHED_ENV="KEY=VALUE ..." is given to the patched servers of parity and ab (opt-in switches);
# AB_FLAGS replaces ab's server flags (default --cuda-graph-max-bs-decode 32).
# Results and logs go to $OUT (default ./gpu-results) and, packed, to $OUT/results.tgz (the device
# tool returns few files); the tables are printed last.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PREFIX=${PREFIX:-/tmp/sglang-gemma4}  # where setup.sh installs the bundle
OUT=${OUT:-$PWD/gpu-results}
RESULTS=$OUT
mkdir -p "$RESULTS/results"
trap 'tar -czf "$RESULTS/results.tgz" -C "$RESULTS" results' EXIT
OUT=$RESULTS/results
python3 -m pip list --format=freeze > "$OUT/host-pip-freeze.txt" 2>/dev/null || true
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
bash scripts/gpu/setup.sh dist/bundle 2>&1 | tee "$OUT/setup.log"
# The harness itself (checkpoints, transformers reference, bench client) runs on the pristine build's
# packages, so transformers is the release sglang pins on both sides of every comparison.
# A build's environment (its PYTHONPATH) with this repo's harness package on top.
use_build() { . "$PREFIX/env-$1.sh"; export PYTHONPATH=$PWD/python:$PYTHONPATH; }
use_build pristine
# Small capture sets keep each server start short; the benches below use the preset's.
SMOKE_FLAGS=(--cuda-graph-max-bs-decode 8 --cuda-graph-max-bs-prefill 512)
status=0  # a failing stage is reported, and the next stage still runs
for arg in "$@"; do
  stage=${arg%%:*}
  variants=$( [ "$arg" != "$stage" ] && echo "${arg#*:}" | tr ',' ' ' || true)
  case "$stage" in
    smoke) python3 -m sglang_gemma4.gpu.smoke --out "$OUT/smoke" --build patched \
             --variants ${variants:-26b-a4b e4b 31b e2b} -- "${SMOKE_FLAGS[@]}" || status=1 ;;
    bad-input) python3 -m sglang_gemma4.gpu.bad_input --start "${variants:-e2b}" --out "$OUT/bad-input" || status=1 ;;
    mtp) for build in pristine patched; do
           python3 -m sglang_gemma4.gpu.smoke --out "$OUT/mtp" --build $build --mtp \
             --variants ${variants:-26b-a4b} -- "${SMOKE_FLAGS[@]}" || { [ $build = pristine ] || status=1; }
         done ;;
    gpu-tests) tree=$PREFIX-tree  # the layout the tests expect: TREE/python/sglang
               mkdir -p "$tree/python" && ln -sfn "$PREFIX/patched/sglang" "$tree/python/sglang"
               ( use_build patched
                 SGLANG_GEMMA4_TREE=$tree python3 -m pytest -q -p no:cacheprovider \
                   ${GPU_TESTS:-test/patches test/harness/test_cuda_timing.py} ) 2>&1 |
                 tee "$OUT/gpu-tests.log" | tail -15 || status=1 ;;
    routing) ( use_build patched
               python3 -m sglang_gemma4.gpu.bench_gemma4_routing --out "$OUT/routing" ) || status=1 ;;
    serve) ( . "$PREFIX/env-patched.sh"; exec setsid make serve \
               SERVE_FLAGS="-- --cuda-graph-max-bs-decode 8 --cuda-graph-max-bs-prefill 512" ) > "$OUT/serve.log" 2>&1 &
           serve_pid=$!
           python3 -m sglang_gemma4.gpu.ask 2>&1 | tee "$OUT/serve-check.txt" || status=1
           kill -- -"$serve_pid" 2>/dev/null || true; wait "$serve_pid" 2>/dev/null || true ;;
    parity) python3 -m sglang_gemma4.gpu.parity --out "$OUT/parity" --variants ${variants:-e2b e4b 26b-a4b 31b} \
              --builds ${PARITY_BUILDS:-pristine patched} --patched-env ${PATCHED_ENV:-} \
              --eager-variants e2b e4b || status=1 ;;
    repro) all_cases=$(python3 -c 'from sglang_gemma4.gpu.repro import CASES; print(*CASES)')
           for case in ${variants:-$all_cases}; do
             for build in pristine patched; do
               # the pristine build is expected to crash: only the patched one must survive
               python3 -m sglang_gemma4.gpu.repro --case "$case" --build "$build" --out "$OUT/repro" ||
                 { [ "$build" = pristine ] || status=1; }
             done
           done ;;
    ab) for v in ${variants:-26b-a4b}; do
          python3 -m sglang_gemma4.gpu.bench --variant "$v" --builds pristine patched --workloads ${AB_WORKLOADS:-chat batch1} \
            --out "$OUT/ab-$v" --patched-env ${PATCHED_ENV:-} -- ${AB_FLAGS:---cuda-graph-max-bs-decode 32} || status=1
        done ;;
    step-trace) setups=(--builds pristine patched)
                if [ -n "${TRACE_SETUPS:-}" ]; then
                  setups=(--builds); IFS=';' read -ra specs <<< "$TRACE_SETUPS"
                  for spec in "${specs[@]}"; do setups+=(--config "$spec"); done
                fi
                for v in ${variants:-26b-a4b}; do
                  python3 -m sglang_gemma4.gpu.step_trace --variant "$v" --out "$OUT/step-trace-$v" "${setups[@]}" \
                    || status=1
                done ;;
    kernels) unfused=${KERNELS_OFF:-SGLANG_OPT_USE_FUSED_GEMMA4_ROUTING=0 SGLANG_OPT_USE_FUSED_GEMMA4_PLE_TAIL=0
               SGLANG_OPT_USE_FUSED_GEMMA4_MOE_NORMS=0}
             for v in ${variants:-26b-a4b}; do
               python3 -m sglang_gemma4.gpu.bench --variant "$v" --out "$OUT/kernels-$v" --workloads ${KERNEL_WORKLOADS:-batch1 chat} \
                 --config "unfused=patched $unfused" --config "fused=patched" -- ${KERNEL_FLAGS:---cuda-graph-max-bs-decode 64} || status=1
             done ;;
    profile) batches=${PROFILE_BATCH_SIZES:+--batch-sizes $PROFILE_BATCH_SIZES}
             for v in ${variants:-26b-a4b}; do
               for build in ${PROFILE_BUILDS:-pristine patched}; do
                 python3 -m sglang_gemma4.gpu.profile --variant "$v" --out "$OUT/profile" --build $build $batches ||
                   status=1
               done
               [ -z "${PROFILE_ENV:-}" ] || python3 -m sglang_gemma4.gpu.profile --variant "$v" --out "$OUT/profile" \
                 --build patched --label patched-env --env $PROFILE_ENV $batches || status=1
             done ;;
    memory) python3 -m sglang_gemma4.gpu.memory --out "$OUT/memory" --variants ${variants:-31b e4b} \
              --archs conditional --memory explicit || status=1
            python3 -m sglang_gemma4.gpu.memory --out "$OUT/memory" --variants 31b --archs causal \
              --memory auto || status=1 ;;
    tp2-parity) # sglang serves TP unfused, with only a warning, when flashinfer.comm does not import
                if ! ( use_build patched; python3 -c "import flashinfer.comm" ) > "$OUT/flashinfer-comm.txt" 2>&1; then
                  echo "check: flashinfer.comm does not import, so the fused side would run unfused:" >&2
                  tail -3 "$OUT/flashinfer-comm.txt" >&2; status=1
                fi
                for mode in fused unfused; do
                  flags="--tp-size 2"; [ $mode = fused ] || flags+=" --enforce-disable-flashinfer-allreduce-fusion"
                  python3 -m sglang_gemma4.gpu.parity --variants ${variants:-31b} --builds patched \
                    --out "$OUT/tp2-parity-$mode" --server-flags "$flags" || status=1
                done ;;
    tp2-ab) declare -A tp2_setups=([fused]="" [unfused]="--enforce-disable-flashinfer-allreduce-fusion"
                                   [no-custom-ar]="--disable-custom-all-reduce")
            setups=()
            for name in ${variants:-fused unfused}; do
              [ -n "${tp2_setups[$name]+set}" ] || { echo "check: unknown tp2-ab setup $name" >&2; exit 2; }
              setups+=(--config "$name=patched ${tp2_setups[$name]}")
            done
            python3 -m sglang_gemma4.gpu.bench --variant 31b --out "$OUT/tp2-ab" "${setups[@]}" \
              --workloads ${TP2_WORKLOADS:-chat} -- --tp-size 2 --cuda-graph-max-bs-decode 32 --cuda-graph-backend-prefill disabled ||
              status=1 ;;
    mtp-fill) for mtp in ${MTP_SETUPS:-off on}; do
                python3 -m sglang_gemma4.gpu.bench --variant 26b-a4b --out "$OUT/mtp-fill" \
                  $([ $mtp = on ] && echo --mtp) --config "mtp-$mtp=patched ${MTP_ENV:-}" \
                  --workloads ${MTP_WORKLOADS:-summarization-80 chat} -- --cuda-graph-max-bs-decode 32 \
                  --cuda-graph-backend-prefill disabled || status=1
              done
              python3 -m sglang_gemma4.gpu.bench --variant 26b-a4b --out "$OUT/mtp-fill" --summarize-only ;;
    yoco) for v in ${variants:-e2b e4b}; do
            python3 -m sglang_gemma4.gpu.parity --variants "$v" --builds patched-eager \
              --patched-env SGLANG_GEMMA4_YOCO=1 --out "$OUT/yoco-parity" || status=1
            # 256-token chunks: later chunks extend a cached prefix, as a radix-cache hit does
            python3 -m sglang_gemma4.gpu.parity --variants "$v" --builds patched-eager \
              --patched-env SGLANG_GEMMA4_YOCO=1 --server-flags "--chunked-prefill-size 256" \
              --out "$OUT/yoco-parity-chunked" || status=1
            python3 -m sglang_gemma4.gpu.bench --variant "$v" --out "$OUT/yoco-$v" \
              --workloads ${YOCO_WORKLOADS:-long-prefill decode-burst} --config "off=patched SGLANG_GEMMA4_YOCO=0" \
              --config "on=patched SGLANG_GEMMA4_YOCO=1" -- --disable-radix-cache \
              --cuda-graph-backend-prefill disabled --cuda-graph-max-bs-decode 64 || status=1
          done ;;
    moe-tune) ( use_build patched
                python3 -m sglang_gemma4.gpu.tune_gemma4_moe --out "$OUT/moe-tune" ${MOE_TUNE_ARGS:-} ) || status=1
              python3 -m sglang_gemma4.gpu.bench --variant 26b-a4b --out "$OUT/moe-ab" --workloads batch1 chat \
                --config "shipped=patched" --config "tuned=patched SGLANG_MOE_CONFIG_DIR=$OUT/moe-tune" \
                -- --cuda-graph-max-bs-decode 32 --cuda-graph-backend-prefill disabled || status=1 ;;
    coldstart) for v in ${variants:-26b-a4b}; do
                 # every compile cache a start fills, emptied for a cold start so that it is cold throughout
                 caches=/tmp/sglang-gemma4-compile-caches-$v
                 for start in ${COLDSTART_STARTS:-cold-no-prebuild cold warm}; do
                   case $start in
                     cold-pristine) build=pristine prebuild=0 ;;
                     cold-no-prebuild) build=patched prebuild=0 ;;
                     cold|warm) build=patched prebuild=1 ;;
                     *) echo "check: unknown coldstart start $start" >&2; exit 2 ;;
                   esac
                   [ $start = warm ] || rm -rf "$caches"
                   SGLANG_GEMMA4_PREBUILD=$prebuild \
                     TRITON_CACHE_DIR=$caches/triton TVM_FFI_CACHE_DIR=$caches/tvm-ffi \
                     FLASHINFER_WORKSPACE_BASE=$caches/flashinfer TORCHINDUCTOR_CACHE_DIR=$caches/inductor \
                     python3 -m sglang_gemma4.gpu.smoke --out "$OUT/coldstart-$start" \
                     --build $build --variants "$v" -- ${COLDSTART_FLAGS:-} || status=1
                 done
                 python3 -m sglang_gemma4.gpu.compile_caches "$caches" --markdown | tee "$OUT/compiles-$v.md"
                 python3 -m sglang_gemma4.gpu.start_times "$OUT"/coldstart-*/"$v"-*.log --markdown |
                   tee "$OUT/start-times-$v.md"
               done ;;
    tiles) ( . "$PREFIX/env-pristine.sh"
             python3 -m sglang_gemma4.gpu.bench_extend_attention_tiles --out "$OUT/tiles" ${TILE_CASES:+--cases $TILE_CASES} ) ||
             status=1 ;;
    decode-tiles) ( . "$PREFIX/env-pristine.sh"; python3 -m sglang_gemma4.gpu.bench_decode_attention_tiles --out "$OUT/decode-tiles" ) ||
                  status=1 ;;
    opt-in-ab) setups=(--config "off=patched")  # then each switch alone, named after it
               for switch in ${OPT_IN:?opt-in-ab needs OPT_IN: KEY=VALUE or --server-flag ...}; do
                 name=${switch%%=*}
                 setups+=(--config "${name#--}=patched $switch")
               done
               for v in ${variants:-26b-a4b}; do
                 python3 -m sglang_gemma4.gpu.bench --variant "$v" --out "$OUT/opt-in-ab-$v" \
                   --workloads ${OPT_IN_WORKLOADS:-batch1 chat} "${setups[@]}" -- --cuda-graph-max-bs-decode 32 || status=1
               done ;;
    tiles-ab) for mtp in ${variants:-off on}; do
                python3 -m sglang_gemma4.gpu.bench --variant 26b-a4b --out "$OUT/tiles-ab" \
                  $([ $mtp = on ] && echo --mtp) --config "generic-mtp-$mtp=patched SGLANG_OPT_HOPPER_EXTEND_ATTENTION_TILES=0" \
                  --config "tiles-mtp-$mtp=patched" --workloads ${TILES_AB_WORKLOADS:-summarization} -- \
                  --cuda-graph-max-bs-decode 32 --cuda-graph-backend-prefill disabled || status=1
              done ;;
    mm-ab) for v in ${variants:-e2b}; do
             model=$PWD/checkpoints/$v-conditional
             [ -f "$model/processor_config.json" ] || python3 -m sglang_gemma4 checkpoint --variant "$v" \
               --arch conditional --weights none --out "$model"
             # on Hopper the vision tower's attention defaults to FA3, whose 1 GB library the bundle leaves
             # out of sgl_kernel (ImportError at the first image): triton_attn, as 0090's GPU test uses
             # the third setup turns off the other patches that change an E2B/E4B image prompt's time (YOCO's
             # prefill, the PLE tail's decode), leaving mostly 0090's batched encoder against pristine
             python3 -m sglang_gemma4.gpu.bench --variant "$v" --model "$model" --builds pristine patched \
               --config "patched-no-yoco-ple=patched SGLANG_GEMMA4_YOCO=0 SGLANG_OPT_USE_FUSED_GEMMA4_PLE_TAIL=0" \
               --workloads ${MM_WORKLOADS:-images-6} --out "$OUT/mm-ab-$v" -- --load-format dummy \
               --enable-multimodal --mm-attention-backend triton_attn --cuda-graph-max-bs-decode 16 \
               --cuda-graph-backend-prefill disabled || status=1
           done ;;
    swa) declare -A swa_setups=(
           [r0.8]="--swa-full-tokens-ratio 0.8" [r0.15]="--swa-full-tokens-ratio 0.15"
           [r0.8-leaf]="SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW=1 --swa-full-tokens-ratio 0.8"
           [r0.15-leaf]="SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW=1 --swa-full-tokens-ratio 0.15"
           [r0.8-noradix]="--swa-full-tokens-ratio 0.8 --disable-radix-cache"
           [r0.15-noradix]="--swa-full-tokens-ratio 0.15 --disable-radix-cache")
         setups=()
         for name in ${variants:-r0.8 r0.15}; do
           [ -n "${swa_setups[$name]:-}" ] || { echo "check: unknown swa setup $name (${!swa_setups[*]})" >&2; exit 2; }
           setups+=(--config "$name=patched ${swa_setups[$name]}")
         done
         python3 -m sglang_gemma4.gpu.bench --variant 26b-a4b --out "$OUT/swa" "${setups[@]}" \
           --workloads ${SWA_WORKLOADS:-summarization-80 chat} -- --cuda-graph-max-bs-decode 32 --cuda-graph-backend-prefill disabled ||
           status=1 ;;
    baseline) for v in ${variants:-26b-a4b}; do
                # capture graphs for the largest concurrency the workloads use (32), not the preset's 64
                python3 -m sglang_gemma4.gpu.bench --variant "$v" --builds pristine --out "$OUT/baseline-$v" \
                  -- --cuda-graph-max-bs-decode 32 || status=1
              done ;;
    *) echo "check: unknown stage $stage" >&2; exit 2 ;;
  esac
done
exit $status
