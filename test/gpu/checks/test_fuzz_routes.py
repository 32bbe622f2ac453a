"""Fuzzer v2 without a GPU: what route_case generates over the route table (every route, every kind
of case, admin routes with the key only with bodies their model refuses on a live server), how a
live run judges answers, and a whole live run against a stand-in server (run_routes): raw HTTP
abuse, client disconnects, witnesses, the probe and the verdict written to fuzz-routes.json."""

import json
import random

import pytest
from stand_in import JsonHandler, serving

from sglang_gemma4.gpu.checks import fuzz, routes

VOCAB = 262144


def cases(count: int, seed: int = 3, **kw):
    rng = random.Random(seed)
    return [fuzz.route_case(rng, VOCAB, **kw) for _ in range(count)]


def test_every_route_and_every_kind_of_case_is_generated():
    generated = cases(6000, admin_key="k", in_process=True)
    reached = {c.route for c in generated}
    expected = {
        (r.method, r.path) for r in routes.ROUTES if not r.only_when and r.body != "websocket"
    }
    assert expected <= reached, sorted(expected - reached)
    assert {c.kind for c in generated} == {
        "fields",
        "batch",
        "non-object",
        "raw",
        "no-body",
        "form",
        "admin-key",
        "admin-no-key",
    }


def test_admin_routes_get_the_key_only_with_a_body_their_model_refuses_on_a_live_server():
    for case in cases(6000, admin_key="k"):
        if case.keyed:
            route = routes.BY_KEY[case.route]
            assert route.cls == routes.ADMIN and route.body is not None, case
            try:
                body = json.loads(case.body)
            except (ValueError, RecursionError):
                continue  # not JSON, or deeper than json.loads reads
            assert not isinstance(body, dict), case
        if (
            case.route in routes.BY_KEY
            and routes.BY_KEY[case.route].cls == routes.ADMIN
            and not case.keyed
        ):
            assert case.headers.get("authorization") != "Bearer k"


def test_a_live_server_without_an_admin_key_gets_only_refused_bodies_on_admin_routes():
    # its admin routes may be open to anyone: a valid body (or none) would act on the server
    for case in cases(4000):
        route = routes.BY_KEY.get(case.route)
        if route is not None and route.cls == routes.ADMIN:
            assert route.body is not None and not case.keyed, case
            try:
                body = json.loads(case.body)
            except (ValueError, RecursionError):
                continue
            assert not isinstance(body, dict), case


def test_cases_are_sendable_bytes_and_deep_values_are_expanded():
    for case in cases(3000, admin_key="k", in_process=True):
        assert case.body is None or isinstance(case.body, bytes)
        assert b"\\u0000deep:" not in (case.body or b"")
        for value in case.headers.values():
            (value if isinstance(value, bytes) else value.encode("latin-1"))
    assert fuzz.encode({"a": fuzz._nested(600, as_dict=False)}).count(b"[") == 600


def test_generate_batch_forms_mismatch_the_batch_and_repeat_rids():
    rng = random.Random(1)
    bodies = [fuzz.generate_batch(rng, VOCAB) for _ in range(500)]
    mismatched = [
        b
        for b in bodies
        if isinstance(b["text"], list)
        and any(
            isinstance(b.get(f), list) and len(b[f]) != len(b["text"]) for f in fuzz.BATCH_FIELDS
        )
    ]
    assert len(mismatched) > 100
    assert any(
        b.get("rid") and len(set(b["rid"])) < len(b["rid"])
        for b in bodies
        if isinstance(b.get("rid"), list)
    )
    assert any("input_ids" in b for b in bodies)


@pytest.mark.parametrize(
    "path, method, status, dropped, raw, outcome",
    [
        ("/v1/models", "GET", 200, False, False, "ok"),
        ("/api/show", "POST", 404, False, False, "client-error"),
        ("/api/show", "POST", 500, False, False, "server-error"),
        ("/api/show", "POST", 0, False, False, "no-answer"),
        ("/generate", "POST", 0, True, False, "dropped"),
        ("/generate", "POST", 503, True, False, "server-error"),
        ("", "RAW", 0, False, True, "dropped"),
        ("", "RAW", 400, False, True, "client-error"),
        ("", "RAW", 502, False, True, "server-error"),
    ],
)
def test_answers_are_classified(path, method, status, dropped, raw, outcome):
    case = fuzz.Case(method, path, b"{}", {}, "fields", (method, path))
    assert fuzz.classify_case(case, status, "{}", dropped=dropped, raw=raw) == outcome


