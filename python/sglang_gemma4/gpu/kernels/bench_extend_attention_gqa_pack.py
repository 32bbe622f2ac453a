"""Long-prefill extend attention on Gemma-4's full layers (patch 0105): the old kernel (one program
per query head, 0100's Hopper tile) against the packed kernel (one program per KV head's query-head
group) with each tile of its table, on the GPU this runs on.

    python -m sglang_gemma4.gpu.kernels.bench_extend_attention_gqa_pack --out DIR
        [--prefixes 0 32768 65536 122880]
        [--chunk 8192] [--models 26B-A4B 31B] [--kv-dtypes bf16 fp8] [--tiles NAME ...] [--repeats
        3]

One layer's prefill chunk: one request's --chunk new tokens (bf16 q/k/v) after a cached prefix,
causal, head dim 512, softmax scale 0.125 (logits of std ~2.8 on these unit-normal inputs: neither
uniform nor one-hot); the KV buffer bf16, or fp8 (e4m3) read back with
k/v scales. Layers: 26B-A4B (16 query heads on 2 KV heads), 31B (32 on 4). Each call is timed with
CUDA events (median of --repeats after one warm-up call that also compiles); each packed output is
compared with the old kernel's (max |diff|, and over the old output's largest value); a tile that
fails (e.g. to compile within the GPU's shared memory) is a row saying why. Writes
DIR/gqa_pack.md and prints it; exits 1 when a packed output differs from the old one by more than
2e-2 of its largest value.
"""

import argparse
import itertools
import os
import statistics
from pathlib import Path

import torch

from sglang.kernels.ops.attention import extend_attention as ea

MODELS = {"26B-A4B": (16, 2), "31B": (32, 4)}  # full-attention layers: query heads, KV heads
HEAD_DIM = 512
KV_DTYPES = {"bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn}
KV_SCALES = {"bf16": (1.0, 1.0), "fp8": (0.5, 2.0)}  # k_scale, v_scale
SWITCH = "SGLANG_OPT_EXTEND_ATTENTION_GQA_PACK"
# Where a full layer's KV rows lie: sglang's static split keeps each layer's rows side by side; its
# unified pool keeps a token's K and V of every full layer in one envelope, so one layer's rows lie
# an envelope apart (26B-A4B: 5 full layers x K and V x 2 KiB = 20 KiB, as its server logs)
FULL_LAYERS = {"26B-A4B": 5, "31B": 10}
LAYOUTS = ("split", "unified")
MAX_REL_DIFF = 2e-2
SM_SCALE = 0.125


def inputs(
    model: str,
    kv_dtype: str,
    prefix: int,
    chunk: int,
    device: str = "cuda",
    dtype: torch.dtype = torch.bfloat16,
    seed: int = 0,
    layout: str = "split",
) -> dict:
    """One request: `prefix` cached tokens at shuffled pool slots, then `chunk` new ones, the cache
    rows in `layout` (LAYOUTS)."""
    q_heads, kv_heads = MODELS[model]
    g = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g).to(dtype).to(device)

    rows = prefix + chunk
    k_buffer, v_buffer = randn(rows, kv_heads, HEAD_DIM), randn(rows, kv_heads, HEAD_DIM)
    slots = torch.randperm(rows, generator=g).to(device)
    new_slots = slots[prefix:]
    k_extend, v_extend = k_buffer[new_slots], v_buffer[new_slots]
    if kv_dtype == "fp8":
        k_buffer, v_buffer = k_buffer.to(KV_DTYPES["fp8"]), v_buffer.to(KV_DTYPES["fp8"])
    if layout == "unified":
        envelope = torch.zeros(
            rows, 2 * FULL_LAYERS[model], kv_heads, HEAD_DIM, dtype=k_buffer.dtype, device=device
        )
        envelope[:, 0], envelope[:, 1] = k_buffer, v_buffer
        k_buffer, v_buffer = envelope[:, 0], envelope[:, 1]
    k_scale, v_scale = KV_SCALES[kv_dtype]
    return dict(
        q=randn(chunk, q_heads, HEAD_DIM),
        k_extend=k_extend,
        v_extend=v_extend,
        k_buffer=k_buffer,
        v_buffer=v_buffer,
        qo_indptr=torch.tensor([0, chunk], dtype=torch.int32, device=device),
        kv_indptr=torch.tensor([0, prefix], dtype=torch.int32, device=device),
        kv_indices=slots[:prefix].to(torch.int64),
        chunk=chunk,
        k_scale=k_scale,
        v_scale=v_scale,
    )


def old_kernel(data: dict, out: torch.Tensor) -> None:
    """extend_attention_fwd with the packed kernel switched off: what the backend ran before
    0105."""
    previous = os.environ.get(SWITCH)
    os.environ[SWITCH] = "0"
    try:
        ea.extend_attention_fwd(
            data["q"],
            data["k_extend"],
            data["v_extend"],
            out,
            data["k_buffer"],
            data["v_buffer"],
            data["qo_indptr"],
            data["kv_indptr"],
            data["kv_indices"],
            None,
            True,
            None,
            data["chunk"],
            data["k_scale"],
            data["v_scale"],
            SM_SCALE,
        )
    finally:
        if previous is None:
            del os.environ[SWITCH]
        else:
            os.environ[SWITCH] = previous


