"""The launch presets: every sglang server flag this project passes, defined here once.

The launcher (launch.py, behind scripts/launch_gemma4.sh), the harness's servers (server.py), the
profiler's and memory check's bench_one_batch runs and the GPU stages (stages/) all build their
command lines from these lists; test/gpu/serve/test_presets.py parses each with sglang's own server
arguments parser.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Preset:
    mem_fraction_static: float  # weights + KV pool
    model_flags: tuple[str, ...] = ()  # sglang options that change how this variant's model runs
    unified_kv: bool = False  # one KV buffer for both layer kinds (UNIFIED_KV), where measured
    # --max-running-requests on one GPU a model copy: patch 0017 sizes the SWA pool for this many
    # requests' windows, the full-attention pool gets the rest
    one_gpu_max_running: int | None = None


# No --context-length: sglang serves the checkpoint's own window (max_position_embeddings: 262,144
# for 26B-A4B and 31B, 131,072 for E2B and E4B); `-- --context-length N` lowers it.
PRESETS = {
    "e2b": Preset(0.85),
    "e4b": Preset(0.85),
    # sglang's own option: the experts' down GEMM adds each token's top-k outputs into the layer
    # output (bf16 atomics) instead of a separate sum kernel. One H100, same call: decode at 32
    # running x1.19, batch 1 unchanged
    # (benchmark_results/sglang-0.5.12/
    # 2026-11-23-h100-26b-a4b-gdd00e9604a-coldstart-dual-stream-fused-sum); parity vs transformers
    # kept (2026-11-23-h100-all-gf4025de4e2-parity-ab-fused-rope).
    "26b-a4b": Preset(0.85, ("--enable-fused-moe-sum-all-reduce",), unified_kv=True),
    # 62.5 GB of weights: leave the KV pool room on 80 GB. 32 running on one GPU: the windows of 64
    # (the decode graphs') are no smaller than the 0.8 ratio's SWA pool, so 0017 keeps the ratio and
    # an H200 holds 93,118 full-attention tokens (a whole-window prompt refused; chat at 64
    # retracted 19 requests; benchmark_results/sglang-0.5.17/
    # 2026-11-29-h200x2-26b-a4b-31b-e4b-g137e86f2a6-long-parity-31b-tp2-structured); at 32,
    # 423,019 (2026-11-28-h200x2-26b-a4b-31b-ged5e9fd50e-tp2-dp2-long-beside-2x250k). TP 2 holds
    # 1,625,581 at 64.
    "31b": Preset(0.88, one_gpu_max_running=32),
}
# Gemma-4 sizes asked for that no preset serves, and why: the launcher answers with the reason
NOT_SERVED = {
    "12b": (
        "Gemma-4 12B has no preset: its shapes (layers, heads, sliding window, KV sharing, MoE or "
        "dense) are not among the published configurations this stack sizes and tests its "
        "presets on (e2b, e4b, 26b-a4b, 31b). Serve a 12B checkpoint with sglang.launch_server."
    ),
}

# Every variant, every build: the kernels and backends the offline bundle serves Gemma-4 with.
BACKENDS = (
    "--attention-backend",
    "triton",  # the Hopper path that serves Gemma-4 (head dims 256/512)
    "--sampling-backend",
    "pytorch",  # flashinfer's sampling kernels JIT-compile for ~74 s on first use
    # structured output (response_format json_schema/json_object, regex, EBNF, forced tool calls):
    # xgrammar, which sglang imports whatever the backend and the offline bundle carries
    "--grammar-backend",
    "xgrammar",
    # JSON under a schema in one layout ({"a": 1, "b": [2]}): a grammar that allows any whitespace
    # between tokens lets greedy decoding repeat spaces or newlines until max_tokens
    "--constrained-json-disable-any-whitespace",
)
# One KV buffer for the full-attention and sliding-window layers (sglang's unified pool; 0021, 0022,
# 0256, 0266): the full-attention layers take the bytes the running windows do not, so 26B-A4B at
# its 262,144 window holds 914,311 full-attention tokens at an H100's budget, 509,521 on the static
# split. Same call, H200, 26B-A4B: batch 1 x0.984, chat at 32 x0.990, at 64 x0.995 output
# throughput; parity passes on all four shapes (benchmark_results/sglang-0.5.17/
# 2026-11-28-h200-26b-a4b-e2b-ge5198188a1-unified-pool-ab-long-parity,
# 2026-11-28-h200-e4b-31b-26b-a4b-ged5e9fd50e-unified-parity-chat64-openai-suite). On one GPU per
# model copy only; not with MTP (sglang refuses it) nor an FP8 cache (parity and tensor parallelism
# ran on the split); pristine sglang cannot serve it (0021).
UNIFIED_KV = ("--enable-unified-memory",)
# Gemma-4's own tool-call and reasoning formats, parsed into tool_calls and reasoning_content
PARSERS = ("--tool-call-parser", "gemma4", "--reasoning-parser", "gemma4")
# A server without structured output (constrained requests are refused); the last repeated flag wins
NO_STRUCTURED_OUTPUT = ("--grammar-backend", "none")
# Image (and, on E2B/E4B, audio) input: the towers loaded (0013 serves Gemma-4 text-only without it,
# and refuses media then). Costs the towers' weights in GPU memory: E4B on an H200, 0.91 GB and
# 2.2% of the KV pool, text speed unchanged (benchmark_results/sglang-0.5.17/
# 2026-11-29-h200-e2b-e4b-26b-a4b-gdb2b4f4e76-audio-0276-mixed-chunk-multimodal-cost). The vision
# tower's attention on Triton, as the text layers': on Hopper sglang picks
# FA3 for it, whose 1 GB library the offline bundle leaves out of sgl_kernel (an ImportError at the
# first image killed the server)
MULTIMODAL = ("--enable-multimodal", "--mm-attention-backend", "triton_attn")
DECODE_GRAPHS = ("--cuda-graph-max-bs-decode", "64")  # what serving captures
# The KV cache in FP8 (e4m3): twice the tokens of bf16 in the same pool (launch_gemma4 --kv-fp8; the
# long experiment's fp8 setups). Unscaled (Gemma-4's checkpoints carry no KV scales); patch 0179
# lets the Triton kernels read it, whose compile failed on an H100 without it
# (benchmark_results/sglang-0.5.17/
# 2026-11-27-h100-e2b-26b-a4b-g96694484f3-route-fuzz-long-context-gqa-pack).
KV_FP8 = ("--kv-cache-dtype", "fp8_e4m3")
# The Gemma-4 assistant draft (FROZEN_KV_MTP): 3 steps, 4 draft tokens, top-k 1 (26b-a4b and 31b).
MTP_STEPS, MTP_DRAFT_TOKENS = 3, 4
MTP = (
    "--speculative-algorithm",
    "NEXTN",
    "--speculative-num-steps",
    str(MTP_STEPS),
    "--speculative-num-draft-tokens",
    str(MTP_DRAFT_TOKENS),
    "--speculative-eagle-topk",
    "1",
)
# On dummy weights the draft agrees with the target every time, so every step would accept all
# MTP_DRAFT_TOKENS: every MTP benchmark serves with sglang's simulated acceptance instead, at the
# reference fork's real accept lengths (chat). Its keys are the variants the preset serves with a
# draft.
SIMULATED_ACCEPT_LEN = {"26b-a4b": 2.8, "31b": 3.1}

# Extra flags that the harness adds after the preset (the last of a repeated flag wins):
# checks whose outcome does not depend on CUDA graphs skip their capture for a quick start
NO_GRAPHS = ("--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled")
# small capture sets: a short start with graphs on (smoke, make serve on the GPU check)
SMALL_GRAPHS = ("--cuda-graph-max-bs-decode", "8", "--cuda-graph-max-bs-prefill", "512")
# parity's prompts as served: decode graphs and prefill graphs on, sized for its batch (E2B/E4B's,
# 4042 tokens, fits one prefill graph)
PARITY_GRAPHS = ("--cuda-graph-max-bs-decode", "8", "--cuda-graph-max-bs-prefill", "4096")
# benchmarks whose largest concurrency is 32
BENCH_GRAPHS = ("--cuda-graph-max-bs-decode", "32")
# benchmarks on a shorter start: decode graphs to 32, no prefill graphs (prefill speed not compared)
BENCH_GRAPHS_DECODE_ONLY = (
    "--cuda-graph-max-bs-decode",
    "32",
    "--cuda-graph-backend-prefill",
    "disabled",
)


def preset(variant: str) -> Preset:
    if variant in NOT_SERVED:
        raise ValueError(NOT_SERVED[variant])
    if variant not in PRESETS:
        raise ValueError(f"unknown variant {variant!r} (one of {', '.join(PRESETS)})")
    return PRESETS[variant]


def model_flags(variant: str) -> list[str]:
    """The variant's own sglang options, which a profiled or measured step must share with
    serving."""
    return list(preset(variant).model_flags)


def server_args(
    variant: str,
    model: str,
    *,
    tp: int = 1,
    dp: int = 1,
    host: str = "127.0.0.1",
    port: int = 30000,
    dummy_weights: bool = False,
    draft: str | None = None,
    api_key: str | None = None,
    admin_api_key: str | None = None,
    structured_output: bool = True,
    parsers: bool = True,
    kv_fp8: bool = False,
    multimodal: bool = False,
    static_kv: bool = False,
) -> list[str]:
    """sglang.launch_server's arguments for `variant` served from `model` (a draft turns MTP on;
    structured_output=False serves without a grammar backend, parsers=False without PARSERS,
    kv_fp8=True with the KV cache in FP8, multimodal=True with the vision/audio towers:
    MULTIMODAL; static_kv=True keeps the static KV split where the preset serves UNIFIED_KV)."""
    p = preset(variant)
    args = ["--load-format", "dummy"] if dummy_weights else []
    args += [
        "--model-path",
        model,
        "--tokenizer-path",
        model,
        "--host",
        host,
        "--port",
        str(port),
        "--tp-size",
        str(tp),
        "--dp-size",
        str(dp),
        *BACKENDS,
        "--mem-fraction-static",
        str(p.mem_fraction_static),
        *DECODE_GRAPHS,
        *p.model_flags,
    ]
    if parsers:
        args += PARSERS
    if not structured_output:
        args += NO_STRUCTURED_OUTPUT
    if kv_fp8:
        args += KV_FP8
    elif p.unified_kv and tp == 1 and not draft and not static_kv:
        args += UNIFIED_KV
    if p.one_gpu_max_running and tp == 1:
        args += ["--max-running-requests", str(p.one_gpu_max_running)]
    if multimodal:
        args += MULTIMODAL
    if draft:
        args += [*MTP, "--speculative-draft-model-path", draft]
    if api_key:
        args += ["--api-key", api_key]
    if admin_api_key:
        args += ["--admin-api-key", admin_api_key]
    return args


def resolved_server_args(argv: list[str]):
    """The ServerArgs sglang.launch_server resolves from `argv` (its own parser and from_cli_args),
    without starting anything: for code that reads the published server arguments outside a
    server."""
    import argparse

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return ServerArgs.from_cli_args(parser.parse_args(argv))


def simulated_acceptance(variant: str, accept_len: float | None = None) -> dict[str, str]:
    """The server environment under which sglang's verify accepts `accept_len` tokens a step on
    average (default: the variant's SIMULATED_ACCEPT_LEN)."""
    if accept_len is None:
        if variant not in SIMULATED_ACCEPT_LEN:
            raise ValueError(
                f"no MTP draft for {variant!r}: MTP serves {', '.join(SIMULATED_ACCEPT_LEN)}"
            )
        accept_len = SIMULATED_ACCEPT_LEN[variant]
    return {
        "SGLANG_SIMULATE_ACC_LEN": str(accept_len),
        "SGLANG_SIMULATE_ACC_METHOD": "match-expected",
    }


def full_acceptance_problem(accept_len: float | None) -> str | None:
    """What is wrong with an MTP run of dummy weights whose server logged `accept_len`, or None: the
    most a step can accept (every draft token) means the simulated acceptance did not apply, so the
    run did not measure the speculative step it names."""
    if accept_len is None or accept_len < MTP_DRAFT_TOKENS:
        return None
    return (
        f"the server logged accept length {accept_len:.2f} (every draft accepted): the "
        "simulated acceptance "
        f"(SGLANG_SIMULATE_ACC_LEN) did not apply; refusing the run"
    )
