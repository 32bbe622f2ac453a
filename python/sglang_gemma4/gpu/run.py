"""The GPU experiments, described as data, and the one runner that runs them (scripts/gpu/check.sh
hands it every stage that is not a gate).

    python -m sglang_gemma4.gpu.run STAGE[:CHOICE,...] --out DIR [--dry-run]
    python -m sglang_gemma4.gpu.run --list

An experiment is a list of steps: a command of this package (or sglang's) with its arguments, the
build whose environment runs it (none: the harness's own, the pristine build with this repository on
top), and its environment. Most are A/B comparisons (bench.py): a variant, its server setups
('NAME=BUILD [KEY=VALUE ...] [flags]'), the workloads and the servers' flags. CHOICE picks the
variants (or, where the experiment says so, its setups or sides); the environment knobs each
experiment names replace a default. `--dry-run` prints every command instead of running it, and for
the harness modules that start servers, the exact server command lines they would start.
"""

import argparse
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from sglang_gemma4.gpu import presets
from sglang_gemma4.gpu.server import REPO, describe, in_build

# The harness modules that start servers (or bench_one_batch) and print their command lines on --dry-run.
DRY_RUNS = {f"sglang_gemma4.gpu.{m}" for m in ("smoke", "bench", "parity", "step_trace", "profile", "memory",
                                                "bad_input", "repro", "mtp_greedy", "spec_step", "access_check",
                                                "openai_suite", "prefill_profile")}


@dataclass(frozen=True)
class Step:
    argv: tuple[str, ...]
    build: str | None = None  # run inside this build's environment, with this package on top
    env: dict = field(default_factory=dict)
    may_fail: bool = False  # e.g. the pristine side of a check whose pristine build is expected to crash
    report: Path | None = None  # its output is also written here
    empty_first: Path | None = None  # removed before the step (e.g. the compile caches of a cold start)
    unless_exists: Path | None = None  # skipped when this file exists

    @property
    def module(self) -> str | None:
        return self.argv[2] if self.argv[:2] == ("python3", "-m") else None


def harness(module: str, *args: str, **step) -> Step:
    return Step(("python3", "-m", f"sglang_gemma4.gpu.{module}", *args), **step)


def knob(name: str, default: str) -> list[str]:
    """An environment knob's words, or the default's."""
    return (os.environ.get(name) or default).split()


@dataclass(frozen=True)
class Comparison:
    """An A/B run of bench.py: each setup's server in turn on the same GPU, the same workloads."""

    out: str  # folder under OUT; {variant} is filled in
    setups: tuple[str, ...]  # bench --config specs; a bare build name is that build as it is
    workloads: tuple[str, ...]
    workloads_knob: str | None  # the environment knob that replaces them
    flags: tuple[str, ...] = presets.BENCH_GRAPHS
    variants: tuple[str, ...] = ("26b-a4b",)
    mtp: bool = False
    model: str | None = None  # default: the launch preset's config-only checkpoint

    def steps(self, out: Path, variants: list[str] | None = None, flags: tuple[str, ...] | None = None) -> list[Step]:
        """One bench run per variant (CHOICE, or the default ones); `flags` replaces the servers' flags. With MTP,
        every setup serves with the variant's simulated acceptance (presets.simulated_acceptance)."""
        steps = []
        for v in variants or self.variants:
            setups = [with_env(s, presets.simulated_acceptance(v)) for s in self.setups] if self.mtp else self.setups
            builds = [s for s in setups if s in ("pristine", "patched")]
            configs = [a for s in setups if s not in builds for a in ("--config", s)]
            steps.append(harness("bench", "--variant", v, "--out", str(out / self.out.format(variant=v)),
                                 *(["--model", self.model.format(variant=v)] if self.model else []),
                                 *(["--mtp"] if self.mtp else []), "--builds", *builds, *configs,
                                 "--workloads", *(knob(self.workloads_knob, " ".join(self.workloads))
                                                  if self.workloads_knob else self.workloads),
                                 "--", *(self.flags if flags is None else flags)))
        return steps


def env_words(env: dict[str, str]) -> list[str]:
    return [f"{key}={value}" for key, value in env.items()]


def with_env(setup: str, env: dict[str, str]) -> str:
    """A bench setup with `env` before its own environment pairs (which win); a bare build becomes the
    setup of that name."""
    head, _, rest = setup.partition(" ")
    if "=" not in head:
        head = f"{head}={head}"
    return " ".join([head, *env_words(env), *([rest] if rest else [])])


