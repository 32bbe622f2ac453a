"""The experiments: measurements and comparisons (most are A/B runs of studies/bench.py: a variant,
its server setups 'NAME=BUILD [KEY=VALUE ...] [flags]', the workloads and the servers' flags). What
each runs is its function's docstring; CHOICE picks the variants (or, where it says so, its setups
or sides); table.py names each one's arguments (KEY=) and their defaults."""

import shlex
from pathlib import Path

from sglang_gemma4.gpu import REPO
from sglang_gemma4.gpu.serve import presets
from sglang_gemma4.gpu.stages.steps import (
    Comparison,
    Step,
    env_words,
    harness,
    known,
    named,
)

# The fused kernels' kill switches (0030: the PLE tail; 0040: the MoE norms).
KERNELS_OFF = "SGLANG_OPT_USE_FUSED_GEMMA4_PLE_TAIL=0 SGLANG_OPT_USE_FUSED_GEMMA4_MOE_NORMS=0"
# More than one GPU (nvidia-h200-x2), patched build: tensor parallel 2 (with sglang's FlashInfer
# allreduce + RMSNorm fusion, without it, or without its custom all-reduce) and data parallel 2 (a
# model copy per GPU, requests spread by sglang's controller), each against one GPU. --tp and --dp
# are the launcher's: the preset then serves as it does at that size
MULTI_GPU_SETUPS = {
    "one-gpu": "",
    "tp2": "--tp 2",
    "tp2-unfused": "--tp 2 --enforce-disable-flashinfer-allreduce-fusion",
    "tp2-no-custom-ar": "--tp 2 --disable-custom-all-reduce",
    "dp2": "--dp 2",
}
SWA_SETUPS = {
    "r0.8": "--swa-full-tokens-ratio 0.8",
    "r0.15": "--swa-full-tokens-ratio 0.15",
    "r0.8-leaf": "SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW=1 --swa-full-tokens-ratio 0.8",
    "r0.15-leaf": "SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW=1 --swa-full-tokens-ratio 0.15",
    "r0.8-noradix": "--swa-full-tokens-ratio 0.8 --disable-radix-cache",
    "r0.15-noradix": "--swa-full-tokens-ratio 0.15 --disable-radix-cache",
}
DECODE_ONLY = presets.BENCH_GRAPHS_DECODE_ONLY
MM_FLAGS = (
    "--load-format",
    "dummy",
    *presets.MULTIMODAL,
    "--cuda-graph-max-bs-decode",
    "16",
    "--cuda-graph-backend-prefill",
    "disabled",
)
# the third mm-ab setup turns off the other patches that change an E2B/E4B image prompt's time
# (YOCO's prefill, the PLE tail's decode), leaving mostly 0090's batched encoder against pristine
MM_SETUPS = (
    "pristine",
    "patched",
    "patched-no-yoco-ple=patched SGLANG_GEMMA4_YOCO=0 SGLANG_OPT_USE_FUSED_GEMMA4_PLE_TAIL=0",
)


def mtp(choice, args, out):
    """the MTP preset: 26B-A4B-shaped target + assistant draft, full size, dummy weights with the
    simulated acceptance (pristine, may fail; then patched)"""
    return [
        harness(
            "checks.smoke",
            "--out",
            str(out / "mtp"),
            "--build",
            build,
            "--mtp",
            "--variants",
            v,
            "--env",
            *env_words(presets.simulated_acceptance(v)),
            "--",
            *presets.SMALL_GRAPHS,
            may_fail=build == "pristine",
        )
        for build in ("pristine", "patched")
        for v in choice or ["26b-a4b"]
    ]


def routing(choice, args, out):
    """the Gemma-4 routing kernel vs the torch routing ops, CUDA-graph replayed, T = 1..512 (patched
    build)"""
    return [harness("kernels.bench_gemma4_routing", "--out", str(out / "routing"), build="patched")]


def kernels(choice, args, out):
    """the fused kernels (0030, 0040) off vs on, patched build: batch-1 decode and chat
    (workloads=); off= replaces the kill switches of the "unfused" side; flags= the server flags"""
    off = " ".join(args["off"].split())
    flags = tuple(args["flags"].split())
    return Comparison(
        "kernels-{variant}", (f"unfused=patched {off}", "fused=patched"), ("batch1", "chat")
    ).steps(out, choice, flags=flags, workloads=args["workloads"].split())


