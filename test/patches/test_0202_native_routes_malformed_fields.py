"""0202: sglang's native routes answer a malformed field with HTTP 400 naming it, instead of 500:
an unknown parser on /parse_function_call and /separate_reasoning, /vertex_generate parameters that
/generate does not take, /configure_logging values the request logger rejects, and the Ollama
routes' requests that the tokenizer manager rejects (streamed or not). One exception handler answers
the validation layer's InvalidRequestError with 400 on every route. Through sglang's HTTP app in
process. Also: /api/chat tokenizes its messages to a list of ids (transformers 5 returns a dict
unless told otherwise) and Ollama's seed option becomes sampling_seed."""

import pytest
from http_app import http_app

MESSAGES = [{"role": "user", "content": "hi"}]
MALFORMED = [
    (
        "/parse_function_call",
        {"text": "a", "tool_call_parser": "nope", "tools": []},
        "tool_call_parser",
    ),
    ("/separate_reasoning", {"text": "a", "reasoning_parser": "nope"}, "reasoning_parser"),
    ("/vertex_generate", {"instances": [{"text": "a"}], "parameters": {"bogus": 1}}, "bogus"),
    (
        "/vertex_generate",
        {"instances": [{"text": "a"}], "parameters": {"image_data": "x"}},
        "image_data",
    ),
    ("/vertex_generate", {"instances": [{"text": "a"}], "parameters": {"text": "b"}}, "text"),
    ("/vertex_generate", {"instances": [{"text": "a"}], "parameters": {"stream": "x"}}, "stream"),
    (
        "/vertex_generate",
        {"instances": [{"text": "a"}, {"text": "b"}], "parameters": {"rid": ["x"]}},
        "rid",
    ),
    (
        "/vertex_generate",
        {"instances": [{"text": "a"}], "parameters": {"sampling_params": {"top_k": 0}}},
        "top_k",
    ),
    ("/configure_logging", {"log_requests_level": 7}, "log_requests_level"),
    ("/configure_logging", {"log_requests_format": "xml"}, "log_requests_format"),
    ("/configure_logging", {"log_level": "loud"}, "log_level"),
    (
        "/api/generate",
        {"model": "m", "prompt": "hi", "stream": False, "options": {"num_predict": "x"}},
        "max_new_tokens",
    ),
    (
        "/api/generate",
        {"model": "m", "prompt": "hi", "stream": True, "options": {"temperature": -1}},
        "temperature",
    ),
    (
        "/api/chat",
        {"model": "m", "messages": MESSAGES, "stream": False, "options": {"top_k": 0}},
        "top_k",
    ),
    (
        "/api/chat",
        {"model": "m", "messages": MESSAGES, "stream": True, "options": {"seed": "x"}},
        "sampling_seed",
    ),
]


@pytest.mark.parametrize(
    "path, body, field", MALFORMED, ids=[f"{p}-{i}" for i, (p, _, _) in enumerate(MALFORMED)]
)
def test_a_malformed_field_is_a_400_naming_it(path, body, field):
    reply = http_app().post(path, body)
    assert reply.status == 400, reply
    assert field in reply.body, reply


WELL_FORMED = [
    (
        "/vertex_generate",
        {"instances": [{"text": "a"}], "parameters": {"sampling_params": {"max_new_tokens": 4}}},
    ),
    (
        "/api/generate",
        {"model": "m", "prompt": "hi", "stream": False, "options": {"seed": 3, "num_predict": 4}},
    ),
    (
        "/api/generate",
        {"model": "m", "prompt": "hi", "stream": True, "options": {"num_predict": 4}},
    ),
    (
        "/api/chat",
        {"model": "m", "messages": MESSAGES, "stream": False, "options": {"num_predict": 4}},
    ),
    (
        "/api/chat",
        {"model": "m", "messages": MESSAGES, "stream": True, "options": {"num_predict": 4}},
    ),
]


@pytest.mark.parametrize("path, body", WELL_FORMED, ids=range(len(WELL_FORMED)))
def test_a_well_formed_request_reaches_the_scheduler(path, body):
    reply = http_app().post(path, body)
    assert reply.status == 200 and reply.dispatched, reply


def test_parsers_known_to_sglang_still_parse():
    reply = http_app().post("/separate_reasoning", {"text": "a", "reasoning_parser": "deepseek-r1"})
    assert reply.status == 200, reply
    reply = http_app().post(
        "/parse_function_call", {"text": "a", "tool_call_parser": "gemma4", "tools": []}
    )
    assert reply.status == 200, reply


OTHER = [
    (
        "/v1/messages/count_tokens",
        b'{"model": "default", "messages": []}',
        "Messages cannot be empty",
    ),
    ("/api/chat", b'{"model": "m", "messages": [], "stream": false}', "messages"),
    ("/remove_external_corpus", b"false", "corpus_id"),
    ("/remove_external_corpus", b'{"corpus_id": ', "not valid JSON"),
    ("/add_external_corpus", b"{", "not valid JSON"),
]


@pytest.mark.parametrize(
    "path, raw, words", OTHER, ids=[f"{p}-{i}" for i, (p, _, _) in enumerate(OTHER)]
)
def test_an_empty_conversation_or_a_body_that_is_no_json_object_is_a_400(path, raw, words):
    reply = http_app().send("POST", path, raw=raw, headers={"content-type": "application/json"})
    assert reply.status == 400, reply
    assert words in reply.body, reply


def test_the_disconnect_abort_of_a_request_rejected_before_normalization_does_nothing(monkeypatch):
    from sglang.srt.managers import tokenizer_manager
    from sglang.srt.managers.io_struct import GenerateReqInput

    async def no_wait(seconds):
        pass

    monkeypatch.setattr(tokenizer_manager.asyncio, "sleep", no_wait)
    app = http_app()
    rejected = GenerateReqInput(text="hi", rid="r")  # never normalized: no is_single
    app.loop.run_until_complete(app.manager.create_abort_task(rejected)())