def named(catalog: dict[str, str], names: list[str], experiment: str) -> tuple[str, ...]:
    unknown = [n for n in names if n not in catalog]
    if unknown:
        raise SystemExit(f"run: {experiment}: unknown setup {', '.join(unknown)} (one of {', '.join(catalog)})")
    return tuple(f"{n}=patched {catalog[n]}".strip() for n in names)


# The fused kernels' kill switches (0030: the PLE tail; 0040: the MoE norms).
KERNELS_OFF = "SGLANG_OPT_USE_FUSED_GEMMA4_PLE_TAIL=0 SGLANG_OPT_USE_FUSED_GEMMA4_MOE_NORMS=0"
TP2_SETUPS = {"fused": "", "unfused": "--enforce-disable-flashinfer-allreduce-fusion",
              "no-custom-ar": "--disable-custom-all-reduce"}  # 0003's JIT all-reduce off
SWA_SETUPS = {
    "r0.8": "--swa-full-tokens-ratio 0.8", "r0.15": "--swa-full-tokens-ratio 0.15",
    "r0.8-leaf": "SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW=1 --swa-full-tokens-ratio 0.8",
    "r0.15-leaf": "SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW=1 --swa-full-tokens-ratio 0.15",
    "r0.8-noradix": "--swa-full-tokens-ratio 0.8 --disable-radix-cache",
    "r0.15-noradix": "--swa-full-tokens-ratio 0.15 --disable-radix-cache",
}
DECODE_ONLY = presets.BENCH_GRAPHS_DECODE_ONLY
MM_FLAGS = ("--load-format", "dummy", "--enable-multimodal",
            # on Hopper the vision tower's attention defaults to FA3, whose 1 GB library the bundle leaves
            # out of sgl_kernel (ImportError at the first image): triton_attn, as 0090's GPU test uses
            "--mm-attention-backend", "triton_attn", "--cuda-graph-max-bs-decode", "16",
            "--cuda-graph-backend-prefill", "disabled")
# the third mm-ab setup turns off the other patches that change an E2B/E4B image prompt's time (YOCO's
# prefill, the PLE tail's decode), leaving mostly 0090's batched encoder against pristine
MM_SETUPS = ("pristine", "patched", "patched-no-yoco-ple=patched SGLANG_GEMMA4_YOCO=0 SGLANG_OPT_USE_FUSED_GEMMA4_PLE_TAIL=0")


def mtp(choice, out):
    """the MTP preset: 26B-A4B-shaped target + assistant draft, full size, dummy weights with the simulated acceptance
    (pristine, may fail; then patched)"""
    return [harness("smoke", "--out", str(out / "mtp"), "--build", build, "--mtp", "--variants", v, "--env",
                    *env_words(presets.simulated_acceptance(v)), "--",
                    *presets.SMALL_GRAPHS, may_fail=build == "pristine")
            for build in ("pristine", "patched") for v in choice or ["26b-a4b"]]


def routing(choice, out):
    """the Gemma-4 routing kernel vs the torch routing ops, CUDA-graph replayed, T = 1..512 (patched build)"""
    return [harness("bench_gemma4_routing", "--out", str(out / "routing"), build="patched")]


def kernels(choice, out):
    """the fused kernels (0030, 0040) off vs on, patched build: batch-1 decode and chat ($KERNEL_WORKLOADS);
    $KERNELS_OFF replaces the kill switches of the "unfused" side; $KERNEL_FLAGS the server flags"""
    off = " ".join(knob("KERNELS_OFF", KERNELS_OFF))
    flags = tuple(knob("KERNEL_FLAGS", " ".join(presets.DECODE_GRAPHS)))
    return Comparison("kernels-{variant}", (f"unfused=patched {off}", "fused=patched"), ("batch1", "chat"),
                      "KERNEL_WORKLOADS").steps(out, choice, flags=flags)


def profile(choice, out):
    """one decode step at batch 1, 4, 16, 64 ($PROFILE_BATCH_SIZES): graph step time and per-kernel attribution,
    pristine then patched ($PROFILE_BUILDS); $PROFILE_ENV (KEY=VALUE ...) adds a patched run with that environment"""
    batches = ["--batch-sizes", *knob("PROFILE_BATCH_SIZES", "")] if os.environ.get("PROFILE_BATCH_SIZES") else []
    steps = []
    for v in choice or ["26b-a4b"]:
        steps += [harness("profile", "--variant", v, "--out", str(out / "profile"), "--build", b, *batches)
                  for b in knob("PROFILE_BUILDS", "pristine patched")]
        if os.environ.get("PROFILE_ENV"):
            steps.append(harness("profile", "--variant", v, "--out", str(out / "profile"), "--build", "patched",
                                 "--label", "patched-env", "--env", *knob("PROFILE_ENV", ""), *batches))
    return steps