def profile(choice, args, out):
    """one decode step at batch 1, 4, 16, 64 (batch-sizes=): graph step time and per-kernel
    attribution, pristine then patched (builds=); env= (KEY=VALUE ...) adds a patched run with that
    environment"""
    batches = ["--batch-sizes", *args["batch-sizes"].split()] if args["batch-sizes"] else []
    steps = []
    for v in choice or ["26b-a4b"]:
        steps += [
            harness(
                "studies.profile",
                "--variant",
                v,
                "--out",
                str(out / "profile"),
                "--build",
                b,
                *batches,
            )
            for b in args["builds"].split()
        ]
        if args["env"]:
            steps.append(
                harness(
                    "studies.profile",
                    "--variant",
                    v,
                    "--out",
                    str(out / "profile"),
                    "--build",
                    "patched",
                    "--label",
                    "patched-env",
                    "--env",
                    *args["env"].split(),
                    *batches,
                )
            )
    return steps


def step_trace(choice, args, out):
    """requests decoding (streams= at once, default 1, of prompt-len= prompt tokens, default 128),
    torch profiler over 60 scheduler steps: pristine then patched, or the setups in setups=
    ('NAME=BUILD [KEY=VALUE ...]', ';' between them)"""
    specs = [s.strip() for s in args["setups"].split(";") if s.strip()]
    setups = [
        "--builds",
        *([] if specs else ["pristine", "patched"]),
        *[a for s in specs for a in ("--config", s)],
    ]
    load = ["--streams", *args["streams"].split(), "--prompt-len", *args["prompt-len"].split()]
    return [
        harness(
            "studies.step_trace",
            "--variant",
            v,
            "--out",
            str(out / f"step-trace-{v}"),
            *setups,
            *load,
        )
        for v in choice or ["26b-a4b"]
    ]


def memory(choice, args, out):
    """weight memory and KV pool per build, model runner only: the conditional class at
    --mem-fraction-static 0.85 (default 31b,e4b), then dense causal 31B with sglang's own memory
    settings (patch 0011's defaults)"""
    return [
        harness(
            "studies.memory",
            "--out",
            str(out / "memory"),
            "--variants",
            *(choice or ["31b", "e4b"]),
            "--archs",
            "conditional",
            "--memory",
            "explicit",
        ),
        harness(
            "studies.memory",
            "--out",
            str(out / "memory"),
            "--variants",
            "31b",
            "--archs",
            "causal",
            "--memory",
            "auto",
        ),
    ]


def multi_gpu_parity(choice, args, out):
    """more than one GPU vs transformers: reduced-layer random-weight checkpoints (CHOICE, default
    26b-a4b,31b) served by the patched build in each setup of setups= (default tp2 dp2; also
    tp2-unfused, tp2-no-custom-ar: sglang serves TP unfused, with only a warning, when
    flashinfer.comm does not import, so that import is checked first)"""
    check = Step(
        ("python3", "-c", "import flashinfer.comm"),
        build="patched",
        report=out / "flashinfer-comm.txt",
    )
    setups = known(MULTI_GPU_SETUPS, args["setups"].split(), "multi-gpu-parity")
    return [check] + [
        harness(
            "checks.parity",
            "--variants",
            *(choice or ["26b-a4b", "31b"]),
            "--builds",
            "patched",
            "--out",
            str(out / f"multi-gpu-parity-{name}"),
            "--server-flags",
            MULTI_GPU_SETUPS[name],
        )
        for name in setups
    ]


def multi_gpu_ab(choice, args, out):
    """more than one GPU vs one, patched build, same call (CHOICE, default 26b-a4b,31b): the setups
    of setups= (default one-gpu tp2 dp2; also tp2-unfused, tp2-no-custom-ar) under batch-1 decode
    and chat at 64 (workloads=), decode graphs to 64, no prefill graphs"""
    return Comparison(
        "multi-gpu-ab-{variant}",
        named(MULTI_GPU_SETUPS, args["setups"].split(), "multi-gpu-ab"),
        ("batch1", "chat-at-64"),
        (*presets.DECODE_GRAPHS, "--cuda-graph-backend-prefill", "disabled"),
        ("26b-a4b", "31b"),
    ).steps(out, choice, workloads=args["workloads"].split())


