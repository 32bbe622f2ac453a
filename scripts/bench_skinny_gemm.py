"""The dense weight-streaming GEMMs of a Gemma-4 decode step at small batch (issue #10): cuBLAS, as
sglang runs them, against a Triton skinny GEMM over a grid of tiles.

    python scripts/bench_skinny_gemm.py --out DIR [--variants 26b-a4b ...] [--tokens 1 4] [--rep-ms 10]

Runs on the patched build (patch 0110's kernel, sglang.srt.layers.skinny_gemm).

At batch 1 the profile of 26B-A4B (session 5) has the per-layer GEMMs streaming their weights at
~1.9 TB/s, well under the HBM's, while its largest GEMM kernel, by its size the logits head, reaches
~2.9: the per-layer matrices are small (12-52 MB) and cuBLAS splits K for several. Per variant, every distinct projection of a layer (fused
q/k/v and o of sliding and full layers, gate/up, down, the MoE router, the PLE gate and projection)
and the logits head, at each --tokens count, is timed (Triton's do_bench, L2 flushed between runs, so
weights come from HBM as in a decode step) with:
- torch.nn.functional.linear under cuBLAS and under cuBLASLt (torch's preferred_blas_library);
- patch 0110's Triton skinny GEMM (y = x W^T, the tokens padded to one MMA tile of 16 rows) with its
  own tile choice and over a grid of (BLOCK_N, BLOCK_K, num_warps, num_stages); a tile is eligible
  when its output is within one bf16 step (2^-8) of the largest value of the float32 product.
Writes DIR/skinny_gemm.jsonl (every timing) and DIR/skinny_gemm.md: per shape and token count the
cuBLAS time and achieved TB/s, 0110's tile's and the best tile's, and per variant the GEMM time of
one decode step (each projection times its layer count) against the weights read at the HBM
bandwidth.
"""

import argparse
import itertools
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from sglang.srt.layers.skinny_gemm import (SKINNY_GEMM_MAX_TOKENS, SKINNY_GEMM_MIN_ROWS, skinny_gemm,
                                            skinny_gemm_tile)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from sglang_gemma4.harness.profile import HBM_BYTES_PER_S  # noqa: E402
from sglang_gemma4.kernel_grid import add_jobs_argument, compile_ahead, fastest_match, measure_all  # noqa: E402
from sglang_gemma4.variants import text_config  # noqa: E402

GRID = list(itertools.product((16, 32, 64, 128), (64, 128, 256), (4, 8), (2, 3, 4, 5)))
BLAS = ("cublas", "cublaslt")
# Eligible tiles stay within one bf16 step at the output's largest value of the float32 product
# (cuBLAS itself rounds its float32 sums to bf16).
ULP_AT_MAX = 2.0 ** -8


def projections(variant: str) -> dict[str, tuple[int, int, int]]:
    """name: (N, K, how many a decode step runs) for the variant's dense GEMMs, as sglang fuses them."""
    c = text_config(variant)
    hidden, layers = c["hidden_size"], c["layer_types"]
    full, sliding = layers.count("full_attention"), layers.count("sliding_attention")
    q, kv = c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"]
    q_full = c["num_attention_heads"] * c["global_head_dim"]
    kv_full = c.get("num_global_key_value_heads") or c["num_key_value_heads"]
    kv_full *= c["global_head_dim"]
    v_full = 0 if c.get("attention_k_eq_v") else kv_full
    shapes = {"qkv sliding": (q + 2 * kv, hidden, sliding), "qkv full": (q_full + kv_full + v_full, hidden, full),
              "o sliding": (hidden, q, sliding), "o full": (hidden, q_full, full),
              "gate_up": (2 * c["intermediate_size"], hidden, len(layers)),
              "down": (hidden, c["intermediate_size"], len(layers)), "logits": (c["vocab_size"], hidden, 1)}
    if c.get("enable_moe_block"):
        shapes["router"] = (c["num_experts"], hidden, len(layers))
    if c.get("hidden_size_per_layer_input"):
        ple = c["hidden_size_per_layer_input"]
        shapes |= {"ple gate": (ple, hidden, len(layers)), "ple projection": (hidden, ple, len(layers))}
    return shapes


def launch_tile(item: tuple) -> None:
    """One small launch of a tile, so that its kernel lands in Triton's cache."""
    tokens, tile = item
    skinny_gemm(torch.randn(tokens, 256, device="cuda", dtype=torch.bfloat16),
                torch.randn(256, 256, device="cuda", dtype=torch.bfloat16), tile)


def tb_per_s(row: dict) -> float:
    return row["weight_bytes"] / row["us"] / 1e6


