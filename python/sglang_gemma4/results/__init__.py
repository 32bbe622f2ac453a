"""Measured results as data (benchmark_results/): runs.py reads and checks each run's result.json,
archive.py packs a run's raw files and checks its figures against them, render.py writes the
index, the README's results tables and the patches' Bench: lines from them.

Imports nothing else of sglang_gemma4 but markdown.py; the stack uses only what this module names
below."""

from pathlib import Path

from sglang_gemma4.results.archive import read_archive
from sglang_gemma4.results.render import regenerate as _regenerate
from sglang_gemma4.results.runs import RESULTS_DIR

__all__ = ["RESULTS_DIR", "read_archive", "regenerate"]


def regenerate(root: Path, pin_version: str, patch_paths: list[Path]) -> str:
    """The index, the README's results tables and the Bench: lines rewritten from the runs'
    result.json files (which name the pin they compare with); a note when there are no results."""
    if not (root / RESULTS_DIR).is_dir():
        return f"no {RESULTS_DIR}/: no results tables"
    return _regenerate(root, pin_version, patch_paths)