def step_trace(choice, out):
    """requests decoding ($TRACE_STREAMS at once, default 1, of $TRACE_PROMPT_LEN prompt tokens, default 128), torch
    profiler over 60 scheduler steps: pristine then patched, or the setups in $TRACE_SETUPS ('NAME=BUILD
    [KEY=VALUE ...]', ';' between them)"""
    specs = [s.strip() for s in os.environ.get("TRACE_SETUPS", "").split(";") if s.strip()]
    setups = ["--builds", *([] if specs else ["pristine", "patched"]), *[a for s in specs for a in ("--config", s)]]
    load = ["--streams", *knob("TRACE_STREAMS", "1"), "--prompt-len", *knob("TRACE_PROMPT_LEN", "128")]
    return [harness("step_trace", "--variant", v, "--out", str(out / f"step-trace-{v}"), *setups, *load)
            for v in choice or ["26b-a4b"]]


def memory(choice, out):
    """weight memory and KV pool per build, model runner only: the conditional class at --mem-fraction-static
    0.85 (default 31b,e4b), then dense causal 31B with sglang's own memory settings (patch 0011's defaults)"""
    return [harness("memory", "--out", str(out / "memory"), "--variants", *(choice or ["31b", "e4b"]), "--archs",
                    "conditional", "--memory", "explicit"),
            harness("memory", "--out", str(out / "memory"), "--variants", "31b", "--archs", "causal", "--memory", "auto")]


def tp2_parity(choice, out):
    """tensor parallel 2, patched build, reduced-layer 31B vs transformers: FlashInfer's allreduce + RMSNorm
    fusion on and off (sglang serves TP unfused, with only a warning, when flashinfer.comm does not import)"""
    check = Step(("python3", "-c", "import flashinfer.comm"), build="patched", report=out / "flashinfer-comm.txt")
    return [check] + [harness("parity", "--variants", *(choice or ["31b"]), "--builds", "patched", "--out",
                              str(out / f"tp2-parity-{mode}"), "--server-flags",
                              shlex.join(["--tp-size", "2", *TP2_SETUPS[mode].split()]))
                      for mode in ("fused", "unfused")]


def tp2_ab(choice, out):
    """tensor parallel 2, full 31B shape, patched build: setups fused, unfused (no allreduce fusion), no-custom-ar
    (0003's JIT all-reduce off); CHOICE picks setups (default fused,unfused); $TP2_WORKLOADS"""
    setups = named(TP2_SETUPS, choice or ["fused", "unfused"], "tp2-ab")
    return Comparison("tp2-ab", setups, ("chat",), "TP2_WORKLOADS", ("--tp-size", "2", *DECODE_ONLY),
                      ("31b",)).steps(out)


def mtp_sides(name: str, variant: str, workloads: tuple[str, ...], flags: tuple[str, ...], out: Path) -> list[Step]:
    """The patched build serving `variant` without MTP, then with the preset's MTP at its simulated acceptance
    ($MTP_SETUPS picks the sides, $MTP_WORKLOADS the workloads, $MTP_ENV adds KEY=VALUE to both), into one
    folder and one summary."""
    env = " ".join(knob("MTP_ENV", ""))
    steps = []
    for side in knob("MTP_SETUPS", "off on"):
        steps += Comparison(name, (f"mtp-{side}=patched {env}".strip(),), workloads, "MTP_WORKLOADS", flags,
                            mtp=side == "on").steps(out, [variant])
    return steps + [harness("bench", "--variant", variant, "--out", str(out / name), "--summarize-only")]


def mtp_fill(choice, out):
    """the MTP preset (26B-A4B + draft, patched) under summarization 8000/1000 x 80, which fills the SWA pool, and
    chat: MTP off then on ($MTP_SETUPS picks the sides, $MTP_WORKLOADS the workloads, $MTP_ENV adds KEY=VALUE)"""
    return mtp_sides("mtp-fill", "26b-a4b", ("summarization-80", "chat"), DECODE_ONLY, out)


def mtp_ab(choice, out):
    """MTP off vs on, patched build, same call, MTP at the variant's simulated acceptance (CHOICE, default
    26b-a4b,31b): batch-1 decode and chat at 32 ($MTP_WORKLOADS; $MTP_SETUPS, $MTP_ENV as in mtp-fill; $MTP_FLAGS
    replaces the servers' graph flags, e.g. decode graphs only for a shorter 31B start)"""
    flags = tuple(knob("MTP_FLAGS", " ".join(presets.BENCH_GRAPHS)))
    return [step for v in choice or list(presets.SIMULATED_ACCEPT_LEN)
            for step in mtp_sides(f"mtp-ab-{v}", v, ("batch1", "chat"), flags, out)]


