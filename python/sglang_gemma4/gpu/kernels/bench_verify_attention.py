"""The MTP target verify's attention on Gemma-4 shapes (patch 0175): extend_attention_fwd, which the
triton backend ran it through, against the grouped split-KV kernel, on the GPU this runs on.

    python -m sglang_gemma4.gpu.kernels.bench_verify_attention --out DIR [--batches 1 4 16 32]
        [--prefixes 200 1500 8000]

One layer's verify: each request's 4 draft tokens (a top-k 1 chain) over its cached prefix, as the
backend hands it (a sliding layer: the window's last 1023 positions), bf16, KV rows scattered in the
pool. Layers: 31B sliding (32 query heads, 16 KV heads x 256, window 1023) and full (32 / 4 x 512),
26B-A4B sliding (16 / 8 x 256) and full (16 / 2 x 512). Each kernel is captured in a CUDA graph and
replayed (the grouped kernel's launches must replay from shapes alone); its output is compared with
a float32 reference (max abs difference). Writes DIR/verify_attention.md and prints it.
"""

import argparse
import itertools
from pathlib import Path

import torch

from sglang_gemma4.gpu.kernels.cuda_timing import graph_replay_us

from sglang.kernels.ops.attention import verify_grouped_attention as vg
from sglang.kernels.ops.attention.extend_attention import extend_attention_fwd

CHAIN = 4
REPEATS = 20  # graph replays timed per kernel
LAYERS = {  # q heads, kv heads, head dim, window (the backend's: config.sliding_window - 1)
    "31B sliding": (32, 16, 256, 1023),
    "31B full": (32, 4, 512, -1),
    "26B-A4B sliding": (16, 8, 256, 1023),
    "26B-A4B full": (16, 2, 512, -1),
}


def verify_inputs(batch: int, prefix: int, layer: str) -> dict:
    q_heads, kv_heads, dim, window = LAYERS[layer]
    listed = min(prefix, window) if window > 0 else prefix  # what the backend's KV indices hold
    g = torch.Generator(device="cuda").manual_seed(batch * 7 + prefix)

    def randn(*shape):
        return torch.randn(*shape, generator=g, device="cuda", dtype=torch.bfloat16)

    rows = batch * (listed + CHAIN)
    k_buffer, v_buffer = randn(rows, kv_heads, dim), randn(rows, kv_heads, dim)
    slots = torch.randperm(rows, generator=g, device="cuda").view(batch, listed + CHAIN)
    chain_rows = slots[:, listed:].reshape(-1)
    return dict(
        q=randn(batch * CHAIN, q_heads, dim),
        k_extend=k_buffer[chain_rows],
        v_extend=v_buffer[chain_rows],
        k_buffer=k_buffer,
        v_buffer=v_buffer,
        window=window,
        listed=listed,
        qo_indptr=torch.arange(batch + 1, device="cuda", dtype=torch.int32) * CHAIN,
        kv_indptr=torch.arange(batch + 1, device="cuda", dtype=torch.int32) * listed,
        kv_indices=slots[:, :listed].reshape(-1).to(torch.int64),
    )


def grouped(data: dict, out: torch.Tensor) -> None:
    vg.verify_grouped_attention_fwd(
        data["q"],
        data["k_extend"],
        data["v_extend"],
        out,
        data["k_buffer"],
        data["v_buffer"],
        data["qo_indptr"],
        data["kv_indptr"],
        data["kv_indices"],
        CHAIN,
        data["q"].shape[-1] ** -0.5,
        data["window"],
        sm_count=torch.cuda.get_device_properties(0).multi_processor_count,
    )


def extended(data: dict, out: torch.Tensor) -> None:
    extend_attention_fwd(
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
        CHAIN,
        1.0,
        1.0,
        data["q"].shape[-1] ** -0.5,
        sliding_window_size=data["window"],
    )


def reference(data: dict) -> torch.Tensor:
    """float32: draft token j sees its listed prefix and the chain up to j, on a sliding layer only
    the positions at most `window` before its own."""
    q, window, listed = data["q"].float(), data["window"], data["listed"]
    tokens, q_heads, dim = q.shape
    kv_heads = data["k_buffer"].shape[1]
    q_pos = listed + torch.arange(CHAIN, device="cuda")[:, None]
    k_pos = torch.arange(listed + CHAIN, device="cuda")[None, :]
    visible = (k_pos <= q_pos) & ((q_pos - k_pos <= window) if window > 0 else True)
    out = torch.empty(tokens, q_heads, dim, device="cuda")
    for b in range(tokens // CHAIN):
        chunk = slice(b * CHAIN, (b + 1) * CHAIN)
        rows = data["kv_indices"][b * listed : (b + 1) * listed]
        k = torch.cat([data["k_buffer"][rows], data["k_extend"][chunk]]).float()
        v = torch.cat([data["v_buffer"][rows], data["v_extend"][chunk]]).float()
        scores = (
            torch.einsum("qkgd,nkd->kgqn", q[chunk].view(CHAIN, kv_heads, -1, dim), k) * dim**-0.5
        )
        probs = scores.masked_fill(~visible, float("-inf")).softmax(-1)
        out[chunk] = torch.einsum("kgqn,nkd->qkgd", probs, v).reshape(CHAIN, q_heads, dim)
    return out


def timed(kernel, data: dict, ref: torch.Tensor) -> tuple[float, float]:
    """(graph-replay microseconds, max abs difference from float32) of one kernel."""
    out = torch.empty_like(data["q"])
    us = graph_replay_us(lambda: kernel(data, out), REPEATS)
    return us, (out.float() - ref).abs().max().item()


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True)
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 4, 16, 32])
    parser.add_argument("--prefixes", nargs="+", type=int, default=[200, 1500, 8000])
    return parser


def main() -> int:
    args = parser().parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    lines = [
        (
            f"# MTP verify attention, one layer, {CHAIN} draft tokens a request, on "
            f"{torch.cuda.get_device_name()}"
        ),
        "",
        "| layer | batch | prefix | extend us | grouped us | speed-up | splits | max abs "
        "err extend | "
        "grouped |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    worst = 0.0
    for layer, batch, prefix in itertools.product(LAYERS, args.batches, args.prefixes):
        data = verify_inputs(batch, prefix, layer)
        ref = reference(data)
        extend_us, extend_err = timed(extended, data, ref)
        grouped_us, grouped_err = timed(grouped, data, ref)
        worst = max(worst, grouped_err)
        _, kv_heads, _, window = LAYERS[layer]
        splits = vg.num_kv_splits(
            batch * kv_heads, window, sms
        )  # one head slice a KV head at these groups
        lines.append(
            f"| {layer} | {batch} | {prefix} | {extend_us:.1f} | {grouped_us:.1f} | "
            f"{extend_us / grouped_us:.2f}x | {splits} | {extend_err:.1e} | {grouped_err:.1e} |"
        )
        print(lines[-1], flush=True)
    lines.append(
        f"\nworst grouped max abs err: {worst:.1e} ({'ok' if worst < 2e-2 else 'FAIL: over 2e-2'})"
    )
    print(lines[-1])
    (out / "verify_attention.md").write_text("\n".join(lines) + "\n")
    return 0 if worst < 2e-2 else 1


if __name__ == "__main__":
    raise SystemExit(main())
