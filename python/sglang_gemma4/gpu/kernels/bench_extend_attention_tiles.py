"""Triton extend-attention tiles on Gemma-4 shapes (issue #8 part 3): kernel time of every tile in a
grid against the tile sglang ships, on the GPU this runs on.

    python -m sglang_gemma4.gpu.kernels.bench_extend_attention_tiles --out DIR [--cases NAME ...]
        [--rep-ms 25]

Shapes: 26B-A4B/31B attention heads (16 query heads; sliding layers 8 KV heads x 256 with window
1024, full layers 2 KV heads x 512), causal, no custom mask; cases: prefill bs 1 x 8192 and bs 1 x
1000 and bs 4 x 1000 new tokens (no prefix), and MTP-verify-like bs 32 x 4 new tokens after a prefix
of 64, 1000 and 8000.  A tile is (BLOCK_M, BLOCK_N, num_warps, num_stages): the tile function is
replaced for the grid and the launch's num_stages overridden, so the shipped kernel runs unchanged.
Kernels are compiled first in --jobs worker processes (Triton's on-disk cache then serves the
timing pass, which would otherwise compile ~150 kernels one after another).  Each tile's output is
compared with the unforced shipped launch's (max relative error); tiles the GPU cannot run (out of
shared memory or registers) are recorded as such.  Writes DIR/tiles.jsonl and DIR/tiles.md (per
case: shipped tile and time, best tile and time, speed-up).
"""

import argparse
import itertools
import os
from pathlib import Path

import torch

from sglang_gemma4.gpu.kernels.kernel_grid import (
    add_jobs_argument,
    compile_ahead,
    fastest_match,
    measure_all,
)

from sglang.kernels.ops.attention import extend_attention as ea

HEADS = 16
LAYERS = {"sliding": (8, 256, 1024), "full": (2, 512, -1)}  # kv heads, head dim, window
CASES = {  # name: (batch, new tokens per request, prefix tokens per request)
    "prefill-1x8192": (1, 8192, 0),
    "prefill-1x1000": (1, 1000, 0),
    "prefill-4x1000": (4, 1000, 0),
    "verify-32x4+64": (32, 4, 64),
    "verify-32x4+1000": (32, 4, 1000),
    "verify-32x4+8000": (32, 4, 8000),
}
GRID = list(itertools.product((16, 32, 64, 128), (32, 64, 128), (4, 8), (1, 2, 3)))


def inputs(batch: int, new: int, prefix: int, kv_heads: int, dim: int, seed: int = 0) -> dict:
    g = torch.Generator(device="cuda").manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g, device="cuda", dtype=torch.bfloat16)

    total_new = batch * new
    # The KV buffer holds each request's prefix then its new tokens, like the cache after the write.
    kv_buffer_k, kv_buffer_v = (
        randn(batch * (prefix + new), kv_heads, dim),
        randn(batch * (prefix + new), kv_heads, dim),
    )
    starts = torch.arange(batch, device="cuda") * (prefix + new)
    kv_indices = (
        (starts[:, None] + torch.arange(prefix, device="cuda")[None, :]).reshape(-1).to(torch.int64)
    )
    new_rows = (starts[:, None] + prefix + torch.arange(new, device="cuda")[None, :]).reshape(-1)
    return dict(
        q_extend=randn(total_new, HEADS, dim),
        k_extend=kv_buffer_k[new_rows],
        v_extend=kv_buffer_v[new_rows],
        k_buffer=kv_buffer_k,
        v_buffer=kv_buffer_v,
        qo_indptr=torch.arange(batch + 1, device="cuda", dtype=torch.int32) * new,
        kv_indptr=torch.arange(batch + 1, device="cuda", dtype=torch.int32) * prefix,
        kv_indices=kv_indices,
        max_len_extend=new,
    )


