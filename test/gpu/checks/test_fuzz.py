"""The live fuzz check without a GPU: what its generator produces, how it judges an answer and the
pool, and a whole run against a stand-in server."""

import functools
import json
import math
import random

import pytest
from stand_in import JsonHandler, serving

from sglang_gemma4.gpu.checks import fuzz

VOCAB = 262144


@functools.cache
def generated(count: int = 3000, seed: int = 7) -> tuple[tuple[str, dict], ...]:
    rng = random.Random(seed)
    return tuple(fuzz.request(rng, VOCAB) for _ in range(count))


def leaves(value):
    """Every scalar in a JSON value, and the lengths of its lists."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from leaves(item)
    elif isinstance(value, list):
        yield ("len", len(value))
        scalars = {
            item for item in value if not isinstance(item, (list, dict))
        }  # huge lists repeat
        yield from scalars
        for item in value:
            if isinstance(item, (list, dict)):
                yield from leaves(item)
    else:
        yield value


def test_the_same_seed_generates_the_same_requests():
    def encoded(seed: int) -> list[bytes]:  # as sent: NaN does not compare equal to itself
        rng = random.Random(seed)
        return [fuzz.encode(dict([fuzz.request(rng, VOCAB)])) for _ in range(100)]

    assert encoded(3) == encoded(3) != encoded(4)


def test_every_endpoint_streaming_and_not_and_every_field_is_fuzzed():
    requests = generated()
    assert {(e, p["stream"]) for e, p in requests} == {
        (e, s) for e in fuzz.ENDPOINTS for s in (True, False)
    }
    fields = {e: set() for e in fuzz.ENDPOINTS}
    for endpoint, payload in requests:
        params = payload.get("sampling_params")
        params = params[0] if isinstance(params, list) else params or {}
        fields[endpoint] |= set(payload) | set(params)
    assert set(fuzz.SAMPLING) | set(fuzz.GENERATE_TOP) <= fields["/generate"]
    assert set(fuzz.COMPLETIONS) <= fields["/v1/completions"]
    assert set(fuzz.CHAT) <= fields["/v1/chat/completions"]


def test_values_cover_every_json_type_the_boundaries_bad_unicode_and_huge_lists():
    values = [leaf for _, payload in generated() for leaf in leaves(payload)]
    kinds = {type(v) for v in values}
    assert {type(None), bool, int, float, str} <= kinds
    for edge in (0, -1, 2**31, 2**31 - 1, 2**63, VOCAB - 1, VOCAB, VOCAB + 1):
        assert any(type(v) is int and v == edge for v in values), edge
    assert any(isinstance(v, float) and math.isnan(v) for v in values)
    assert {math.inf, -math.inf} <= {v for v in values if isinstance(v, float)}
    assert any(isinstance(v, str) and any(0xD800 <= ord(c) <= 0xDFFF for c in v) for v in values)
    assert any(v == ("len", VOCAB + 1) for v in values if isinstance(v, tuple))


def test_every_request_bounds_its_generation():
    for endpoint, payload in generated():
        params = payload.get("sampling_params", payload)
        for one in params if isinstance(params, list) else [params]:
            length = one.get("max_new_tokens" if endpoint == "/generate" else "max_tokens")
            assert length is not None


def test_requests_are_sent_as_json_with_nan_and_lone_surrogate_escapes():
    body = fuzz.encode({"t": math.nan, "u": -math.inf, "s": "a\ud800"}).decode()
    assert body == '{"t": NaN, "u": -Infinity, "s": "a\\ud800"}'


GENERATED = json.dumps({"text": "x", "meta_info": {"finish_reason": {"type": "length"}}})
CHOICES = json.dumps({"choices": [{"index": 0, "text": "x"}]})


def sse(*events) -> str:
    return "".join(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events)


@pytest.mark.parametrize(
    "endpoint, stream, status, body, outcome",
    [
        ("/generate", False, 200, GENERATED, "ok"),
        ("/generate", False, 200, f"[{GENERATED}, {GENERATED}]", "ok"),
        ("/v1/completions", False, 200, CHOICES, "ok"),
        (
            "/v1/chat/completions",
            True,
            200,
            sse({"choices": [{"delta": {"content": "x"}}]}, {"choices": []}, "[DONE]"),
            "ok",
        ),
        ("/generate", True, 200, sse(json.loads(GENERATED), "[DONE]"), "ok"),
        ("/generate", False, 400, '{"error": {"message": "top_k must be ..."}}', "client-error"),
        ("/v1/chat/completions", False, 422, "", "client-error"),
        ("/generate", False, 500, "Internal Server Error", "server-error"),
        ("/generate", False, 503, "", "server-error"),
        ("/generate", False, 0, "ConnectionRefusedError", "no-answer"),
        ("/generate", False, 200, "not json", "bad-body"),
        ("/v1/completions", False, 200, '{"object": "error"}', "bad-body"),
        ("/generate", True, 200, sse(json.loads(GENERATED)), "bad-body"),  # no [DONE]: cut off
        (
            "/generate",
            True,
            200,
            sse({"error": {"message": "bad", "code": 400}}, "[DONE]"),
            "client-error",
        ),
        (
            "/v1/completions",
            True,
            200,
            sse({"error": {"message": "boom", "code": 500}}, "[DONE]"),
            "server-error",
        ),
        (
            "/generate",
            True,
            200,
            sse(
                {"text": "", "meta_info": {"finish_reason": {"type": "abort", "status_code": 400}}},
                "[DONE]",
            ),
            "client-error",
        ),
        (
            "/generate",
            False,
            200,
            json.dumps(
                {"text": "", "meta_info": {"finish_reason": {"type": "abort", "status_code": 500}}}
            ),
            "server-error",
        ),
    ],
)
def test_answers_are_classified(endpoint, stream, status, body, outcome):
    assert fuzz.classify(endpoint, stream, status, body) == outcome


def decode_line(second: int, running: int, full: int, swa: int, queued: int = 0) -> str:
    return (
        f"[2026-11-24 10:00:{second:02d}] Decode batch, #running-req: {running}, #full "
        f"token: {full}, "
        f"full token usage: 0.00, #swa token: {swa}, swa token usage: 0.00, cuda graph: False, "
        f"gen throughput (token/s): 50.00, #queue-req: {queued}"
    )


@pytest.mark.parametrize(
    "lines, drained",
    [
        ([decode_line(1, 1, 47, 47), decode_line(3, 1, 87, 87)], True),
        ([decode_line(1, 2, 47, 47)], False),  # a request left running
        ([decode_line(1, 1, 47, 47, queued=1)], False),  # or queued
        ([decode_line(1, 1, 47, 600)], False),  # tokens no request holds
        ([decode_line(1, 1, 900, 47)], False),
        (
            [
                "[2026-11-24 10:00:01] Decode batch, #running-req: 1, #token: 30, token "
                "usage: 0.00, cuda graph: False, "
                "gen throughput (token/s): 50.00, #queue-req: 0"
            ],
            True,
        ),  # a pool without SWA
        ([], False),  # no decode line: nothing read
    ],
)
def test_the_pool_is_drained_when_the_probe_decodes_alone_with_its_own_tokens(lines, drained):
    assert fuzz.pool_drained("\n".join(lines), own_tokens=88)[0] is drained


@pytest.mark.parametrize(
    "counts, alive, good, drained, passed",
    [
        ({"ok": 300, "client-error": 300}, True, True, True, True),
        ({"ok": 599, "server-error": 1}, True, True, True, False),
        ({"ok": 599, "bad-body": 1}, True, True, True, False),
        ({"ok": 599, "no-answer": 1}, True, True, True, False),
        ({"ok": 599, "not-sent": 1}, True, True, True, False),
        ({"ok": 600}, False, False, False, False),
        ({"ok": 600}, True, False, True, False),
        ({"ok": 600}, True, True, False, False),
    ],
)
def test_verdict(counts, alive, good, drained, passed):
    assert fuzz.verdict(counts, alive, good, drained) is passed


class StandIn(JsonHandler):
    """Rejects every request (or answers 500 to one in ten, when told to), serves the probe and
    logs its decode lines as a scheduler would."""

    log_path = None
    fail_some = False
    seen = 0

    def do_POST(self):
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        StandIn.seen += 1
        if payload == fuzz.PROBE:
            with open(self.log_path, "a") as log:
                log.write(decode_line(1, 1, 40, 40) + "\n" + decode_line(3, 1, 80, 80) + "\n")
            self.answer(200, {"text": "x" * 80, "meta_info": {"prompt_tokens": 4}})
        elif self.fail_some and StandIn.seen % 10 == 0:
            self.answer(500, {"error": {"message": "boom"}})
        else:
            self.answer(400, {"error": {"message": "sampling_params.top_k must be ..."}})

    def do_GET(self):  # /health
        self.answer(200, {})


def stand_in_run(
    tmp_path, monkeypatch, fail_some: bool, time_limit: float = 300
) -> tuple[bool, dict]:
    monkeypatch.setattr(fuzz.time, "sleep", lambda s: None)
    log = tmp_path / "server.log"
    log.write_text("")
    monkeypatch.setattr(StandIn, "log_path", log)
    monkeypatch.setattr(StandIn, "fail_some", fail_some)
    with serving(StandIn) as url:
        passed = fuzz.run(
            url, log, tmp_path, count=40, seed=5, vocab=VOCAB, workers=4, time_limit=time_limit
        )
    return passed, json.loads((tmp_path / "fuzz.json").read_text())


@pytest.mark.parametrize("fail_some, verdict", [(False, "PASS"), (True, "FAIL")])
def test_a_run_writes_its_result_file(tmp_path, monkeypatch, fail_some, verdict):
    passed, result = stand_in_run(tmp_path, monkeypatch, fail_some)
    assert passed is (verdict == "PASS") and result["verdict"] == verdict
    assert result["seed"] == 5 and sum(result["outcomes"].values()) == 40
    assert (
        result["pool_drained"] and result["good_request_answered"] and result["server_deaths"] == 0
    )
    assert result["answers_5xx"] == len(result["failures"]) == (4 if fail_some else 0)


def test_requests_past_the_time_limit_are_not_sent_and_fail_the_run(tmp_path, monkeypatch):
    passed, result = stand_in_run(tmp_path, monkeypatch, fail_some=False, time_limit=-1)
    assert not passed and result["outcomes"] == {"not-sent": 40}
