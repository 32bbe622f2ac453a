"""The OpenAI API as users drive it: the official `openai` Python client against a server.

    python -m sglang_gemma4.gpu.checks.openai_suite --url http://127.0.0.1:30000 [--images]
        [--api-key K] [--out DIR]
    python -m sglang_gemma4.gpu.checks.openai_suite --start VARIANT --out DIR [--dry-run]
    python -m sglang_gemma4.gpu.checks.openai_suite --start-images VARIANT --out DIR [--dry-run]

Each check sends what a client sends (chat, streaming, n > 1, logprobs, a forced tool call, JSON
schema, regex and EBNF output, stop, max_tokens, usage, refused requests) and asserts what any
model's answer must satisfy: greedy streams equal greedy answers, constrained output parses and
follows its schema, usage adds up, refusals arrive as the client's exception classes. The schemas
are bounded (enums, booleans, short arrays), so that a model with dummy or random weights still
finishes each answer. test/gpu/checks/test_openai_suite.py runs the same checks in CI against
sglang's HTTP app in process, with the scheduler replaced by a stub.

--start serves VARIANT (26b-a4b or 31b) as mtp_greedy.py builds it: a reduced random-weight target
and an assistant draft that agrees with it on part of the tokens, so that MTP accepts some drafts
and rejects others for real. (sglang's simulated acceptance, which the benchmarks use on dummy
weights, emits a fixed token id instead of the verified ones: no output of it can be compared.) It
runs every check without MTP, then with it: the greedy constrained answers (JSON schema, forced tool
call, regex, EBNF) must be the same both times. Writes DIR/openai-suite.json and
DIR/openai-suite.md, with the accept length the MTP server logged; exits non-zero unless every check
passed on both.

--images (with --url, a server started with the preset's --multimodal) adds an image question and
bad media (broken base64, a non-image, a truncated image, a decompression bomb, a remote URL, a
server path), each of which must be refused with 400. --start-images serves VARIANT so (a
config-only Gemma4ForConditionalGeneration checkpoint, dummy weights) and runs chat and those
checks.
"""

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from sglang_gemma4.gpu.serve.presets import MTP_DRAFT_TOKENS as MTP_TOKENS
from sglang_gemma4.gpu.serve.presets import SIMULATED_ACCEPT_LEN

WEATHER_PARAMETERS = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "enum": ["Paris", "London", "Oslo"]},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "alerts": {"type": "boolean"},
    },
    "required": ["city", "unit", "alerts"],
    "additionalProperties": False,
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": WEATHER_PARAMETERS,
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web",
            "parameters": {
                "type": "object",
                "properties": {"q": {"type": "string"}},
                "required": ["q"],
            },
        },
    },
]
ANSWER_SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "enum": ["yes", "no", "unsure"]},
        "confidence": {"type": "string", "enum": ["low", "medium", "high"]},
        "tags": {
            "type": "array",
            "items": {"type": "string", "enum": ["geo", "math", "misc"]},
            "minItems": 1,
            "maxItems": 2,
        },
    },
    "required": ["answer", "confidence", "tags"],
    "additionalProperties": False,
}
REGEX = "(yes|no|maybe)"
EBNF = 'root ::= "Paris" | "London" | "Oslo"'
ASK = [{"role": "user", "content": "Is Paris the capital of France? Answer briefly."}]
WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]
GREEDY = {"temperature": 0}


@dataclass
class Run:
    """One pass of the checks against one server: each check's outcome and the answers compared
    across servers (the greedy constrained ones)."""

    outcomes: dict = field(default_factory=dict)  # check -> None (passed) or the failure
    answers: dict = field(default_factory=dict)  # name -> greedy constrained output

    @property
    def passed(self) -> bool:
        return all(v is None for v in self.outcomes.values())


def served_model(client) -> str:
    models = client.models.list().data
    assert models and models[0].id, f"/v1/models lists no model: {models}"
    return models[0].id


