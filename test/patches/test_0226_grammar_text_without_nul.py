"""0226: a regex or EBNF grammar, or a JSON schema or structural tag whose strings hold a NUL
character, is answered with HTTP 400 naming the field. xgrammar's regex converter reads past the end
of a pattern that starts with NUL and the scheduler process dies (SIGSEGV; found by the route fuzzer
on a live server, a chat request with "regex": "\\u0000"). Sent in process through sglang's request
path (request_pipeline.py), as a client sends them, on every route that takes a grammar; and the
crash itself, in a child process, so that a release of xgrammar without it shows that the patch can
go."""

import json
import subprocess
import sys

import pytest
from request_pipeline import front_end

GENERATE, COMPLETIONS, CHAT = "/generate", "/v1/completions", "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "hi"}]


def schema(pattern: str) -> str:
    return json.dumps(
        {"type": "object", "properties": {"a": {"type": "string", "pattern": pattern}}}
    )


def answer(endpoint: str, payload: dict):
    return front_end().post(endpoint, payload)


@pytest.mark.parametrize(
    "field, text",
    [
        ("regex", "\x00"),
        ("regex", "a|\x00b"),
        ("ebnf", 'root ::= "\x00"'),
        ("json_schema", schema("\x00")),
        ("json_schema", schema("\x00a")),
        ("json_schema", schema("\\\\\x00")),
        (
            "structural_tag",
            json.dumps(
                {
                    "structures": [
                        {"begin": "<f>", "schema": json.loads(schema("\x00")), "end": "</f>"}
                    ],
                    "triggers": ["<f>"],
                }
            ),
        ),
    ],
)
def test_a_grammar_holding_nul_is_refused_naming_the_field(field, text):
    got = answer(GENERATE, {"text": "hi", "sampling_params": {"max_new_tokens": 4, field: text}})
    assert got.status == 400, f"{got.status} {got.message!r}"
    assert f"sampling_params.{field}" in got.message and "NUL" in got.message


def test_the_openai_routes_refuse_it_too():
    got = answer(
        COMPLETIONS, {"model": "default", "prompt": "hi", "max_tokens": 4, "regex": "\x00"}
    )
    assert got.status == 400 and "NUL" in got.message, got.message
    response_format = {
        "type": "json_schema",
        "json_schema": {"name": "n", "schema": json.loads(schema("\x00"))},
    }
    got = answer(
        CHAT,
        {
            "model": "default",
            "messages": MESSAGES,
            "max_tokens": 4,
            "response_format": response_format,
        },
    )
    assert got.status == 400 and "NUL" in got.message, got.message


@pytest.mark.parametrize(
    "field, text",
    [
        ("regex", "a\\x00"),
        ("regex", "\\u0000"),
        ("ebnf", 'root ::= "\\x00"'),
        # a backslash then "u0000" in the pattern (an escaped backslash in JSON): a regex escape, no
        # NUL
        ("json_schema", schema("\\u0000")),
        ("json_schema", schema("[a-z]+")),
    ],
)
def test_escapes_that_name_nul_without_holding_it_are_served(field, text):
    got = answer(GENERATE, {"text": "hi", "sampling_params": {"max_new_tokens": 4, field: text}})
    assert got.status == 200 and got.sent, f"{got.status} {got.message!r}"


def test_xgrammar_still_dies_on_a_pattern_that_starts_with_nul():
    # the reason for the patch: drop it once this fails on the pinned xgrammar
    child = subprocess.run(
        [sys.executable, "-c", "import xgrammar; xgrammar.Grammar.from_regex('\\x00')"],
        capture_output=True,
        timeout=120,
    )
    assert child.returncode == -11, (child.returncode, child.stderr[-500:])
