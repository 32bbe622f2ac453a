"""Generated hostile requests against a running server: the sampling, logprob and stop fields of
/generate, /v1/completions and /v1/chat/completions with values of every JSON type, boundary numbers
(0, -1, 2**31, 2**63, NaN, +-inf), huge lists, text that is not valid Unicode and token ids at and
beyond the vocabulary; streaming and not.

    python -m sglang_gemma4.gpu.checks.fuzz --start e2b --out DIR [--requests 600] [--seed N]
    python -m sglang_gemma4.gpu.checks.fuzz --url URL --log SERVER_LOG --out DIR ...

PASS only if every answer is a 2xx with a sensible body or a 4xx, the server never dies, no answer
is a 5xx, and afterwards the KV pool has drained and a good request is answered. Drained: while a
probe request decodes alone, the scheduler's decode log lines (read as gpu/serve/pool_usage.py reads
them) show it as the only running request, holding no more tokens than its own. Writes
DIR/fuzz.json. Bounded: --requests requests, --workers at a time, 60 s each, none sent after
--time-limit seconds (those count as failures: the server was too slow to answer them all).

The generator (`request`) also drives the CPU fuzz test of the validation layer. It leaves out
values that are valid but slow to serve (n in the hundreds, top logprobs over the whole vocabulary,
long generations): unit tests cover those boundaries.

v2 (--routes): generated requests (`route_case`) to every route of the route table
(gpu/checks/routes.py): hostile fields of each route's body, /generate's batch forms and rid games,
bodies that are not JSON objects, truncated and invalid JSON, wrong content types, junk forms, admin
routes without the key, with a wrong one and with the key (then only bodies the route's model
refuses: a valid one would act on the server), raw HTTP abuse on fresh connections and streamed
requests cut off by the client. Witness requests with their own rids run alongside. PASS only if the
server never dies, no answer is a 5xx, every request but raw abuse and cut-off ones is answered, the
pool drains, a good request is answered and no witness is refused or aborted. With --start the
server gets --admin-api-key fuzz-admin-key. Writes DIR/fuzz-routes.json. CPU:
test/patches/test_0203_route_fuzz.py sends the same generator's requests through sglang's HTTP app
in process.

    python -m sglang_gemma4.gpu.checks.fuzz --routes --start e2b --out DIR --requests 1000
"""

import argparse
import http.client
import json
import math
import random
import re
import socket
import threading
import time
import urllib.parse
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from sglang_gemma4.gpu.serve import pool_usage
from sglang_gemma4.gpu.serve.presets import NO_GRAPHS
from sglang_gemma4.gpu.serve.server import Server, http_json

ENDPOINTS = ("/generate", "/v1/completions", "/v1/chat/completions")
INTS = [
    0,
    1,
    -1,
    2,
    16,
    2**31 - 1,
    2**31,
    -(2**31),
    2**32,
    2**53 + 1,
    2**63 - 1,
    2**63,
    -(2**63) - 1,
    2**64,
    10**30,
]
FLOATS = [
    0.0,
    -0.0,
    1e-45,
    1e-7,
    0.5,
    1.0,
    1.0000001,
    2.0,
    2.0000001,
    -2.0,
    -2.0000001,
    3.4e38,
    3.5e38,
    1e308,
    math.nan,
    math.inf,
    -math.inf,
]
WRONG_TYPES = [None, True, False, "1", "0.5", "", "nan", [], [1], {}, {"1": 1}]
BAD_TEXT = ["\ud800", "a\udfffb", "\ud83d", "\udc00\ud800", "ok \ud83d\ude00 \udfff"]
TEXTS = ["hi", "", " ", "\n", "stop", "é", "\U0001f600", "\x00", "\uffff", "a" * 3000]
REGEXES = [
    "a+b",
    "(",
    "[",
    "a{2,1}",
    "(?<=a+)b",
    "\\",
    "(" * 300 + ")" * 300,
    "a{4294967296}",
    "(a{4000000000}){4000000000}",
    ".*",
]
# /generate's sampling fields, and what kind of value each takes
SAMPLING = {
    "max_new_tokens": "count",
    "min_new_tokens": "count",
    "n": "choices",
    "temperature": "float",
    "top_p": "float",
    "top_k": "top_k",
    "min_p": "float",
    "frequency_penalty": "float",
    "presence_penalty": "float",
    "repetition_penalty": "float",
    "stop": "texts",
    "stop_token_ids": "ids",
    "stop_regex": "regexes",
    "regex": "text",
    "ebnf": "text",
    "json_schema": "text",
    "ignore_eos": "bool",
    "skip_special_tokens": "bool",
    "spaces_between_special_tokens": "bool",
    "no_stop_trim": "bool",
    "stream_interval": "count",
    "logit_bias": "bias",
    "sampling_seed": "seed",
    "custom_params": "custom",
    "bogus": "count",
    "temprature": "float",
    "is_normalized": "bool",
    "stop_strs": "texts",
}
GENERATE_TOP = {
    "return_logprob": "bool",
    "logprob_start_len": "count",
    "top_logprobs_num": "top",
    "token_ids_logprob": "ids",
}
OPENAI = {
    "max_tokens": "count",
    "min_tokens": "count",
    "n": "choices",
    "temperature": "float",
    "top_p": "float",
    "top_k": "top_k",
    "min_p": "float",
    "frequency_penalty": "float",
    "presence_penalty": "float",
    "repetition_penalty": "float",
    "stop": "texts",
    "stop_token_ids": "ids",
    "stop_regex": "regexes",
    "regex": "text",
    "ebnf": "text",
    "logit_bias": "bias",
    "seed": "seed",
    "ignore_eos": "bool",
    "skip_special_tokens": "bool",
    "no_stop_trim": "bool",
}
COMPLETIONS = {**OPENAI, "logprobs": "top", "echo": "bool", "json_schema": "text"}
CHAT = {**OPENAI, "max_completion_tokens": "count", "logprobs": "bool", "top_logprobs": "top"}
CHEAP_MAX_TOKENS = (
    8  # every request generates at most this many tokens unless its max is a fuzzed field
)
# A route's output bound is never dropped from its example: without one a request may rightly
# generate up to the context window (minutes on random weights) and the fuzzer would take that for a
# hung server.
OUTPUT_BOUNDS = {
    "max_tokens",
    "max_completion_tokens",
    "max_output_tokens",
    "max_new_tokens",
    "sampling_params",
    "options",
    "parameters",
}


