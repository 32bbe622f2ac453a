"""0203: a JSON body nested deeper than 128 levels (within what orjson parses, beyond what recursive
code over a request survives: Python's recursion limit) is answered 400 on every JSON route, the
pydantic-model routes and those that read the body themselves, instead of a RecursionError (500) in
a multimodal loader, a validator or a chat template. Bodies of ordinary depth, and large flat ones,
are untouched. Through sglang's HTTP app in process."""

import json

import pytest
from http_app import http_app


def nested(depth: int):
    value = 1
    for _ in range(depth):
        value = [value]
    return value


DEEP = [
    ("/encode", {"text": "hi", "image_data": nested(600)}),
    ("/generate", {"text": "hi", "image_data": nested(600)}),
    (
        "/v1/chat/completions",
        {
            "model": "default",
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": nested(300)}}],
        },
    ),
    ("/v1/completions", {"model": "default", "prompt": "hi", "logit_bias": nested(200)}),
    ("/remove_external_corpus", {"corpus_id": nested(200)}),
]


@pytest.mark.parametrize("path, body", DEEP, ids=[p for p, _ in DEEP])
def test_a_body_nested_too_deep_is_a_400(path, body):
    reply = http_app().send(
        "POST", path, raw=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    assert reply.status == 400, reply
    assert "nests deeper than 128" in reply.body, reply


def test_ordinary_and_large_flat_bodies_reach_the_scheduler():
    schema = {"type": "string"}
    for _ in range(15):  # 30 levels of JSON
        schema = {"type": "object", "properties": {"a": schema}}
    chat = {
        "model": "default",
        "messages": [{"role": "user", "content": "[{" * 300}],
        "max_tokens": 4,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": schema}}],
    }
    reply = http_app().post("/v1/chat/completions", chat)
    assert reply.status == 200 and reply.dispatched, reply
    reply = http_app().post(
        "/generate",
        {"input_ids": [[5] * 50000, [6] * 50000], "sampling_params": {"max_new_tokens": 2}},
    )
    assert reply.status == 200 and reply.dispatched, reply


def test_tool_call_arguments_nested_too_deep_are_a_400():
    # a JSON string, parsed for the chat template, which renders it recursively
    arguments = '{"a":' * 900 + "1" + "}" * 900
    messages = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "1", "type": "function", "function": {"name": "f", "arguments": arguments}}
            ],
        },
    ]
    reply = http_app().post(
        "/v1/chat/completions", {"model": "default", "messages": messages, "max_tokens": 2}
    )
    assert reply.status == 400 and "nest deeper than 128" in reply.body, reply
    shallow = '{"a":' * 20 + "1" + "}" * 20
    messages[1]["tool_calls"][0]["function"]["arguments"] = shallow
    reply = http_app().post(
        "/v1/chat/completions", {"model": "default", "messages": messages, "max_tokens": 2}
    )
    assert reply.status == 200 and reply.dispatched, reply
