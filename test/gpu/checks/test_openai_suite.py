"""The openai client suite (gpu/checks/openai_suite.py) in CI: the official `openai` client against
sglang's HTTP app (http_server.app, served by uvicorn in this process) with the launch preset's
grammar backend and gemma4 parsers, and a stub in place of the scheduler. The stub answers as a
model would through the tokenizer manager: constrained requests with text their grammar accepts
(checked with xgrammar), others with a fixed answer, Gemma-4's own tool-call text or a thought;
streams in steps of several tokens (as MTP delivers them), with stop strings, max_tokens, n and
logprobs honoured."""

import json
import re
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "patches"))

import patched_tree  # noqa: E402,F401  (the patched sglang first on sys.path)

from sglang_gemma4.gpu.checks import openai_suite  # noqa: E402
from sglang_gemma4.gpu.serve import presets  # noqa: E402

ANSWER = "Paris is the capital of France, on the Seine."
Q = '<|"|>'
NATIVE_CALL = (
    f"<|tool_call>call:get_weather{{city:{Q}Paris{Q},unit:{Q}celsius{Q},alerts:false}}<tool_call|>"
)
THOUGHT = "<|channel>thought\nThe capital of France is Paris.<channel|>"
CANDIDATES = ("yes", "no", "maybe", "Paris", "London", "Oslo")
STEP = 3  # tokens a streamed step carries
SPECIAL = re.compile(r"<\|tool_call>|<tool_call\|>|<\|\"\|>|<\|channel>|<channel\|>")


def instance(schema: dict):
    """The first value a schema allows, in order (enum, const, the first of anyOf, then by type)."""
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return instance(schema[key][0])
    kind = schema.get("type", "object")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object":
        return {name: instance(sub) for name, sub in schema.get("properties", {}).items()}
    if kind == "array":
        return [
            instance(schema.get("items", {"type": "string"}))
            for _ in range(max(1, schema.get("minItems", 1)))
        ]
    return {"string": "text", "integer": 1, "number": 1.5, "boolean": True, "null": None}[kind]


def step_ends(text: str, tokens: int) -> list[int]:
    """Where the stream's steps end: every STEP tokens (one token a byte here), never inside one of
    Gemma-4's special tokens, which its own tokenizer keeps whole (one token each)."""
    assert len(text.encode()) == tokens
    inside = {
        i
        for m in SPECIAL.finditer(text)
        for i in range(len(text[: m.start()].encode()) + 1, len(text[: m.end()].encode()))
    }
    return sorted({k for k in range(STEP, tokens, STEP) if k not in inside} | {tokens})