def mtp_sides(
    name: str,
    variant: str,
    workloads: tuple[str, ...],
    flags: tuple[str, ...],
    args: dict[str, str],
    out: Path,
) -> list[Step]:
    """The patched build serving `variant` without MTP, then with the preset's MTP at its simulated
    acceptance (sides= picks the sides, workloads= the workloads, env= adds KEY=VALUE to both), into
    one folder and one summary."""
    env = " ".join(args["env"].split())
    steps = []
    for side in args["sides"].split():
        steps += Comparison(
            name, (f"mtp-{side}=patched {env}".strip(),), workloads, flags, mtp=side == "on"
        ).steps(out, [variant], workloads=args["workloads"].split())
    return steps + [
        harness("studies.bench", "--variant", variant, "--out", str(out / name), "--summarize-only")
    ]


def mtp_fill(choice, args, out):
    """the MTP preset (26B-A4B + draft, patched) under summarization 8000/1000 x 80, which fills the
    SWA pool, and chat: MTP off then on (sides= picks the sides, workloads= the workloads, env= adds
    KEY=VALUE; flags= replaces the servers' graph flags, decode graphs only by default: with
    --static-kv among them the MTP-off side keeps MTP's KV split, not the unified pool)"""
    flags = tuple(args["flags"].split())
    return mtp_sides("mtp-fill", "26b-a4b", ("summarization-80", "chat"), flags, args, out)


def mtp_ab(choice, args, out):
    """MTP off vs on, patched build, same call, MTP at the variant's simulated acceptance (CHOICE,
    default 26b-a4b,31b): batch-1 decode and chat at 32 (workloads=; sides=, env= as in mtp-fill;
    flags= replaces the servers' graph flags, e.g. decode graphs only for a shorter 31B start; with
    --static-kv among them 26B-A4B's MTP-off side keeps MTP's KV split, not the unified pool)"""
    flags = tuple(args["flags"].split())
    return [
        step
        for v in choice or list(presets.SIMULATED_ACCEPT_LEN)
        for step in mtp_sides(f"mtp-ab-{v}", v, ("batch1", "chat"), flags, args, out)
    ]


def mtp_greedy(choice, args, out):
    """greedy decoding with MTP vs without, patched build, reduced random-weight targets and drafts
    built to agree with them on 70% of the tokens, under a load that fills the SWA pool: every token
    must match, the accept length must be partial (CHOICE, default 26b-a4b,31b); env= (KEY=VALUE
    ...) is given to both servers"""
    env = args["env"].split()
    return [
        harness(
            "checks.mtp_greedy",
            "--out",
            str(out / "mtp-greedy"),
            "--variants",
            *(choice or list(presets.SIMULATED_ACCEPT_LEN)),
            *(["--env", *env] if env else []),
        )
    ]


def openai_suite(choice, args, out):
    """the official openai client against the preset's server (structured output, gemma4 parsers):
    chat, streaming, n > 1, logprobs, a forced tool call, JSON schema, regex, EBNF, stop,
    max_tokens, usage, refusals; mtp-greedy's reduced random-weight target served without MTP, then
    with its agreeing draft (real, partial acceptance), whose greedy constrained answers must equal
    MTP off's (CHOICE, default 26b-a4b; or 31b)"""
    return [
        harness("checks.openai_suite", "--start", v, "--out", str(out / f"openai-suite-{v}"))
        for v in choice or ["26b-a4b"]
    ]


def openai_suite_images(choice, args, out):
    """the openai client against the preset's --multimodal server (towers loaded, dummy weights):
    chat, an image question, and bad media (broken base64, non-image, truncated, decompression bomb,
    remote URL, server path) refused with 400 (CHOICE, default e4b)"""
    return [
        harness(
            "checks.openai_suite",
            "--start-images",
            v,
            "--out",
            str(out / f"openai-suite-images-{v}"),
        )
        for v in choice or ["e4b"]
    ]


def media_parity(medium: str, choice: list[str], args: dict, out: Path) -> list[Step]:
    return [
        harness(
            "checks.media_parity",
            "--out",
            str(out / f"{medium}-parity"),
            "--media",
            medium,
            *(["--variants", *choice] if choice else []),
            "--builds",
            *args["builds"].split(),
        )
    ]


def image_parity(choice, args, out):
    """the image path against transformers: reduced-layer conditional checkpoints whose text model
    and published towers carry random weights, three noise PNGs (square, wide, tall) with a
    question, served as the preset's --multimodal (CHOICE, default e4b, 26b-a4b, 31b; builds=)"""
    return media_parity("image", choice, args, out)