def mtp_greedy(choice, out):
    """greedy decoding with MTP vs without, patched build, reduced random-weight targets and drafts built to agree
    with them on 70% of the tokens, under a load that fills the SWA pool: every token must match, the accept
    length must be partial (CHOICE, default 26b-a4b,31b); $MTP_GREEDY_ENV (KEY=VALUE ...) is given to both servers"""
    env = knob("MTP_GREEDY_ENV", "")
    return [harness("mtp_greedy", "--out", str(out / "mtp-greedy"), "--variants",
                    *(choice or list(presets.SIMULATED_ACCEPT_LEN)), *(["--env", *env] if env else []))]


def openai_suite(choice, out):
    """the official openai client against the preset's server (structured output, gemma4 parsers): chat,
    streaming, n > 1, logprobs, a forced tool call, JSON schema, regex, EBNF, stop, max_tokens, usage, refusals;
    mtp-greedy's reduced random-weight target served without MTP, then with its agreeing draft (real, partial
    acceptance), whose greedy constrained answers must equal MTP off's (CHOICE, default 26b-a4b; or 31b)"""
    return [harness("openai_suite", "--start", v, "--out", str(out / f"openai-suite-{v}")) for v in choice or ["26b-a4b"]]


def openai_suite_images(choice, out):
    """the openai client against the preset's --multimodal server (towers loaded, dummy weights): chat, an image
    question, and bad media (broken base64, non-image, truncated, decompression bomb, remote URL, server path)
    refused with 400 (CHOICE, default e4b)"""
    return [harness("openai_suite", "--start-images", v, "--out", str(out / f"openai-suite-images-{v}"))
            for v in choice or ["e4b"]]


def structured_cost(choice, out):
    """the preset's structured output (xgrammar) vs --grammar-backend none, patched build, same call: unconstrained
    batch-1 decode and chat at 32 ($STRUCTURED_WORKLOADS) (CHOICE, default 26b-a4b)"""
    return Comparison("structured-cost-{variant}", ("none=patched --grammar-backend none", "xgrammar=patched"),
                      ("batch1", "chat"), "STRUCTURED_WORKLOADS").steps(out, choice)


def structured_throughput(choice, out):
    """constrained throughput with the preset's xgrammar, patched build: batch-1 decode and chat at 32, every
    request under an open JSON schema that keeps it decoding to its full length (CHOICE, default 26b-a4b)"""
    return Comparison("structured-throughput-{variant}", ("xgrammar=patched",), ("batch1-json", "chat-json"),
                      None).steps(out, choice)


def spec_step(choice, out):
    """one frozen-KV MTP step by part (draft loop, verify, the gaps between) at batch 1, 4, 16, 32 and the variant's
    simulated acceptance, pristine then patched ($SPEC_BUILDS), per variant (CHOICE, default 26b-a4b,31b); decode
    graphs to 32, no prefill graphs (only decode is traced); $SPEC_BATCH_SIZES replaces the batch sizes,
    $SPEC_PROMPT_LEN the 128 prompt tokens of each stream; $SPEC_ENV (KEY=VALUE ...) is given to every server and
    $SPEC_LABEL names that setup in the files (e.g. an opt-in switch off, then on)"""
    env, label = knob("SPEC_ENV", ""), "-".join(knob("SPEC_LABEL", ""))
    return [harness("spec_step", "--variant", v, "--build", build, "--out", str(out / "spec-step"),
                    "--batch-sizes", *knob("SPEC_BATCH_SIZES", "1 4 16 32"),
                    "--prompt-len", *knob("SPEC_PROMPT_LEN", "128"),
                    *(["--env", *env] if env else []), *(["--label", f"{build}-{label}"] if label else []),
                    "--", *DECODE_ONLY)
            for v in choice or list(presets.SIMULATED_ACCEPT_LEN) for build in knob("SPEC_BUILDS", "pristine patched")]


def yoco(choice, out):
    """patch 0080 (on by default): E2B/E4B parity vs transformers with SGLANG_GEMMA4_YOCO=1 (graphs off), whole and
    in 256-token chunks, then off vs on with the radix cache and prefill graphs off ($YOCO_WORKLOADS)"""
    steps = []
    for v in choice or ["e2b", "e4b"]:
        parity = ("--variants", v, "--builds", "patched-eager", "--patched-env", "SGLANG_GEMMA4_YOCO=1")
        steps += [harness("parity", *parity, "--out", str(out / "yoco-parity")),
                  # 256-token chunks: later chunks extend a cached prefix, as a radix-cache hit does
                  harness("parity", *parity, "--server-flags", "--chunked-prefill-size 256", "--out",
                          str(out / "yoco-parity-chunked"))]
        steps += Comparison("yoco-{variant}", ("off=patched SGLANG_GEMMA4_YOCO=0", "on=patched SGLANG_GEMMA4_YOCO=1"),
                            ("long-prefill", "decode-burst"), "YOCO_WORKLOADS",
                            ("--disable-radix-cache", "--cuda-graph-backend-prefill", "disabled",
                             *presets.DECODE_GRAPHS), (v,)).steps(out)
    return steps


