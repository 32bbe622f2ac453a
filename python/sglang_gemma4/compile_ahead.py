"""Compile Triton kernels in worker processes before a timing loop (the tile and MoE-config
benchmarks): Triton's on-disk cache then serves the loop, which would otherwise compile one
candidate kernel after another."""

import multiprocessing
from concurrent.futures import ProcessPoolExecutor


def compile_ahead(worker, items: list, jobs: int) -> None:
    """worker(chunk) over `jobs` interleaved chunks of `items`, in up to `jobs` spawned processes
    (not forked: each starts its own CUDA context). A worker launches each item's kernel once and
    ignores the ones the GPU cannot run."""
    chunks = [items[i::jobs] for i in range(jobs) if items[i::jobs]]
    with ProcessPoolExecutor(len(chunks), mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(worker, chunks))
