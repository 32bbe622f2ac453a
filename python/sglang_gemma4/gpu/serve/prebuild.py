"""Build the CUDA modules a Gemma-4 server compiles at first use, all at once, before it starts
(issue #10 part 3, cold start).

    python -m sglang_gemma4.gpu.serve.prebuild --model DIR [--tp N]

sglang compiles several CUDA modules with nvcc the first time a forward pass needs them: its JIT
kernels (0.5.17: sglang/kernels/ops; RoPE per rotary width, the KV-cache store per K/V row size,
the activation, the overlap scheduler's position clamp) and, through sgl_kernel's rmsnorm,
FlashInfer's norm module. A server meets them one after another during its first CUDA-graph capture:
on an H100 with empty caches they took ~95 of a 26B-A4B start's 205 s
(benchmark_results/sglang-0.5.12/2026-11-22-h100-26b-a4b-g5723c55349-coldstart/). Each is one nvcc
process, so built side by side they cost about the longest one. They land in the caches the server
reads (TVM_FFI_CACHE_DIR, FLASHINFER_WORKSPACE_BASE, or their defaults under the home directory);
where they are already there, each worker only loads its module. Needs the GPU and the Python
environment that will serve.

A run that built everything leaves a stamp in sglang's JIT cache (TVM_FFI_CACHE_DIR, default
~/.cache/tvm-ffi) named after the builds and the installed sglang; while it is there a later run
returns at once instead of starting workers only to load cached modules (~19 s of Python imports on
an H100 host, 2026-11-22-h100-26b-a4b-g61d2ad1a64-dual-stream-coldstart). Emptying that cache
removes it; --force ignores it. (FlashInfer's cache emptied alone: the server rebuilds its norm.)

The module arguments follow from the checkpoint's config as sglang derives them at run time (checked
against the builds of a 26B-A4B cold start): the rotary width of each attention kind (its head dim),
and the KV-cache row of each kind (KV heads per rank x head dim x 2 bytes, bf16).
"""

import argparse
import hashlib
import importlib
import importlib.metadata
import json
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

# (module, loader) of each JIT build; the loaders are sglang's own cached constructors
ROPE = ("sglang.kernels.ops.attention.rope", "_jit_fused_rope_module")
KV_STORE = ("sglang.kernels.ops.kvcache.kvcache", "_jit_kvcache_module")
ACTIVATION = ("sglang.kernels.ops.activation.activation", "activation_module")
CLAMP_POSITION = ("sglang.kernels.ops.attention.clamp_position", "_jit_clamp_position_module")
FLASHINFER_NORM = ("sglang_gemma4.gpu.serve.prebuild", "flashinfer_cuda_norm")
BF16_BYTES = 2


def kv_heads_per_rank(heads: int, tp: int) -> int:
    """sglang splits KV heads across ranks and replicates them when there are fewer than ranks."""
    return max(1, heads // tp)


def builds(text_config: dict, tp: int = 1) -> list[tuple[str, str, tuple]]:
    """(module, loader, args) of every build a server of this Gemma-4 text config starts with."""
    import torch

    # Hugging Face's form has head_dim and num_key_value_heads of the sliding layers; the text-only
    # form sglang reads (Gemma4ForCausalLM) moves those to swa_* and gives the full layers' values
    sliding = (
        text_config.get("swa_head_dim") or text_config["head_dim"],
        text_config.get("swa_num_key_value_heads") or text_config["num_key_value_heads"],
    )
    full = (
        text_config.get("global_head_dim") or text_config["head_dim"],
        text_config.get("num_global_key_value_heads") or text_config["num_key_value_heads"],
    )
    head_dims = sorted({sliding[0], full[0]})
    rows = sorted(
        {kv_heads_per_rank(heads, tp) * dim * BF16_BYTES for dim, heads in (sliding, full)}
    )
    # Gemma-4's RoPE is NeoX-style, q and k both bf16; K and V rows are equally wide
    return (
        [(*ROPE, (True, dim, torch.bfloat16, torch.bfloat16)) for dim in head_dims]
        + [(*KV_STORE, (row, row)) for row in rows]
        + [
            (*ACTIVATION, (torch.bfloat16,)),
            (*CLAMP_POSITION, (torch.int64,)),
            (*FLASHINFER_NORM, ()),
        ]
    )


def flashinfer_cuda_norm() -> None:
    """FlashInfer's CUDA norm module, which sgl_kernel's rmsnorm runs whenever flashinfer imports,
    unless FlashInfer finds its CuTe-DSL kernels (nvidia-cutlass-dsl) to run instead."""
    import flashinfer.norm

    if flashinfer.norm._USE_CUDA_NORM:
        flashinfer.norm.get_norm_module()


def run_one(module: str, loader: str, args: tuple) -> float:
    """Build one module (a no-op when its cache has it); the seconds it took."""
    start = time.monotonic()
    getattr(importlib.import_module(module), loader)(*args)
    return time.monotonic() - start


def describe(module: str, loader: str, args: tuple) -> str:
    name = loader.removeprefix("_jit_").removesuffix("_module")
    return f"{name}({', '.join(str(a).removeprefix('torch.') for a in args)})"


def prebuild(jobs: list[tuple[str, str, tuple]], log=print) -> list[str]:
    """Run every build in its own process at once; the descriptions of those that failed (a server
    then builds or fails on its own, as without this step)."""
    start, failed = time.monotonic(), []
    # spawned, not forked: each worker sets up CUDA (the build flags name the GPU's architecture)
    with ProcessPoolExecutor(
        max_workers=len(jobs), mp_context=multiprocessing.get_context("spawn")
    ) as pool:
        futures = [(describe(*job), pool.submit(run_one, *job)) for job in jobs]
        for name, future in futures:
            try:
                log(f"prebuild: {name}: {future.result():.1f} s")
            except Exception as e:  # noqa: BLE001 - any build error is reported, not raised
                log(f"prebuild: {name} FAILED: {type(e).__name__}: {e}")
                failed.append(name)
    log(
        (
            f"prebuild: {len(jobs) - len(failed)} of {len(jobs)} modules ready in "
            f"{time.monotonic() - start:.1f} s"
        )
    )
    return failed


def stamp_path(jobs: list[tuple[str, str, tuple]]) -> Path:
    """Where a complete prebuild of these jobs for the installed sglang is recorded."""
    try:
        sglang = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        sglang = "none"
    key = json.dumps(
        [sglang, os.environ.get("FLASHINFER_WORKSPACE_BASE", ""), *(describe(*job) for job in jobs)]
    )
    cache = Path(os.environ.get("TVM_FFI_CACHE_DIR") or Path.home() / ".cache" / "tvm-ffi")
    return cache / f"sglang-gemma4-prebuild-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def text_config_of(model: Path) -> dict:
    config = json.loads((model / "config.json").read_text())
    return config.get("text_config") or config


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 2)[2],
    )
    parser.add_argument(
        "--model", required=True, type=Path, help="the checkpoint the server will serve"
    )
    parser.add_argument("--tp", type=int, default=1, help="the server's tensor-parallel size")
    parser.add_argument(
        "--force",
        action="store_true",
        help="start the workers even where the stamp says all is built",
    )
    args = parser.parse_args(argv)
    jobs = builds(text_config_of(args.model), args.tp)
    stamp = stamp_path(jobs)
    if stamp.exists() and not args.force:
        print(
            f"prebuild: {len(jobs)} of {len(jobs)} modules ready in 0.0 s (built before: {stamp})"
        )
        return 0
    if prebuild(jobs):
        return 1
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text("\n".join(describe(*job) for job in jobs) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
