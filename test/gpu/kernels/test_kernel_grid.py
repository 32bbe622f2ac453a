"""The kernel-grid helpers: every item launched ahead exactly once in a worker process, not in the
caller, a failing launch skipped; a candidate that fails is recorded, not fatal; the fastest
matching candidate is chosen."""

import functools
import io
import json
import os
from pathlib import Path

import torch

from sglang_gemma4.gpu.kernels.kernel_grid import compile_ahead, fastest_match, measure, measure_all


def record(directory: str, item: str) -> None:
    """One file per launch, named by the item and the process that ran it; "bad" items fail."""
    if item.startswith("bad"):
        raise RuntimeError("out of resource: shared memory")
    (Path(directory) / f"{item}-{os.getpid()}").touch()


def test_each_item_runs_once_in_a_worker_process(tmp_path):
    items = [f"k{i}" for i in range(7)]
    compile_ahead(functools.partial(record, str(tmp_path)), items, jobs=3)
    runs = [name.rsplit("-", 1) for name in os.listdir(tmp_path)]
    assert sorted(item for item, _ in runs) == sorted(items)
    assert str(os.getpid()) not in {pid for _, pid in runs}


def test_a_failing_launch_does_not_stop_the_others(tmp_path):
    compile_ahead(functools.partial(record, str(tmp_path)), ["bad0", "k1", "bad2", "k3"], jobs=1)
    assert sorted(name.split("-")[0] for name in os.listdir(tmp_path)) == ["k1", "k3"]


def test_more_jobs_than_items(tmp_path):
    compile_ahead(functools.partial(record, str(tmp_path)), ["only"], jobs=4)
    assert [name.split("-")[0] for name in os.listdir(tmp_path)] == ["only"]


def test_a_failing_candidate_is_recorded():
    def out_of_resources():
        raise RuntimeError("out of resource: shared memory, Required: 262144")

    row = measure({"tile": [128, 128]}, out_of_resources, torch.ones(4), rep_ms=1)
    assert row["error"].startswith("RuntimeError: out of resource") and "us" not in row


def test_fastest_match_skips_failed_and_differing_candidates():
    rows = [
        {"name": "fast-but-off", "us": 1.0, "max_rel_err": 5e-3},
        {"name": "failed", "error": "x"},
        {"name": "slow", "us": 9.0, "max_rel_err": 0.0},
        {"name": "best", "us": 3.0, "max_rel_err": 1e-3},
    ]
    assert fastest_match(rows)["name"] == "best"
    assert fastest_match(rows, tolerance=1e-2)["name"] == "fast-but-off"


def test_measure_all_writes_each_row_as_it_is_measured():
    def fails(name):
        def run():
            raise RuntimeError(f"{name}: out of resource")

        return run

    jsonl = io.StringIO()
    rows = measure_all((({"tile": t}, fails(t)) for t in ("a", "b")), torch.ones(4), 1, jsonl)
    assert [r["tile"] for r in rows] == ["a", "b"] and all("error" in r for r in rows)
    assert [json.loads(line) for line in jsonl.getvalue().splitlines()] == rows
