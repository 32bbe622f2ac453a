"""compile_ahead: every item runs exactly once, in a worker process, not in the caller."""

import functools
import os
from pathlib import Path

from sglang_gemma4.compile_ahead import compile_ahead


def record(directory: str, chunk: list) -> None:
    for item in chunk:  # one file per item, named by the item and the process that ran it
        (Path(directory) / f"{item}-{os.getpid()}").touch()


def test_each_item_runs_once_in_a_worker_process(tmp_path):
    items = [f"k{i}" for i in range(7)]
    compile_ahead(functools.partial(record, str(tmp_path)), items, jobs=3)
    runs = [name.rsplit("-", 1) for name in os.listdir(tmp_path)]
    assert sorted(item for item, _ in runs) == sorted(items)
    assert str(os.getpid()) not in {pid for _, pid in runs}


def test_more_jobs_than_items(tmp_path):
    compile_ahead(functools.partial(record, str(tmp_path)), ["only"], jobs=4)
    assert [name.split("-")[0] for name in os.listdir(tmp_path)] == ["only"]