def audio_parity(choice, args, out):
    """the audio path against transformers, as image-parity: three noise WAVs of 1, 2.5 and 4 s
    (CHOICE, default e2b, e4b: the variants with an audio tower; builds=)"""
    return media_parity("audio", choice, args, out)


def structured_cost(choice, args, out):
    """the preset's structured output (xgrammar) vs --grammar-backend none, patched build, same
    call: unconstrained batch-1 decode and chat at 32 (workloads=), decode graphs only (a grammar
    weighs on decode steps) (CHOICE, default 26b-a4b)"""
    return Comparison(
        "structured-cost-{variant}",
        ("none=patched --grammar-backend none", "xgrammar=patched"),
        ("batch1", "chat"),
        DECODE_ONLY,
    ).steps(out, choice, workloads=args["workloads"].split())


def structured_throughput(choice, args, out):
    """constrained throughput with the preset's xgrammar, patched build: batch-1 decode and chat at
    32 unconstrained, then the same loads with every request under an open JSON schema that keeps
    it decoding to its full length, on the same server, decode graphs only (CHOICE, default
    26b-a4b)"""
    return Comparison(
        "structured-throughput-{variant}",
        ("xgrammar=patched",),
        ("batch1", "chat", "batch1-json", "chat-json"),
        DECODE_ONLY,
    ).steps(out, choice)


def spec_step(choice, args, out):
    """one frozen-KV MTP step by part (draft loop, verify, the gaps between) at batch 1, 4, 16, 32
    and the variant's simulated acceptance, pristine then patched (builds=), per variant (CHOICE,
    default 26b-a4b,31b); decode graphs to 32, no prefill graphs (only decode is traced);
    batch-sizes= replaces the batch sizes, prompt-len= the 128 prompt tokens of each stream; env=
    (KEY=VALUE ...) is given to every server and label= names that setup in the files (e.g. an
    opt-in switch off, then on)"""
    env, label = args["env"].split(), "-".join(args["label"].split())
    return [
        harness(
            "studies.spec_step",
            "--variant",
            v,
            "--build",
            build,
            "--out",
            str(out / "spec-step"),
            "--batch-sizes",
            *args["batch-sizes"].split(),
            "--prompt-len",
            *args["prompt-len"].split(),
            *(["--env", *env] if env else []),
            *(["--label", f"{build}-{label}"] if label else []),
            "--",
            *DECODE_ONLY,
        )
        for v in choice or list(presets.SIMULATED_ACCEPT_LEN)
        for build in args["builds"].split()
    ]


def yoco(choice, args, out):
    """patch 0080 (on by default): E2B/E4B parity vs transformers with SGLANG_GEMMA4_YOCO=1 (graphs
    off), whole and in 256-token chunks, then off vs on with the radix cache and prefill graphs off
    (workloads=)"""
    steps = []
    for v in choice or ["e2b", "e4b"]:
        parity = (
            "--variants",
            v,
            "--builds",
            "patched-eager",
            "--patched-env",
            "SGLANG_GEMMA4_YOCO=1",
        )
        steps += [
            harness("checks.parity", *parity, "--out", str(out / "yoco-parity")),
            # 256-token chunks: later chunks extend a cached prefix, as a radix-cache hit does
            harness(
                "checks.parity",
                *parity,
                "--server-flags",
                "--chunked-prefill-size 256",
                "--out",
                str(out / "yoco-parity-chunked"),
            ),
        ]
        steps += Comparison(
            "yoco-{variant}",
            ("off=patched SGLANG_GEMMA4_YOCO=0", "on=patched SGLANG_GEMMA4_YOCO=1"),
            ("long-prefill", "decode-burst"),
            (
                "--disable-radix-cache",
                "--cuda-graph-backend-prefill",
                "disabled",
                *presets.DECODE_GRAPHS,
            ),
            (v,),
        ).steps(out, workloads=args["workloads"].split())
    return steps


def moe_tune(choice, args, out):
    """the fused-MoE kernel configs for 26B-A4B on this GPU (tune_gemma4_moe, tuner=), then batch-1
    and chat with sglang's shipped configs vs the tuned file (SGLANG_MOE_CONFIG_DIR), patched
    build"""
    tuned = out / "moe-tune"
    return [
        harness(
            "kernels.tune_gemma4_moe", "--out", str(tuned), *args["tuner"].split(), build="patched"
        ),
        *Comparison(
            "moe-ab",
            ("shipped=patched", f"tuned=patched SGLANG_MOE_CONFIG_DIR={tuned}"),
            ("batch1", "chat"),
            DECODE_ONLY,
        ).steps(out),
    ]