def time_projection(base: dict, rep_ms: int, jsonl) -> tuple[list[dict], dict, list[dict]]:
    """(cuBLAS and cuBLASLt rows, 0110's own tile's row, the grid's rows) for one N x K at base's
    tokens, each row also appended to the open JSONL file."""
    torch.manual_seed(0)
    n, k = base["n"], base["k"]
    x = torch.randn(base["tokens"], k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    reference = x.float() @ w.float().T
    blas = []
    for library in BLAS:  # the library is switched outside the timed call
        torch.backends.cuda.preferred_blas_library(library)
        blas += measure_all([({**base, "kernel": library}, lambda: F.linear(x, w))], reference, rep_ms, jsonl)
    torch.backends.cuda.preferred_blas_library("cublas")
    shipped, *grid = measure_all(
        [({**base, "kernel": "0110", "tile": list(skinny_gemm_tile(n, k))}, lambda: skinny_gemm(x, w))]
        + [({**base, "kernel": "grid", "tile": list(tile)}, lambda tile=tile: skinny_gemm(x, w, tile))
           for tile in GRID],
        reference, rep_ms, jsonl)
    return blas, shipped, grid


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--variants", nargs="+", default=["26b-a4b"], choices=["e2b", "e4b", "26b-a4b", "31b"])
    parser.add_argument("--tokens", nargs="+", type=int, default=[1, 4],
                        help=f"rows of x (decode batch), at most {SKINNY_GEMM_MAX_TOKENS}")
    parser.add_argument("--rep-ms", type=int, default=10, help="timing budget per candidate (triton do_bench)")
    add_jobs_argument(parser)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # Token counts are runtime arguments: one compile per tile (M = 1 specializes apart, hence two).
    compile_ahead(launch_tile, [(tokens, tile) for tokens in (1, 2) for tile in GRID], args.jobs)
    gpu = torch.cuda.get_device_name()
    bandwidth = next((bw for key, bw in HBM_BYTES_PER_S.items() if key in gpu), None)
    lines = [f"# Dense decode GEMMs on {gpu}: cuBLAS vs a Triton skinny GEMM (patch 0110)", "",
             "| variant | projection | N x K | tokens | cuBLAS us | TB/s | 0110 tile | us | TB/s | best tile "
             "(N, K, warps, stages) | us | TB/s | cuBLAS / best |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    totals = {}
    with open(out / "skinny_gemm.jsonl", "w") as f:
        for variant, tokens in itertools.product(args.variants, args.tokens):
            for name, (n, k, count) in projections(variant).items():
                base = {"gpu": gpu, "variant": variant, "projection": name, "n": n, "k": k, "tokens": tokens,
                        "per_step": count, "weight_bytes": n * k * 2}
                blas, shipped, grid = time_projection(base, args.rep_ms, f)
                cublas, best = blas[0], fastest_match(grid, ULP_AT_MAX)
                lines.append(f"| {variant} | {name} | {n} x {k} | {tokens} | {cublas['us']:.1f} | {tb_per_s(cublas):.2f} | "
                             f"{tuple(shipped['tile'])} | {shipped['us']:.1f} | {tb_per_s(shipped):.2f} | "
                             f"{tuple(best['tile'])} | {best['us']:.1f} | {tb_per_s(best):.2f} | "
                             f"{cublas['us'] / best['us']:.2f}x |")
                print(lines[-1], flush=True)
                # what serving runs with 0110 on: its kernel where the linear method routes, cuBLAS elsewhere
                routed = n >= SKINNY_GEMM_MIN_ROWS and name != "logits"
                step = totals.setdefault((variant, tokens), dict.fromkeys(("bytes", *BLAS, "0110", "best"), 0.0))
                step["bytes"] += n * k * 2 * count
                for row in blas:
                    step[row["kernel"]] += row["us"] * count
                step["0110"] += (shipped["us"] if routed else cublas["us"]) * count
                step["best"] += min(cublas["us"], best["us"]) * count
    lines += ["", "Per decode step, each projection times its count per step. `0110`: its tile where the linear "
              "method routes (at least SKINNY_GEMM_MIN_ROWS rows; the logits head is not a linear layer), cuBLAS "
              "elsewhere; `best`: the faster of cuBLAS and the grid's best tile per projection.", "",
              "| variant | tokens | weights GB | cuBLAS us | cuBLASLt us | 0110 us | best us | HBM floor us |",
              "|---|---|---|---|---|---|---|---|"]
    for (variant, tokens), step in totals.items():
        floor = f"{step['bytes'] / bandwidth * 1e6:.1f}" if bandwidth else "-"
        lines.append(f"| {variant} | {tokens} | {step['bytes'] / 1e9:.2f} | {step['cublas']:.1f} | "
                     f"{step['cublaslt']:.1f} | {step['0110']:.1f} | {step['best']:.1f} | {floor} |")
    (out / "skinny_gemm.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[-len(totals) - 2:]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
