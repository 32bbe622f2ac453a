"""Tune sglang's Triton fused-MoE kernel config for a Gemma-4 MoE shape on this GPU (issue #10 part
2).

    python -m sglang_gemma4.gpu.kernels.tune_gemma4_moe --out DIR [--variant 26b-a4b] [--tp 1]
        [--batch-sizes 1 2 4 ...]
        [--grid quick|full|decode] [--repeats 20] [--share-within 0.02 | --per-gemm] [--jobs 8]

For each batch size, sglang's own `fused_experts` (both expert GEMMs and the activation, bf16, top-k
routing drawn uniformly at random) runs under each candidate kernel config, replayed from a CUDA
graph; the fastest config wins, or with --share-within F the fewest configs that keep every batch
size within F of its fastest (each distinct config is one more Triton compile when a server
captures its CUDA graphs: issue #10's cold start). sglang's current choice is timed the same way
(for Triton 3.6 it falls back to the 3.5.1 file, with a warning). Writes
- DIR/configs/triton_<version>/<sglang's file name>.json: the winners, where `get_moe_configs` reads
  them, so `SGLANG_MOE_CONFIG_DIR=DIR` serves with them without a rebuild (A/B), and a patch can
  ship the file under python/sglang/srt/layers/moe/moe_runner/triton_utils/configs/;
- DIR/tune.jsonl (every timing) and DIR/tune.md (per batch size: shipped vs tuned time).

With --per-gemm the two expert GEMMs are timed apart (gate_up, and down as the 26B-A4B launch preset
runs it: adding each token's top-k outputs into the layer output), each with its own winner among
the configs as tall as sglang's current choice at that batch size (sglang asserts the two GEMMs
share BLOCK_SIZE_M); sglang reads the down winners from a second file, named with `_down`. Both
files cover every batch size of the default list, sglang's current choice where not tuned, so
that prefill keeps its tiles.
"""

import argparse
import functools
import itertools
import json
import sys
from pathlib import Path

from sglang_gemma4.gpu.kernels.cuda_timing import graph_replay_us
from sglang_gemma4.gpu.kernels.kernel_grid import add_jobs_argument, compile_ahead
from sglang_gemma4.gpu.serve.presets import BACKENDS, model_flags, resolved_server_args
from sglang_gemma4.gpu.serve.variants import text_config, write_config

BATCH_SIZES = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 2048, 4096]
GRIDS = {
    "quick": {
        "BLOCK_SIZE_M": [16, 32, 64],
        "BLOCK_SIZE_N": [32, 64, 128],
        "BLOCK_SIZE_K": [64, 128],
        "GROUP_SIZE_M": [1, 16],
        "num_warps": [4],
        "num_stages": [3, 4],
    },
    "full": {
        "BLOCK_SIZE_M": [16, 32, 64, 128],
        "BLOCK_SIZE_N": [32, 64, 128, 256],
        "BLOCK_SIZE_K": [64, 128, 256],
        "GROUP_SIZE_M": [1, 16, 32],
        "num_warps": [4, 8],
        "num_stages": [2, 3, 4, 5],
    },
    # decode sizes (one expert tile row): narrower tiles and fewer warps than the others reach
    "decode": {
        "BLOCK_SIZE_M": [16],
        "BLOCK_SIZE_N": [16, 32, 64, 128],
        "BLOCK_SIZE_K": [64, 128, 256],
        "GROUP_SIZE_M": [1],
        "num_warps": [2, 4, 8],
        "num_stages": [2, 3, 4, 5],
    },
}
GEMMS = ("gate_up", "down")


def candidates(grid: str) -> list[dict]:
    keys = list(GRIDS[grid])
    return [dict(zip(keys, values)) for values in itertools.product(*GRIDS[grid].values())]


def fits(config: dict, batch: int) -> bool:
    """Skip tiles taller than an expert's rows can fill (at most one row per token): pure
    padding."""
    return config["BLOCK_SIZE_M"] <= max(16, 1 << (batch - 1).bit_length())