COLDSTARTS = {
    "cold-pristine": ("pristine", "0"),
    "cold-no-prebuild": ("patched", "0"),
    "cold": ("patched", "1"),
    "warm": ("patched", "1"),
}


def coldstart(choice, args, out):
    """server starts with the preset's own capture sizes (flags= adds flags); starts= picks and
    orders them (default cold-no-prebuild cold warm; also cold-pristine): a cold start empties every
    compile cache first (under /tmp, so a warm start may follow in the next call); then what the
    last start compiled and the start-time breakdown"""
    steps = []
    for v in choice or ["26b-a4b"]:
        caches = Path(f"/tmp/sglang-gemma4-compile-caches-{v}")
        logs = []
        for start in args["starts"].split():
            if start not in COLDSTARTS:
                raise SystemExit(
                    f"run: coldstart: unknown start {start} (one of {', '.join(COLDSTARTS)})"
                )
            build, prebuild = COLDSTARTS[start]
            env = {
                "SGLANG_GEMMA4_PREBUILD": prebuild,
                "TRITON_CACHE_DIR": f"{caches}/triton",
                "TVM_FFI_CACHE_DIR": f"{caches}/tvm-ffi",
                "FLASHINFER_WORKSPACE_BASE": f"{caches}/flashinfer",
                "TORCHINDUCTOR_CACHE_DIR": f"{caches}/inductor",
            }
            steps.append(
                harness(
                    "checks.smoke",
                    "--out",
                    str(out / f"coldstart-{start}"),
                    "--build",
                    build,
                    "--variants",
                    v,
                    "--",
                    *args["flags"].split(),
                    env=env,
                    empty_first=None if start == "warm" else caches,
                )
            )
            logs.append(str(out / f"coldstart-{start}" / f"{v}-{build}.log"))
        steps += [
            harness(
                "studies.compile_caches", str(caches), "--markdown", report=out / f"compiles-{v}.md"
            ),
            harness("studies.start_times", *logs, "--markdown", report=out / f"start-times-{v}.md"),
        ]
    return steps


def tiles(choice, args, out):
    """the Triton extend-attention kernel on Gemma-4 shapes: a grid of tiles vs the shipped one
    (cases=)"""
    cases = ["--cases", *args["cases"].split()] if args["cases"] else []
    return [
        harness(
            "kernels.bench_extend_attention_tiles",
            "--out",
            str(out / "tiles"),
            *cases,
            build="pristine",
        )
    ]


def decode_tiles(choice, args, out):
    """the Triton decode attention (stage 1's tile, the KV-split cap) on Gemma-4 shapes vs the
    shipped launch"""
    return [
        harness(
            "kernels.bench_decode_attention_tiles",
            "--out",
            str(out / "decode-tiles"),
            build="pristine",
        )
    ]


def verify_attention(choice, args, out):
    """patch 0175: the MTP verify's attention, the grouped split-KV kernel vs extend_attention_fwd
    on 31B's and 26B-A4B's layer shapes, timed from CUDA graphs and checked against float32 (patched
    build)"""
    return [
        harness(
            "kernels.bench_verify_attention",
            "--out",
            str(out / "verify-attention"),
            build="patched",
        )
    ]


def gqa_pack(choice, args, out):
    """patch 0105: extend attention on 26B-A4B's and 31B's full layers, the old kernel vs the packed
    one with each tile of its table (tiles= picks some): an 8,192-token chunk after prefixes of
    0-120K (prefixes=), bf16 and fp8 KV (kv=), both models (models=), ms per call and the packed
    output vs the old one (patched build)"""
    options = {
        "prefixes": "--prefixes",
        "tiles": "--tiles",
        "models": "--models",
        "kv": "--kv-dtypes",
    }
    picked = [w for key, flag in options.items() if args[key] for w in (flag, *args[key].split())]
    return [
        harness(
            "kernels.bench_extend_attention_gqa_pack",
            "--out",
            str(out / "gqa-pack"),
            *picked,
            build="patched",
        )
    ]