def stream_text(client, **request) -> tuple[list, dict]:
    """A streamed chat completion as a client assembles it: per choice its content, reasoning, tool
    calls (merged by index) and finish reasons, and the usage chunk."""
    choices, usage = {}, None
    for chunk in client.chat.completions.create(
        stream=True, stream_options={"include_usage": True}, **request
    ):
        if chunk.usage is not None:
            assert not chunk.choices, "the usage chunk carries no choice"
            usage = chunk.usage
        for c in chunk.choices:
            got = choices.setdefault(
                c.index, {"content": "", "reasoning": "", "calls": {}, "finish": []}
            )
            got["content"] += c.delta.content or ""
            got["reasoning"] += getattr(c.delta, "reasoning_content", None) or ""
            for call in c.delta.tool_calls or []:
                merged = got["calls"].setdefault(call.index, {"name": "", "arguments": ""})
                merged["name"] += (call.function.name or "") if call.function else ""
                merged["arguments"] += (call.function.arguments or "") if call.function else ""
            if c.finish_reason:
                got["finish"].append(c.finish_reason)
    return [choices[i] for i in sorted(choices)], usage


def check_usage(usage, max_tokens: int | None = None) -> None:
    assert usage is not None and usage.prompt_tokens > 0, usage
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens, usage
    if max_tokens is not None:
        assert 0 < usage.completion_tokens <= max_tokens, usage


def follows(value, schema: dict) -> None:
    import jsonschema

    jsonschema.validate(value, schema)


# --- the checks: each takes (client, model, run) and raises AssertionError (or the client's error)
# ---


def chat(client, model, run):
    r = client.chat.completions.create(model=model, messages=ASK, max_tokens=16, **GREEDY)
    assert r.object == "chat.completion" and len(r.choices) == 1, r
    message = r.choices[0].message
    assert message.role == "assistant" and isinstance(message.content, str) and message.content, (
        message
    )
    assert r.choices[0].finish_reason in ("stop", "length"), r.choices[0]
    check_usage(r.usage, 16)


def streaming(client, model, run):
    request = dict(model=model, messages=ASK, max_tokens=24, **GREEDY)
    whole = client.chat.completions.create(**request)
    (streamed,), usage = stream_text(client, **request)
    assert streamed["content"] == whole.choices[0].message.content, (
        streamed,
        whole.choices[0].message,
    )
    assert streamed["finish"] == [whole.choices[0].finish_reason], streamed
    check_usage(usage, 24)
    assert usage.completion_tokens == whole.usage.completion_tokens, (usage, whole.usage)


def several_choices(client, model, run):
    r = client.chat.completions.create(
        model=model, messages=ASK, max_tokens=8, n=3, temperature=1.0, seed=7
    )
    assert sorted(c.index for c in r.choices) == [0, 1, 2], r.choices
    assert all(
        c.finish_reason in ("stop", "length") and isinstance(c.message.content, str)
        for c in r.choices
    )
    check_usage(r.usage)
    assert r.usage.completion_tokens <= 3 * 8, r.usage
    streamed, usage = stream_text(
        client, model=model, messages=ASK, max_tokens=8, n=2, temperature=1.0, seed=7
    )
    assert len(streamed) == 2 and all(len(c["finish"]) == 1 for c in streamed), streamed
    check_usage(usage)


def logprobs(client, model, run):
    r = client.chat.completions.create(
        model=model, messages=ASK, max_tokens=8, logprobs=True, top_logprobs=3, **GREEDY
    )
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens, (len(content), r.usage)
    for token in content:
        assert token.logprob <= 0 and len(token.top_logprobs) == 3, token
        # greedy: the chosen token is the most likely one
        assert abs(max(t.logprob for t in token.top_logprobs) - token.logprob) < 1e-3, token


def forced_tool_call(client, model, run):
    # one call (parallel_tool_calls off bounds the array the grammar allows), whatever the weights
    # choose
    request = dict(
        model=model,
        messages=WEATHER,
        tools=TOOLS,
        max_tokens=128,
        parallel_tool_calls=False,
        **GREEDY,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    r = client.chat.completions.create(**request)
    calls = r.choices[0].message.tool_calls
    assert calls and len(calls) == 1 and calls[0].function.name == "get_weather", r.choices[0]
    arguments = json.loads(calls[0].function.arguments)
    follows(arguments, WEATHER_PARAMETERS)
    assert calls[0].id and calls[0].type == "function", calls[0]
    assert r.choices[0].finish_reason in ("tool_calls", "stop"), r.choices[0]
    (streamed,), usage = stream_text(client, **request)
    assert [(c["name"], json.loads(c["arguments"])) for c in streamed["calls"].values()] == [
        (c.function.name, json.loads(c.function.arguments)) for c in calls
    ], streamed
    check_usage(usage, 128)
    run.answers["forced_tool_call"] = [(c.function.name, c.function.arguments) for c in calls]


def json_schema(client, model, run):
    request = dict(
        model=model,
        messages=ASK,
        max_tokens=128,
        **GREEDY,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": ANSWER_SCHEMA, "strict": True},
        },
    )
    r = client.chat.completions.create(**request)
    assert r.choices[0].finish_reason == "stop", r.choices[0]
    follows(json.loads(r.choices[0].message.content), ANSWER_SCHEMA)
    (streamed,), _ = stream_text(client, **request)
    assert streamed["content"] == r.choices[0].message.content, streamed
    run.answers["json_schema"] = r.choices[0].message.content