def _ids(rng: random.Random, vocab: int) -> list:
    """Token ids, one of them an edge: at or beyond the vocabulary, or not an integer. Some lists
    are huge, one longer than the vocabulary."""
    edge = rng.choice([0, vocab - 1, vocab, vocab + 1, -1, 2**31, 2**63, 1.0, True, "5", None])
    roll = rng.random()
    size = vocab + 1 if roll < 0.03 else 5000 if roll < 0.1 else rng.choice([1, 3])
    start = rng.randrange(vocab)
    ids = [(start + 7919 * i) % vocab for i in range(size)]
    ids[rng.randrange(size)] = edge
    return ids


def value(rng: random.Random, kind: str, vocab: int):
    """A value for a field of this kind: a valid one, a boundary one or one of the wrong JSON
    type."""
    roll = rng.random()
    if roll < 0.15:
        # null for a count would mean "no limit": a generation to the end of the context
        return rng.choice(
            [v for v in WRONG_TYPES + BAD_TEXT[:1] if v is not None or kind != "count"]
        )
    valid = roll < 0.5
    if kind in ("count", "seed", "top_k", "choices", "top"):
        if valid:
            return rng.choice(
                {
                    "count": [0, 1, 4],
                    "seed": [0, 42],
                    "top_k": [-1, 1, 20],
                    "choices": [1, 2],
                    "top": [0, 1, 5],
                }[kind]
            )
        # vocab itself is a valid top-logprobs count but slow to serve: only the edge beyond it
        return rng.choice(INTS + [1.5, 4.0, vocab + 1] + ([1025] if kind == "choices" else []))
    if kind == "float":
        return rng.choice([0.0, 0.5, 1.0]) if valid else rng.choice(FLOATS + INTS[5:8])
    if kind == "bool":
        return rng.choice([True, False]) if valid else rng.choice([0, 1, "true", "false"])
    if kind == "text":
        return rng.choice(TEXTS[:3]) if valid else rng.choice(BAD_TEXT + TEXTS)
    if kind == "texts":
        if valid:
            return rng.choice(["\n", ["a", "b"], []])
        return rng.choice(
            [
                rng.choice(BAD_TEXT),
                [rng.choice(TEXTS), rng.choice(BAD_TEXT)],
                ["x"] * 1000,
                [1, 2],
                [["a"]],
            ]
        )
    if kind == "regexes":
        return (
            rng.choice(["a+b", ["x", "y+"]])
            if valid
            else rng.choice(REGEXES + [[rng.choice(REGEXES)]])
        )
    if kind == "ids":
        return rng.choice([[1, 2], []]) if valid else _ids(rng, vocab)
    if kind == "bias":
        if valid:
            return rng.choice([{"17": 1.0}, {"5": -math.inf, "6": -100}])
        key = rng.choice(
            [str(vocab - 1), str(vocab), "-1", "abc", "1.5", " 5", str(2**63), "\ud800", ""]
        )
        bias = rng.choice(FLOATS + ["1", None, True, [1]])
        roll = rng.random()
        return (
            {key: bias}
            if roll < 0.9
            else {str(i): 0.5 for i in range(vocab + 1 if roll < 0.92 else 1000)}
        )
    if kind == "custom":
        if valid:
            return {"k": 1, "xs": [1, "a"]}
        return rng.choice(
            [{"k": {"deep": {"er": 1}}}, {"k": 2**64}, {"\ud800": 1}, {"k": [[1]]}, "x", [1]]
        )
    raise ValueError(f"unknown kind {kind}")


def _prompt(rng: random.Random, vocab: int, as_ids: bool):
    if not as_ids:
        return rng.choice(["hi", "hi", "hi", rng.choice(BAD_TEXT), rng.choice(TEXTS)])
    if rng.random() < 0.7:
        return [2, 100, 200]
    return rng.choice([_ids(rng, vocab), []]) if rng.random() < 0.9 else [2] * 200000


def request(rng: random.Random, vocab: int) -> tuple[str, dict]:
    """(endpoint, JSON payload): 1 to 3 fields fuzzed, the rest ordinary; streaming or not."""
    endpoint = rng.choice(ENDPOINTS)
    stream = rng.random() < 0.4
    fuzzed = rng.randint(1, 3)
    if endpoint == "/generate":
        batch = 2 if rng.random() < 0.1 else None
        prompt = _prompt(rng, vocab, as_ids=rng.random() < 0.3)
        prompt_field = "input_ids" if isinstance(prompt, list) else "text"
        params = {"max_new_tokens": CHEAP_MAX_TOKENS}
        payload = {prompt_field: [prompt] * batch if batch else prompt, "stream": stream}
        for name in rng.sample(sorted(SAMPLING) + sorted(GENERATE_TOP), fuzzed):
            kind = SAMPLING.get(name) or GENERATE_TOP[name]
            target = params if name in SAMPLING else payload
            target[name] = value(rng, kind, vocab)
            if batch and rng.random() < 0.5:  # a per-prompt list, of the right length or not
                target[name] = [target[name]] * rng.choice([batch, batch + 1])
        payload["sampling_params"] = [params] * batch if batch and rng.random() < 0.5 else params
        return endpoint, payload
    fields = COMPLETIONS if endpoint == "/v1/completions" else CHAT
    payload = {"model": "default", "max_tokens": CHEAP_MAX_TOKENS, "stream": stream}
    if endpoint == "/v1/completions":
        payload["prompt"] = _prompt(rng, vocab, as_ids=rng.random() < 0.3)
    else:
        content = rng.choice(["hi", "hi", rng.choice(BAD_TEXT), rng.choice(TEXTS)])
        payload["messages"] = [{"role": "user", "content": content}]
    for name in rng.sample(sorted(fields), fuzzed):
        payload[name] = value(rng, fields[name], vocab)
    return endpoint, payload


