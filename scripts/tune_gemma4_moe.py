"""Tune sglang's Triton fused-MoE kernel config for a Gemma-4 MoE shape on this GPU (issue #10 part 2).

    python scripts/tune_gemma4_moe.py --out DIR [--variant 26b-a4b] [--tp 1] [--batch-sizes 1 2 4 ...]
        [--grid quick|full] [--repeats 20]

For each batch size, sglang's own `fused_experts` (both expert GEMMs and the activation, bf16, top-k
routing drawn uniformly at random) runs under each candidate kernel config, replayed from a CUDA
graph; the fastest config wins. sglang's current choice is timed the same way (for Triton 3.6 it
falls back to the 3.5.1 file, with a warning). Writes
- DIR/configs/triton_<version>/<sglang's file name>.json: the winners, where `get_moe_configs` reads
  them, so `SGLANG_MOE_CONFIG_DIR=DIR` serves with them without a rebuild (A/B), and a patch can ship
  the file under python/sglang/srt/layers/moe/moe_runner/triton_utils/configs/;
- DIR/tune.jsonl (every timing) and DIR/tune.md (per batch size: shipped vs tuned time).
"""

import argparse
import itertools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

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


def config_key(config: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in config.items())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--variant", default="26b-a4b")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel size: each rank holds N / tp")
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=BATCH_SIZES)
    parser.add_argument("--grid", choices=sorted(GRIDS), default="quick")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()

    from types import SimpleNamespace

    import torch
    import triton
    from triton.runtime.errors import OutOfResources

    from sglang.srt.layers.moe.moe_runner.base import MoeRunnerConfig
    from sglang.srt.layers.moe.moe_runner.triton_utils import fused_experts, get_config_file_name, override_config
    from sglang.srt.layers.moe.topk import StandardTopKOutput
    from sglang.srt.server_args import set_global_server_args_for_scheduler

    # fused_experts reads two server flags; this is not a server.
    set_global_server_args_for_scheduler(
        SimpleNamespace(enable_fused_moe_sum_all_reduce=False, enable_deterministic_inference=False))
    text = text_config(args.variant)
    experts, top_k, hidden = text["num_experts"], text["top_k_experts"], text["hidden_size"]
    n = text["moe_intermediate_size"] // args.tp
    g = torch.Generator(device="cuda").manual_seed(0)
    w1 = torch.randn(experts, 2 * n, hidden, device="cuda", dtype=torch.bfloat16, generator=g) * hidden ** -0.5
    w2 = torch.randn(experts, hidden, n, device="cuda", dtype=torch.bfloat16, generator=g) * n ** -0.5
    runner = MoeRunnerConfig(num_experts=experts, num_local_experts=experts, hidden_size=hidden,
                             intermediate_size_per_partition=n, top_k=top_k, activation="gelu", inplace=False)
    configs = {config_key(c): c for c in candidates(args.grid)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    timings, shipped = {}, {}
    for batch in args.batch_sizes:
        x = torch.randn(batch, hidden, device="cuda", dtype=torch.bfloat16, generator=g)
        scores = torch.rand(batch, experts, device="cuda", generator=g)
        weights, ids = torch.topk(torch.softmax(scores, -1), top_k, dim=-1)
        routing = StandardTopKOutput(weights / weights.sum(-1, keepdim=True), ids.to(torch.int32), scores)

        def run():
            fused_experts(x, w1, w2, routing, runner)

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
    best = pick(timings, configs)
    version_dir = out / "configs" / f"triton_{triton.__version__.replace('.', '_')}"
    version_dir.mkdir(parents=True, exist_ok=True)
    path = version_dir / get_config_file_name(experts, n, None)
    path.write_text(json.dumps({str(b): c for b, c in best.items()}, indent=4) + "\n")
    lines = [f"# Fused-MoE configs for {args.variant} (E={experts}, N={n}, top_k={top_k}, tp={args.tp}), "
             f"{torch.cuda.get_device_name()}, triton {triton.__version__}", "",
             "| batch | shipped (us) | tuned (us) | tuned / shipped | config |", "|---|---|---|---|---|"]
    for b in args.batch_sizes:
        tuned = timings[b][config_key(best[b])]
        lines.append(f"| {b} | {shipped[b]:.1f} | {tuned:.1f} | {tuned / shipped[b]:.3f} | `{config_key(best[b])}` |")
    (out / "tune.md").write_text("\n".join(lines) + f"\n\nWritten: {path.relative_to(out)}\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
