"""Graph-replay timing measures the captured work: a GPU spin ten times longer reads about ten
times longer, and calls_per_graph divides the replay back to one call."""

import pytest

from sglang_gemma4.gpu.kernels.cuda_timing import graph_replay_us


@pytest.mark.gpu
def test_time_scales_with_the_captured_work():
    import torch

    short = graph_replay_us(lambda: torch.cuda._sleep(200_000), repeats=5)
    long = graph_replay_us(lambda: torch.cuda._sleep(2_000_000), repeats=5)
    assert 7 < long / short < 13


@pytest.mark.gpu
def test_calls_per_graph_reports_one_call():
    import torch

    once = graph_replay_us(lambda: torch.cuda._sleep(500_000), repeats=5)
    per_call = graph_replay_us(lambda: torch.cuda._sleep(500_000), repeats=5, calls_per_graph=4)
    assert 0.8 < per_call / once < 1.25
