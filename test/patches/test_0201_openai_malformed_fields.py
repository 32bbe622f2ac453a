"""0201: the OpenAI routes answer a body that is not a JSON object, a response_format (or its
schema) that is not an object, cache_salt/extra_key that are not strings, and /v1/detokenize token
ids outside what the tokenizer decodes (negative, beyond 32 bits) with HTTP 400 naming the field,
instead of 500 (an AttributeError in a request model's validator, a TypeError, an OverflowError in
the tokenizer), through sglang's HTTP app in process."""

import pytest
from http_app import http_app

MESSAGES = [{"role": "user", "content": "hi"}]
CHAT = {"model": "default", "messages": MESSAGES, "max_tokens": 4}
MALFORMED = [
    ("/v1/chat/completions", [1, 2], "dictionary"),
    ("/v1/chat/completions", "hello", "dictionary"),
    ("/v1/chat/completions", 7, "dictionary"),
    ("/v1/chat/completions", None, "dictionary"),
    ("/invocations", ["x"], "dictionary"),
    ("/v1/chat/completions", {**CHAT, "response_format": "json"}, "response_format"),
    ("/v1/chat/completions", {**CHAT, "response_format": ["json_object"]}, "response_format"),
    (
        "/v1/chat/completions",
        {**CHAT, "response_format": {"type": "json_schema", "schema": "x"}},
        "response_format",
    ),
    (
        "/v1/chat/completions",
        {**CHAT, "response_format": {"type": "json_schema", "schema": [1]}},
        "response_format",
    ),
    ("/v1/chat/completions", {**CHAT, "cache_salt": ["a"]}, "cache_salt"),
    ("/v1/chat/completions", {**CHAT, "extra_key": ["a"]}, "extra_key"),
    ("/v1/completions", {"model": "default", "prompt": "hi", "cache_salt": ["a"]}, "cache_salt"),
    ("/v1/completions", {"model": "default", "prompt": "hi", "extra_key": {"a": 1}}, "extra_key"),
    ("/v1/detokenize", {"tokens": [5, -1]}, "tokens[1]"),
    ("/v1/detokenize", {"tokens": [2**40]}, "tokens[0]"),
    ("/detokenize", {"tokens": [[5], [6, -(2**63)]]}, "tokens[1][1]"),
    ("/detokenize", {"tokens": [2**32]}, "tokens[0]"),
]


@pytest.mark.parametrize(
    "path, body, field", MALFORMED, ids=[f"{p}-{i}" for i, (p, _, _) in enumerate(MALFORMED)]
)
def test_a_malformed_body_is_a_400_naming_the_field(path, body, field):
    reply = http_app().send(
        "POST",
        path,
        raw=__import__("json").dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    assert reply.status == 400, reply
    assert field in reply.body, reply


WELL_FORMED = [
    (
        "/v1/chat/completions",
        {
            **CHAT,
            "response_format": {"type": "json_schema", "schema": {"type": "object", "title": "T"}},
        },
    ),
    ("/v1/chat/completions", {**CHAT, "cache_salt": "salt", "extra_key": "key"}),
]


@pytest.mark.parametrize("path, body", WELL_FORMED, ids=range(len(WELL_FORMED)))
def test_a_well_formed_request_reaches_the_scheduler(path, body):
    reply = http_app().post(path, body)
    assert reply.status == 200 and reply.dispatched, reply


def test_detokenize_decodes_ids_within_32_bits():
    reply = http_app().post("/v1/detokenize", {"tokens": [[40, 41], [2**32 - 1]]})
    assert reply.status == 200, reply
    assert (
        reply.json()["text"][0] == "EF"
    )  # byte-level tokenizer: id 40 is "E" (4 specials + "!"..)


def test_the_responses_api_answers_404_when_it_failed_to_load(monkeypatch):
    # OpenAIServingResponses failing at start-up (e.g. no harmony vocabulary offline) leaves it
    # unset
    app = http_app()
    monkeypatch.delattr(app.app.state, "openai_serving_responses", raising=False)
    for method, path, body in [
        ("POST", "/v1/responses", {"model": "default", "input": "hi"}),
        ("GET", "/v1/responses/resp_1", None),
        ("POST", "/v1/responses/resp_1/cancel", None),
    ]:
        reply = app.send(method, path, body)
        assert reply.status == 404, (path, reply)


def test_tokenize_reports_the_context_length_when_the_tokenizer_sets_no_limit():
    # transformers' "no limit" is int(1e30), which JSON's int64 cannot carry
    reply = http_app().post("/v1/tokenize", {"prompt": "hi"})
    assert reply.status == 200, reply
    assert reply.json()["max_model_len"] == http_app().manager.model_config.context_len