def pick(timings: dict[int, dict[str, float]], configs: dict[str, dict]) -> dict[int, dict]:
    """Fastest config per batch size, from {batch: {config key: microseconds}}."""
    return {
        batch: configs[min(by_config, key=by_config.get)] for batch, by_config in timings.items()
    }


def pick_shared(
    timings: dict[int, dict[str, float]], configs: dict[str, dict], within: float
) -> dict[int, dict]:
    """Few distinct configs: greedily the one within `within` of the fastest at the most batch sizes
    not yet covered (ties: the lower total time there), until all are; each batch size then takes
    the fastest of the chosen."""
    fastest = {batch: min(by_config.values()) for batch, by_config in timings.items()}
    good = {
        key: {
            batch
            for batch, by_config in timings.items()
            if key in by_config and by_config[key] <= fastest[batch] * (1 + within)
        }
        for key in configs
    }
    chosen, left = [], set(timings)
    while left:
        key = max(
            good, key=lambda k: (len(good[k] & left), -sum(timings[b][k] for b in good[k] & left))
        )
        chosen.append(key)
        left -= good[key]
    return {
        batch: configs[min((k for k in chosen if k in by_config), key=by_config.get)]
        for batch, by_config in timings.items()
    }


def per_gemm_files(
    current: dict[int, dict[str, dict]], tuned: dict[int, dict[str, dict]]
) -> dict[str, dict]:
    """{gemm: {batch: config}} for the two files sglang reads: every batch size sglang's current
    choice (`current`, {batch: {gemm: config}}) covers, the tuned winner where there is one."""
    files = {}
    for gemm in GEMMS:
        files[gemm] = {
            batch: (tuned.get(batch) or by_gemm)[gemm] for batch, by_gemm in sorted(current.items())
        }
        assert all(
            files[gemm][b]["BLOCK_SIZE_M"] == current[b][gemm]["BLOCK_SIZE_M"] for b in current
        )
    return files


def config_key(config: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in config.items())


def publish_server_args(variant: str, *extra: str) -> None:
    """Publish the server arguments a server of `variant` resolves from the launch preset and
    `extra` flags (from a config.json alone): sglang's fused_experts and its config lookup read them
    from the process's runtime context, as in a server (e.g. whether the down GEMM sums the top-k
    outputs itself)."""
    import tempfile

    from sglang.srt.runtime_context import publish

    model = write_config(Path(tempfile.mkdtemp(prefix="tune-moe-")), variant, "causal")
    argv = ["--model-path", str(model), *BACKENDS, *model_flags(variant), *extra]
    publish(resolved_server_args(argv), role="scheduler")


