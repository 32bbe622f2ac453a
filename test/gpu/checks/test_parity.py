"""Parity scoring: agreement over greedy steps, log-probability deltas only where both sides saw the
same history, bounds taken from transformers' own bf16 noise."""

from sglang_gemma4.gpu.checks.parity import bounds, compare, passes, prompts
from sglang_gemma4.gpu.serve.checkpoint import reduced_text_config, token_ids


def step(top1: int, logprobs: dict) -> dict:
    return {"top1": top1, "top": logprobs}


def test_identical_runs_agree_with_zero_delta():
    run = [[step(5, {5: -0.1, 6: -2.0}), step(6, {6: -0.3, 5: -1.5})]]
    assert compare(run, run) == {
        "top1_agreement": 1.0,
        "max_abs_dlogprob": 0.0,
        "top20_overlap": 0.1,
        "steps_compared": 2,
    }


def test_a_flipped_first_step_skips_the_rest_of_that_prompt():
    ref = [
        [step(5, {5: -0.1, 6: -0.2}), step(7, {7: -0.5})],
        [step(8, {8: -0.1}), step(9, {9: -0.1})],
    ]
    got = [
        [step(6, {6: -0.15, 5: -0.12}), step(1, {1: -9.0})],
        [step(8, {8: -0.3}), step(9, {9: -0.1})],
    ]
    result = compare(ref, got)
    # prompt 1: step 1 disagrees (its deltas count, its step 2 is not compared); prompt 2: both
    # agree
    assert result["steps_compared"] == 3 and result["top1_agreement"] == round(2 / 3, 4)
    assert result["max_abs_dlogprob"] == 0.2


def test_bounds_follow_the_noise_floor():
    bound = bounds({"top1_agreement": 1.0, "max_abs_dlogprob": 0.25}, prompts_count=8)
    assert bound == {"max_abs_dlogprob": 0.55, "top1_agreement": 0.875}
    assert passes({"top1_agreement": 0.875, "max_abs_dlogprob": 0.55}, bound)
    assert not passes({"top1_agreement": 0.75, "max_abs_dlogprob": 0.1}, bound)
    assert not passes({"top1_agreement": 1.0, "max_abs_dlogprob": 0.56}, bound)
    assert not passes({"error": "server exited"}, bound)


def test_prompts_start_with_bos_cross_the_window_and_avoid_specials():
    text = reduced_text_config("e2b", 8)
    batch = prompts(text)
    bos = token_ids(text["vocab_size"])["bos_token_id"]
    assert all(p[0] == bos and max(p[1:]) < text["vocab_size"] - 5 for p in batch)
    lengths = [len(p) for p in batch]
    assert min(lengths) < text["sliding_window"] < max(lengths) and sum(lengths) <= 4096
    assert prompts(text) == batch  # same seed, same prompts
