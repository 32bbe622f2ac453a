"""0227: /v1/score on a generation model answers an empty label_token_ids with HTTP 400 naming the
field; before, the request reached the scheduler, came back with no label logprobs and the route
answered 500 ("output_logprobs is empty"). Through sglang's HTTP app in process."""

import pytest
from http_app import http_app

SCORE = {"query": "q", "items": ["a", "b"]}


@pytest.mark.parametrize(
    "items", [["a", "b"], "a single item", [[5, 6]]], ids=["texts", "text", "ids"]
)
def test_empty_label_token_ids_is_a_400_naming_the_field(items):
    body = {
        **SCORE,
        "query": [5] if isinstance(items[0], list) else "q",
        "items": items,
        "label_token_ids": [],
    }
    reply = http_app().post("/v1/score", body)
    assert reply.status == 400, reply
    assert "label_token_ids" in reply.body, reply
    assert not reply.dispatched


def test_missing_label_token_ids_is_still_a_400():
    reply = http_app().post("/v1/score", SCORE)
    assert reply.status == 400 and "label_token_ids" in reply.body, reply


def test_a_well_formed_score_request_reaches_the_scheduler():
    reply = http_app().post("/v1/score", {**SCORE, "label_token_ids": [5, 6]})
    assert reply.status == 200 and reply.dispatched, reply