def moe_tune(choice, out):
    """the fused-MoE kernel configs for 26B-A4B on this GPU (tune_gemma4_moe, $MOE_TUNE_ARGS), then batch-1 and chat
    with sglang's shipped configs vs the tuned file (SGLANG_MOE_CONFIG_DIR), patched build"""
    tuned = out / "moe-tune"
    return [harness("tune_gemma4_moe", "--out", str(tuned), *knob("MOE_TUNE_ARGS", ""), build="patched"),
            *Comparison("moe-ab", ("shipped=patched", f"tuned=patched SGLANG_MOE_CONFIG_DIR={tuned}"),
                        ("batch1", "chat"), None, DECODE_ONLY).steps(out)]


COLDSTARTS = {"cold-pristine": ("pristine", "0"), "cold-no-prebuild": ("patched", "0"), "cold": ("patched", "1"),
              "warm": ("patched", "1")}


def coldstart(choice, out):
    """server starts with the preset's own capture sizes ($COLDSTART_FLAGS adds flags); $COLDSTART_STARTS picks and
    orders them (default cold-no-prebuild cold warm; also cold-pristine): a cold start empties every compile cache
    first (under /tmp, so a warm start may follow in the next call); then what the last start compiled and the
    start-time breakdown"""
    steps = []
    for v in choice or ["26b-a4b"]:
        caches = Path(f"/tmp/sglang-gemma4-compile-caches-{v}")
        logs = []
        for start in knob("COLDSTART_STARTS", "cold-no-prebuild cold warm"):
            if start not in COLDSTARTS:
                raise SystemExit(f"run: coldstart: unknown start {start} (one of {', '.join(COLDSTARTS)})")
            build, prebuild = COLDSTARTS[start]
            env = {"SGLANG_GEMMA4_PREBUILD": prebuild, "TRITON_CACHE_DIR": f"{caches}/triton",
                   "TVM_FFI_CACHE_DIR": f"{caches}/tvm-ffi", "FLASHINFER_WORKSPACE_BASE": f"{caches}/flashinfer",
                   "TORCHINDUCTOR_CACHE_DIR": f"{caches}/inductor"}
            steps.append(harness("smoke", "--out", str(out / f"coldstart-{start}"), "--build", build, "--variants", v,
                                 "--", *knob("COLDSTART_FLAGS", ""), env=env,
                                 empty_first=None if start == "warm" else caches))
            logs.append(str(out / f"coldstart-{start}" / f"{v}-{build}.log"))
        steps += [harness("compile_caches", str(caches), "--markdown", report=out / f"compiles-{v}.md"),
                  harness("start_times", *logs, "--markdown", report=out / f"start-times-{v}.md")]
    return steps


def tiles(choice, out):
    """the Triton extend-attention kernel on Gemma-4 shapes: a grid of tiles vs the shipped one ($TILE_CASES)"""
    cases = ["--cases", *knob("TILE_CASES", "")] if os.environ.get("TILE_CASES") else []
    return [harness("bench_extend_attention_tiles", "--out", str(out / "tiles"), *cases, build="pristine")]


def decode_tiles(choice, out):
    """the Triton decode attention (stage 1's tile, the KV-split cap) on Gemma-4 shapes vs the shipped launch"""
    return [harness("bench_decode_attention_tiles", "--out", str(out / "decode-tiles"), build="pristine")]


def verify_attention(choice, out):
    """patch 0175: the MTP verify's attention, the grouped split-KV kernel vs extend_attention_fwd on 31B's and
    26B-A4B's layer shapes, timed from CUDA graphs and checked against float32 (patched build)"""
    return [harness("bench_verify_attention", "--out", str(out / "verify-attention"), build="patched")]


def gqa_pack(choice, out):
    """patch 0105: extend attention on 26B-A4B's and 31B's full layers, the old kernel vs the packed one with
    each tile of its table: an 8,192-token chunk after prefixes of 0-120K ($GQA_PACK_PREFIXES), bf16 and fp8 KV,
    ms per call and the packed output vs the old one (patched build)"""
    prefixes = ["--prefixes", *knob("GQA_PACK_PREFIXES", "")] if os.environ.get("GQA_PACK_PREFIXES") else []
    return [harness("bench_extend_attention_gqa_pack", "--out", str(out / "gqa-pack"), *prefixes, build="patched")]