class StandIn(JsonHandler):
    """Answers every request 400 (or 500 to some, when told to) except the probe, the witnesses and
    /health; logs the probe's decode lines as a scheduler would; may abort witnesses."""

    log_path = None
    fail_some = False
    abort_witnesses = False
    seen = 0

    def handle_one(self):
        length = self.headers.get("Content-Length")
        body = self.rfile.read(int(length)) if length and length.isdigit() else b""
        StandIn.seen += 1
        try:
            payload = json.loads(body or b"null")
        except (ValueError, RecursionError):
            payload = None
        if self.path == "/health":
            return self.answer(200, {})
        if payload == fuzz.PROBE:
            with open(self.log_path, "a") as log:
                log.write(decode_line(1) + "\n" + decode_line(3) + "\n")
            return self.answer(200, {"text": "x" * 80, "meta_info": {"prompt_tokens": 4}})
        if isinstance(payload, dict) and str(payload.get("rid", "")).startswith("witness-"):
            reason = {"type": "abort"} if self.abort_witnesses else {"type": "length"}
            return self.answer(200, {"text": "w", "meta_info": {"finish_reason": reason}})
        if self.fail_some and StandIn.seen % 10 == 0:
            return self.answer(500, {"error": {"message": "boom"}})
        self.answer(400, {"error": {"message": "bad field"}})

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = handle_one


def decode_line(second: int) -> str:
    return (
        f"[2026-11-27 10:00:{second:02d}] Decode batch, #running-req: 1, #full token: 40, "
        "full token usage: 0.00, "
        "#swa token: 40, swa token usage: 0.00, cuda graph: False, gen throughput "
        "(token/s): 50.00, "
        f"#queue-req: 0"
    )


def stand_in_run(
    tmp_path, monkeypatch, fail_some=False, abort_witnesses=False
) -> tuple[bool, dict]:
    monkeypatch.setattr(fuzz.time, "sleep", lambda s: None)
    log = tmp_path / "server.log"
    log.write_text("")
    for name, value in (
        ("log_path", log),
        ("fail_some", fail_some),
        ("abort_witnesses", abort_witnesses),
    ):
        monkeypatch.setattr(StandIn, name, value)
    with serving(StandIn) as url:
        passed = fuzz.run_routes(
            url, log, tmp_path, count=150, seed=9, vocab=VOCAB, workers=4, admin_key="k"
        )
    return passed, json.loads((tmp_path / "fuzz-routes.json").read_text())


@pytest.mark.parametrize(
    "fail_some, abort_witnesses, verdict",
    [(False, False, "PASS"), (True, False, "FAIL"), (False, True, "FAIL")],
)
def test_a_live_run_writes_its_verdict(tmp_path, monkeypatch, fail_some, abort_witnesses, verdict):
    passed, result = stand_in_run(tmp_path, monkeypatch, fail_some, abort_witnesses)
    assert passed is (verdict == "PASS") and result["verdict"] == verdict, result
    assert result["seed"] == 9 and sum(result["outcomes"].values()) == 150
    assert result["witnesses"] >= 1 and result["good_request_answered"] and result["pool_drained"]
    assert (result["answers_5xx"] > 0) is fail_some
    assert (result["witnesses_refused_or_aborted"] > 0) is abort_witnesses


def test_a_generating_route_keeps_its_output_bound_whatever_field_is_dropped():
    bounded = {
        (r.method, r.path): set(r.example) & fuzz.OUTPUT_BOUNDS
        for r in routes.ROUTES
        if isinstance(r.example, dict) and set(r.example) & fuzz.OUTPUT_BOUNDS
    }
    assert ("POST", "/v1/responses") in bounded and ("POST", "/api/generate") in bounded
    seen = 0
    for case in cases(6000, seed=11):
        if case.kind == "fields" and case.route in bounded:
            # a top-level key is a quoted name in the body (some values nest past json's recursion
            # limit)
            assert all(f'"{key}":'.encode() in case.body for key in bounded[case.route]), case.body[
                :300
            ]
            seen += 1
    assert seen > 100


@pytest.mark.parametrize(
    "path, value, streams",
    [
        ("/generate", 1, True),
        ("/generate", "false", True),
        ("/generate", 0, False),
        ("/generate", None, False),
        ("/v1/chat/completions", True, True),
        ("/v1/chat/completions", 1, True),
        ("/v1/chat/completions", "yes", True),
        ("/v1/chat/completions", "false", False),
        ("/v1/chat/completions", 2, False),
        ("/v1/completions", "x" * 300, False),
        ("/v1/responses", None, False),
    ],
)
def test_the_expected_answer_streams_as_the_route_reads_its_stream_field(path, value, streams):
    assert fuzz.streams(path, value) is streams
