"""0240: sglang's gemma4 tool-call detector streams each call under its position in the response,
as OpenAI clients expect (they merge streamed deltas by index), not under its function's position in
the request's tools. Two calls of one function then stream as two calls, not as one call whose name
and arguments are both pasted together.

Every test streams known Gemma-4 outputs through the detector (and, for thinking, the reasoning
parser first, as the chat route does) in every split into two chunks and in random multi-token
chunks (MTP accepting several tokens a step), and compares what a client assembles with the one-shot
parse of the whole text."""

import json
import random
import re

import pytest

Q = '<|"|>'  # Gemma-4's string delimiter
WEATHER = (
    f"<|tool_call>call:get_weather{{location:{Q}Paris, France{Q},unit:{Q}celsius{Q}}}<tool_call|>"
)
TWO_OF_ONE = (
    f"Let me check both.<|tool_call>call:get_weather{{location:{Q}Paris{Q}}}<tool_call|>"
    f"<|tool_call>call:get_weather{{location:{Q}London{Q}}}<tool_call|>"
)
NESTED = (
    f"<|tool_call>call:search{{query:{Q}a {{b}} [c], d:e{Q},"
    f"filters:{{year:2024,tags:[{Q}x{Q},{Q}y{Q}]}},"
    f"limit:5,exact:true,ratio:0.5}}<tool_call|>"
)
MIXED = (
    f"<|tool_call>call:search{{query:{Q}weather{Q}}}<tool_call|><|tool_call>call:get_weather{{location:{Q}Oslo{Q}}}"
    f"<tool_call|><|tool_call>call:search{{query:{Q}news{Q}}}<tool_call|>"
)
UNKNOWN = "<|tool_call>call:not_offered{x:1}<tool_call|>"
TOOL_TEXTS = {
    "one": WEATHER,
    "two-of-one-function": TWO_OF_ONE,
    "nested": NESTED,
    "mixed": MIXED,
    "unknown": UNKNOWN,
}
THOUGHT = "<|channel>thought\nThe user wants Paris; call the tool, then {answer}.<channel|>"
# Gemma-4's special tokens are single tokens: a detokenized stream never splits one
SPECIAL = re.compile(r"<\|tool_call>|<tool_call\|>|<\|\"\|>|<\|channel>|<channel\|>")


def tools():
    from sglang.srt.entrypoints.openai.protocol import Function, Tool

    schema = {"type": "object", "properties": {}}
    return [
        Tool(type="function", function=Function(name=name, parameters=schema))
        for name in ("search", "get_weather")
    ]


def every_two_way_split(text: str):
    return [[text[:i], text[i:]] for i in range(1, len(text))]


def tokens(text: str) -> list[str]:
    """Token-like pieces: special tokens whole, other text a few characters at a time."""
    pieces, at = [], 0
    for m in [*SPECIAL.finditer(text), None]:
        end = m.start() if m else len(text)
        pieces += [text[i : min(i + 3, end)] for i in range(at, end, 3)] + (
            [m.group()] if m else []
        )
        at = m.end() if m else end
    return pieces


def multi_token_chunks(text: str, seed: int, most: int = 4) -> list[str]:
    """The text as an MTP stream delivers it: 1..`most` tokens a step."""
    rng, pieces, chunks = random.Random(seed), tokens(text), []
    while pieces:
        take = rng.randint(1, most)
        chunks.append("".join(pieces[:take]))
        pieces = pieces[take:]
    return chunks


def streamed(chunks: list[str]) -> tuple[str, list[tuple[str, dict]]]:
    """What an OpenAI client assembles from the chat route's tool-call deltas: content, and each
    call (by its index) with its name and its concatenated arguments."""
    from sglang.srt.function_call.function_call_parser import FunctionCallParser

    parser, content, calls = FunctionCallParser(tools(), "gemma4"), "", {}
    for chunk in chunks:
        normal, items = parser.parse_stream_chunk(chunk)
        content += normal
        for item in items:
            call = calls.setdefault(item.tool_index, {"name": "", "arguments": ""})
            call["name"] += item.name or ""
            call["arguments"] += item.parameters or ""
    return content, [(c["name"], json.loads(c["arguments"])) for _, c in sorted(calls.items())]


def one_shot(text: str) -> tuple[str, list[tuple[str, dict]]]:
    from sglang.srt.function_call.function_call_parser import FunctionCallParser

    content, items = FunctionCallParser(tools(), "gemma4").parse_non_stream(text)
    return content, [(item.name, json.loads(item.parameters)) for item in items]


@pytest.mark.parametrize("name", TOOL_TEXTS)
def test_every_split_streams_the_calls_of_the_one_shot_parse(name):
    text = TOOL_TEXTS[name]
    expected = one_shot(text)
    assert expected[1], "the one-shot parse finds the calls"
    for chunks in [
        [text],
        *every_two_way_split(text),
        *(multi_token_chunks(text, seed) for seed in range(200)),
    ]:
        assert streamed(chunks) == expected, chunks


def test_two_calls_of_one_function_stream_under_their_own_indices():
    from sglang.srt.function_call.function_call_parser import FunctionCallParser

    parser = FunctionCallParser(tools(), "gemma4")
    _, items = parser.parse_stream_chunk(TWO_OF_ONE)  # one step that accepted the whole answer
    assert [(item.tool_index, item.name) for item in items if item.name] == [
        (0, "get_weather"),
        (1, "get_weather"),
    ]
    assert one_shot(TWO_OF_ONE)[1] == [
        ("get_weather", {"location": "Paris"}),
        ("get_weather", {"location": "London"}),
    ]


def reasoning_then_tools(chunks: list[str]) -> tuple[str, str, list]:
    """The chat route's order: the reasoning parser first, the tool-call parser on what it passes
    on."""
    from sglang.srt.parser.reasoning_parser import ReasoningParser

    reasoner, reasoning, passed = ReasoningParser("gemma4"), "", []
    for chunk in chunks:
        thought, normal = reasoner.parse_stream_chunk(chunk)
        reasoning += thought or ""
        passed.append(normal or "")
    thought, normal = reasoner.parse_stream_end()
    reasoning += thought or ""
    passed.append(normal or "")
    content, calls = streamed(passed)
    return reasoning, content, calls


@pytest.mark.parametrize(
    "after", ["It is sunny in Paris.", WEATHER, TWO_OF_ONE], ids=["answer", "call", "two-calls"]
)
def test_reasoning_then_content_or_calls_in_every_multi_token_split(after):
    text = THOUGHT.format(answer="answer") + after
    from sglang.srt.parser.reasoning_parser import ReasoningParser

    thought, normal = ReasoningParser("gemma4").parse_non_stream(text)
    assert thought == "The user wants Paris; call the tool, then answer."
    expected = (thought, *one_shot(normal))
    pieces = tokens(text)
    splits = [["".join(pieces[:i]), "".join(pieces[i:])] for i in range(1, len(pieces))]
    for chunks in [[text], *splits, *(multi_token_chunks(text, seed) for seed in range(200))]:
        assert reasoning_then_tools(chunks) == expected, chunks
