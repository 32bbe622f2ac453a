"""Shared test set-up: GPU-marked tests skip (visibly) where no CUDA device exists."""

import pytest


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