class StubEngine:
    """TokenizerManager.generate_request without a scheduler: what it would yield for `obj`."""

    def __init__(self, manager):
        self.manager, self.tokenizer, self.prompts = manager, manager.tokenizer, {}

    def text_for(self, obj, prompt: str) -> str:
        import xgrammar
        from xgrammar.testing import _is_grammar_accept_string

        sp = obj.sampling_params
        if sp.get("json_schema"):
            # what the scheduler compiles (a schema it cannot compile aborts the request)
            grammar = xgrammar.Grammar.from_json_schema(sp["json_schema"], any_whitespace=False)
            text = json.dumps(instance(json.loads(sp["json_schema"])))
            assert _is_grammar_accept_string(grammar, text), (
                text
            )  # the layout the preset's grammar accepts
            return text
        for key, build in (
            ("regex", xgrammar.Grammar.from_regex),
            ("ebnf", xgrammar.Grammar.from_ebnf),
        ):
            if sp.get(key):
                grammar = build(sp[key])
                return next(c for c in CANDIDATES if _is_grammar_accept_string(grammar, c))
        if "weather" in prompt:
            return f"Let me look.{NATIVE_CALL}" + (
                NATIVE_CALL.replace("Paris", "Oslo") if "Oslo" in prompt else ""
            )
        if "Think" in prompt:
            return THOUGHT + ANSWER
        return ANSWER

    def outputs(self, obj, prompt_ids: list[int]) -> list[dict]:
        """Every step of one choice's stream, cumulative as the tokenizer manager yields them."""
        sp, tok = obj.sampling_params, self.tokenizer
        meta = {
            "id": obj.rid,
            "prompt_tokens": len(prompt_ids),
            "cached_tokens": 0,
            "weight_version": "default",
        }
        try:
            text = self.text_for(obj, tok.decode(prompt_ids))
        except (
            RuntimeError
        ) as e:  # as the scheduler's grammar manager answers a grammar that does not compile
            abort = {
                "type": "abort",
                "message": f"Grammar compilation failed: {e}",
                "status_code": 400,
                "err_type": "BadRequestError",
            }
            return [
                {
                    "index": 0,
                    "text": "",
                    "output_ids": [],
                    "meta_info": {**meta, "finish_reason": abort, "completion_tokens": 0},
                }
            ]
        ids = tok.encode(text, add_special_tokens=False)
        finish = {"type": "stop", "matched": tok.eos_token_id}
        limit = sp.get("max_new_tokens")
        if limit is not None and len(ids) >= limit and (limit < len(ids) or sp.get("ignore_eos")):
            ids, finish = ids[:limit], {"type": "length", "length": limit}
        for stop in sp.get("stop") or []:
            decoded = tok.decode(ids)
            if stop in decoded:
                ids = tok.encode(decoded[: decoded.index(stop)], add_special_tokens=False)
                finish = {"type": "stop", "matched": stop}
        steps = []
        for k in step_ends(tok.decode(ids), len(ids)):
            meta = {
                **meta,
                "finish_reason": finish if k == len(ids) else None,
                "completion_tokens": k,
            }
            if obj.return_logprob:
                top = max(obj.top_logprobs_num or 0, 0)
                meta |= {
                    "input_token_logprobs": [],
                    "input_top_logprobs": [],
                    "output_token_logprobs": [(-0.1, t, tok.decode([t])) for t in ids[:k]],
                    "output_top_logprobs": [
                        [
                            (
                                -0.1 - j,
                                t if j == 0 else j + 10,
                                tok.decode([t if j == 0 else j + 10]),
                            )
                            for j in range(top)
                        ]
                        for t in ids[:k]
                    ],
                }
            steps.append(
                {"index": 0, "text": tok.decode(ids[:k]), "output_ids": ids[:k], "meta_info": meta}
            )
        return steps

    def send_one_request(self, tokenized) -> None:
        self.prompts[tokenized.rid] = list(tokenized.input_ids)

    async def wait_one_response(self, obj, request=None):
        """The answers to one request (n > 1 arrives as n requests) after the tokenizer manager's
        own checks ran, as its _wait_one_response yields them."""
        steps = self.outputs(obj, self.prompts.pop(obj.rid))
        finish = steps[-1]["meta_info"]["finish_reason"]
        if not obj.stream:
            if finish.get("status_code") == 400:  # how it answers a request the scheduler refused
                raise ValueError(finish["message"])
            yield steps[-1]
            return
        for step in steps:
            yield step

    def serve(self) -> None:
        """Stand in for the scheduler behind the manager."""
        self.manager._send_one_request = self.send_one_request
        self.manager._wait_one_response = self.wait_one_response
        self.manager.auto_create_handle_loop = lambda: None  # no detokenizer to listen to


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    """sglang's HTTP app with the preset's structured output and parsers, the stub behind it."""
    import uvicorn
    from gemma4_config import server_args
    from request_pipeline import byte_level_tokenizer

    from sglang_gemma4.gpu.serve.variants import write_config

    from sglang.srt.entrypoints import http_server
    from sglang.srt.entrypoints.openai.serving_chat import OpenAIServingChat
    from sglang.srt.entrypoints.openai.serving_completions import OpenAIServingCompletion
    from sglang.srt.managers.tokenizer_manager import TokenizerManager
    from sglang.srt.parser.template_manager import TemplateManager
    from sglang.srt.server_args import PortArgs

    model_dir = write_config(Path(tempfile.mkdtemp(prefix="sglang-openai-suite-")), "e2b", "causal")
    byte_level_tokenizer(model_dir)
    args = server_args(model_dir, *presets.BACKENDS[2:], *presets.PARSERS)
    assert args.grammar_backend == "xgrammar" and args.tool_call_parser == "gemma4"
    manager = TokenizerManager(args, PortArgs.init_new(args))
    templates = TemplateManager()
    templates.initialize_templates(tokenizer_manager=manager, model_path=args.model_path)
    StubEngine(manager).serve()
    http_server.set_global_state(http_server._GlobalState(manager, templates, {}))
    app = http_server.app
    app.state.openai_serving_chat = OpenAIServingChat(manager, templates)
    app.state.openai_serving_completion = OpenAIServingCompletion(manager, templates)
    port = free_port()
    uv = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off", log_level="warning")
    )
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not uv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert uv.started, "uvicorn did not start"
    yield f"http://127.0.0.1:{port}"
    uv.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def client(server):
    return openai_suite.client_for(server, timeout=60)