# ---- v2: every route of the route table (gpu/checks/routes.py) ----

DEEP = 3000  # nesting deeper than Python's default recursion limit
HOSTILE = [
    *WRONG_TYPES,
    *INTS,
    *FLOATS,
    *BAD_TEXT,
    *TEXTS,
    "\u202e\u0000\ufeff",
    "x" * 100000,
    {"": None},
    [None],
    [[[]]],
    -0.0,
]


def _nested(depth: int, as_dict: bool):
    """A value nested `depth` deep; beyond what json.dumps recurses, a marker that encode()
    expands."""
    if depth > 500:
        return f"\0deep:{depth}:{'d' if as_dict else 'l'}"
    value: object = 1
    for _ in range(depth):
        value = {"a": value} if as_dict else [value]
    return value


def _deep_text(depth: int) -> str:
    """JSON text of an object nested `depth` deep, as a string field carries it (tool-call
    arguments)."""
    return '{"a":' * depth + "1" + "}" * depth


def hostile(rng: random.Random):
    """Any JSON value a field should not take: wrong types, extreme numbers, broken Unicode, deep
    nesting, huge strings."""
    roll = rng.random()
    if roll < 0.05:
        return _nested(rng.choice([64, 500, DEEP]), as_dict=rng.random() < 0.5)
    return rng.choice(HOSTILE)


def route_value(rng: random.Random, kind: str, vocab: int):
    """A value for a field of a route-table kind: valid, on a boundary or hostile."""
    roll = rng.random()
    if roll < 0.25:
        return hostile(rng)
    if kind == "object":
        return rng.choice(
            [
                {},
                {"type": "json_object"},
                {"type": "json_schema", "schema": rng.choice(["x", [1], {}])},
                {"id": rng.choice(["s", 5, None]), "offset": rng.choice([0, -1, "x", 2**40])},
                {"bogus": 1},
            ]
        )
    if kind == "objects":
        return rng.choice(
            [
                [],
                [{}],
                [{"role": "user", "content": "hi"}],
                [{"role": 5, "content": None}],
                [{"text": rng.choice(TEXTS + BAD_TEXT)}],
                ["x"],
                [[{}]],
                [
                    {
                        "type": "function",
                        "function": {
                            "name": "f",
                            "parameters": _nested(rng.choice([5, 400]), True),
                        },
                    }
                ],
                [
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [
                            {
                                "id": "1",
                                "type": "function",
                                "function": {
                                    "name": "f",
                                    "arguments": _deep_text(rng.choice([5, 300, 900])),
                                },
                            }
                        ],
                    }
                ],
            ]
        )
    if kind == "rid":
        return rng.choice(
            ["", "r", "\ud800", "x" * 10000, ["a", "a"], ["a", "b", "c"], [1], 7, None]
        )
    if kind == "sampling":
        return {
            name: value(rng, SAMPLING[name], vocab)
            for name in rng.sample(sorted(SAMPLING), rng.randint(1, 2))
        }
    if kind == "ollama_options":
        options = {"num_predict": CHEAP_MAX_TOKENS}
        for name in rng.sample(
            [
                "temperature",
                "top_p",
                "top_k",
                "num_predict",
                "stop",
                "seed",
                "presence_penalty",
                "frequency_penalty",
                "bogus",
            ],
            rng.randint(1, 2),
        ):
            options[name] = value(
                rng,
                {
                    "temperature": "float",
                    "top_p": "float",
                    "top_k": "top_k",
                    "stop": "texts",
                    "seed": "seed",
                    "num_predict": "count",
                }.get(name, "float"),
                vocab,
            )
        return options
    return value(rng, kind, vocab)


@dataclass
class Case:
    """One generated HTTP request: `body` is sent as it is (None: no body)."""

    method: str
    path: str
    body: bytes | None
    headers: dict
    kind: str  # what it tries
    route: tuple  # the (method, path) of the route table it aims at
    stream: bool = False
    keyed: bool = False  # carries the admin key


JSON = {"content-type": "application/json"}
BATCH_FIELDS = [
    "rid",
    "lora_path",
    "lora_id",
    "video_data",
    "audio_data",
    "image_data",
    "bootstrap_room",
    "bootstrap_host",
    "bootstrap_port",
    "custom_logit_processor",
    "extra_key",
    "return_hidden_states",
    "return_logprob",
    "top_logprobs_num",
    "logprob_start_len",
    "sampling_params",
]


def _batch_value(rng: random.Random, name: str, vocab: int):
    return {
        "rid": lambda: f"b{rng.randrange(10**9)}",
        "sampling_params": lambda: {"max_new_tokens": 4},
        "bootstrap_room": lambda: rng.choice([1, -1, 2**70]),
        "bootstrap_port": lambda: 1,
        "return_logprob": lambda: rng.choice([True, False]),
        "top_logprobs_num": lambda: rng.choice([0, 2]),
        "logprob_start_len": lambda: -1,
        "return_hidden_states": lambda: False,
    }.get(name, lambda: rng.choice([None, "x", ""]))()


def generate_batch(rng: random.Random, vocab: int) -> dict:
    """/generate's batch forms: per-prompt lists that match the batch or not, text with input_ids of
    another shape, a list where a single prompt takes none, duplicated rids."""
    size = rng.choice([1, 2, 3])
    single = rng.random() < 0.2
    body: dict = {
        "text": "hi" if single else ["hi"] * size,
        "sampling_params": {"max_new_tokens": CHEAP_MAX_TOKENS},
    }
    if rng.random() < 0.3:
        body["input_ids"] = rng.choice([[5, 6], [[5]] * size, [[5]] * (size + 1), [[5]]])
    for name in rng.sample(BATCH_FIELDS, rng.randint(1, 3)):
        length = rng.choice([size, size, size - 1, size + 1, 0])
        body[name] = [_batch_value(rng, name, vocab) for _ in range(length)]
        if name == "rid" and rng.random() < 0.3:
            body[name] = ["same"] * length
    if rng.random() < 0.2:
        body["sampling_params"] = {"n": 2, "max_new_tokens": CHEAP_MAX_TOKENS}
    return body


