"""Parity scoring: agreement over greedy steps, log-probability deltas only where both sides saw the
same history, bounds taken from transformers' own bf16 noise."""

import pytest
import torch
from tiny_gemma4 import tiny

from sglang_gemma4.gpu.checks import parity
from sglang_gemma4.gpu.checks.parity import bounds, compare, greedy_steps, passes, prompts
from sglang_gemma4.gpu.serve.checkpoint import (
    hf_model,
    init_random_,
    reduced_text_config,
    token_ids,
)


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


def test_long_prompts_are_added_to_the_set():
    text = reduced_text_config("26b-a4b", 4)
    batch, longer = prompts(text), prompts(text, (20000, 33))
    assert longer[: len(batch)] == batch and [len(p) for p in longer[len(batch) :]] == [20000, 33]


@pytest.mark.parametrize("variant", ["e2b", "26b-a4b"])
def test_the_reference_prefilled_in_chunks_on_its_cache_equals_one_whole_forward(
    variant, monkeypatch
):
    # chunks shorter than the window and longer than it, a KV-shared tail (E2B), k_eq_v (26B-A4B)
    text = tiny(variant) | {"sliding_window": 8}
    model = hf_model(text, "causal").eval()
    init_random_(model, seed=5)
    ids = torch.randint(0, 400, (45,), generator=torch.Generator().manual_seed(1)).tolist()
    with torch.no_grad():
        first = model(input_ids=torch.tensor([ids])).logits[0, -1]
        second = model(input_ids=torch.tensor([ids + [int(first.argmax())]])).logits[0, -1]
        for chunk in (5, 13, 64):
            monkeypatch.setattr(parity, "REFERENCE_CHUNK", chunk)
            steps = greedy_steps(model, ids)
            assert [s["top1"] for s in steps] == [int(first.argmax()), int(second.argmax())]
            for step, logits in zip(steps, (first, second)):
                want = torch.log_softmax(logits.float(), -1)
                got = torch.tensor([want[t] for t in step["top"]])
                assert torch.allclose(torch.tensor(list(step["top"].values())), got, atol=1e-4)
