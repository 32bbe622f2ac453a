"""Shared test set-up: GPU-marked tests skip (visibly) where no CUDA device exists, and the
helper modules of the patch tests (test/patches/helpers/: stand-ins and builders, no tests) are
importable by name from every test, and one random seed per run (helpers/session_seed.py)."""

import sys
from pathlib import Path

import pytest

HELPERS = Path(__file__).resolve().parent / "patches" / "helpers"
if str(HELPERS) not in sys.path:
    sys.path.insert(0, str(HELPERS))

import session_seed  # noqa: E402 (from HELPERS)


def pytest_configure(config):
    session_seed.ensure()  # before pytest-xdist starts its workers: they inherit it


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (runs on the GPU machine)")
    for item in items:
        if item.get_closest_marker("gpu"):  # the mark, not any keyword named gpu (a parameter id)
            item.add_marker(skip)