def opt_in_ab(choice, out):
    """the patched build as it is ("off"), then with each switch of $OPT_IN alone (KEY=VALUE, or a --server-flag):
    batch-1 decode and chat ($OPT_IN_WORKLOADS)"""
    switches = os.environ.get("OPT_IN", "").split()
    if not switches:
        raise SystemExit("run: opt-in-ab needs OPT_IN: KEY=VALUE or --server-flag ...")
    setups = ("off=patched", *[f"{s.split('=')[0].removeprefix('--')}=patched {s}" for s in switches])
    return Comparison("opt-in-ab-{variant}", setups, ("batch1", "chat"), "OPT_IN_WORKLOADS").steps(out, choice)


def tiles_ab(choice, out):
    """patch 0100 (Hopper extend-attention tiles) off vs on, patched build, full 26B-A4B: MTP off and/or on
    (CHOICE: off,on); $TILES_AB_WORKLOADS"""
    steps = []
    for side in choice or ["off", "on"]:
        steps += Comparison("tiles-ab", (f"generic-mtp-{side}=patched SGLANG_OPT_HOPPER_EXTEND_ATTENTION_TILES=0",
                                         f"tiles-mtp-{side}=patched"), ("summarization",), "TILES_AB_WORKLOADS",
                            DECODE_ONLY, mtp=side == "on").steps(out)
    return steps


def mm_ab(choice, out):
    """pristine vs patched serving images (0090's batched vision encoder): a config-only conditional checkpoint with
    its processor (default e2b), dummy weights, $MM_WORKLOADS; a third setup leaves mostly 0090 against pristine"""
    steps = []
    for v in choice or ["e2b"]:
        model = REPO / "checkpoints" / f"{v}-conditional"
        steps += [Step(("python3", "-m", "sglang_gemma4", "checkpoint", "--variant", v, "--arch", "conditional",
                        "--weights", "none", "--out", str(model)), unless_exists=model / "processor_config.json"),
                  *Comparison("mm-ab-{variant}", MM_SETUPS, ("images-6",), "MM_WORKLOADS", MM_FLAGS, (v,),
                              model=str(model)).steps(out)]
    return steps


def swa(choice, out):
    """the SWA pool study on the full 26B-A4B shape, patched build: summarization 8000/1000 x 80 and chat per setup
    (CHOICE, default r0.8,r0.15; -leaf adds the leaf-lock release, -noradix --disable-radix-cache); $SWA_WORKLOADS"""
    setups = named(SWA_SETUPS, choice or ["r0.8", "r0.15"], "swa")
    return Comparison("swa", setups, ("summarization-80", "chat"), "SWA_WORKLOADS", DECODE_ONLY).steps(out)


# patches 0016/0017's switches (the SWA lock released as the window slides, the SWA pool sized for the running
# windows), both off or both on; -rN also caps the running requests at N, the bound 0017 sizes the SWA pool for
# (at 32, 32 requests of 9000 tokens fit its full pool); on-i128 keeps sglang's SWA maintenance interval of 128
# decode steps instead of 0017's 16 (its pool is then sized for 128: the ratio's split for 64 requests)
KV_OFF = "SGLANG_OPT_SWA_RELEASE_PASSED_PREFIX=0 SGLANG_OPT_SWA_POOL_FROM_RUNNING_WINDOWS=0"
KV_ON = "SGLANG_OPT_SWA_RELEASE_PASSED_PREFIX=1 SGLANG_OPT_SWA_POOL_FROM_RUNNING_WINDOWS=1"
KV_SETUPS = {"off": KV_OFF, "on": KV_ON, "on-i128": f"{KV_ON} SGLANG_SWA_EVICTION_INTERVAL=128",
             **{f"{side}-r{n}": f"{env} --max-running-requests {n}" for n in (32, 48)
                for side, env in (("off", KV_OFF), ("on", KV_ON))}}
KV_PARTS = (*KV_SETUPS, "parity", "canary", "memory", "memory-off", "memory-on")
# decode graphs up to the 64 requests the workloads run; no prefill graphs: shorter starts, and sglang's KV
# canary needs them off
KV_FLAGS = (*presets.DECODE_GRAPHS, "--cuda-graph-backend-prefill", "disabled")