@pytest.mark.parametrize("check", openai_suite.CHECKS, ids=lambda c: c.__name__)
def test_each_check_passes_against_the_app(client, check):
    run = openai_suite.Run()
    check(client, openai_suite.served_model(client), run)


def test_the_run_records_the_compared_answers(client):
    run = openai_suite.run_checks(client)
    assert run.passed, run.outcomes
    assert set(openai_suite.COMPARED) <= set(run.answers)
    assert json.loads(run.answers["json_schema"]) == instance(openai_suite.ANSWER_SCHEMA)
    assert openai_suite.differences(run, run) == []
    changed = openai_suite.Run(answers={**run.answers, "json_schema": '{"answer": "no"}'})
    assert openai_suite.differences(run, changed) == [
        f'json_schema: MTP off {run.answers["json_schema"]!r}, on \'{{"answer": "no"}}\''
    ]


def test_a_failing_check_is_reported_not_raised(client):
    def broken(client, model, run):
        raise AssertionError("the answer was wrong")

    run = openai_suite.run_checks(client, [broken])
    assert not run.passed and run.outcomes["broken"] == "AssertionError: the answer was wrong"
    assert "FAIL: AssertionError: the answer was wrong" in openai_suite.report({"here": run}, None)


def test_gemma4_tool_calls_stream_to_the_client_in_multi_token_steps(client):
    """tool_choice auto: the model's own tool-call text, parsed by the preset's gemma4 parser, both
    streamed (STEP tokens a chunk) and whole."""
    model = openai_suite.served_model(client)
    request = dict(
        model=model, messages=openai_suite.WEATHER, tools=openai_suite.TOOLS, max_tokens=200
    )
    whole = client.chat.completions.create(**request)
    message = whole.choices[0].message
    assert message.content == "Let me look." and whole.choices[0].finish_reason == "tool_calls", (
        whole.choices[0]
    )
    expected = [("get_weather", {"city": "Paris", "unit": "celsius", "alerts": False})]
    assert [
        (c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls
    ] == expected
    (streamed,), _ = openai_suite.stream_text(client, **request)
    assert streamed["content"] == "Let me look."
    assert [(c["name"], json.loads(c["arguments"])) for c in streamed["calls"].values()] == expected


def test_two_calls_of_one_function_stream_as_two_calls(client):
    """0240: an OpenAI client merges streamed tool-call deltas by index; the final step carries the
    second call's end and the finish reason."""
    model = openai_suite.served_model(client)
    request = dict(
        model=model,
        messages=[{"role": "user", "content": "What is the weather in Paris and Oslo?"}],
        tools=openai_suite.TOOLS,
        max_tokens=300,
    )
    expected = [
        ("get_weather", {"city": city, "unit": "celsius", "alerts": False})
        for city in ("Paris", "Oslo")
    ]
    calls = client.chat.completions.create(**request).choices[0].message.tool_calls
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == expected
    (streamed,), _ = openai_suite.stream_text(client, **request)
    assert [(c["name"], json.loads(c["arguments"])) for c in streamed["calls"].values()] == expected
    assert streamed["finish"] == ["tool_calls"] and streamed["content"] == "Let me look."


def test_gemma4_reasoning_is_separated_when_thinking_is_asked_for(client):
    model = openai_suite.served_model(client)
    request = dict(
        model=model,
        messages=[{"role": "user", "content": "Think: what is the capital of France?"}],
        max_tokens=200,
        extra_body={"chat_template_kwargs": {"enable_thinking": True}},
    )
    message = client.chat.completions.create(**request).choices[0].message
    assert (message.reasoning_content, message.content) == (
        "The capital of France is Paris.",
        ANSWER,
    )
    (streamed,), _ = openai_suite.stream_text(client, **request)
    assert (streamed["reasoning"], streamed["content"]) == (
        "The capital of France is Paris.",
        ANSWER,
    )


def test_the_gpu_stage_serves_a_real_draft_without_then_with_mtp(tmp_path, capsys):
    """mtp_greedy's random-weight target and agreeing draft: real acceptance, never the simulated
    one (which emits a fixed token, not the verified ones)."""
    assert (
        openai_suite.main(
            ["--start", "26b-a4b", "--out", str(tmp_path), "--checkpoints", "ck", "--dry-run"]
        )
        == 0
    )
    off, on = capsys.readouterr().out.strip().splitlines()
    assert "--speculative-algorithm" not in off and "--grammar-backend xgrammar" in off
    assert "--tool-call-parser gemma4" in off and "--speculative-algorithm NEXTN" in on
    assert "--load-format dummy" not in on and "SGLANG_SIMULATE_ACC_LEN" not in on
    model = str((Path("ck") / "26b-a4b").resolve())
    assert (
        f"--model-path {model} " in on
        and f"--speculative-draft-model-path {model}-assistant " in on
    )


def test_the_cli_runs_every_check_against_a_url_and_writes_its_table(server, tmp_path, capsys):
    assert openai_suite.main(["--url", server, "--out", str(tmp_path)]) == 0
    table = (tmp_path / "openai-suite.md").read_text()
    assert table == capsys.readouterr().out.strip() + "\n"
    assert all(f"| {check.__name__} | pass |" in table for check in openai_suite.CHECKS), table


def test_the_suites_images_are_what_they_claim():
    """The image check's PNG decodes; each bad medium fails where the server must refuse it."""
    import base64
    import io

    from PIL import Image

    def decoded(url: str) -> bytes:
        return base64.b64decode(url.split(",", 1)[1])

    good = Image.open(io.BytesIO(openai_suite.png(64, 64)))
    assert good.size == (64, 64) and good.convert("RGB").getpixel((5, 7)) == (200, 30, 30)
    bad = openai_suite.BAD_MEDIA
    with pytest.raises(ValueError):
        base64.b64decode(bad["broken base64"].split(",", 1)[1], validate=True)
    with pytest.raises(OSError):
        Image.open(io.BytesIO(decoded(bad["not an image"])))
    with pytest.raises(OSError):
        Image.open(io.BytesIO(decoded(bad["truncated image"]))).load()
    with pytest.raises(Image.DecompressionBombError):
        Image.open(io.BytesIO(decoded(bad["decompression bomb"])))
    assert bad["remote URL"].startswith("http://") and bad["server path"].startswith("file:///")


def test_a_text_only_server_refuses_every_image_with_400(client):
    """The preset without --multimodal: bad media and a good image alike are answered 400 (never
    500)."""
    import openai

    model = openai_suite.served_model(client)
    openai_suite.bad_media(client, model, openai_suite.Run())
    with pytest.raises(openai.BadRequestError):
        openai_suite.image_input(client, model, openai_suite.Run())


def test_images_run_only_when_asked(server, tmp_path):
    assert openai_suite.main(["--url", server, "--out", str(tmp_path / "text")]) == 0
    assert "bad_media" not in (tmp_path / "text" / "openai-suite.md").read_text()
    assert openai_suite.main(["--url", server, "--images", "--out", str(tmp_path / "images")]) == 1
    table = (tmp_path / "images" / "openai-suite.md").read_text()
    assert "| bad_media | pass |" in table and "| image_input | FAIL: BadRequestError" in table


def test_the_image_stage_serves_the_conditional_class_with_its_towers(tmp_path, capsys):
    assert (
        openai_suite.main(
            ["--start-images", "e4b", "--out", str(tmp_path), "--checkpoints", "ck", "--dry-run"]
        )
        == 0
    )
    (line,) = capsys.readouterr().out.strip().splitlines()
    words = line.split()
    assert words[words.index("--model-path") + 1] == str((Path("ck") / "e4b-multimodal").resolve())
    assert "--enable-multimodal" in words and words[words.index("--load-format") + 1] == "dummy"
    assert "--grammar-backend xgrammar" in line and "--tool-call-parser gemma4" in line
    assert not (Path("ck") / "e4b-multimodal").exists()  # a dry run writes nothing