def run(args: dict, window: int, tile=None) -> torch.Tensor:
    """One launch; tile (BLOCK_M, BLOCK_N, num_warps, num_stages) or None for the shipped choice."""
    out = torch.empty_like(args["q_extend"])
    shipped_sizes, shipped_kernel = ea._get_block_sizes_for_extend_attention, ea._fwd_kernel
    if tile is not None:
        block_m, block_n, warps, stages = tile

        def forced_sizes(lq, lv):
            dmodel, dpe, dv, *_ = shipped_sizes(lq, lv)
            return dmodel, dpe, dv, block_m, block_n, warps

        class ForcedStages:  # the launch hard-codes num_stages: override it, keep everything else
            def __getitem__(self, grid):
                return lambda *a, **kw: shipped_kernel[grid](*a, **{**kw, "num_stages": stages})

        ea._get_block_sizes_for_extend_attention, ea._fwd_kernel = forced_sizes, ForcedStages()
    try:
        ea.extend_attention_fwd(
            args["q_extend"],
            args["k_extend"],
            args["v_extend"],
            out,
            args["k_buffer"],
            args["v_buffer"],
            args["qo_indptr"],
            args["kv_indptr"],
            args["kv_indices"],
            None,
            True,
            None,
            args["max_len_extend"],
            1.0,
            1.0,
            sliding_window_size=window,
        )
    finally:
        ea._get_block_sizes_for_extend_attention, ea._fwd_kernel = shipped_sizes, shipped_kernel
    return out


def shipped_tile(dim: int) -> tuple:
    *_, block_m, block_n, warps = ea._get_block_sizes_for_extend_attention(dim, dim)
    return block_m, block_n, warps, 1


def launch_tile(item: tuple) -> None:
    """One launch of a (layer, tile) on a small case, so that its kernel lands in Triton's cache."""
    layer, tile = item
    kv_heads, dim, window = LAYERS[layer]
    run(inputs(*CASES["verify-32x4+64"], kv_heads, dim), window, tile)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument(
        "--rep-ms", type=int, default=25, help="timing budget per tile (triton do_bench)"
    )
    add_jobs_argument(parser)
    return parser


def main() -> int:
    args = parser().parse_args()
    # On a build with patch 0100, its own Hopper tiles would override the tiles forced here (set
    # here, not at import, which must not change the importer's kernels; the compile workers inherit
    # it).
    os.environ["SGLANG_OPT_HOPPER_EXTEND_ATTENTION_TILES"] = "0"
    print(f"compiling {len(LAYERS) * (len(GRID) + 1)} kernels in {args.jobs} processes", flush=True)
    compile_ahead(
        launch_tile,
        [(layer, tile) for layer in LAYERS for tile in [shipped_tile(LAYERS[layer][1])] + GRID],
        args.jobs,
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    gpu = torch.cuda.get_device_name()
    lines = [
        f"# Extend-attention tiles on {gpu}",
        "",
        (
            "| case | layer | shipped tile (M, N, warps, stages) | us | best tile | us | "
            "speed-up | max rel err |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    with open(out / "tiles.jsonl", "w") as f:
        for case, (layer, (kv_heads, dim, window)) in itertools.product(args.cases, LAYERS.items()):
            batch, new, prefix = CASES[case]
            data = inputs(batch, new, prefix, kv_heads, dim)
            reference = run(data, window)
            # The shipped tile is timed through the same forced launch as the grid: equal Python
            # overhead.
            results = measure_all(
                (
                    (
                        {
                            "gpu": gpu,
                            "case": case,
                            "layer": layer,
                            "batch": batch,
                            "new": new,
                            "prefix": prefix,
                            "tile": list(tile),
                            "shipped": shipped,
                        },
                        lambda tile=tile, data=data, window=window: run(data, window, tile),
                    )
                    for shipped, tile in [(True, shipped_tile(dim))] + [(False, t) for t in GRID]
                ),
                reference,
                args.rep_ms,
                f,
            )
            shipped, best = results[0], fastest_match(results[1:])
            lines.append(
                f"| {case} | {layer} {dim} | {tuple(shipped['tile'])} | {shipped['us']:.1f} | "
                f"{tuple(best['tile'])} | {best['us']:.1f} | {shipped['us'] / best['us']:.2f}x | "
                f"{best['max_rel_err']:.1e} |"
            )
            print(lines[-1], flush=True)
    (out / "tiles.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