def extend_gemm(choice, args, out):
    """patch 0185: extend attention on 26B-A4B's and 31B's full layers, 0105's packed kernel vs the
    tiled-GEMM path with each size of sizes= (KEY_BLOCK:SCORE_ELEMENTS): chunks of chunks= new
    tokens (default 8,192) after prefixes of 0-120K (prefixes=), bf16 and fp8 KV (kv=), both models
    (models=), the cache rows as the static split holds them or as the unified pool does (layouts=
    split unified), ms per call and the GEMM output vs the packed one (patched build); against=
    FILE... times other revisions of 0185's module beside the installed one"""
    options = {
        "prefixes": "--prefixes",
        "chunks": "--chunks",
        "sizes": "--sizes",
        "models": "--models",
        "kv": "--kv-dtypes",
        "layouts": "--layouts",
        "against": "--against",
    }
    picked = [w for key, flag in options.items() if args[key] for w in (flag, *args[key].split())]
    return [
        harness(
            "kernels.bench_extend_attention_gemm",
            "--out",
            str(out / "extend-gemm"),
            *picked,
            build="patched",
        )
    ]


def multimodal_cost(choice, args, out):
    """the preset text-only vs --multimodal (the vision and audio towers loaded), patched build,
    same call, text requests: the KV pool each leaves, batch-1 decode and chat at 32 (workloads=),
    decode graphs only (CHOICE, default e4b)"""
    return Comparison(
        "multimodal-cost-{variant}",
        ("text=patched", "multimodal=patched --multimodal"),
        ("batch1", "chat"),
        DECODE_ONLY,
        ("e4b",),
    ).steps(out, choice, workloads=args["workloads"].split())


def opt_in_ab(choice, args, out):
    """the patched build as it is ("off"), then with each switch of switches= alone (KEY=VALUE, or a
    --server-flag): batch-1 decode and chat (workloads=); flags= replaces both sides' graph flags"""
    switches = args["switches"].split()
    if not switches:
        raise SystemExit("run: opt-in-ab needs switches=KEY=VALUE or --server-flag ...")
    setups = (
        "off=patched",
        *[f"{s.split('=')[0].removeprefix('--')}=patched {s}" for s in switches],
    )
    flags = tuple(shlex.split(args["flags"])) or None
    return Comparison("opt-in-ab-{variant}", setups, ("batch1", "chat")).steps(
        out, choice, flags, args["workloads"].split()
    )


def tiles_ab(choice, args, out):
    """patch 0100 (Hopper extend-attention tiles) off vs on, patched build, full 26B-A4B: MTP off
    and/or on (CHOICE: off,on); workloads="""
    steps = []
    for side in choice or ["off", "on"]:
        steps += Comparison(
            "tiles-ab",
            (
                f"generic-mtp-{side}=patched SGLANG_OPT_HOPPER_EXTEND_ATTENTION_TILES=0",
                f"tiles-mtp-{side}=patched",
            ),
            ("summarization",),
            DECODE_ONLY,
            mtp=side == "on",
        ).steps(out, workloads=args["workloads"].split())
    return steps


def mm_ab(choice, args, out):
    """pristine vs patched serving images (0090's batched vision encoder): a config-only conditional
    checkpoint with its processor (default e2b), dummy weights, workloads=; a third setup leaves
    mostly 0090 against pristine"""
    steps = []
    for v in choice or ["e2b"]:
        model = REPO / "checkpoints" / f"{v}-conditional"
        steps += [
            Step(
                (
                    "python3",
                    "-m",
                    "sglang_gemma4",
                    "checkpoint",
                    "--variant",
                    v,
                    "--arch",
                    "conditional",
                    "--weights",
                    "none",
                    "--out",
                    str(model),
                ),
                unless_exists=model / "processor_config.json",
            ),
            *Comparison(
                "mm-ab-{variant}", MM_SETUPS, ("images-6",), MM_FLAGS, (v,), model=str(model)
            ).steps(out, workloads=args["workloads"].split()),
        ]
    return steps


def swa(choice, args, out):
    """the SWA pool study on the full 26B-A4B shape, patched build: summarization 8000/1000 x 80 and
    chat per setup (CHOICE, default r0.8,r0.15; -leaf adds the leaf-lock release, -noradix
    --disable-radix-cache); workloads="""
    setups = named(SWA_SETUPS, choice or ["r0.8", "r0.15"], "swa")
    return Comparison("swa", setups, ("summarization-80", "chat"), DECODE_ONLY).steps(
        out, workloads=args["workloads"].split()
    )


