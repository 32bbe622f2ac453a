"""0241: while streaming, sglang's gemma4 tool-call detector holds back text that could be the start
of a <|tool_call> token ("<", "<|", "<|tool_c", ...) until the next chunk shows what it is. When the
answer ends there, the held text is content and must reach the client: the chat route now asks the
parser for it at the end of the stream. Without it a streamed answer ending in "<" (code, maths, an
answer cut by max_tokens) lost its last characters, which the one-shot answer keeps.

Known Gemma-4 outputs are streamed through the detector in every split into two chunks and in random
multi-token chunks (MTP accepting several tokens a step), with the stream's end, and compared with
the one-shot parse: content, and each call (by its index) with its name and arguments. The chat
route is driven in process with the gemma4 parser and a stand-in for the scheduler."""

import json
import random
import re

import pytest
from request_pipeline import front_end

Q = '<|"|>'  # Gemma-4's string delimiter
CALL = f"<|tool_call>call:get_weather{{location:{Q}Paris{Q}}}<tool_call|>"
HELD = {
    "ends-with-lt": "Compare: 1 <",
    "ends-with-partial-start": "See the tag <|tool",
    "ends-with-almost-the-start": "Tokens like <|tool_call",
    "lt-inside-and-at-end": "if a < b then a <",
}
# what the every-split comparison covers besides: calls whose arguments hold what the parser must
# not split on, unicode, empty arguments, text before a call
CALLS = {
    "unicode": (
        f"<|tool_call>call:get_weather{{location:{Q}Zürich, 東京 🌍{Q},"
        f"note:{Q}naïve “quotes”\n{Q}}}<tool_call|>"
    ),
    "braces-in-strings": (
        f"<|tool_call>call:search{{query:{Q}if (a < b) {{ x: 1, }} ]{Q},n:-3,f:-0.25}}<tool_call|>"
    ),
    "array-of-objects": (
        f"<|tool_call>call:search{{items:[{{a:1,b:{Q}x,y{Q}}},{{a:2,b:[1,2]}}],"
        f"deep:{{x:{{y:{{z:[{Q}}}]{Q}]}}}}}}}}<tool_call|>"
    ),
    "empty-arguments": "<|tool_call>call:search{}<tool_call|>",
    "lt-before-a-call": f"Checking a < b.{CALL}",
    "two-calls": f"Both.{CALL}<|tool_call>call:search{{query:{Q}news{Q}}}<tool_call|>",
}
SPECIAL = re.compile(r"<\|tool_call>|<tool_call\|>|<\|\"\|>|<\|channel>|<channel\|>")


def tools():
    from sglang.srt.entrypoints.openai.protocol import Function, Tool

    schema = {"type": "object", "properties": {}}
    return [
        Tool(type="function", function=Function(name=name, parameters=schema))
        for name in ("search", "get_weather")
    ]


def multi_token_chunks(text: str, seed: int, most: int = 4) -> list[str]:
    """1..`most` token-like pieces a step; Gemma-4's special tokens stay whole."""
    pieces, at = [], 0
    for m in [*SPECIAL.finditer(text), None]:
        end = m.start() if m else len(text)
        pieces += [text[i : min(i + 3, end)] for i in range(at, end, 3)] + (
            [m.group()] if m else []
        )
        at = m.end() if m else end
    rng, chunks = random.Random(seed), []
    while pieces:
        take = rng.randint(1, most)
        chunks.append("".join(pieces[:take]))
        pieces = pieces[take:]
    return chunks


def streamed(chunks: list[str]) -> tuple[str, list]:
    """What a client assembles: content, and the calls merged by index, the stream's end
    included."""
    from sglang.srt.function_call.function_call_parser import FunctionCallParser

    parser, content, calls = FunctionCallParser(tools(), "gemma4"), "", {}
    for chunk in chunks:
        normal, items = parser.parse_stream_chunk(chunk)
        content += normal
        for item in items:
            call = calls.setdefault(item.tool_index, {"name": "", "arguments": ""})
            call["name"] += item.name or ""
            call["arguments"] += item.parameters or ""
    content += held_text(parser)
    return content, [(i, c["name"], json.loads(c["arguments"])) for i, c in sorted(calls.items())]


