"""Every GPU stage, gates and experiments alike: what it runs (its function's docstring), its time
limit and its arguments, and the expansion of one stage's command-line word into its steps.

    STAGE[:CHOICE,...][:KEY=VALUE]...

CHOICE picks the stage's variants (or, where it says so, its setups, sides or cases); each KEY=VALUE
sets one of its arguments (a VALUE may hold spaces, commas and '='), e.g.
`fuzz:e4b:requests=1000:seed=7`, `ab:31b:workloads=chat batch1`. Every stage also takes
timeout=SECONDS."""

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sglang_gemma4.gpu.serve import presets
from sglang_gemma4.gpu.stages import experiments as e
from sglang_gemma4.gpu.stages import gates as g
from sglang_gemma4.gpu.stages.steps import Step

TIMEOUT_S = 600  # one device call


@dataclass(frozen=True)
class Arg:
    default: str = ""
    env: str | None = None  # the environment knob it replaces, refused when set


@dataclass(frozen=True)
class Stage:
    steps: Callable[[list[str], dict[str, str], Path], list[Step]]
    args: dict[str, Arg] = field(default_factory=dict)
    gate: bool = False
    timeout_s: int = TIMEOUT_S

    @property
    def what(self) -> str:
        return " ".join(self.steps.__doc__.split())


def workloads(env: str) -> dict[str, Arg]:
    """A comparison's workloads= (default: the stage's own)."""
    return {"workloads": Arg(env=env)}


def fuzzing(requests: str, env: str) -> dict[str, Arg]:
    return {"requests": Arg(requests, env), "seed": Arg(env="FUZZ_SEED")}


BUILDS = "pristine patched"
PATCHED_ENV = Arg(env="PATCHED_ENV")
STAGES = {
    # the gates
    "smoke": Stage(g.smoke, gate=True),
    "bad-input": Stage(g.bad_input, gate=True),
    "access": Stage(g.access, gate=True),
    "fuzz": Stage(g.fuzz, fuzzing("600", "FUZZ_REQUESTS"), gate=True),
    "fuzz-routes": Stage(g.fuzz_routes, fuzzing("1000", "FUZZ_ROUTE_REQUESTS"), gate=True),
    "sampling-fuzz": Stage(g.sampling_fuzz, fuzzing("400", "SAMPLING_FUZZ_REQUESTS"), gate=True),
    "gpu-tests": Stage(
        g.gpu_tests,
        {"tests": Arg("test/patches test/gpu/kernels/test_cuda_timing.py", "GPU_TESTS")},
        gate=True,
    ),
    "serve": Stage(g.serve, gate=True),
    "parity": Stage(
        g.parity,
        {
            "builds": Arg(BUILDS, "PARITY_BUILDS"),
            "flags": Arg(env="PARITY_FLAGS"),
            "patched-env": PATCHED_ENV,
            "long": Arg(),
        },
        gate=True,
    ),
    "repro": Stage(g.repro, gate=True),
    "ab": Stage(
        g.ab,
        {
            "workloads": Arg("chat batch1", "AB_WORKLOADS"),
            "flags": Arg(" ".join(presets.BENCH_GRAPHS), "AB_FLAGS"),
            "patched-env": PATCHED_ENV,
        },
        gate=True,
    ),
    # the experiments
    "mtp": Stage(e.mtp),
    "routing": Stage(e.routing),
    "kernels": Stage(
        e.kernels,
        {
            "off": Arg(e.KERNELS_OFF, "KERNELS_OFF"),
            "flags": Arg(" ".join(presets.DECODE_GRAPHS), "KERNEL_FLAGS"),
            **workloads("KERNEL_WORKLOADS"),
        },
    ),
    "profile": Stage(
        e.profile,
        {
            "batch-sizes": Arg(env="PROFILE_BATCH_SIZES"),
            "builds": Arg(BUILDS, "PROFILE_BUILDS"),
            "env": Arg(env="PROFILE_ENV"),
        },
    ),
    "step-trace": Stage(
        e.step_trace,
        {
            "setups": Arg(env="TRACE_SETUPS"),
            "streams": Arg("1", "TRACE_STREAMS"),
            "prompt-len": Arg("128", "TRACE_PROMPT_LEN"),
        },
    ),
    "memory": Stage(e.memory),
    "multi-gpu-parity": Stage(e.multi_gpu_parity, {"setups": Arg("tp2 dp2")}),
    "multi-gpu-ab": Stage(
        e.multi_gpu_ab, {"setups": Arg("one-gpu tp2 dp2"), **workloads("TP2_WORKLOADS")}
    ),
    "mtp-fill": Stage(
        e.mtp_fill,
        {
            "sides": Arg("off on", "MTP_SETUPS"),
            "env": Arg(env="MTP_ENV"),
            "flags": Arg(" ".join(presets.BENCH_GRAPHS_DECODE_ONLY)),
            **workloads("MTP_WORKLOADS"),
        },
    ),
    "mtp-ab": Stage(
        e.mtp_ab,
        {
            "sides": Arg("off on", "MTP_SETUPS"),
            "env": Arg(env="MTP_ENV"),
            "flags": Arg(" ".join(presets.BENCH_GRAPHS), "MTP_FLAGS"),
            **workloads("MTP_WORKLOADS"),
        },
    ),
    "mtp-greedy": Stage(e.mtp_greedy, {"env": Arg(env="MTP_GREEDY_ENV")}),
    "spec-step": Stage(
        e.spec_step,
        {
            "builds": Arg(BUILDS, "SPEC_BUILDS"),
            "batch-sizes": Arg("1 4 16 32", "SPEC_BATCH_SIZES"),
            "prompt-len": Arg("128", "SPEC_PROMPT_LEN"),
            "env": Arg(env="SPEC_ENV"),
            "label": Arg(env="SPEC_LABEL"),
        },
    ),
    "openai-suite": Stage(e.openai_suite),
    "openai-suite-images": Stage(e.openai_suite_images),
    "image-parity": Stage(e.image_parity, {"builds": Arg("patched")}),
    "audio-parity": Stage(e.audio_parity, {"builds": Arg("patched")}),
    "structured-cost": Stage(e.structured_cost, workloads("STRUCTURED_WORKLOADS")),
    "structured-throughput": Stage(e.structured_throughput),
    "multimodal-cost": Stage(e.multimodal_cost, {"workloads": Arg()}),
    "yoco": Stage(e.yoco, workloads("YOCO_WORKLOADS")),
    "moe-tune": Stage(e.moe_tune, {"tuner": Arg(env="MOE_TUNE_ARGS")}),
    "coldstart": Stage(
        e.coldstart,
        {
            "starts": Arg("cold-no-prebuild cold warm", "COLDSTART_STARTS"),
            "flags": Arg(env="COLDSTART_FLAGS"),
        },
    ),
    "tiles": Stage(e.tiles, {"cases": Arg(env="TILE_CASES")}),
    "decode-tiles": Stage(e.decode_tiles),
    "verify-attention": Stage(e.verify_attention),
    "gqa-pack": Stage(
        e.gqa_pack,
        {"prefixes": Arg(env="GQA_PACK_PREFIXES"), "tiles": Arg(), "models": Arg(), "kv": Arg()},
    ),
    "extend-gemm": Stage(
        e.extend_gemm,
        {
            "prefixes": Arg(),
            "chunks": Arg(),
            "sizes": Arg(),
            "models": Arg(),
            "kv": Arg(),
            "layouts": Arg(),
            "against": Arg(),
        },
    ),
    "opt-in-ab": Stage(
        e.opt_in_ab,
        {"switches": Arg(env="OPT_IN"), "flags": Arg(), **workloads("OPT_IN_WORKLOADS")},
    ),
    "tiles-ab": Stage(e.tiles_ab, workloads("TILES_AB_WORKLOADS")),
    "mm-ab": Stage(e.mm_ab, workloads("MM_WORKLOADS")),
    "swa": Stage(e.swa, workloads("SWA_WORKLOADS")),
    "kv-capacity": Stage(
        e.kv_capacity,
        {
            "memory-variants": Arg("31b e4b", "KV_MEMORY_VARIANTS"),
            "vllm-log": Arg(env="VLLM_LOG"),
            **workloads("KV_WORKLOADS"),
        },
    ),
    "long": Stage(
        e.long_context,
        {"variants": Arg("26b-a4b"), "flags": Arg(), **workloads("LONG_WORKLOADS")},
    ),
    "prefill-profile": Stage(e.prefill_profile),
    "baseline": Stage(e.baseline),
}
KEY = re.compile(r"([a-z][a-z0-9-]*)=(.*)", re.S)


