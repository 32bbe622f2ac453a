"""Triton decode attention on Gemma-4 shapes (issue #10's batch-1 lead): the grouped stage-1
kernel's tile and the number of KV splits against what sglang ships, on the GPU this runs on.

    python -m sglang_gemma4.gpu.kernels.bench_decode_attention_tiles --out DIR
        [--batches 1 4 16 64] [--contexts 256 2000 8000]

One decode step of one layer (stage 1 over KV splits, then stage 2's reduction), 26B-A4B's heads
(16 query heads; sliding layers: 8 KV heads x 256 over at most the 1024-token window, as the triton
backend hands them; full layers: 2 KV heads x 512 over the whole context), bf16, the split count per
request from the backend's own heuristic.  Grid: stage 1's BLOCK_N x num_warps x num_stages (0.5.12
hard-codes 32, 4, 2) and the split cap (`--triton-attention-num-kv-splits`, default 8), each timed
by Triton's do_bench (median) and compared with the shipped launch's output.  Kernels are compiled
first in --jobs worker processes.  Writes DIR/decode_tiles.jsonl and DIR/decode_tiles.md (per case:
shipped time, best setting and its time).
"""

import argparse
import itertools
from pathlib import Path

import torch

from sglang_gemma4.gpu.kernels.kernel_grid import (
    add_jobs_argument,
    compile_ahead,
    fastest_match,
    measure_all,
)

from sglang.kernels.ops.attention import decode_attention as da
from sglang.kernels.ops.attention.metadata import get_num_kv_splits_triton

HEADS, WINDOW = 16, 1024
LAYERS = {"sliding": (8, 256), "full": (2, 512)}  # kv heads, head dim
SHIPPED = (32, 4, 2, 8)  # BLOCK_N, num_warps, num_stages, split cap: one of the grid's settings
GRID = list(itertools.product((16, 32, 64), (2, 4, 8), (1, 2, 3), (4, 8, 16)))


def step_inputs(batch: int, context: int, layer: str, max_splits: int) -> dict:
    kv_heads, dim = LAYERS[layer]
    tokens = min(context, WINDOW) if layer == "sliding" else context
    g = torch.Generator(device="cuda").manual_seed(batch * 7 + context)

    def randn(*shape):
        return torch.randn(*shape, generator=g, device="cuda", dtype=torch.bfloat16)

    seq_lens = torch.full((batch,), tokens, device="cuda", dtype=torch.int32)
    num_kv_splits = torch.empty(batch, device="cuda", dtype=torch.int32)
    get_num_kv_splits_triton[(1,)](
        num_kv_splits,
        seq_lens,
        batch,
        1,
        HEADS,
        kv_heads,
        max_splits,
        torch.cuda.get_device_properties(0).multi_processor_count,
        MAX_NUM_SEQ=256,
    )
    return dict(
        q=randn(batch, HEADS, dim),
        k=randn(batch * tokens, kv_heads, dim),
        v=randn(batch * tokens, kv_heads, dim),
        kv_indptr=torch.arange(batch + 1, device="cuda", dtype=torch.int32) * tokens,
        kv_indices=torch.arange(batch * tokens, device="cuda", dtype=torch.int64),
        logits=torch.empty(batch, HEADS, max_splits, dim, device="cuda", dtype=torch.float32),
        lse=torch.empty(batch, HEADS, max_splits, device="cuda", dtype=torch.float32),
        num_kv_splits=num_kv_splits,
        max_splits=max_splits,
    )


def decode_step(data: dict, block_n: int, warps: int, stages: int) -> torch.Tensor:
    """One layer's decode attention with stage 1 launched with the given tile."""
    stage1 = da._fwd_grouped_kernel_stage1

    class ForcedTile:  # the launch hard-codes these three: override them, keep everything else
        def __getitem__(self, grid):
            return lambda *a, **kw: stage1[grid](
                *a, **{**kw, "BLOCK_N": block_n, "num_warps": warps, "num_stages": stages}
            )

    out = torch.empty_like(data["q"])
    da._fwd_grouped_kernel_stage1 = ForcedTile()
    try:
        da.decode_attention_fwd_grouped(
            data["q"],
            data["k"],
            data["v"],
            out,
            data["kv_indptr"],
            data["kv_indices"],
            data["logits"],
            data["lse"],
            data["num_kv_splits"],
            data["max_splits"],
            data["q"].shape[-1] ** -0.5,
            1.0,
        )
    finally:
        da._fwd_grouped_kernel_stage1 = stage1
    return out


def launch_setting(item: tuple) -> None:
    """One launch of a (layer, setting) on a small case, so that its kernels land in Triton's
    cache."""
    layer, (block_n, warps, stages, splits) = item
    decode_step(step_inputs(1, 256, layer, splits), block_n, warps, stages)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True)
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 4, 16, 64])
    parser.add_argument("--contexts", nargs="+", type=int, default=[256, 2000, 8000])
    parser.add_argument(
        "--rep-ms", type=int, default=25, help="timing budget per setting (triton do_bench)"
    )
    add_jobs_argument(parser)
    return parser


def main() -> int:
    args = parser().parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    compile_ahead(launch_setting, [(layer, s) for layer in LAYERS for s in GRID], args.jobs)
    gpu = torch.cuda.get_device_name()
    lines = [
        f"# Decode attention (one layer, stage 1 + 2) on {gpu}",
        "",
        "| batch | context | layer | shipped (BLOCK_N, warps, stages, splits) us | best "
        "setting | us | "
        "speed-up | max rel err |",
        "|---|---|---|---|---|---|---|---|",
    ]
    with open(out / "decode_tiles.jsonl", "w") as f:
        for batch, context, layer in itertools.product(args.batches, args.contexts, LAYERS):
            inputs = {
                splits: step_inputs(batch, context, layer, splits)
                for splits in {s[3] for s in GRID}
            }
            reference = decode_step(inputs[SHIPPED[3]], *SHIPPED[:3])
            rows = measure_all(
                (
                    (
                        {
                            "gpu": gpu,
                            "batch": batch,
                            "context": context,
                            "layer": layer,
                            "setting": list(setting),
                            "shipped": setting == SHIPPED,
                        },
                        lambda setting=setting, inputs=inputs: decode_step(
                            inputs[setting[3]], *setting[:3]
                        ),
                    )
                    for setting in GRID
                ),
                reference,
                args.rep_ms,
                f,
            )
            shipped, best = rows[GRID.index(SHIPPED)], fastest_match(rows)
            lines.append(
                f"| {batch} | {context} | {layer} | {shipped['us']:.1f} | "
                f"{tuple(best['setting'])} | "
                f"{best['us']:.1f} | {shipped['us'] / best['us']:.2f}x | "
                f"{best['max_rel_err']:.1e} |"
            )
            print(lines[-1], flush=True)
    (out / "decode_tiles.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