def json_object(client, model, run):
    r = client.chat.completions.create(
        model=model, messages=ASK, max_tokens=64, response_format={"type": "json_object"}, **GREEDY
    )
    if r.choices[0].finish_reason == "stop":  # an unbounded object may run out of tokens first
        assert isinstance(json.loads(r.choices[0].message.content), dict), r.choices[0]


def regex_and_ebnf(client, model, run):
    r = client.chat.completions.create(
        model=model, messages=ASK, max_tokens=16, extra_body={"regex": REGEX}, **GREEDY
    )
    assert r.choices[0].message.content in ("yes", "no", "maybe"), r.choices[0]
    e = client.chat.completions.create(
        model=model, messages=WEATHER, max_tokens=16, extra_body={"ebnf": EBNF}, **GREEDY
    )
    assert e.choices[0].message.content in ("Paris", "London", "Oslo"), e.choices[0]
    run.answers["regex"], run.answers["ebnf"] = (
        r.choices[0].message.content,
        e.choices[0].message.content,
    )


def stop(client, model, run):
    request = dict(model=model, messages=ASK, max_tokens=24, **GREEDY)
    text = client.chat.completions.create(**request).choices[0].message.content
    assert len(text) >= 6, f"too short an answer to cut: {text!r}"
    cut = text[len(text) // 2 : len(text) // 2 + 3]
    r = client.chat.completions.create(stop=[cut], **request)
    assert r.choices[0].message.content == text[: text.index(cut)], (
        text,
        cut,
        r.choices[0].message.content,
    )
    assert r.choices[0].finish_reason == "stop", r.choices[0]


def max_tokens(client, model, run):
    r = client.chat.completions.create(
        model=model, messages=ASK, max_tokens=5, extra_body={"ignore_eos": True}, **GREEDY
    )
    assert r.usage.completion_tokens == 5 and r.choices[0].finish_reason == "length", (
        r.usage,
        r.choices[0],
    )


def refusals(client, model, run):
    import openai

    refused = [
        dict(messages=[]),  # nothing to answer
        dict(
            messages=ASK,
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "not_offered"}},
        ),
        dict(
            messages=ASK,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "bad", "schema": {"type": 7}},
            },
        ),
        dict(messages=ASK, max_tokens=-1),
        dict(messages=[{"role": "user", "content": "word " * 40000}]),
    ]  # beyond the preset's context
    for request in refused:
        try:
            client.chat.completions.create(model=model, **request)
        except openai.BadRequestError as e:
            assert e.status_code == 400 and e.message, e
        else:
            raise AssertionError(f"answered, not refused: {str(request)[:200]}")


CHECKS = [
    chat,
    streaming,
    several_choices,
    logprobs,
    forced_tool_call,
    json_schema,
    json_object,
    regex_and_ebnf,
    stop,
    max_tokens,
    refusals,
]


# --- images (a server started with the preset's --multimodal) ---