def _raw_abuse(rng: random.Random, body: dict) -> tuple[bytes, dict]:
    """A body a JSON parser or the HTTP layer must refuse: truncated or invalid JSON, broken UTF-8,
    literals JSON has not, a wrong content type."""
    text = encode(body)
    choice = rng.randrange(11)
    if choice == 0:
        return text[: rng.randrange(max(1, len(text)))], JSON
    if choice == 1:
        return rng.choice(
            [
                b"",
                b"{",
                b"}",
                b"{'text': 'hi'}",
                b'{"text": "hi",}',
                b"nul",
                b"\xef\xbb\xbf{}",
                b'{"text": "hi"} trailing',
                b'{"a":1e999}',
                b'{"text": "hi", "text": 5}',
            ]
        ), JSON
    if choice == 2:
        return b'{"text": "\xff\xfe", "prompt": "\xc3", "messages": "\xed\xa0\x80"}', JSON
    if choice == 3:
        return b"[" * 20000 + b"]" * 20000, JSON
    if choice == 4:
        return text, {
            "content-type": rng.choice(
                [
                    "text/plain",
                    "application/x-www-form-urlencoded",
                    "multipart/form-data; boundary=x",
                    "application/json; charset=latin-1",
                    "application/xml",
                ]
            )
        }
    if choice == 5:
        return text, {}
    if choice == 6:
        return text.replace(b"}", b', "z": NaN, "y": -Infinity}', 1), JSON
    if choice == 7:
        return b'{"text": "' + b"a" * 300_000 + b'"}', JSON
    if choice == 8:
        return text, {**JSON, "content-encoding": rng.choice(["gzip", "br", "deflate"])}
    if choice == 9:
        return text, {**JSON, "x-request-id": b"\xe9\xff" * 10, "accept": "*/*" * 300}
    return json.dumps([body, body]).encode(), JSON


def _form(rng: random.Random) -> tuple[bytes, dict]:
    """A multipart form for an upload route: junk audio, fields of the wrong type, broken
    framing."""
    boundary = "fuzzboundary"
    fields = {
        "model": rng.choice(["default", "", "\xff"]),
        "temperature": rng.choice(["0", "nan", "-1", "x", "1e999"]),
        "response_format": rng.choice(["json", "text", "verbose_json", "bogus"]),
        "language": rng.choice(["en", "", "x" * 300]),
        "stream": rng.choice(["true", "false", "maybe"]),
    }
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode(
            errors="replace"
        )
        for name, value in fields.items()
        if rng.random() < 0.6
    ]
    if rng.random() < 0.8:
        audio = rng.choice(
            [
                b"",
                b"RIFF\x00\x00\x00\x00WAVEfmt ",
                bytes(rng.randrange(256) for _ in range(64)),
                b"ID3" + b"\xff" * 100,
            ]
        )
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
            f"Content-Type: audio/wav\r\n\r\n".encode()
            + audio
            + b"\r\n"
        )
    body = b"".join(parts) + (f"--{boundary}--\r\n".encode() if rng.random() < 0.8 else b"")
    return body, {"content-type": f"multipart/form-data; boundary={boundary}"}


def _path(rng: random.Random, path: str) -> str:
    """A templated path with a hostile parameter, sometimes a junk query string."""
    for name in ("{model:path}", "{response_id}", "{method}"):
        path = path.replace(
            name,
            rng.choice(
                [
                    "default",
                    "none-such",
                    "%00",
                    "%ED%A0%80",
                    "..%2F..%2Fetc%2Fpasswd",
                    "a" * 5000,
                    "%F0%9F%98%80",
                ]
            ),
        )
    if rng.random() < 0.15:
        path += rng.choice(
            [
                "?timeout=-1",
                "?dp_rank=x&include=%ff",
                "?level=999999999999",
                "?rank=-5",
                "?format=" + "x" * 3000,
                "?a=1&a=2",
            ]
        )
    return path


PYDANTIC_TRUE = {"1", "true", "t", "yes", "y", "on"}


def streams(path: str, value) -> bool:
    """Whether a request whose `stream` field is `value` gets an event stream: /generate's request
    is a dataclass that streams on any true value; the OpenAI-style models read it as pydantic does
    (true, 1, "true", "yes", "on", ...; other non-booleans are refused)."""
    if path == "/generate":
        return bool(value)
    if isinstance(value, str):
        return value.strip().lower() in PYDANTIC_TRUE
    return value is True or (type(value) in (int, float) and value == 1)


