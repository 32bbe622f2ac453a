"""Tune sglang's Triton fused-MoE kernel config for a Gemma-4 MoE shape on this GPU (issue #10 part 2).

    python scripts/tune_gemma4_moe.py --out DIR [--variant 26b-a4b] [--tp 1] [--batch-sizes 1 2 4 ...]
        [--grid quick|full] [--repeats 20] [--share-within 0.02] [--jobs 8]

For each batch size, sglang's own `fused_experts` (both expert GEMMs and the activation, bf16, top-k
routing drawn uniformly at random) runs under each candidate kernel config, replayed from a CUDA
graph; the fastest config wins, or with --share-within F the fewest configs that keep every batch
size within F of its fastest (each distinct config is one more Triton compile when a server
captures its CUDA graphs: issue #10's cold start). sglang's current choice is timed the same way (for Triton 3.6 it
falls back to the 3.5.1 file, with a warning). Writes
- DIR/configs/triton_<version>/<sglang's file name>.json: the winners, where `get_moe_configs` reads
  them, so `SGLANG_MOE_CONFIG_DIR=DIR` serves with them without a rebuild (A/B), and a patch can ship
  the file under python/sglang/srt/layers/moe/moe_runner/triton_utils/configs/;
- DIR/tune.jsonl (every timing) and DIR/tune.md (per batch size: shipped vs tuned time).
"""

import argparse
import functools
import itertools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from sglang_gemma4.kernel_grid import add_jobs_argument, compile_ahead  # noqa: E402
from sglang_gemma4.cuda_timing import graph_replay_us  # noqa: E402
from sglang_gemma4.variants import text_config  # noqa: E402

BATCH_SIZES = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 2048, 4096]
GRIDS = {
    "quick": {"BLOCK_SIZE_M": [16, 32, 64], "BLOCK_SIZE_N": [32, 64, 128], "BLOCK_SIZE_K": [64, 128],
              "GROUP_SIZE_M": [1, 16], "num_warps": [4], "num_stages": [3, 4]},
    "full": {"BLOCK_SIZE_M": [16, 32, 64, 128], "BLOCK_SIZE_N": [32, 64, 128, 256], "BLOCK_SIZE_K": [64, 128, 256],
             "GROUP_SIZE_M": [1, 16, 32], "num_warps": [4, 8], "num_stages": [2, 3, 4, 5]},
}


def candidates(grid: str) -> list[dict]:
    keys = list(GRIDS[grid])
    return [dict(zip(keys, values)) for values in itertools.product(*GRIDS[grid].values())]


def fits(config: dict, batch: int) -> bool:
    """Skip tiles taller than an expert's rows can fill (at most one row per token): pure padding."""
    return config["BLOCK_SIZE_M"] <= max(16, 1 << (batch - 1).bit_length())


def pick(timings: dict[int, dict[str, float]], configs: dict[str, dict]) -> dict[int, dict]:
    """Fastest config per batch size, from {batch: {config key: microseconds}}."""
    return {batch: configs[min(by_config, key=by_config.get)] for batch, by_config in timings.items()}


def pick_shared(timings: dict[int, dict[str, float]], configs: dict[str, dict], within: float) -> dict[int, dict]:
    """Few distinct configs: greedily the one within `within` of the fastest at the most batch sizes
    not yet covered (ties: the lower total time there), until all are; each batch size then takes
    the fastest of the chosen."""
    fastest = {batch: min(by_config.values()) for batch, by_config in timings.items()}
    good = {key: {batch for batch, by_config in timings.items()
                  if key in by_config and by_config[key] <= fastest[batch] * (1 + within)} for key in configs}
    chosen, left = [], set(timings)
    while left:
        key = max(good, key=lambda k: (len(good[k] & left), -sum(timings[b][k] for b in good[k] & left)))
        chosen.append(key)
        left -= good[key]
    return {batch: configs[min((k for k in chosen if k in by_config), key=by_config.get)]
            for batch, by_config in timings.items()}


def config_key(config: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in config.items())


class MoeProblem:
    """The variant's expert weights (random, on the GPU) and sglang's fused_experts over them."""

    def __init__(self, variant: str, tp: int):
        from types import SimpleNamespace

        import torch

        from sglang.srt.layers.moe.moe_runner.base import MoeRunnerConfig
        from sglang.srt.server_args import set_global_server_args_for_scheduler

        # fused_experts reads two server flags; this is not a server.
        set_global_server_args_for_scheduler(
            SimpleNamespace(enable_fused_moe_sum_all_reduce=False, enable_deterministic_inference=False))
        text = text_config(variant)
        self.experts, self.top_k, self.hidden = text["num_experts"], text["top_k_experts"], text["hidden_size"]
        self.n = text["moe_intermediate_size"] // tp
        self.g = torch.Generator(device="cuda").manual_seed(0)
        randn = functools.partial(torch.randn, device="cuda", dtype=torch.bfloat16, generator=self.g)
        self.w1 = randn(self.experts, 2 * self.n, self.hidden) * self.hidden ** -0.5
        self.w2 = randn(self.experts, self.hidden, self.n) * self.n ** -0.5
        self.runner = MoeRunnerConfig(num_experts=self.experts, num_local_experts=self.experts,
                                      hidden_size=self.hidden, intermediate_size_per_partition=self.n,
                                      top_k=self.top_k, activation="gelu", inplace=False)

    def call(self, batch: int):
        """fused_experts on `batch` random tokens with top-k routing drawn uniformly at random."""
        import torch

        from sglang.srt.layers.moe.moe_runner.triton_utils import fused_experts
        from sglang.srt.layers.moe.topk import StandardTopKOutput

        x = torch.randn(batch, self.hidden, device="cuda", dtype=torch.bfloat16, generator=self.g)
        scores = torch.rand(batch, self.experts, device="cuda", generator=self.g)
        weights, ids = torch.topk(torch.softmax(scores, -1), self.top_k, dim=-1)
        routing = StandardTopKOutput(weights / weights.sum(-1, keepdim=True), ids.to(torch.int32), scores)
        return lambda: fused_experts(x, self.w1, self.w2, routing, self.runner)


