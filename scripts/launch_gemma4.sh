#!/usr/bin/env bash
# Launch sglang with this stack's preset for a Gemma-4 variant (python/sglang_gemma4/gpu/serve/presets.py
# holds every flag; python -m sglang_gemma4.gpu.serve.launch does the work):
#
#   scripts/launch_gemma4.sh VARIANT [--model DIR] [--mtp] [--draft DIR] [--tp N] [--dp N] [--host H]
#                            [--port P] [--api-key K] [--admin-api-key K] [--no-structured-output]
#                            [--no-parsers] [--kv-fp8] [--multimodal] [--static-kv] [--no-prebuild]
#                            [--dry-run] [-- extra launch_server flags]
#
# --help describes each option. Before the server starts it prints who the server lets in (admin
# routes, API key, CORS, the realtime websocket, client chat templates). The Python environment decides which build serves: source
# $PREFIX/env-patched.sh or env-pristine.sh (scripts/gpu/setup.sh) first, or have the patched wheel
# installed.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
PYTHONPATH="$here/python${PYTHONPATH:+:$PYTHONPATH}" exec python3 -m sglang_gemma4.gpu.serve.launch "$@"