def route_case(
    rng: random.Random,
    vocab: int,
    table=None,
    admin_key: str | None = None,
    in_process: bool = False,
) -> Case:
    """One generated request to a route of the table: hostile fields, batch forms, bodies that are
    not objects, raw-protocol abuse, admin routes with and without the key, rid games. Admin routes
    with the key get only bodies their model refuses (a valid one would act on the server), and on
    a live server no request to an admin route without a body."""
    from sglang_gemma4.gpu.checks import routes as route_table

    table = table or route_table.ROUTES
    public = [
        r
        for r in table
        if r.cls == route_table.PUBLIC and not r.only_when and r.body != "websocket"
    ]
    with_body = [r for r in public if r.example is not None]
    admin = [r for r in table if r.cls == route_table.ADMIN and not r.only_when]
    roll = rng.random()
    if roll < 0.12:  # the sampling, logprob and stop fields of the three generation routes
        endpoint, payload = request(rng, vocab)
        return Case(
            "POST",
            endpoint,
            encode(payload),
            dict(JSON),
            "fields",
            ("POST", endpoint),
            stream=payload.get("stream") is True,
        )
    if roll < 0.50:  # the fields of any public route with a body
        route = rng.choice(with_body)
        body = json.loads(json.dumps(route.example))
        for name in rng.sample(sorted(route.fields), min(len(route.fields), rng.randint(1, 3))):
            body[name] = route_value(rng, route.fields[name], vocab)
        if rng.random() < 0.1:
            body[rng.choice(["bogus", "", "\ud800", "__class__", "x" * 300])] = hostile(rng)
        droppable = sorted(set(body) - OUTPUT_BOUNDS)
        if droppable and rng.random() < 0.1:
            body.pop(rng.choice(droppable))
        stream = streams(route.path, body.get("stream"))
        return Case(
            route.method,
            route.path,
            encode(body),
            dict(JSON),
            "fields",
            (route.method, route.path),
            stream,
        )
    if roll < 0.60:  # /generate's batch forms and rid games
        method = rng.choice(["POST", "PUT"])
        return Case(
            method,
            "/generate",
            encode(generate_batch(rng, vocab)),
            dict(JSON),
            "batch",
            (method, "/generate"),
        )
    if roll < 0.68:  # a body that is not an object
        route = rng.choice(with_body)
        body = rng.choice(
            [[route.example], [], "hi", 5, None, True, 1e308, [[route.example]], hostile(rng)]
        )
        return Case(
            route.method,
            route.path,
            encode(body),
            dict(JSON),
            "non-object",
            (route.method, route.path),
        )
    if roll < 0.78:  # raw-protocol abuse
        route = rng.choice(with_body)
        body, headers = _raw_abuse(rng, route.example)
        return Case(route.method, route.path, body, headers, "raw", (route.method, route.path))
    if roll < 0.835:  # routes without a body; a method the route does not take
        route = rng.choice([r for r in public if r.example is None and r.body is None])
        method = (
            route.method
            if rng.random() < 0.8
            else rng.choice(["DELETE", "PATCH", "OPTIONS", "PUT"])
        )
        body = None if rng.random() < 0.7 else encode(hostile(rng))
        return Case(
            method, _path(rng, route.path), body, dict(JSON), "no-body", (route.method, route.path)
        )
    if roll < 0.84:  # forms: a file upload of junk, fields of wrong types (slow to refuse: few)
        route = rng.choice([r for r in public if r.body == "multipart"])
        body, headers = _form(rng)
        return Case(route.method, route.path, body, headers, "form", (route.method, route.path))
    # admin routes: no key, a wrong key, or the key with a body the route's model refuses
    route = rng.choice(admin)
    # a live server started without an admin key may run its admin routes for anyone: only bodies
    # their model refuses, and none to a route without a body (it would act)
    open_admin = admin_key is None and not in_process
    if open_admin and route.body is None:
        route = rng.choice([r for r in admin if r.body is not None])
    keyed = admin_key is not None and rng.random() < 0.4 and (route.body is not None or in_process)
    headers = dict(JSON)
    if keyed:
        headers["authorization"] = f"Bearer {admin_key}"
    elif rng.random() < 0.5:
        headers["authorization"] = rng.choice(
            [
                "Bearer wrong",
                "Bearer ",
                "Basic eDp5",
                "bearer" + " x" * 500,
                f"Bearer {admin_key or 'k'}x",
            ]
        )
    if (keyed or open_admin) and route.body is not None:
        body = rng.choice(
            [b"[1]", b'"x"', b"5", b"{", b"[" * 50000, encode([{}]), encode("x"), encode(7)]
        )
    else:
        body = (
            None
            if rng.random() < 0.3
            else encode(rng.choice([{}, {"bogus": 1}, [1], {"rid": "x"}, hostile(rng)]))
        )
    return Case(
        route.method,
        _path(rng, route.path),
        body,
        headers,
        "admin-key" if keyed else "admin-no-key",
        (route.method, route.path),
        keyed=keyed,
    )


_DEEP_MARKER = re.compile(r'"\\u0000deep:(\d+):([dl])"')


def _expand_deep(match: re.Match) -> str:
    depth = int(match.group(1))
    return (
        ('{"a":' * depth + "1" + "}" * depth)
        if match.group(2) == "d"
        else "[" * depth + "1" + "]" * depth
    )


def encode(payload) -> bytes:
    """As a client would send it: NaN and Infinity as JSON literals, lone surrogates as \\u
    escapes."""
    text = json.dumps(payload, allow_nan=True)
    if "deep:" in text:
        text = _DEEP_MARKER.sub(_expand_deep, text)
    return text.encode()


def _events(body: str) -> list:
    """The data of a server-sent event stream, "[DONE]" included."""
    events = []
    for line in body.splitlines():
        if line.startswith("data: "):
            data = line[len("data: ") :]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


def _sensible(endpoint: str, answer) -> bool:
    """Whether a 2xx body (or one streamed chunk) has the shape the endpoint promises."""
    if endpoint == "/generate":
        items = answer if isinstance(answer, list) else [answer]
        return bool(items) and all(
            isinstance(i, dict) and "meta_info" in i and "text" in i for i in items
        )
    choices = answer.get("choices") if isinstance(answer, dict) else None
    return isinstance(choices, list) and (not choices or isinstance(choices[0], dict))


def _error_status(answer) -> int | None:
    """The status an answer reports in its body: an error object, or a request aborted by the
    server."""
    if isinstance(answer, list):
        return max((s for s in map(_error_status, answer) if s is not None), default=None)
    if not isinstance(answer, dict):
        return None
    if isinstance(answer.get("error"), dict):
        return int(answer["error"].get("code") or 500)
    reason = (answer.get("meta_info") or {}).get("finish_reason")
    if isinstance(reason, dict) and reason.get("type") == "abort":
        return int(reason.get("status_code") or 500)
    return None


