"""0180: when the scheduler aborts a streamed OpenAI request that asked for logprobs, the stream
ends with the abort's answer (an error chunk, or the last chunk of a graceful abort) instead of a
KeyError that the server answers with HTTP 500. The scheduler's output is what the tokenizer manager
hands the route for an aborted request: a finish reason and no logprob fields."""

from http import HTTPStatus

import pytest
from request_pipeline import front_end

MESSAGES = [{"role": "user", "content": "hi"}]
REFUSED = (
    "Grammar-based generation is not supported when the server is launched with "
    "--grammar-backend none"
)


def abort_output(status: HTTPStatus | None) -> dict:
    finish = {"type": "abort", "message": REFUSED}
    if status is not None:
        finish["status_code"] = status
    return {
        "index": 0,
        "text": "",
        "output_ids": [],
        "meta_info": {
            "id": "req-0",
            "finish_reason": finish,
            "prompt_tokens": 3,
            "completion_tokens": 0,
            "cached_tokens": 0,
        },
    }


def stream(endpoint: str, payload: dict, output: dict) -> tuple[int, list]:
    return front_end().answer_with(endpoint, payload, output)


REQUESTS = [
    (
        "/v1/chat/completions",
        {"messages": MESSAGES, "stream": True, "logprobs": True, "top_logprobs": 2},
    ),
    ("/v1/completions", {"prompt": "hi", "stream": True, "logprobs": 1}),
    ("/v1/completions", {"prompt": "hi", "stream": True, "logprobs": 1, "echo": True}),
]


@pytest.mark.parametrize("endpoint, payload", REQUESTS)
def test_an_abort_with_an_error_status_streams_that_error(endpoint, payload):
    status, events = stream(endpoint, payload, abort_output(HTTPStatus.BAD_REQUEST))
    assert status == 200, events
    errors = [e["error"] for e in events if isinstance(e, dict) and "error" in e]
    assert errors and errors[0]["message"] == REFUSED and errors[0]["code"] == 400, events


@pytest.mark.parametrize("endpoint, payload", REQUESTS)
def test_a_graceful_abort_ends_the_stream_with_its_finish_reason(endpoint, payload):
    status, events = stream(endpoint, payload, abort_output(None))
    assert status == 200, events
    finishes = [
        choice.get("finish_reason")
        for e in events
        if isinstance(e, dict)
        for choice in e.get("choices", [])
    ]
    assert "abort" in [f["type"] if isinstance(f, dict) else f for f in finishes if f], events
