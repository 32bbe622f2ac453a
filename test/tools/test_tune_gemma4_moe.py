"""The MoE tuning script's choices that do not need a GPU: the candidate grids, which tiles a batch
size can use, and the winner per batch size."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "tune_gemma4_moe.py"
spec = importlib.util.spec_from_file_location("tune_gemma4_moe", SCRIPT)
tune = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tune)


def test_grids_are_the_full_cross_product_without_repeats():
    for grid, axes in tune.GRIDS.items():
        configs = tune.candidates(grid)
        expected = 1
        for values in axes.values():
            expected *= len(values)
        assert len(configs) == expected
        assert len({tune.config_key(c) for c in configs}) == expected
        assert all(set(c) == set(axes) for c in configs)


def test_tiles_taller_than_a_batch_are_skipped():
    tall = {"BLOCK_SIZE_M": 64}
    assert not tune.fits(tall, 1) and not tune.fits(tall, 32)
    assert tune.fits(tall, 33) and tune.fits(tall, 64) and tune.fits(tall, 4096)
    assert tune.fits({"BLOCK_SIZE_M": 16}, 1)  # the smallest tile always runs


def test_pick_keeps_the_fastest_config_per_batch():
    a, b = {"BLOCK_SIZE_M": 16, "num_warps": 4}, {"BLOCK_SIZE_M": 32, "num_warps": 8}
    configs = {tune.config_key(a): a, tune.config_key(b): b}
    timings = {1: {tune.config_key(a): 5.0, tune.config_key(b): 7.5},
               64: {tune.config_key(a): 9.0, tune.config_key(b): 6.0}}
    assert tune.pick(timings, configs) == {1: a, 64: b}