def classify(endpoint: str, stream: bool, status: int, body: str) -> str:
    """ok (2xx, sensible body), client-error (4xx, or an error of 4xx status in a 2xx stream),
    server-error (5xx, here or in the stream), no-answer (no HTTP status) or bad-body."""
    if status == 0:
        return "no-answer"
    if 400 <= status < 500:
        return "client-error"
    if not 200 <= status < 300:
        return "server-error"
    try:
        answers = _events(body) if stream else [json.loads(body)]
    except ValueError:
        return "bad-body"
    if stream and (not answers or answers[-1] != "[DONE]"):
        return "bad-body"
    answers = [a for a in answers if a != "[DONE]"]
    errors = [s for s in map(_error_status, answers) if s is not None]
    if errors:
        return "server-error" if max(errors) >= 500 else "client-error"
    return "ok" if answers and all(_sensible(endpoint, a) for a in answers) else "bad-body"


def pool_drained(probe_log: str, own_tokens: int) -> tuple[bool, list[dict]]:
    """Whether the decode lines the scheduler logged while the probe decoded show it alone, holding
    at most its own tokens (the full and the SWA pool), and those lines."""
    lines = [s for s in pool_usage.parse(probe_log) if s["kind"] == "decode"]
    used = ("full_token", "swa_token", "token")
    drained = bool(lines) and all(
        s.get("running_req") == 1
        and s.get("queue_req", 0) == 0
        and all(s.get(key, 0) <= own_tokens for key in used)
        for s in lines
    )
    return drained, lines


PROBE = {
    "text": "drain probe",
    "sampling_params": {"max_new_tokens": 80, "ignore_eos": True, "temperature": 0},
}


def probe(url: str, log_path: Path) -> tuple[bool, bool, list[dict]]:
    """(answered, drained, decode lines): one request decoding 80 tokens alone (decode lines are
    logged every 40 decode steps), its lines read from the server log."""
    offset = log_path.stat().st_size
    try:
        status, body = http_json("POST", f"{url}/generate", PROBE, timeout=120)
    except OSError:
        return False, False, []
    if status != 200:
        return False, False, []
    prompt_tokens = json.loads(body)["meta_info"]["prompt_tokens"]
    time.sleep(2)  # the log is written by another process
    with open(log_path, errors="replace") as f:
        f.seek(offset)
        log = f.read()
    own = (
        prompt_tokens + PROBE["sampling_params"]["max_new_tokens"] + 1
    )  # +1: the slot of the next token
    drained, lines = pool_drained(log, own)
    return True, drained, lines


def send(url: str, endpoint: str, payload: dict, timeout: float) -> tuple[int, str]:
    try:
        return http_json("POST", f"{url}{endpoint}", encode(payload), timeout=timeout)
    except OSError as e:
        return 0, f"{type(e).__name__}: {e}"


def verdict(counts: dict, server_alive: bool, good_answered: bool, drained: bool) -> bool:
    bad = sum(n for outcome, n in counts.items() if outcome not in ("ok", "client-error"))
    return bad == 0 and server_alive and good_answered and drained


def serving(url: str) -> bool:
    try:
        return http_json("GET", f"{url}/health", timeout=10)[0] == 200
    except OSError:
        return False


def write_summary(out: Path, name: str, summary: dict, unprinted=()) -> None:
    """Writes a run's summary to out/name and prints it without its long lists."""
    (out / name).write_text(json.dumps(summary, indent=1))
    hidden = ("failures", "probe_decode_lines", *unprinted)
    print(json.dumps({k: v for k, v in summary.items() if k not in hidden}, indent=1))


def run(
    url: str,
    log_path: Path,
    out: Path,
    count: int,
    seed: int,
    vocab: int,
    workers: int,
    alive=None,
    time_limit: float = 300,
) -> bool:
    rng = random.Random(seed)
    cases = [request(rng, vocab) for _ in range(count)]
    started = time.monotonic()

    def one(case):
        endpoint, payload = case
        if time.monotonic() - started > time_limit:
            return endpoint, payload, 0, "not sent: time limit reached", "not-sent"
        status, body = send(url, endpoint, payload, timeout=60)
        return (
            endpoint,
            payload,
            status,
            body,
            classify(endpoint, payload.get("stream") is True, status, body),
        )

    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(one, cases))
    counts: dict = {}
    by_endpoint: dict = {}
    for endpoint, _, _, _, outcome in results:
        counts[outcome] = counts.get(outcome, 0) + 1
        by_endpoint.setdefault(endpoint, {}).setdefault(outcome, 0)
        by_endpoint[endpoint][outcome] += 1
    time.sleep(5)  # let aborted requests leave the scheduler before the probe
    server_alive = (alive or (lambda: serving(url)))()
    good_answered, drained, lines = probe(url, log_path) if server_alive else (False, False, [])
    passed = verdict(counts, server_alive, good_answered, drained)
    failures = [
        {
            "endpoint": e,
            "request": encode(p).decode()[:300],
            "status": s,
            "answer": b[:300],
            "outcome": o,
        }
        for e, p, s, b, o in results
        if o not in ("ok", "client-error")
    ]
    summary = {
        "seed": seed,
        "requests": count,
        "seconds": round(time.monotonic() - started, 1),
        "outcomes": counts,
        "by_endpoint": by_endpoint,
        "streamed": sum(1 for _, p, *_ in results if p.get("stream") is True),
        "server_deaths": 0 if server_alive else 1,
        "answers_5xx": counts.get("server-error", 0),
        "good_request_answered": good_answered,
        "pool_drained": drained,
        "probe_decode_lines": lines,
        "failures": failures[:30],
        "verdict": "PASS" if passed else "FAIL",
    }
    write_summary(out, "fuzz.json", summary)
    return passed


# ---- v2 against a live server: every route, raw HTTP abuse, disconnects, witnesses ----