def png(width: int, height: int, rgb=(200, 30, 30), rows: bytes | None = None) -> bytes:
    """A PNG written by hand (no imaging library on the client): `rows` replaces the pixel data."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    if rows is None:
        rows = (b"\x00" + bytes(rgb) * width) * height
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def data_url(data: bytes, mime: str = "image/png") -> str:
    import base64

    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def with_image(url: str, text: str = "What colour is this picture? One word.") -> list:
    return [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": text},
                {"type": "image_url", "image_url": {"url": url}},
            ],
        }
    ]


# media every server must refuse with 400 (0245, 0246): never fetched, never read, never a 500
BAD_MEDIA = {
    "broken base64": "data:image/png;base64,!!!not-base64!!!",
    "not an image": data_url(b"%PDF-1.4 this is no image", "image/png"),
    "truncated image": data_url(png(64, 64, rows=b"\x00" * 10)),
    "decompression bomb": data_url(
        png(20000, 20000, rows=b"\x00" * 16)
    ),  # 400 M pixels, a header only
    "remote URL": "http://127.0.0.1:9/cat.png",
    "server path": "file:///etc/hostname",
}


def image_input(client, model, run):
    r = client.chat.completions.create(
        model=model, messages=with_image(data_url(png(64, 64))), max_tokens=8, **GREEDY
    )
    assert isinstance(r.choices[0].message.content, str) and r.choices[0].finish_reason in (
        "stop",
        "length",
    ), r
    question = [{"role": "user", "content": "What colour is this picture? One word."}]
    text_only = client.chat.completions.create(
        model=model, messages=question, max_tokens=1, **GREEDY
    )
    # the image's soft tokens are part of the prompt
    assert r.usage.prompt_tokens > text_only.usage.prompt_tokens, (r.usage, text_only.usage)


def bad_media(client, model, run):
    import openai

    for name, url in BAD_MEDIA.items():
        try:
            client.chat.completions.create(model=model, messages=with_image(url), max_tokens=4)
        except openai.BadRequestError as e:
            assert e.status_code == 400 and e.message, (name, e)
        except openai.APIStatusError as e:
            raise AssertionError(
                f"{name}: answered {e.status_code}, not 400: {e.message[:200]}"
            ) from e
        else:
            raise AssertionError(f"{name}: answered, not refused")


MEDIA_CHECKS = [image_input, bad_media]
# what must not change when MTP turns on (greedy, constrained)
COMPARED = ("forced_tool_call", "json_schema", "regex", "ebnf")


def run_checks(client, checks=CHECKS) -> Run:
    run = Run()
    try:
        model = served_model(client)
    except Exception as e:  # noqa: BLE001 - reported, like any check's failure
        run.outcomes["models"] = f"{type(e).__name__}: {e}"
        return run
    run.outcomes["models"] = None
    for check in checks:
        try:
            check(client, model, run)
            run.outcomes[check.__name__] = None
        except Exception as e:  # noqa: BLE001
            run.outcomes[check.__name__] = f"{type(e).__name__}: {str(e)[:1000]}"
    return run


def differences(off: Run, on: Run) -> list[str]:
    return [
        f"{name}: MTP off {off.answers.get(name)!r}, on {on.answers.get(name)!r}"
        for name in COMPARED
        if off.answers.get(name) != on.answers.get(name)
    ]


def client_for(url: str, api_key: str | None = None, timeout: float = 300):
    import openai

    return openai.OpenAI(
        base_url=f"{url.rstrip('/')}/v1", api_key=api_key or "none", timeout=timeout, max_retries=0
    )


def report(runs: dict[str, Run], diffs: list[str] | None) -> str:
    names = list(next(iter(runs.values())).outcomes) if runs else []
    lines = [f"| check | {' | '.join(runs)} |", "|---|" + "---|" * len(runs)]
    for name in names:
        cells = [
            "pass"
            if r.outcomes.get(name, "") is None
            else f"FAIL: {r.outcomes.get(name, 'not run')}"[:300]
            for r in runs.values()
        ]
        lines.append(
            f"| {name} | {' | '.join(c.replace('|', '/').replace(chr(10), ' ') for c in cells)} |"
        )
    if diffs is not None:
        lines.append(
            "\nGreedy constrained answers, MTP off vs on: "
            + ("identical." if not diffs else "DIFFERENT: " + "; ".join(diffs))
        )
    return "\n".join(lines) + "\n"


def start_and_run(variant: str, out: Path, checkpoints: Path, seed: int, dry_run: bool) -> int:
    """mtp_greedy's reduced random-weight target and its agreeing draft (real, partial acceptance),
    served without MTP and then with it; every check on each, then the greedy constrained answers
    compared."""
    from sglang_gemma4.gpu.checks import mtp_greedy

    target, draft = (
        (checkpoints / variant).resolve(),
        (checkpoints / f"{variant}-assistant").resolve(),
    )
    servers = dict(zip(("mtp-off", "mtp-on"), mtp_greedy.servers(variant, target, draft, out)))
    if dry_run:
        for server in servers.values():
            print(server.describe())
        return 0
    out.mkdir(parents=True, exist_ok=True)
    if not (target / "config.json").is_file() or not (draft / "config.json").is_file():
        mtp_greedy.build(variant, checkpoints, seed)
    runs, accept_len = {}, None
    for name, server in servers.items():
        with server:
            started = time.monotonic()
            runs[name] = run_checks(client_for(server.url))
            print(
                f"openai-suite: {variant} {name}: "
                f"{sum(v is None for v in runs[name].outcomes.values())}/"
                f"{len(runs[name].outcomes)} checks passed in {time.monotonic() - started:.0f} s",
                flush=True,
            )
            if died := server.death():
                runs[name].outcomes["server alive"] = died
        if name == "mtp-on":
            accept_len = mtp_greedy.served_stats(server.log_path.read_text(errors="replace"))[
                "accept_len"
            ]
    diffs = differences(runs["mtp-off"], runs["mtp-on"])
    table = (
        report(runs, diffs)
        + f"\nMTP on: the server logged accept length {accept_len} of {MTP_TOKENS}.\n"
    )
    (out / "openai-suite.md").write_text(f"# openai client suite: {variant}\n\n{table}")
    (out / "openai-suite.json").write_text(
        json.dumps(
            {
                "variant": variant,
                "runs": {
                    n: {"outcomes": r.outcomes, "answers": r.answers} for n, r in runs.items()
                },
                "mtp_differences": diffs,
                "mtp_accept_len": accept_len,
            },
            indent=1,
        )
    )
    print(table, flush=True)
    return 0 if all(r.passed for r in runs.values()) and not diffs else 1


def start_images(variant: str, out: Path, checkpoints: Path, dry_run: bool) -> int:
    """VARIANT as Gemma4ForConditionalGeneration with the preset's towers on (config-only
    checkpoint, dummy weights: nothing here compares answers): chat, an image question, bad media
    refused with 400."""
    from sglang_gemma4.gpu import REPO
    from sglang_gemma4.gpu.serve.presets import MULTIMODAL, SMALL_GRAPHS
    from sglang_gemma4.gpu.serve.server import Server

    model = (checkpoints / f"{variant}-multimodal").resolve()
    server = Server(
        variant,
        "patched",
        out / f"{variant}-multimodal.log",
        model=str(model),
        extra=[*MULTIMODAL, "--load-format", "dummy", *SMALL_GRAPHS],
    )
    if dry_run:
        print(server.describe())
        return 0
    if not (model / "config.json").is_file():
        from sglang_gemma4.gpu.serve.checkpoint import write_checkpoint

        write_checkpoint(variant, model, arch="conditional", weights="none", repo_root=REPO)
    out.mkdir(parents=True, exist_ok=True)
    with server:
        run = run_checks(client_for(server.url), [chat, *MEDIA_CHECKS])
        if died := server.death():
            run.outcomes["server alive"] = died
    table = report({f"{variant} --multimodal": run}, None)
    (out / "openai-suite.md").write_text(f"# openai client suite: {variant} with images\n\n{table}")
    print(table, flush=True)
    return 0 if run.passed else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="a running server, e.g. http://127.0.0.1:30000")
    where.add_argument(
        "--start",
        metavar="VARIANT",
        choices=list(SIMULATED_ACCEPT_LEN),
        help="serve VARIANT's random-weight target without MTP, then with its draft",
    )
    where.add_argument(
        "--start-images",
        metavar="VARIANT",
        choices=["e2b", "e4b", "26b-a4b", "31b"],
        help=(
            "serve VARIANT with the preset's --multimodal (dummy weights): chat and the "
            "image checks"
        ),
    )
    p.add_argument(
        "--images",
        action="store_true",
        help="with --url: also the image checks (a server started with the preset's --multimodal)",
    )
    p.add_argument("--api-key")
    p.add_argument("--out", type=Path)
    p.add_argument(
        "--checkpoints",
        type=Path,
        default=Path("checkpoints/openai-suite"),
        help="with --start: where the target and draft are (made there when missing)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="with --start or --start-images: print the servers' command lines",
    )
    args = p.parse_args(argv)
    if args.start_images:
        return start_images(
            args.start_images,
            args.out or Path("openai-suite-images"),
            args.checkpoints,
            args.dry_run,
        )
    if args.start:
        return start_and_run(
            args.start, args.out or Path("openai-suite"), args.checkpoints, args.seed, args.dry_run
        )
    run = run_checks(
        client_for(args.url, args.api_key), CHECKS + (MEDIA_CHECKS if args.images else [])
    )
    table = report({args.url: run}, None)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "openai-suite.md").write_text(table)
    print(table, flush=True)
    return 0 if run.passed else 1


if __name__ == "__main__":
    sys.exit(main())