class MoeProblem:
    """The variant's expert weights (random, on the GPU) and sglang's fused_experts over them."""

    def __init__(self, variant: str, tp: int):
        import torch

        from sglang.srt.layers.moe.moe_runner.base import MoeRunnerConfig

        publish_server_args(variant)
        text = text_config(variant)
        self.experts, self.top_k, self.hidden = (
            text["num_experts"],
            text["top_k_experts"],
            text["hidden_size"],
        )
        self.n = text["moe_intermediate_size"] // tp
        self.g = torch.Generator(device="cuda").manual_seed(0)
        randn = functools.partial(
            torch.randn, device="cuda", dtype=torch.bfloat16, generator=self.g
        )
        self.w1 = randn(self.experts, 2 * self.n, self.hidden) * self.hidden**-0.5
        self.w2 = randn(self.experts, self.hidden, self.n) * self.n**-0.5
        self.runner = MoeRunnerConfig(
            num_experts=self.experts,
            num_local_experts=self.experts,
            hidden_size=self.hidden,
            intermediate_size_per_partition=self.n,
            top_k=self.top_k,
            activation="gelu",
            inplace=False,
        )

    def tokens(self, batch: int):
        """`batch` random tokens and their top-k routing, drawn uniformly at random."""
        import torch

        from sglang.srt.layers.moe.topk import StandardTopKOutput

        x = torch.randn(batch, self.hidden, device="cuda", dtype=torch.bfloat16, generator=self.g)
        scores = torch.rand(batch, self.experts, device="cuda", generator=self.g)
        weights, ids = torch.topk(torch.softmax(scores, -1), self.top_k, dim=-1)
        return x, StandardTopKOutput(
            weights / weights.sum(-1, keepdim=True), ids.to(torch.int32), scores
        )

    def call(self, batch: int):
        """fused_experts on `batch` tokens."""
        from sglang.srt.layers.moe.moe_runner.triton_utils import fused_experts

        x, routing = self.tokens(batch)
        return lambda: fused_experts(x, self.w1, self.w2, routing, self.runner)

    def current(self, batch: int) -> dict[str, dict]:
        """sglang's own choice at `batch` tokens: {gemm: config} (down falls back to gate_up's)."""
        from sglang.srt.layers.moe.moe_runner.triton_utils import try_get_optimal_moe_config

        up, (down, _) = try_get_optimal_moe_config(
            self.w1.shape, self.w2.shape, self.top_k, None, batch, return_down_config=True
        )
        return {"gate_up": dict(up), "down": dict(down or up)}

    def gemm_runs(self, batch: int, block_m: int) -> dict:
        """The two expert GEMMs alone at `batch` tokens (one draw of tokens and routing, aligned to
        `block_m`-row tiles, for every config), as {gemm: config -> launch}: each launched as
        fused_experts launches it."""
        import torch
        import triton.language as tl

        from sglang.kernels.ops.moe.fused_moe_triton_kernels import invoke_fused_moe_kernel
        from sglang.srt.layers.moe.moe_runner.triton_utils import moe_align_block_size

        x, (weights, ids, _) = self.tokens(batch)
        routed = (weights, ids, *moe_align_block_size(ids, block_m, self.experts))
        plain = dict(
            compute_type=tl.bfloat16,
            use_fp8_w8a8=False,
            use_int8_w8a8=False,
            use_int8_w8a16=False,
            use_int4_w4a16=False,
            per_channel_quant=False,
            filter_expert=False,
        )
        up = torch.empty(batch * self.top_k, 2 * self.n, device="cuda", dtype=torch.bfloat16)
        act = torch.randn(
            batch * self.top_k, self.n, device="cuda", dtype=torch.bfloat16, generator=self.g
        )
        out = torch.zeros(batch, self.hidden, device="cuda", dtype=torch.bfloat16)
        return {
            "gate_up": lambda config: (
                lambda: invoke_fused_moe_kernel(
                    x,
                    self.w1,
                    None,
                    up,
                    None,
                    None,
                    None,
                    *routed,
                    False,
                    self.top_k,
                    config,
                    **plain,
                )
            ),
            "down": lambda config: (
                lambda: invoke_fused_moe_kernel(
                    act,
                    self.w2,
                    None,
                    out,
                    None,
                    None,
                    None,
                    *routed,
                    True,
                    1,
                    config,
                    fuse_sum_all_reduce=True,
                    router_topk=self.top_k,
                    **plain,
                )
            ),
        }


@functools.lru_cache(maxsize=None)
def moe_problem(variant: str, tp: int) -> MoeProblem:
    """One per worker process: its weights serve every config it compiles."""
    return MoeProblem(variant, tp)


def run_overridden(config: dict, run) -> None:
    """run() with sglang's fused-MoE config overridden to `config` (both GEMMs)."""
    from sglang.srt.layers.moe.moe_runner.triton_utils import override_config

    with override_config(config):
        run()


def launch_config(variant: str, tp: int, per_gemm: bool, item: tuple) -> None:
    """Run a config at each batch size it serves, so that its kernels land in Triton's cache (a
    config the GPU cannot run stops at its first batch size)."""
    config, batches = item
    for batch in batches:
        if per_gemm:
            for launch in (
                moe_problem(variant, tp).gemm_runs(batch, config["BLOCK_SIZE_M"]).values()
            ):
                launch(config)()
        else:
            run_overridden(config, moe_problem(variant, tp).call(batch))