def kv_capacity(choice, out):
    """patches 0016/0017 (both on by default) on the full 26B-A4B shape, patched build, one part per call
    (CHOICE, default off,on): setups off, on, on-i128 (SWA maintenance every 128 decode steps), off-r32, on-r32,
    off-r48, on-r48 (--max-running-requests 32 or 48) under summarization 80 x 8000/1000 and chat at 32 and 64 at
    once ($KV_WORKLOADS); parity (26B-A4B, E4B vs transformers, both on); canary (both on, 32 running, chat at 64,
    sglang's KV canary raising on a freed or overwritten slot); memory (the $KV_MEMORY_VARIANTS presets, default
    31b e4b, off then on; memory-off, memory-on: one side). Each call ends with the memory and KV-capacity table
    of every server logged so far (kv-capacity/memory.md; $VLLM_LOG adds a vLLM log)"""
    kv = out / "kv-capacity"
    parts = choice or ["off", "on"]
    steps = []
    for part in parts:
        if part == "parity":
            steps.append(harness("parity", "--out", str(kv / "parity"), "--variants", "26b-a4b", "e4b", "--builds",
                                 "patched", "--patched-env", *KV_ON.split()))
        elif part == "canary":
            steps += Comparison("kv-capacity/canary",
                                (f"on-r32-canary=patched {KV_ON} --max-running-requests 32 --kv-canary raise",),
                                ("chat-at-64",), None, KV_FLAGS).steps(out)
        elif part.startswith("memory"):
            sides = ("off", "on") if part == "memory" else (part.removeprefix("memory-"),)
            steps += [harness("smoke", "--out", str(kv / f"memory-{side}"), "--build", "patched", "--variants",
                              *knob("KV_MEMORY_VARIANTS", "31b e4b"), "--env", *KV_SETUPS[side].split(), "--",
                              *KV_FLAGS) for side in sides]
        elif part in KV_SETUPS:
            steps += Comparison("kv-capacity", named(KV_SETUPS, [part], "kv-capacity"),
                                ("summarization-80-at-16", "summarization-80-at-32", "summarization-80-at-64", "chat-at-32",
                                 "chat-at-64"),
                                "KV_WORKLOADS", KV_FLAGS).steps(out)
        else:
            raise SystemExit(f"run: kv-capacity: unknown part {part} (one of {', '.join(KV_PARTS)})")
    if any(part in KV_SETUPS for part in parts):  # each setup ran its own bench: their tables side by side
        steps.append(harness("bench", "--variant", "26b-a4b", "--out", str(kv), "--summarize-only"))
    logs = [f"{kv}/*.server.log", f"{kv}/canary/*.server.log", f"{kv}/memory-*/*.log", *knob("VLLM_LOG", "")]
    return steps + [harness("kv_capacity", *logs, "--gpu-txt", str(out / "gpu.txt"), report=kv / "memory.md")]


# the long-context setups: the builds as the preset serves them at the model's own window, and the patched
# build on sglang's unified hybrid pool (full-attention and SWA KV in one buffer), each also with FP8 KV, and the
# patched build with 0105's packed full-layer extend attention off
FP8 = " ".join(presets.KV_FP8)
LONG_SETUPS = {"pristine": "", "patched": "", "unified": "--enable-unified-memory", "fp8": FP8,
               "unified-fp8": f"--enable-unified-memory {FP8}", "no-gqa-pack": "SGLANG_OPT_EXTEND_ATTENTION_GQA_PACK=0"}
LONG_DEFAULT = ("pristine", "patched", "unified")
LONG_WORKLOADS = ("long-16k", "long-64k", "long-128k", "long-250k", "long-4x60k")


def long_context(choice, out):
    """26B-A4B at its whole window (the preset's context), decode graphs only: one prompt of 16K, 64K, 128K, 250K
    tokens at a time and four of 60K at once, 64 output tokens each ($LONG_WORKLOADS; also long-128k-beside-chat,
    long-3x60k-beside-chat: 8 streams decoding while a 128K or three 60K prompts prefill); setups pristine, patched,
    unified (the patched build on one KV buffer for both layer kinds), fp8 and unified-fp8 (those with FP8 KV),
    no-gqa-pack (the patched build with patch 0105's packed full-layer extend attention off); CHOICE picks them
    (default the first three)"""
    names = choice or list(LONG_DEFAULT)
    unknown = [n for n in names if n not in LONG_SETUPS]
    if unknown:
        raise SystemExit(f"run: long: unknown setup {', '.join(unknown)} (one of {', '.join(LONG_SETUPS)})")
    setups = tuple(f"{n}={'pristine' if n == 'pristine' else 'patched'} {LONG_SETUPS[n]}".strip() for n in names)
    return Comparison("long-{variant}", setups, LONG_WORKLOADS, "LONG_WORKLOADS", DECODE_ONLY).steps(out)