def held_text(parser) -> str:
    """The text the parser held back, at the stream's end (sglang 0.5.18's parse_stream_end
    also returns the calls it flushed)."""
    end = parser.parse_stream_end()
    return end[0] if isinstance(end, tuple) else end


def one_shot(text: str) -> tuple[str, list]:
    from sglang.srt.function_call.function_call_parser import FunctionCallParser

    content, items = FunctionCallParser(tools(), "gemma4").parse_non_stream(text)
    return content, [(i, item.name, json.loads(item.parameters)) for i, item in enumerate(items)]


def every_chunking(text: str):
    yield [text]
    yield from ([text[:i], text[i:]] for i in range(1, len(text)))
    yield from (multi_token_chunks(text, seed) for seed in range(100))


@pytest.mark.parametrize("name", [*HELD, *CALLS])
def test_every_split_streams_the_one_shot_answer(name):
    text = {**HELD, **CALLS}[name]
    expected = one_shot(text)
    assert expected[1] or name in HELD
    for chunks in every_chunking(text):
        assert streamed(chunks) == expected, chunks


def test_text_held_inside_a_call_is_not_content():
    """An answer cut inside a call (max_tokens) leaves the call's text to the parser, not to
    content."""
    from sglang.srt.function_call.function_call_parser import FunctionCallParser

    parser = FunctionCallParser(tools(), "gemma4")
    normal, items = parser.parse_stream_chunk(f"Hi.<|tool_call>call:search{{query:{Q}we")
    assert normal == "Hi." and [item.name for item in items] == ["search"]
    assert held_text(parser) == ""


def chat_stream(steps: list[str]) -> list[dict]:
    """The chat route's stream, with the gemma4 tool-call parser, when the scheduler's answer
    arrives in `steps` (each a few tokens)."""
    fe = front_end()
    model, serving = fe.openai["/v1/chat/completions"]
    payload = {
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "tools": [t.model_dump() for t in tools()],
    }

    async def scheduler_answers(obj, request=None):
        text = ""
        for i, step in enumerate(steps):
            text += step
            last = i == len(steps) - 1
            yield {
                "index": 0,
                "text": text,
                "output_ids": list(range(i + 1)),
                "meta_info": {
                    "id": "req-0",
                    "prompt_tokens": 3,
                    "completion_tokens": i + 1,
                    "finish_reason": {"type": "stop", "matched": 1} if last else None,
                },
            }

    async def answer():
        original, parser = fe.manager.generate_request, serving.tool_call_parser
        fe.manager.generate_request, serving.tool_call_parser = scheduler_answers, "gemma4"
        try:
            response = await serving.handle_request(model.model_validate(payload), None)
            chunks = [chunk async for chunk in response.body_iterator]
        finally:
            fe.manager.generate_request, serving.tool_call_parser = original, parser
        events = [
            line.removeprefix("data: ")
            for chunk in chunks
            for line in chunk.splitlines()
            if line.startswith("data: ")
        ]
        return [json.loads(e) for e in events if e != "[DONE]"]

    return fe.loop.run_until_complete(answer())


@pytest.mark.parametrize(
    "steps, content, calls",
    [
        (["Compare: ", "1 <"], "Compare: 1 <", []),
        (["See the tag ", "<|tool"], "See the tag <|tool", []),
        (
            ["Checking.", CALL[:20], CALL[20:]],
            "Checking.",
            [("get_weather", {"location": "Paris"})],
        ),
    ],
    ids=["ends-with-lt", "ends-with-partial-start", "a-call"],
)
def test_the_chat_stream_delivers_the_whole_answer(steps, content, calls):
    events = chat_stream(steps)
    deltas = [c["delta"] for e in events for c in e["choices"]]
    assert "".join(d.get("content") or "" for d in deltas) == content
    merged = {}
    for d in deltas:
        for call in d.get("tool_calls") or []:
            got = merged.setdefault(call["index"], {"name": "", "arguments": ""})
            got["name"] += call["function"].get("name") or ""
            got["arguments"] += call["function"].get("arguments") or ""
    assert [(c["name"], json.loads(c["arguments"])) for _, c in sorted(merged.items())] == calls
    finish = [c["finish_reason"] for e in events for c in e["choices"] if c.get("finish_reason")]
    assert finish == ["tool_calls" if calls else "stop"]
