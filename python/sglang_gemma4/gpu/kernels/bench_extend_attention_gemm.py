"""Long-prefill extend attention on Gemma-4's full layers (patch 0185): the packed Triton kernel
(0105, what the backend ran before) against the tiled-GEMM path with each block size asked for, on
the GPU this runs on.

    python -m sglang_gemma4.gpu.kernels.bench_extend_attention_gemm --out DIR
        [--prefixes 0 8192 32768 122880] [--chunks 8192] [--models 26B-A4B 31B]
        [--kv-dtypes bf16 fp8] [--sizes 2048:33554432 ...] [--layouts split unified] [--repeats 3]
        [--against OLD/extend_attention_gemm.py ...]

The inputs are the gqa-pack bench's (one request's chunk of new tokens after a cached prefix at
shuffled pool slots, head dim 512, fp8 read back with k/v scales), the cache rows laid out as the
static KV split holds them (split) or as the unified pool does (unified: a token's rows of every
full layer in one envelope). A size is
KEY_BLOCK:SCORE_ELEMENTS (keys per GEMM, fp32 scores held at once). Each call is timed with CUDA
events (median of --repeats after a warm-up call); each GEMM output is compared with the packed
kernel's. --against times other revisions of 0185's module (a file each, e.g. one from an earlier
series) beside the installed one, same inputs and sizes, to compare a kernel change without a
rebuild. Writes
DIR/gemm.md and prints it; exits 1 when an output differs from the packed one by more than 2e-2 of
its largest value.
"""

import argparse
import importlib.util
import itertools
from pathlib import Path

import torch

from sglang_gemma4.gpu.kernels.bench_extend_attention_gqa_pack import (
    LAYOUTS,
    MAX_REL_DIFF,
    SM_SCALE,
    cuda_ms,
    inputs,
    layer_parser,
    packed_kernel,
)

from sglang.kernels.ops.attention import extend_attention_gemm as eg

DEFAULT_SIZE = f"{eg.KEY_BLOCK}:{eg.SCORE_ELEMENTS}"


def revision(path: str):
    """Another revision of 0185's module, loaded from its file (its own Triton kernels)."""
    spec = importlib.util.spec_from_file_location(f"extend_attention_gemm_{Path(path).stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gemm_path(
    data: dict, out: torch.Tensor, key_block: int, score_elements: int, module=eg
) -> None:
    module.extend_attention_gemm_fwd(
        data["q"],
        data["k_extend"],
        data["v_extend"],
        out,
        data["k_buffer"],
        data["v_buffer"],
        data["kv_indices"],
        0,
        0,
        data["chunk"],
        data["kv_indices"].numel(),
        SM_SCALE,
        data["k_scale"],
        data["v_scale"],
        key_block=key_block,
        score_elements=score_elements,
    )


def measure_case(
    model,
    kv_dtype,
    prefix,
    chunk,
    sizes,
    repeats,
    timer=cuda_ms,
    layout="split",
    against=(),
    **input_kwargs,
) -> list[dict]:
    """One row per size and revision (the installed one, then each (name, module) of `against`):
    packed and GEMM ms, their ratio, the GEMM output's difference."""
    data = inputs(model, kv_dtype, prefix, chunk, layout=layout, **input_kwargs)
    packed_out = torch.empty_like(data["q"])
    packed_ms = timer(lambda: packed_kernel(data, packed_out, "m32n64w8s2"), repeats)
    largest = packed_out.float().abs().max().item()
    revisions = [("installed", eg), *against]
    rows = []
    for size, (name, module) in itertools.product(sizes, revisions):
        key_block, score_elements = (int(x) for x in size.split(":"))
        out = torch.empty_like(data["q"])
        ms = timer(
            lambda out=out, kb=key_block, se=score_elements, m=module: gemm_path(
                data, out, kb, se, m
            ),
            repeats,
        )
        diff = (out.float() - packed_out.float()).abs().max().item()
        rows.append(
            dict(
                model=model,
                kv_dtype=kv_dtype,
                layout=layout,
                prefix=prefix,
                chunk=chunk,
                size=size,
                revision=name,
                packed_ms=packed_ms,
                gemm_ms=ms,
                speedup=packed_ms / ms,
                max_rel_diff=diff / largest if largest else diff,
            )
        )
    return rows


def table_row(r: dict) -> str:
    return (
        f"| {r['model']} | {r['kv_dtype']} | {r['layout']} | {r['prefix']} | {r['chunk']} | "
        f"{r['size']} | {r['revision']} | "
        f"{r['packed_ms']:.2f} | {r['gemm_ms']:.2f} | {r['speedup']:.2f}x | "
        f"{r['max_rel_diff']:.1e} |"
    )


def parser() -> argparse.ArgumentParser:
    parser = layer_parser(__doc__, [0, 8192, 32768, 122880])
    parser.add_argument("--chunks", nargs="+", type=int, default=[8192])
    parser.add_argument("--sizes", nargs="+", default=[DEFAULT_SIZE])
    parser.add_argument("--layouts", nargs="+", default=["split"], choices=LAYOUTS)
    parser.add_argument("--against", nargs="+", default=[], metavar="FILE")
    return parser


def main() -> int:
    args = parser().parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        f"# Extend attention, full layer (head dim 512), one request, on "
        f"{torch.cuda.get_device_name()}",
        "",
        f"packed: 0105's kernel (tile m32n64w8s2); GEMM: 0185, size KEY_BLOCK:SCORE_ELEMENTS; ms "
        f"per call, median of {args.repeats}",
        "",
        "| layer | KV | layout | prefix | new tokens | size | GEMM revision | packed ms | "
        "GEMM ms | packed/GEMM | rel diff |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    worst = 0.0
    against = [(path, revision(path)) for path in args.against]  # loaded once, timed per case
    cases = itertools.product(args.models, args.kv_dtypes, args.layouts, args.prefixes, args.chunks)
    for model, kv_dtype, layout, prefix, chunk in cases:
        for r in measure_case(
            model,
            kv_dtype,
            prefix,
            chunk,
            args.sizes,
            args.repeats,
            layout=layout,
            against=against,
        ):
            worst = max(worst, r["max_rel_diff"])
            lines.append(table_row(r))
            print(lines[-1], flush=True)
        torch.cuda.empty_cache()
    verdict = "ok" if worst <= MAX_REL_DIFF else f"FAIL: over {MAX_REL_DIFF}"
    lines.append(f"\nworst GEMM vs packed difference over the largest value: {worst:.1e} {verdict}")
    print(lines[-1])
    (out / "gemm.md").write_text("\n".join(lines) + "\n")
    return 0 if worst <= MAX_REL_DIFF else 1


if __name__ == "__main__":
    raise SystemExit(main())