def time_configs(
    launch, configs: dict[str, dict], eligible, repeats: int, label: str
) -> dict[str, float]:
    """{config key: graph-replayed us of launch(config)} over the eligible configs; one the GPU
    cannot run (a tile too big for the SM's shared memory) is reported and left out."""
    from triton.runtime.errors import OutOfResources

    timings = {}
    for key, config in configs.items():
        if eligible(config):
            try:
                timings[key] = graph_replay_us(launch(config), repeats)
            except (OutOfResources, RuntimeError) as e:
                print(f"tune: {label} {key}: {type(e).__name__}", file=sys.stderr)
    return timings


def write_configs(
    out: Path, problem: MoeProblem, table: dict[int, dict], down: bool = False
) -> Path:
    """Write {batch: config} where sglang's get_moe_configs looks for this triton version's file."""
    import triton

    from sglang.srt.layers.moe.moe_runner.triton_utils import get_config_file_name

    version_dir = out / "configs" / f"triton_{triton.__version__.replace('.', '_')}"
    version_dir.mkdir(parents=True, exist_ok=True)
    path = version_dir / get_config_file_name(problem.experts, problem.n, None, down_moe=down)
    path.write_text(json.dumps({str(b): c for b, c in table.items()}, indent=4) + "\n")
    return path


def tune_per_gemm(problem: MoeProblem, configs: dict[str, dict], args, out: Path) -> None:
    """--per-gemm: each GEMM's own winner per batch size, written as sglang's two files."""
    import torch
    import triton

    current = {
        batch: problem.current(batch) for batch in sorted(set(BATCH_SIZES) | set(args.batch_sizes))
    }
    tuned, lines = {}, []
    for batch in args.batch_sizes:
        tuned[batch] = {}
        # the gate_up GEMM's BLOCK_SIZE_M is the down GEMM's too (sglang asserts it)
        block_m = current[batch]["gate_up"]["BLOCK_SIZE_M"]
        runs = problem.gemm_runs(batch, block_m)
        for gemm in GEMMS:
            shipped = graph_replay_us(runs[gemm](current[batch][gemm]), args.repeats)
            timings = time_configs(
                runs[gemm],
                configs,
                lambda c, block_m=block_m: c["BLOCK_SIZE_M"] == block_m,
                args.repeats,
                f"batch {batch} {gemm}",
            )
            best = min(timings, key=timings.get)
            tuned[batch][gemm] = configs[best]
            with open(out / "tune.jsonl", "a") as f:
                f.write(
                    json.dumps(
                        {
                            "variant": args.variant,
                            "tp": args.tp,
                            "batch": batch,
                            "gemm": gemm,
                            "shipped_config": current[batch][gemm],
                            "shipped_us": shipped,
                            "timings_us": timings,
                        }
                    )
                    + "\n"
                )
            lines.append(
                f"| {batch} | {gemm} | {shipped:.1f} | {timings[best]:.1f} | "
                f"{timings[best] / shipped:.3f} | "
                f"`{config_key(current[batch][gemm])}` | `{best}` |"
            )
            print(
                (
                    f"tune: batch {batch} {gemm}: shipped {shipped:.1f} us, best "
                    f"{timings[best]:.1f} us ({best})"
                ),
                flush=True,
            )
    written = [
        str(write_configs(out, problem, table, down=gemm == "down").relative_to(out))
        for gemm, table in per_gemm_files(current, tuned).items()
    ]
    head = [
        f"# Fused-MoE configs per GEMM for {args.variant} (E={problem.experts}, N={problem.n}, "
        f"top_k={problem.top_k}, tp={args.tp}), {torch.cuda.get_device_name()}, triton "
        f"{triton.__version__}",
        "",
        (
            "| batch | gemm | shipped (us) | tuned (us) | tuned / shipped | shipped config | "
            "tuned config |"
        ),
        "|---|---|---|---|---|---|---|",
    ]
    (out / "tune.md").write_text(
        "\n".join(head + lines) + "\n\nWritten (other batch sizes: sglang's current "
        "choice): " + ", ".join(written) + "\n"
    )
    print("\n".join(head + lines))


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True)
    parser.add_argument("--variant", default="26b-a4b")
    parser.add_argument(
        "--tp", type=int, default=1, help="tensor-parallel size: each rank holds N / tp"
    )
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=BATCH_SIZES)
    parser.add_argument("--grid", choices=sorted(GRIDS), default="quick")
    parser.add_argument("--repeats", type=int, default=20)
    choice = parser.add_mutually_exclusive_group()
    choice.add_argument(
        "--share-within",
        type=float,
        metavar="F",
        help="fewest configs keeping each batch size within F (e.g. 0.02) of its fastest",
    )
    choice.add_argument(
        "--per-gemm",
        action="store_true",
        help="time gate_up and down apart and write each its own winners (two files)",
    )
    add_jobs_argument(parser)
    return parser