@dataclass(frozen=True)
class Expanded:
    name: str
    word: str  # as given on the command line
    steps: list[Step]
    timeout_s: int


def refuse_old_knobs() -> None:
    """An environment knob the table replaced is an error, not silently ignored."""
    set_ = [
        (name, key, arg.env)
        for name, stage in STAGES.items()
        for key, arg in stage.args.items()
        if arg.env and os.environ.get(arg.env)
    ]
    if set_:
        raise SystemExit(
            "run: environment knobs are stage arguments now: "
            + "; ".join(f"{env} -> {name}:{key}=..." for name, key, env in set_)
        )


def expand(word: str, out: Path) -> Expanded:
    """STAGE[:CHOICE,...][:KEY=VALUE]... as its steps."""
    name, _, rest = word.partition(":")
    if name not in STAGES:
        raise SystemExit(f"run: unknown stage {name} (one of {', '.join(STAGES)})")
    stage = STAGES[name]
    args = {key: arg.default for key, arg in stage.args.items()}
    choice, timeout_s = [], stage.timeout_s
    for part in re.split(r":(?=[a-z][a-z0-9-]*=)", rest) if rest else []:
        keyed = KEY.fullmatch(part)
        if not keyed:
            choice += [c for c in part.split(",") if c]
        elif keyed[1] == "timeout":
            timeout_s = int(keyed[2])
        elif keyed[1] in args:
            args[keyed[1]] = keyed[2]
        else:
            raise SystemExit(
                f"run: {name}: unknown argument {keyed[1]} (one of {', '.join([*args, 'timeout'])})"
            )
    try:
        return Expanded(name, word, stage.steps(choice, args, out), timeout_s)
    except ValueError as error:  # e.g. MTP asked of a variant without a draft
        raise SystemExit(f"run: {name}: {error}") from None