# patches 0016/0017's switches (the SWA lock released as the window slides, the SWA pool sized for
# the running windows), both off or both on; -rN also caps the running requests at N, the bound 0017
# sizes the SWA pool for (at 32, 32 requests of 9000 tokens fit its full pool); on-i128 keeps
# sglang's SWA maintenance interval of 128 decode steps instead of 0017's 16 (its pool is then sized
# for 128: the ratio's split for 64 requests)
KV_OFF = "SGLANG_OPT_SWA_RELEASE_PASSED_PREFIX=0 SGLANG_OPT_SWA_POOL_FROM_RUNNING_WINDOWS=0"
KV_ON = "SGLANG_OPT_SWA_RELEASE_PASSED_PREFIX=1 SGLANG_OPT_SWA_POOL_FROM_RUNNING_WINDOWS=1"
KV_SETUPS = {
    "off": KV_OFF,
    "on": KV_ON,
    "on-i128": f"{KV_ON} SGLANG_SWA_EVICTION_INTERVAL=128",
    **{
        f"{side}-r{n}": f"{env} --max-running-requests {n}"
        for n in (32, 48)
        for side, env in (("off", KV_OFF), ("on", KV_ON))
    },
}
KV_PARTS = (*KV_SETUPS, "parity", "canary", "memory", "memory-off", "memory-on")
# decode graphs up to the 64 requests the workloads run; no prefill graphs: shorter starts, and
# sglang's KV canary needs them off
KV_FLAGS = (*presets.DECODE_GRAPHS, "--cuda-graph-backend-prefill", "disabled")


def kv_capacity(choice, args, out):
    """patches 0016/0017 (both on by default) on the full 26B-A4B shape, patched build, one part per
    call (CHOICE, default off,on): setups off, on, on-i128 (SWA maintenance every 128 decode steps),
    off-r32, on-r32, off-r48, on-r48 (--max-running-requests 32 or 48) under summarization 80 x
    8000/1000 and chat at 32 and 64 at once (workloads=); parity (26B-A4B, E4B vs transformers, both
    on); canary (both on, 32 running, chat at 64, sglang's KV canary raising on a freed or
    overwritten slot); memory (the memory-variants= presets, default 31b e4b, off then on;
    memory-off, memory-on: one side). Each call ends with the memory and KV-capacity table of every
    server logged so far (kv-capacity/memory.md; vllm-log= adds a vLLM log)"""
    kv = out / "kv-capacity"
    parts = choice or ["off", "on"]
    steps = []
    for part in parts:
        if part == "parity":
            steps.append(
                harness(
                    "checks.parity",
                    "--out",
                    str(kv / "parity"),
                    "--variants",
                    "26b-a4b",
                    "e4b",
                    "--builds",
                    "patched",
                    "--patched-env",
                    *KV_ON.split(),
                )
            )
        elif part == "canary":
            steps += Comparison(
                "kv-capacity/canary",
                (f"on-r32-canary=patched {KV_ON} --max-running-requests 32 --kv-canary raise",),
                ("chat-at-64",),
                KV_FLAGS,
            ).steps(out)
        elif part.startswith("memory"):
            sides = ("off", "on") if part == "memory" else (part.removeprefix("memory-"),)
            steps += [
                harness(
                    "checks.smoke",
                    "--out",
                    str(kv / f"memory-{side}"),
                    "--build",
                    "patched",
                    "--variants",
                    *args["memory-variants"].split(),
                    "--env",
                    *KV_SETUPS[side].split(),
                    "--",
                    *KV_FLAGS,
                )
                for side in sides
            ]
        elif part in KV_SETUPS:
            steps += Comparison(
                "kv-capacity",
                named(KV_SETUPS, [part], "kv-capacity"),
                (
                    "summarization-80-at-16",
                    "summarization-80-at-32",
                    "summarization-80-at-64",
                    "chat-at-32",
                    "chat-at-64",
                ),
                KV_FLAGS,
            ).steps(out, workloads=args["workloads"].split())
        else:
            raise SystemExit(
                f"run: kv-capacity: unknown part {part} (one of {', '.join(KV_PARTS)})"
            )
    if any(
        part in KV_SETUPS for part in parts
    ):  # each setup ran its own bench: their tables side by side
        steps.append(
            harness("studies.bench", "--variant", "26b-a4b", "--out", str(kv), "--summarize-only")
        )
    logs = [
        f"{kv}/*.server.log",
        f"{kv}/canary/*.server.log",
        f"{kv}/memory-*/*.log",
        *args["vllm-log"].split(),
    ]
    return steps + [
        harness(
            "studies.kv_capacity", *logs, "--gpu-txt", str(out / "gpu.txt"), report=kv / "memory.md"
        )
    ]