RAW_HTTP = [  # request heads (and bodies) an HTTP parser must refuse or survive
    b"GARBAGE\r\n\r\n",
    # body cut short
    b'POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"text": "hi"}',
    b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
    b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n{}",
    (
        b"POST /generate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
        b"chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"
    ),
    (
        b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: "
        b"chunked\r\n\r\n0\r\n\r\n"
    ),
    b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHost: x\r\nX: " + b"y" * 70000 + b"\r\n\r\n",
    b"GET /health HTTP/9.9\r\nHost: x\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
    (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
        b"application/json\r\nContent-Length: 5\r\n\r\n\xff\xfe\x00\x01\x02"
    ),
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS hello on the plain port
]
DISCONNECT = 0.3  # of streamed requests, this share is cut off after the first bytes
RAW_SHARE = 0.02  # of cases, this share is raw HTTP abuse instead


def _split(url: str) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(url)
    return parts.hostname, parts.port or 80


def send_case(url: str, case: Case, timeout: float) -> tuple[int, str]:
    """(status, body) of one generated request, its bytes and headers as they are (0: no answer)."""
    host, port = _split(url)
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.putrequest(case.method, case.path, skip_accept_encoding=True)
        for name, value in case.headers.items():
            connection.putheader(name, value)
        connection.putheader("Content-Length", str(len(case.body or b"")))
        connection.endheaders(case.body)
        response = connection.getresponse()
        return response.status, response.read().decode(errors="replace")
    except (OSError, http.client.HTTPException) as e:
        return 0, f"{type(e).__name__}: {e}"
    finally:
        connection.close()


def send_and_drop(url: str, case: Case, timeout: float = 60) -> tuple[int, str]:
    """Send the request, read its first bytes and close the connection: a client that leaves."""
    head = [
        f"{case.method} {case.path} HTTP/1.1",
        f"Host: {_split(url)[0]}",
        f"Content-Length: {len(case.body or b'')}",
    ]
    head += [
        f"{name}: {value.decode('latin-1') if isinstance(value, bytes) else value}"
        for name, value in case.headers.items()
    ]
    try:
        with socket.create_connection(_split(url), timeout=timeout) as connection:
            connection.sendall(
                ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + (case.body or b"")
            )
            first = connection.recv(200).decode(errors="replace")
    except OSError as e:
        return 0, f"{type(e).__name__}: {e}"
    status = first.split()[1] if first.startswith("HTTP/") and len(first.split()) > 1 else "0"
    return int(status) if status.isdigit() else 0, "closed after the first bytes"


def send_raw(url: str, data: bytes, timeout: float = 30) -> tuple[int, str]:
    """Raw bytes on a fresh connection: the status line answered, or 0 when the server closed it."""
    try:
        with socket.create_connection(_split(url), timeout=timeout) as connection:
            connection.sendall(data)
            connection.shutdown(socket.SHUT_WR)
            first = connection.recv(200).decode(errors="replace")
    except OSError as e:
        return 0, f"{type(e).__name__}: {e}"
    words = first.split()
    return (
        int(words[1]) if first.startswith("HTTP/") and len(words) > 1 and words[1].isdigit() else 0
    ), first[:200]


def classify_case(
    case: Case, status: int, body: str, dropped: bool = False, raw: bool = False
) -> str:
    """As classify(), for any route: raw abuse and dropped requests may end without an answer."""
    if (raw or dropped) and status == 0:
        return "dropped"
    if status >= 500:
        return "server-error"
    if dropped:
        return "dropped"
    if case.method == "POST" and case.path in ENDPOINTS and not raw:
        return classify(case.path, case.stream, status, body)
    if status == 0:
        return "no-answer"
    return "client-error" if status >= 400 else "ok"


# The key a server the fuzzer starts is given: admin routes are sent with it, without it and with a
# wrong one
ADMIN_KEY = "fuzz-admin-key"
WITNESS = {"text": "witness", "sampling_params": {"max_new_tokens": 16, "temperature": 0}}


class Witnesses:
    """Good requests, each with its own rid, sent one after another while the fuzzer runs: none may
    be refused or aborted (a request aborted by another client's request)."""

    def __init__(self, url: str):
        self.url = url
        self.results: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        while not self._stop.is_set():
            rid = f"witness-{uuid.uuid4().hex}"
            try:
                status, body = http_json(
                    "POST", f"{self.url}/generate", {**WITNESS, "rid": rid}, timeout=120
                )
            except OSError as e:
                status, body = 0, f"{type(e).__name__}: {e}"
            reason = None
            if status == 200:
                try:
                    reason = (json.loads(body).get("meta_info") or {}).get("finish_reason")
                except ValueError:
                    pass
            aborted = isinstance(reason, dict) and reason.get("type") == "abort"
            self.results.append(
                {
                    "rid": rid,
                    "status": status,
                    "aborted": aborted,
                    "answer": body[:200] if status != 200 or aborted else "",
                }
            )
            self._stop.wait(0.5)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=150)

    def failed(self) -> list[dict]:
        return [r for r in self.results if r["status"] != 200 or r["aborted"]]


