"""Gemma-4 MoE routing, one Triton launch (sglang's gemma4_fused_routing, upstream since 0.5.17;
once patch 0020) vs the torch ops it replaces, on the GPU.

    python -m sglang_gemma4.gpu.run routing --out DIR    (in the patched build's environment)

Each routing runs captured in a CUDA graph (as decode runs it) and is replayed; the time per call is
the median over repeats of (replay time / calls per graph).  26B-A4B's router: 128 experts, top 8,
bf16 logits.  Writes DIR/routing.jsonl and prints a table.
"""

import argparse
import json
from pathlib import Path

import torch

from sglang_gemma4.gpu.kernels.cuda_timing import graph_replay_us

from sglang.kernels.ops.layernorm.gemma4_fused_ops import gemma4_fused_routing

CALLS_PER_GRAPH = 100


def torch_routing(logits: torch.Tensor, scale: torch.Tensor, k: int):
    """0.5.12's Gemma4MoE routing, op for op."""
    values, ids = torch.topk(logits, k=k, dim=-1)
    weights = torch.softmax(values, dim=-1) * scale[ids].to(values.dtype)
    return weights.to(torch.float32), ids.to(torch.int32)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True)
    parser.add_argument("--experts", type=int, default=128)
    parser.add_argument("--topk", type=int, default=8)
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 8, 64, 512])
    parser.add_argument("--repeats", type=int, default=50)
    return parser


def main() -> int:
    args = parser().parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    scale = (1 + 0.1 * torch.randn(args.experts, device="cuda")).float()
    rows = []
    for tokens in args.tokens:
        logits = torch.randn(tokens, args.experts, device="cuda", dtype=torch.bfloat16)
        row = {
            "gpu": torch.cuda.get_device_name(),
            "experts": args.experts,
            "topk": args.topk,
            "tokens": tokens,
            "dtype": "bfloat16",
            "calls_per_graph": CALLS_PER_GRAPH,
            "repeats": args.repeats,
            "torch_us": graph_replay_us(
                lambda logits=logits: torch_routing(logits, scale, args.topk),
                args.repeats,
                CALLS_PER_GRAPH,
            ),
            "fused_us": graph_replay_us(
                lambda logits=logits: gemma4_fused_routing(logits, scale, args.topk),
                args.repeats,
                CALLS_PER_GRAPH,
            ),
        }
        row["speedup"] = row["torch_us"] / row["fused_us"]
        rows.append(row)
        with open(out / "routing.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
    print("| tokens | torch ops (us) | fused (us) | speed-up |\n|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['tokens']} | {r['torch_us']:.2f} | {r['fused_us']:.2f} | {r['speedup']:.2f}x |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