# the long-context setups: the builds as the preset serves them at the model's own window (26B-A4B's
# patched build on sglang's unified hybrid pool, full-attention and SWA KV in one buffer), the
# patched build on the static split and on the unified pool, each also with FP8 KV, and the patched
# build with 0105's packed full-layer extend attention off
FP8 = " ".join(presets.KV_FP8)
LONG_SETUPS = {
    "pristine": "",
    "patched": "",
    "static": "--static-kv",
    "unified": "--enable-unified-memory",
    "fp8": FP8,
    "unified-fp8": f"--enable-unified-memory {FP8}",
    "no-gqa-pack": "SGLANG_OPT_EXTEND_ATTENTION_GQA_PACK=0",
    "no-gemm": "SGLANG_OPT_EXTEND_ATTENTION_GEMM=0",
    # what the running streams get while a long prompt prefills: sglang's decode steps mixed into
    # the prefill chunks, or chunks of 4,096 tokens (the preset's are sglang's, by GPU memory)
    "mixed-chunk": "--enable-mixed-chunk",
    "chunk-4k": "--chunked-prefill-size 4096",
}
LONG_DEFAULT = ("pristine", "static", "unified")
LONG_WORKLOADS = ("long-16k", "long-64k", "long-128k", "long-250k", "long-4x60k")


def long_context(choice, args, out):
    """26B-A4B (variants=: others too, e.g. 31b e4b) at its whole window (the preset's context),
    decode graphs only: one prompt of 16K, 64K, 128K, 250K tokens at a time, four of 60K and two of
    250K at once, 64 output tokens each (workloads=; also long-128k-beside-chat,
    long-3x60k-beside-chat: 8 streams decoding while a 128K or three 60K prompts prefill); setups
    pristine, patched (as the preset serves the variant), static (the patched build on the static
    KV split), unified (on one KV buffer for both layer kinds), fp8 and unified-fp8 (those with FP8
    KV), no-gqa-pack (the patched build with patch 0105's packed full-layer extend attention off),
    no-gemm (0185's GEMM path off), mixed-chunk (decode steps mixed into the prefill chunks),
    chunk-4k (prefill chunks of 4,096 tokens); CHOICE picks them (default pristine, static,
    unified); flags= adds launch flags to every server"""
    names = known(LONG_SETUPS, choice or list(LONG_DEFAULT), "long")
    setups = tuple(
        f"{n}={'pristine' if n == 'pristine' else 'patched'} {LONG_SETUPS[n]}".strip()
        for n in names
    )
    return Comparison("long-{variant}", setups, LONG_WORKLOADS, DECODE_ONLY).steps(
        out,
        args["variants"].split(),
        (*DECODE_ONLY, *shlex.split(args["flags"])),
        args["workloads"].split(),
    )


def prefill_profile(choice, args, out):
    """26B-A4B at its whole window, decode graphs only: one 131,072-token prompt in 8192-token
    chunks under the torch profiler, per chunk the full-attention and SWA layers' extend attention,
    MoE, GEMMs, the rest and the host's gaps; CHOICE picks the builds (default pristine,patched),
    each its own step into one table"""
    builds = choice or ["pristine", "patched"]
    unknown = [b for b in builds if b not in ("pristine", "patched")]
    if unknown:
        raise SystemExit(
            f"run: prefill-profile: unknown build {', '.join(unknown)} (pristine or patched)"
        )
    return [
        harness(
            "studies.prefill_profile",
            "--variant",
            "26b-a4b",
            "--out",
            str(out / "prefill-profile"),
            "--builds",
            b,
            "--",
            *DECODE_ONLY,
        )
        for b in builds
    ]


def baseline(choice, args, out):
    """pristine sglang: chat, summarization 8000/1000 and batch-1 decode (graphs for the workloads'
    concurrency, 32)"""
    return Comparison(
        "baseline-{variant}", ("pristine",), ("chat", "summarization", "batch1")
    ).steps(out, choice)