def run_routes(
    url: str,
    log_path: Path,
    out: Path,
    count: int,
    seed: int,
    vocab: int,
    workers: int,
    admin_key: str | None,
    alive=None,
    time_limit: float = 420,
) -> bool:
    """Fuzzer v2 against a live server: `count` generated requests to every route of
    gpu/checks/routes.py (raw HTTP abuse and client disconnects among them) with witnesses running.
    PASS: no death, no answer of 5xx, no unanswered request (except raw abuse and disconnects), the
    KV pool drained, a good request served, no witness refused or aborted. Writes
    out/fuzz-routes.json."""
    rng = random.Random(seed)
    plan = []
    for _ in range(count):
        if rng.random() < RAW_SHARE:
            plan.append(("raw", rng.choice(RAW_HTTP), None))
            continue
        case = route_case(rng, vocab, admin_key=admin_key)
        plan.append(("drop" if case.stream and rng.random() < DISCONNECT else "send", None, case))
    started = time.monotonic()

    def one(item):
        how, data, case = item
        if time.monotonic() - started > time_limit:
            return how, case, 0, "not sent: time limit reached", "not-sent"
        if how == "raw":
            status, body = send_raw(url, data)
            return (
                how,
                case,
                status,
                body,
                classify_case(
                    Case("RAW", "", data, {}, "raw", ("RAW", "")), status, body, raw=True
                ),
            )
        if how == "drop":
            status, body = send_and_drop(url, case)
            return how, case, status, body, classify_case(case, status, body, dropped=True)
        status, body = send_case(url, case, timeout=60)
        return how, case, status, body, classify_case(case, status, body, raw=case.kind == "raw")

    with Witnesses(url) as witnesses, ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(one, plan))
    counts: dict = {}
    by_route: dict = {}
    for how, case, _, _, outcome in results:
        counts[outcome] = counts.get(outcome, 0) + 1
        key = "raw HTTP" if how == "raw" else f"{case.route[0]} {case.route[1]}"
        by_route.setdefault(key, {}).setdefault(outcome, 0)
        by_route[key][outcome] += 1
    time.sleep(5)  # let aborted requests leave the scheduler before the probe
    server_alive = (alive or (lambda: serving(url)))()
    good_answered, drained, lines = probe(url, log_path) if server_alive else (False, False, [])
    bad = sum(
        n for outcome, n in counts.items() if outcome not in ("ok", "client-error", "dropped")
    )
    witness_failures = witnesses.failed()
    passed = (
        bad == 0
        and server_alive
        and good_answered
        and drained
        and not witness_failures
        and bool(witnesses.results)
    )
    failures = [
        {
            "route": "raw HTTP" if how == "raw" else f"{case.method} {case.path}"[:200],
            "kind": "raw" if how == "raw" else case.kind,
            "request": ((case.body or b"") if case else b"")[:300].decode(errors="replace"),
            "status": status,
            "answer": body[:300],
            "outcome": outcome,
        }
        for how, case, status, body, outcome in results
        if outcome not in ("ok", "client-error", "dropped")
    ]
    summary = {
        "seed": seed,
        "requests": count,
        "seconds": round(time.monotonic() - started, 1),
        "outcomes": counts,
        "by_route": by_route,
        "routes_reached": len(by_route),
        "server_deaths": 0 if server_alive else 1,
        "answers_5xx": counts.get("server-error", 0),
        "witnesses": len(witnesses.results),
        "witnesses_refused_or_aborted": len(witness_failures),
        "good_request_answered": good_answered,
        "pool_drained": drained,
        "probe_decode_lines": lines,
        "failures": failures[:30],
        "witness_failures": witness_failures[:10],
        "verdict": "PASS" if passed else "FAIL",
    }
    write_summary(out, "fuzz-routes.json", summary, unprinted=("by_route", "witness_failures"))
    return passed


def server_parser(
    description: str,
    requests: int,
    workers: int,
    time_limit: float,
    workers_help: str | None = None,
) -> argparse.ArgumentParser:
    """The options of a run against a server: the server (--url and --log, or --start), --out,
    the run's size, its seed and --dry-run. parse_run_args checks them."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default="http://127.0.0.1:30000")
    parser.add_argument(
        "--log", help="the server's log (needed with --url: the pool is read from it)"
    )
    parser.add_argument(
        "--start",
        metavar="VARIANT",
        help="start this variant's patched server (dummy weights) first",
    )
    parser.add_argument("--out", required=True)
    parser.add_argument("--requests", type=int, default=requests)
    parser.add_argument("--seed", type=int, help="default: a random one, printed and recorded")
    parser.add_argument("--vocab", type=int, default=262144)
    parser.add_argument("--workers", type=int, default=workers, help=workers_help)
    parser.add_argument(
        "--time-limit",
        type=float,
        default=time_limit,
        help="seconds after which no request is sent",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the started server's command line instead"
    )
    return parser


def parse_run_args(parser: argparse.ArgumentParser) -> argparse.Namespace:
    args = parser.parse_args()
    if not args.start and not args.log:
        parser.error("give --start VARIANT, or --log with the server's log for the pool check")
    return args


def run_against_server(args: argparse.Namespace, server: Server | None, name: str, fuzz_run) -> int:
    """--dry-run prints the server's command line; else fuzz_run(url, log_path, seed, alive=...,
    time_limit=...) runs with --seed (or a random seed, printed) against the started server or
    --url, writing into --out. Returns the exit status."""
    if args.dry_run:
        if server:
            print(server.describe())
        return 0
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    print(f"{name}: seed {seed}")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if server:
        with server:
            passed = fuzz_run(
                server.url,
                server.log_path,
                seed,
                alive=lambda: server.process.poll() is None,
                time_limit=args.time_limit,
            )
    else:
        passed = fuzz_run(args.url, Path(args.log), seed, time_limit=args.time_limit)
    return 0 if passed else 1


def main() -> int:
    parser = server_parser(__doc__, requests=600, workers=8, time_limit=300)
    parser.add_argument(
        "--routes",
        action="store_true",
        help="v2: every route of gpu/checks/routes.py, raw HTTP abuse, disconnects and witnesses "
        "(writes fuzz-routes.json)",
    )
    parser.add_argument(
        "--admin-key", help="with --url: the server's --admin-api-key (with --start: one is made)"
    )
    args = parse_run_args(parser)
    out = Path(args.out)
    extra = list(NO_GRAPHS)
    if args.routes and args.start:
        args.admin_key = ADMIN_KEY
        extra += ["--admin-api-key", ADMIN_KEY]
    server = (
        Server(args.start, "patched", out / f"{args.start}-patched.log", extra=extra)
        if args.start
        else None
    )
    if args.routes:

        def fuzz_run(url, log_path, seed, **kw):
            return run_routes(
                url,
                log_path,
                out,
                args.requests,
                seed,
                args.vocab,
                args.workers,
                args.admin_key,
                **kw,
            )
    else:

        def fuzz_run(url, log_path, seed, **kw):
            return run(url, log_path, out, args.requests, seed, args.vocab, args.workers, **kw)

    return run_against_server(args, server, "fuzz", fuzz_run)


if __name__ == "__main__":
    raise SystemExit(main())