@functools.lru_cache(maxsize=None)
def moe_problem(variant: str, tp: int) -> MoeProblem:
    """One per worker process: its weights serve every config it compiles."""
    return MoeProblem(variant, tp)


def launch_config(variant: str, tp: int, item: tuple) -> None:
    """Run a config at each batch size it serves, so that its kernels land in Triton's cache (a
    config the GPU cannot run stops at its first batch size)."""
    from sglang.srt.layers.moe.moe_runner.triton_utils import override_config

    config, batches = item
    for batch in batches:
        with override_config(config):
            moe_problem(variant, tp).call(batch)()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--variant", default="26b-a4b")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel size: each rank holds N / tp")
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=BATCH_SIZES)
    parser.add_argument("--grid", choices=sorted(GRIDS), default="quick")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--share-within", type=float, metavar="F",
                        help="fewest configs keeping each batch size within F (e.g. 0.02) of its fastest")
    add_jobs_argument(parser)
    args = parser.parse_args()

    import torch
    import triton
    from triton.runtime.errors import OutOfResources

    from sglang.srt.layers.moe.moe_runner.triton_utils import get_config_file_name, override_config

    configs = {config_key(c): c for c in candidates(args.grid)}
    # one worker per config: its launches at the batch sizes it serves share that worker's compiles
    work = [(config, [b for b in args.batch_sizes if fits(config, b)]) for config in configs.values()]
    print(f"tune: compiling {len(work)} configs in {args.jobs} processes", flush=True)
    compile_ahead(functools.partial(launch_config, args.variant, args.tp), work, args.jobs)
    problem = MoeProblem(args.variant, args.tp)
    experts, top_k, n = problem.experts, problem.top_k, problem.n
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    timings, shipped = {}, {}
    for batch in args.batch_sizes:
        run = problem.call(batch)
        shipped[batch] = graph_replay_us(run, args.repeats)
        timings[batch] = {}
        for key, config in configs.items():
            if not fits(config, batch):
                continue
            try:
                with override_config(config):
                    timings[batch][key] = graph_replay_us(run, args.repeats)
            except (OutOfResources, RuntimeError) as e:  # a tile too big for the SM's shared memory
                print(f"tune: batch {batch} {key}: {type(e).__name__}", file=sys.stderr)
        with open(out / "tune.jsonl", "a") as f:
            f.write(json.dumps({"variant": args.variant, "tp": args.tp, "batch": batch, "shipped_us": shipped[batch],
                                "timings_us": timings[batch]}) + "\n")
        best = min(timings[batch], key=timings[batch].get)
        print(f"tune: batch {batch}: shipped {shipped[batch]:.1f} us, best {timings[batch][best]:.1f} us ({best})",
              flush=True)
    fastest = pick(timings, configs)
    best = fastest if args.share_within is None else pick_shared(timings, configs, args.share_within)
    version_dir = out / "configs" / f"triton_{triton.__version__.replace('.', '_')}"
    version_dir.mkdir(parents=True, exist_ok=True)
    path = version_dir / get_config_file_name(experts, n, None)
    path.write_text(json.dumps({str(b): c for b, c in best.items()}, indent=4) + "\n")
    lines = [f"# Fused-MoE configs for {args.variant} (E={experts}, N={n}, top_k={top_k}, tp={args.tp}), "
             f"{torch.cuda.get_device_name()}, triton {triton.__version__}", "",
             "| batch | shipped (us) | fastest (us) | written (us) | written / shipped | config |",
             "|---|---|---|---|---|---|"]
    for b in args.batch_sizes:
        written = timings[b][config_key(best[b])]
        lines.append(f"| {b} | {shipped[b]:.1f} | {timings[b][config_key(fastest[b])]:.1f} | {written:.1f} | "
                     f"{written / shipped[b]:.3f} | `{config_key(best[b])}` |")
    distinct = len({config_key(c) for c in best.values()})
    lines += ["", f"Distinct configs written: {distinct} (fastest per batch size: "
              f"{len({config_key(c) for c in fastest.values()})}); share-within: {args.share_within}"]
    (out / "tune.md").write_text("\n".join(lines) + f"\n\nWritten: {path.relative_to(out)}\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
