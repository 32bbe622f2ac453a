#!/usr/bin/env bash
# Launch sglang with this stack's recommended flags for a Gemma-4 variant.
#
#   scripts/launch_gemma4.sh VARIANT [options] [-- extra launch_server flags]
#
#   VARIANT          e2b | e4b | 26b-a4b | 31b
#   --model DIR      checkpoint to serve (default: checkpoints/VARIANT, a config-only checkpoint
#                    made on first use and served with --load-format dummy: speed runs only)
#   --mtp            speculative decoding with the Gemma-4 assistant draft (FROZEN_KV_MTP,
#                    3 steps, 4 draft tokens, top-k 1; 26b-a4b and 31b)
#   --draft DIR      the Gemma4AssistantForCausalLM draft checkpoint (default with no --model:
#                    checkpoints/VARIANT-assistant, config-only, made on first use, dummy weights)
#   --tp N           tensor parallel size (default 1)
#   --host H         bind address (default 127.0.0.1: not exposed unless asked)
#   --port P         (default 30000)
#   --api-key K      passed through to launch_server
#   --no-prebuild    skip building sglang's and FlashInfer's CUDA modules side by side before the
#                    server starts (python -m sglang_gemma4.gpu.prebuild); a server then compiles the
#                    ones missing from its caches one after another during its first graph capture
#                    (SGLANG_GEMMA4_PREBUILD=0 in the environment does the same)
#
# The Python environment decides which build serves: source $PREFIX/env-patched.sh or
# env-pristine.sh (scripts/gpu/setup.sh) first, or have the patched wheel installed.
# Extra flags after -- come last, so they override the preset.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
usage() { sed -n '2,/^[^#]/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
[ $# -ge 1 ] || usage 2
case "$1" in -h|--help) usage ;; esac
variant=$1; shift
model="" draft="" mtp=0 tp=1 host=127.0.0.1 port=30000 api_key="" prebuild=${SGLANG_GEMMA4_PREBUILD:-1}
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --draft) draft=$2; shift 2 ;;
    --mtp) mtp=1; shift ;;
    --tp) tp=$2; shift 2 ;;
    --host) host=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --api-key) api_key=$2; shift 2 ;;
    --no-prebuild) prebuild=0; shift ;;
    -h|--help) usage ;;
    --) shift; break ;;
    *) echo "launch_gemma4: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

# Per-variant preset: static memory fraction (weights + KV pool), context length.
case "$variant" in
  e2b|e4b) mem=0.85 ctx=32768 ;;
  26b-a4b) mem=0.85 ctx=32768 ;;
  31b)     mem=0.88 ctx=32768 ;;  # 62.5 GB of weights: leave the KV pool room on 80 GB
  *) echo "launch_gemma4: unknown variant $variant (e2b, e4b, 26b-a4b, 31b)" >&2; exit 2 ;;
esac

config_only() {  # DIR [checkpoint flags]: a config-and-tokenizer checkpoint, made once
  local dir=$1; shift
  [ -f "$dir/config.json" ] || PYTHONPATH="$here/python${PYTHONPATH:+:$PYTHONPATH}" \
    python3 -m sglang_gemma4 checkpoint --variant "$variant" --weights none --out "$dir" "$@"
}
args=()
if [ -z "$model" ]; then
  model=$here/checkpoints/$variant
  config_only "$model"
  if [ "$mtp" = 1 ] && [ -z "$draft" ]; then
    draft=$here/checkpoints/$variant-assistant
    config_only "$draft" --arch assistant
  fi
  args+=(--load-format dummy)
fi

args+=(
  --model-path "$model" --tokenizer-path "$model"
  --host "$host" --port "$port" --tp-size "$tp"
  --attention-backend triton          # the Hopper path that serves Gemma-4 (head dims 256/512)
  --sampling-backend pytorch          # flashinfer's sampling kernels JIT-compile for ~74 s on first use
  --grammar-backend none              # structured output is not part of the offline bundle
  --mem-fraction-static "$mem" --context-length "$ctx"
  --cuda-graph-max-bs-decode 64
)
# sglang's own option: the experts' down GEMM adds each token's top-k outputs into the layer output
# (bf16 atomics) instead of a separate sum kernel. One H100, same call: decode at 32 running x1.19,
# batch 1 unchanged (benchmark_results/2026-11-23-h100-26b-a4b-gdd00e9604a-coldstart-dual-stream-fused-sum);
# parity vs transformers kept (2026-11-23-h100-all-gf4025de4e2-parity-ab-fused-rope).
[ "$variant" = 26b-a4b ] && args+=(--enable-fused-moe-sum-all-reduce)
if [ "$mtp" = 1 ]; then
  [ -n "$draft" ] || { echo "launch_gemma4: --mtp with --model needs --draft DIR (a Gemma4AssistantForCausalLM checkpoint)" >&2; exit 2; }
  args+=(--speculative-algorithm NEXTN --speculative-draft-model-path "$draft"
         --speculative-num-steps 3 --speculative-num-draft-tokens 4 --speculative-eagle-topk 1)
fi
[ -n "$api_key" ] && args+=(--api-key "$api_key")

echo "launch_gemma4: ${SGLANG_GEMMA4_BUILD:-installed} sglang, $variant, tp $tp, $host:$port"
# Before, not beside, the server: the build processes are gone when it sizes its memory pools.
if [ "$prebuild" = 1 ]; then
  PYTHONPATH="$here/python${PYTHONPATH:+:$PYTHONPATH}" python3 -m sglang_gemma4.gpu.prebuild --model "$model" --tp "$tp" ||
    echo "launch_gemma4: prebuild incomplete; the server builds what is missing itself" >&2
fi
exec python3 -m sglang.launch_server "${args[@]}" "$@"