def prefill_profile(choice, out):
    """26B-A4B at its whole window, decode graphs only: one 131,072-token prompt in 8192-token chunks under the torch
    profiler, per chunk the full-attention and SWA layers' extend attention, MoE, GEMMs, the rest and the host's gaps;
    CHOICE picks the builds (default pristine,patched), each its own step into one table"""
    builds = choice or ["pristine", "patched"]
    unknown = [b for b in builds if b not in ("pristine", "patched")]
    if unknown:
        raise SystemExit(f"run: prefill-profile: unknown build {', '.join(unknown)} (pristine or patched)")
    return [harness("prefill_profile", "--variant", "26b-a4b", "--out", str(out / "prefill-profile"), "--builds", b,
                    "--", *DECODE_ONLY) for b in builds]


def baseline(choice, out):
    """pristine sglang: chat, summarization 8000/1000 and batch-1 decode (graphs for the workloads' concurrency, 32)"""
    return Comparison("baseline-{variant}", ("pristine",), ("chat", "summarization", "batch1"), None).steps(out, choice)


EXPERIMENTS = {"mtp": mtp, "routing": routing, "kernels": kernels, "profile": profile, "step-trace": step_trace,
               "memory": memory, "tp2-parity": tp2_parity, "tp2-ab": tp2_ab, "mtp-fill": mtp_fill, "mtp-ab": mtp_ab,
               "mtp-greedy": mtp_greedy, "spec-step": spec_step, "openai-suite": openai_suite,
               "openai-suite-images": openai_suite_images,
               "structured-cost": structured_cost, "structured-throughput": structured_throughput, "yoco": yoco,
               "moe-tune": moe_tune, "coldstart": coldstart, "tiles": tiles, "decode-tiles": decode_tiles,
               "verify-attention": verify_attention, "gqa-pack": gqa_pack,
               "opt-in-ab": opt_in_ab, "tiles-ab": tiles_ab, "mm-ab": mm_ab, "swa": swa, "kv-capacity": kv_capacity,
               "long": long_context, "prefill-profile": prefill_profile, "baseline": baseline}


def expand(stage: str, out: Path) -> list[Step]:
    """STAGE[:CHOICE,...] as its steps."""
    name, _, choice = stage.partition(":")
    if name not in EXPERIMENTS:
        raise SystemExit(f"run: unknown experiment {name} (one of {', '.join(EXPERIMENTS)})")
    try:
        return EXPERIMENTS[name]([c for c in choice.split(",") if c], out)
    except ValueError as e:  # e.g. MTP asked of a variant without a draft
        raise SystemExit(f"run: {name}: {e}") from None


def command(step: Step) -> list[str]:
    """What runs: the step's argv, inside its build's environment where it names one."""
    return in_build(step.build, list(step.argv), harness=True) if step.build else list(step.argv)


def dry_run(step: Step) -> bool:
    print(describe(step.build or "harness", step.env, list(step.argv)), flush=True)
    if step.module in DRY_RUNS:  # the servers it would start
        argv = [sys.executable, "-m", step.module, "--dry-run", *step.argv[3:]]
        return subprocess.run(argv, env={**os.environ, **step.env}).returncode == 0
    return True


def run(step: Step) -> bool:
    if step.unless_exists and step.unless_exists.exists():
        return True
    if step.empty_first:
        shutil.rmtree(step.empty_first, ignore_errors=True)
    done = subprocess.run(command(step), env={**os.environ, **step.env}, cwd=REPO, text=True,
                          stdout=subprocess.PIPE if step.report else None, stderr=subprocess.STDOUT if step.report else None)
    if step.report:
        step.report.write_text(done.stdout)
        print(done.stdout, end="", flush=True)
    if done.returncode and not step.may_fail:
        print(f"run: failed ({done.returncode}): {shlex.join(command(step))}", file=sys.stderr, flush=True)
    return done.returncode == 0 or step.may_fail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stage", nargs="?", metavar="STAGE[:CHOICE,...]")
    parser.add_argument("--out", type=Path, default=Path("gpu-results"))
    parser.add_argument("--dry-run", action="store_true", help="print the commands (and the servers they start)")
    parser.add_argument("--list", action="store_true", help="the experiments and what each runs")
    args = parser.parse_args(argv)
    if args.list or not args.stage:
        for name, experiment in EXPERIMENTS.items():
            print(f"{name:<17}{' '.join(experiment.__doc__.split())}")
        return 0
    steps = expand(args.stage, args.out.resolve())
    ok = True
    for step in steps:  # a failing step is reported, and the next one still runs
        ok &= dry_run(step) if args.dry_run else run(step)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