def packed_kernel(data: dict, out: torch.Tensor, tile: str) -> None:
    ea.extend_attention_gqa_packed_fwd(
        data["q"],
        data["k_extend"],
        data["v_extend"],
        out,
        data["k_buffer"],
        data["v_buffer"],
        data["qo_indptr"],
        data["kv_indptr"],
        data["kv_indices"],
        data["chunk"],
        data["k_scale"],
        data["v_scale"],
        SM_SCALE,
        tile=tile,
    )


def cuda_ms(fn, repeats: int) -> float:
    """Median milliseconds of `fn` over `repeats` calls, after one warm-up (compiling) call."""
    fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    return statistics.median(samples)


def measure_case(
    model: str,
    kv_dtype: str,
    prefix: int,
    chunk: int,
    tiles: list[str],
    repeats: int,
    timer=cuda_ms,
    **input_kwargs,
) -> list[dict]:
    """One row per tile: old and packed ms, their ratio, the packed output's difference from the old
    one."""
    data = inputs(model, kv_dtype, prefix, chunk, **input_kwargs)
    old_out = torch.empty_like(data["q"])
    old_ms = timer(lambda: old_kernel(data, old_out), repeats)
    largest = old_out.float().abs().max().item()
    rows = []
    for tile in tiles:
        row = dict(
            model=model,
            kv_dtype=kv_dtype,
            prefix=prefix,
            chunk=chunk,
            tile=tile,
            tile_shape=ea._GQA_PACK_TILES[tile],
            old_ms=old_ms,
        )
        out = torch.empty_like(data["q"])
        try:
            ms = timer(lambda out=out, tile=tile: packed_kernel(data, out, tile), repeats)
        except (
            Exception
        ) as e:  # e.g. a tile over the GPU's shared memory or registers: recorded, not fatal
            rows.append(
                {
                    **row,
                    "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[
                        :160
                    ],
                }
            )
            continue
        diff = (out.float() - old_out.float()).abs().max().item()
        rows.append(
            {
                **row,
                "packed_ms": ms,
                "speedup": old_ms / ms,
                "max_abs_diff": diff,
                "max_rel_diff": diff / largest if largest else diff,
            }
        )
    return rows


def table_row(r: dict) -> str:
    if "error" in r:
        return (
            f"| {r['model']} | {r['kv_dtype']} | {r['prefix']} | {r['tile']} {r['tile_shape']} | "
            f"{r['old_ms']:.2f} | failed: {r['error']} | | | |"
        )
    return (
        f"| {r['model']} | {r['kv_dtype']} | {r['prefix']} | {r['tile']} "
        f"{r['tile_shape']} | {r['old_ms']:.2f} | "
        f"{r['packed_ms']:.2f} | {r['speedup']:.2f}x | {r['max_abs_diff']:.1e} | "
        f"{r['max_rel_diff']:.1e} |"
    )


def layer_parser(doc: str, prefixes: list[int]) -> argparse.ArgumentParser:
    """The arguments every full-layer extend bench takes: --out, --prefixes, --models, --kv-dtypes,
    --repeats."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True)
    parser.add_argument("--prefixes", nargs="+", type=int, default=prefixes)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--kv-dtypes", nargs="+", default=list(KV_DTYPES), choices=list(KV_DTYPES))
    parser.add_argument("--repeats", type=int, default=3)
    return parser


def parser() -> argparse.ArgumentParser:
    parser = layer_parser(__doc__, [0, 32768, 65536, 122880])
    parser.add_argument("--chunk", type=int, default=8192)
    parser.add_argument(
        "--tiles", nargs="+", default=list(ea._GQA_PACK_TILES), choices=list(ea._GQA_PACK_TILES)
    )
    return parser


def main() -> int:
    args = parser().parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        f"# Extend attention, full layer (head dim {HEAD_DIM}), 1 x {args.chunk} new tokens, on "
        f"{torch.cuda.get_device_name()}",
        "",
        "old: one program per query head (0100's Hopper tile); packed: one per KV head's "
        "group, tile "
        "(rows, BLOCK_N, warps, stages); ms per call, median of "
        f"{args.repeats}",
        "",
        (
            "| layer | KV | prefix | packed tile | old ms | packed ms | old/packed | max abs "
            "diff | rel |"
        ),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    worst = 0.0
    for model, kv_dtype, prefix in itertools.product(args.models, args.kv_dtypes, args.prefixes):
        for r in measure_case(model, kv_dtype, prefix, args.chunk, args.tiles, args.repeats):
            worst = max(worst, r.get("max_rel_diff", 0.0))
            lines.append(table_row(r))
            print(lines[-1], flush=True)
        torch.cuda.empty_cache()
    verdict = "ok" if worst <= MAX_REL_DIFF else f"FAIL: over {MAX_REL_DIFF}"
    lines.append(
        (
            "\nworst packed vs old difference over the old output's largest value: "
            f"{worst:.1e} ({verdict})"
        )
    )
    print(lines[-1])
    (out / "gqa_pack.md").write_text("\n".join(lines) + "\n")
    return 0 if worst <= MAX_REL_DIFF else 1


if __name__ == "__main__":
    raise SystemExit(main())
