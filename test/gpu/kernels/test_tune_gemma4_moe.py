"""The MoE tuning script's choices that do not need a GPU: the candidate grids, which tiles a batch
size can use, the winner per batch size, and the fewest configs within a tolerance."""

import pytest

from sglang_gemma4.gpu.kernels import tune_gemma4_moe as tune


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
    timings = {
        1: {tune.config_key(a): 5.0, tune.config_key(b): 7.5},
        64: {tune.config_key(a): 9.0, tune.config_key(b): 6.0},
    }
    assert tune.pick(timings, configs) == {1: a, 64: b}


def test_pick_shared_uses_few_configs_within_the_tolerance():
    keys = ["a", "b", "c", "d"]
    configs = {k: {"name": k} for k in keys}
    # a is fastest at 1 and 2, b at 16, d at 64; b is within 3% everywhere below 64, where c and d
    # both are (the tie goes to the lower time there: d)
    timings = {
        1: {"a": 10.0, "b": 10.2, "c": 14.0, "d": 15.0},
        2: {"a": 11.0, "b": 11.3, "c": 14.0, "d": 15.0},
        16: {"a": 20.0, "b": 19.0, "c": 19.5, "d": 25.0},
        64: {"a": 40.0, "b": 39.0, "c": 30.5, "d": 30.0},
    }
    assert len({c["name"] for c in tune.pick(timings, configs).values()}) == 3
    shared = tune.pick_shared(timings, configs, within=0.03)
    assert {b: c["name"] for b, c in shared.items()} == {1: "b", 2: "b", 16: "b", 64: "d"}
    for batch, config in shared.items():
        assert timings[batch][config["name"]] <= min(timings[batch].values()) * 1.03
    # no tolerance: each batch size gets its own fastest
    assert {b: c["name"] for b, c in tune.pick_shared(timings, configs, within=0.0).items()} == {
        b: c["name"] for b, c in tune.pick(timings, configs).items()
    }


def test_per_gemm_files_cover_every_current_batch_size_with_the_tuned_winners():
    def cfg(m, n):
        return {"BLOCK_SIZE_M": m, "BLOCK_SIZE_N": n}

    current = {
        1: {"gate_up": cfg(16, 32), "down": cfg(16, 32)},
        4: {"gate_up": cfg(16, 64), "down": cfg(16, 64)},
        4096: {"gate_up": cfg(64, 128), "down": cfg(64, 128)},
    }
    tuned = {1: {"gate_up": cfg(16, 16), "down": cfg(16, 128)}}
    files = tune.per_gemm_files(current, tuned)
    assert set(files) == {"gate_up", "down"}
    assert files["gate_up"] == {1: cfg(16, 16), 4: cfg(16, 64), 4096: cfg(64, 128)}
    assert files["down"] == {1: cfg(16, 128), 4: cfg(16, 64), 4096: cfg(64, 128)}


def test_per_gemm_files_refuse_a_winner_of_another_tile_height():
    # sglang asserts that gate_up and down share BLOCK_SIZE_M: a file that broke it must not be
    # written
    current = {1: {"gate_up": {"BLOCK_SIZE_M": 16}, "down": {"BLOCK_SIZE_M": 16}}}
    with pytest.raises(AssertionError):
        tune.per_gemm_files(
            current, {1: {"gate_up": {"BLOCK_SIZE_M": 32}, "down": {"BLOCK_SIZE_M": 16}}}
        )


@pytest.mark.parametrize("variant, sums_in_down_gemm", [("26b-a4b", True), ("e4b", False)])
def test_tuning_runs_under_the_presets_server_arguments(variant, sums_in_down_gemm):
    """fused_experts reads the published server arguments: the 26B-A4B preset's down GEMM adds the
    top-k outputs itself (--enable-fused-moe-sum-all-reduce), which the tuner must time that way."""
    import patched_tree  # noqa: F401  (the patched sglang first on sys.path)

    from sglang.srt.runtime_context import get_exec, reset_context

    tune.publish_server_args(variant, "--device", "cpu")
    try:
        assert get_exec().moe.enable_fused_moe_sum_all_reduce is sums_in_down_gemm
        assert get_exec().deterministic.enable_deterministic_inference is False
    finally:
        reset_context()  # the next test starts unpublished, as a fresh process does
