"""0286: /v1/score refuses, with HTTP 400 and before building any prompt, a request whose
single-item prompts (the query once per item) would hold more tokens together than the server's KV
pool. Before, a 105 KB body (a 100,000-character query, 1,000 one-character items) had the server
tokenize 100 million characters and queue 1,000 prompts of 100,000 tokens; the route fuzzer's
request timed out after 20 s in process. Through sglang's HTTP app in process, whose byte-level
tokenizer makes a character one token, with a KV pool of http_app.KV_POOL_TOKENS."""

import time

import pytest
from http_app import KV_POOL_TOKENS, http_app

QUERY_TOKENS = 1000
TOO_MANY = KV_POOL_TOKENS // QUERY_TOKENS + 1  # items whose prompts overflow the pool


def score(query, items, **fields) -> dict:
    return {"query": query, "items": items, "label_token_ids": [5, 6], **fields}


@pytest.mark.parametrize(
    "body",
    [
        score("q" * QUERY_TOKENS, ["a"] * TOO_MANY),
        score("q" * QUERY_TOKENS, ["a"] * TOO_MANY, item_first=True),
        score([7] * QUERY_TOKENS, [[5]] * TOO_MANY),
    ],
    ids=["texts", "texts-item-first", "ids"],
)
def test_prompts_past_the_kv_pool_are_a_400_before_they_are_built(body):
    app = http_app()  # built once per process (seconds), outside the timing
    started = time.monotonic()
    reply = app.post("/v1/score", body)
    seconds = time.monotonic() - started
    assert reply.status == 400, reply
    expanded = TOO_MANY * (QUERY_TOKENS + 1)
    assert f"expand to {expanded} prompt tokens" in reply.body, reply
    assert f"{KV_POOL_TOKENS}-token KV cache" in reply.body, reply
    assert not reply.dispatched
    # the prompts are never tokenized: a million characters' work, not the query's thousand
    assert seconds < 1.0, f"{seconds:.2f} s"


def test_prompts_within_the_pool_still_reach_the_scheduler():
    items = ["a"] * (KV_POOL_TOKENS // (QUERY_TOKENS + 1))
    for body in (
        score("q" * QUERY_TOKENS, items),
        score([7] * QUERY_TOKENS, [[5]] * len(items)),
    ):
        reply = http_app().post("/v1/score", body)
        assert reply.status == 200 and reply.dispatched, reply
