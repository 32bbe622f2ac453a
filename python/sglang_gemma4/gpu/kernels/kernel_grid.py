"""Shared by the kernel-grid benchmarks (gpu/bench_*_tiles.py,
sglang_gemma4.gpu.kernels.tune_gemma4_moe): the candidates compiled ahead in worker processes, one
candidate's difference and time, and the fastest candidate whose output matches."""

import functools
import json
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor


def add_jobs_argument(parser) -> None:
    parser.add_argument(
        "--jobs",
        type=int,
        default=min(8, os.cpu_count() or 1),
        help="processes compiling the candidate kernels before the timing pass",
    )


def _launch_each(launch, chunk: list) -> None:
    for item in chunk:
        try:
            launch(item)
        except Exception:  # a candidate the GPU cannot run: the timing pass records its error
            pass


def compile_ahead(launch, items: list, jobs: int) -> None:
    """launch(item) once for every item, in up to `jobs` spawned processes (not forked: each starts
    its own CUDA context), ignoring the candidates that fail; Triton's on-disk cache then serves the
    timing pass, which would otherwise compile one candidate after another. `launch` must be
    picklable: a module-level function, or a functools.partial of one."""
    chunks = [items[i::jobs] for i in range(jobs) if items[i::jobs]]
    with ProcessPoolExecutor(len(chunks), mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(functools.partial(_launch_each, launch), chunks))


def measure(row: dict, run, reference, rep_ms: int) -> dict:
    """`row` with max_rel_err (largest difference of run()'s output from `reference`, over the
    reference's largest value) and us (Triton's do_bench median), or with the error of a candidate
    the GPU cannot compile or run (out of shared memory or registers)."""
    import triton  # here, not at the top: importing triton fixes TRITON_INTERPRET for the process

    try:
        got = run().float()
        row["max_rel_err"] = (
            (got - reference.float()).abs().max() / reference.float().abs().max()
        ).item()
        row["us"] = triton.testing.do_bench(run, rep=rep_ms, return_mode="median") * 1000
    except Exception as error:  # recorded, not fatal: the grid goes on
        row["error"] = f"{type(error).__name__}: {str(error)[:160]}"
    return row


def measure_all(candidates, reference, rep_ms: int, jsonl) -> list[dict]:
    """measure() each (row, run) of `candidates` in turn, appending every row to the open JSONL file
    as soon as it is measured (a run cut short keeps what it timed)."""
    rows = []
    for row, run in candidates:
        rows.append(measure(row, run, reference, rep_ms))
        jsonl.write(json.dumps(row) + "\n")
    return rows


def fastest_match(rows: list[dict], tolerance: float = 2e-3) -> dict:
    """The fastest timed row whose output is within `tolerance` of the reference."""
    return min(
        (r for r in rows if "us" in r and r["max_rel_err"] < tolerance), key=lambda r: r["us"]
    )