def main() -> int:
    args = parser().parse_args()

    import torch
    import triton

    configs = {config_key(c): c for c in candidates(args.grid)}
    # one worker per config: its launches at the batch sizes it serves share that worker's compiles
    work = [
        (config, [b for b in args.batch_sizes if fits(config, b)]) for config in configs.values()
    ]
    print(f"tune: compiling {len(work)} configs in {args.jobs} processes", flush=True)
    compile_ahead(
        functools.partial(launch_config, args.variant, args.tp, args.per_gemm), work, args.jobs
    )
    problem = MoeProblem(args.variant, args.tp)
    experts, top_k, n = problem.experts, problem.top_k, problem.n
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.per_gemm:
        tune_per_gemm(problem, configs, args, out)
        return 0
    timings, shipped = {}, {}
    for batch in args.batch_sizes:
        run = problem.call(batch)
        shipped[batch] = graph_replay_us(run, args.repeats)
        timings[batch] = time_configs(
            lambda config, run=run: functools.partial(run_overridden, config, run),
            configs,
            lambda config, batch=batch: fits(config, batch),
            args.repeats,
            f"batch {batch}",
        )
        with open(out / "tune.jsonl", "a") as f:
            f.write(
                json.dumps(
                    {
                        "variant": args.variant,
                        "tp": args.tp,
                        "batch": batch,
                        "shipped_us": shipped[batch],
                        "timings_us": timings[batch],
                    }
                )
                + "\n"
            )
        best = min(timings[batch], key=timings[batch].get)
        print(
            (
                f"tune: batch {batch}: shipped {shipped[batch]:.1f} us, best "
                f"{timings[batch][best]:.1f} us ({best})"
            ),
            flush=True,
        )
    fastest = pick(timings, configs)
    best = (
        fastest if args.share_within is None else pick_shared(timings, configs, args.share_within)
    )
    path = write_configs(out, problem, best)
    lines = [
        f"# Fused-MoE configs for {args.variant} (E={experts}, N={n}, top_k={top_k}, "
        f"tp={args.tp}), "
        f"{torch.cuda.get_device_name()}, triton {triton.__version__}",
        "",
        "| batch | shipped (us) | fastest (us) | written (us) | written / shipped | config |",
        "|---|---|---|---|---|---|",
    ]
    for b in args.batch_sizes:
        written = timings[b][config_key(best[b])]
        lines.append(
            f"| {b} | {shipped[b]:.1f} | {timings[b][config_key(fastest[b])]:.1f} | "
            f"{written:.1f} | "
            f"{written / shipped[b]:.3f} | `{config_key(best[b])}` |"
        )
    distinct = len({config_key(c) for c in best.values()})
    lines += [
        "",
        f"Distinct configs written: {distinct} (fastest per batch size: "
        f"{len({config_key(c) for c in fastest.values()})}); share-within: {args.share_within}",
    ]
    (out / "tune.md").write_text("\n".join(lines) + f"\n\nWritten: {path.relative_to(out)}\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
