"""0242: the one-shot gemma4 tool-call parse (a chat completion without stream) answers with all the
text outside the calls as content: before, between and after them, as the streamed parse delivers
it. It kept only the text before the first call, so the same answer read differently streamed and
not.

Known Gemma-4 outputs with text around their calls are streamed through the detector in every split
into two chunks and in random multi-token chunks (MTP accepting several tokens a step), stream end
included, and compared with the one-shot parse; and the chat route answers without stream.

On 0.5.23 the stream's helpers come from this port's test_0241 (the parser's end returns (text,
calls) there), loaded by path: test/patches/ holds a module of the same name."""

import importlib.util
import json
from pathlib import Path

import pytest
from request_pipeline import front_end

_spec = importlib.util.spec_from_file_location(
    "test_0241_port_0523",
    Path(__file__).with_name("test_0241_gemma4_tool_parser_flushes_held_text.py"),
)
_t0241 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_t0241)
every_chunking, one_shot, streamed, tools = (
    _t0241.every_chunking,
    _t0241.one_shot,
    _t0241.streamed,
    _t0241.tools,
)

Q = '<|"|>'
PARIS = f"<|tool_call>call:get_weather{{location:{Q}Paris{Q}}}<tool_call|>"
NEWS = f"<|tool_call>call:search{{query:{Q}news{Q}}}<tool_call|>"
TEXTS = {
    "after": f"Checking.{PARIS}Done, waiting for the result.",
    "between": f"{PARIS} and then {NEWS}",
    "around-both": f"First:{PARIS}\n{NEWS}\nThat is all.",
    "newline-after": f"{PARIS}\n",
}
CONTENT = {
    "after": "Checking.Done, waiting for the result.",
    "between": " and then ",
    "around-both": "First:\n\nThat is all.",
    "newline-after": "\n",
}


@pytest.mark.parametrize("name", TEXTS)
def test_the_one_shot_content_is_the_text_outside_the_calls(name):
    content, calls = one_shot(TEXTS[name])
    assert content == CONTENT[name] and calls


@pytest.mark.parametrize("name", TEXTS)
def test_every_split_streams_the_one_shot_answer(name):
    text = TEXTS[name]
    expected = one_shot(text)
    for chunks in every_chunking(text):
        assert streamed(chunks) == expected, chunks


def test_the_chat_route_answers_with_the_text_after_a_call():
    fe = front_end()
    model, serving = fe.openai["/v1/chat/completions"]
    payload = {
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [t.model_dump() for t in tools()],
    }
    output = {
        "index": 0,
        "text": TEXTS["after"],
        "output_ids": [1, 2, 3],
        "meta_info": {
            "id": "req-0",
            "prompt_tokens": 3,
            "completion_tokens": 3,
            "cached_tokens": 0,
            "weight_version": "default",
            "finish_reason": {"type": "stop", "matched": 1},
        },
    }

    async def scheduler_answers(obj, request=None):
        yield output

    async def answer():
        original, parser = fe.manager.generate_request, serving.tool_call_parser
        fe.manager.generate_request, serving.tool_call_parser = scheduler_answers, "gemma4"
        try:
            return await serving.handle_request(model.model_validate(payload), None)
        finally:
            fe.manager.generate_request, serving.tool_call_parser = original, parser

    answered = fe.loop.run_until_complete(answer())
    response = json.loads(
        answered.body if hasattr(answered, "body") else answered.model_dump_json()
    )
    assert "choices" in response, response
    message = response["choices"][0]["message"]
    assert message["content"] == CONTENT["after"]
    assert [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in message["tool_calls"]
    ] == [("get_weather", {"location": "Paris"})]
    assert response["choices"][0]["finish_reason"] == "tool_calls"
