"""0190: a non-streamed /v1/completions request with echo and logprobs 0 (or false, which the
request model reads as 0) asks for no top logprobs, so the tokenizer manager's answer carries none
for the prompt. The route answers with the echoed prompt and the completion's logprobs instead of
a KeyError that the server answers with HTTP 500 (found by the live fuzzer on an H100)."""

import pytest
from request_pipeline import front_end

COMPLETION = [(-0.5, 104, "h"), (-0.25, 105, "i")]


def scheduler_output(top_logprobs: bool) -> dict:
    """What the tokenizer manager yields for a finished request that asked for logprobs: top
    logprobs only when the request asked for some."""
    meta = {
        "id": "req-0",
        "finish_reason": {"type": "length", "length": 2},
        "prompt_tokens": 3,
        "completion_tokens": 2,
        "cached_tokens": 0,
        "weight_version": "default",
        "input_token_logprobs": [],
        "output_token_logprobs": COMPLETION,
        "output_token_logprobs_length": 2,
    }
    if top_logprobs:
        meta |= {"input_top_logprobs": [], "output_top_logprobs": [[t] for t in COMPLETION]}
    return {"index": 0, "text": "hi", "output_ids": [104, 105], "meta_info": meta}


@pytest.mark.parametrize("prompt", ["abc", [100, 101, 102]], ids=["text", "token-ids"])
@pytest.mark.parametrize("logprobs", [0, False])
def test_echo_without_top_logprobs_answers_the_completion(prompt, logprobs):
    payload = {"prompt": prompt, "max_tokens": 2, "echo": True, "logprobs": logprobs}
    status, (body,) = front_end().answer_with(
        "/v1/completions", payload, scheduler_output(top_logprobs=False)
    )
    assert status == 200, body
    choice = body["choices"][0]
    assert choice["text"].endswith("hi") and len(choice["text"]) > 2, choice
    assert choice["logprobs"]["token_logprobs"] == [-0.5, -0.25], choice
    assert choice["logprobs"]["top_logprobs"] == [], choice


def test_echo_with_top_logprobs_still_returns_them():
    payload = {"prompt": "abc", "max_tokens": 2, "echo": True, "logprobs": 1}
    status, (body,) = front_end().answer_with(
        "/v1/completions", payload, scheduler_output(top_logprobs=True)
    )
    assert status == 200, body
    assert body["choices"][0]["logprobs"]["top_logprobs"] == [{"h": -0.5}, {"i": -0.25}], body
