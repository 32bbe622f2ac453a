"""The live sampling fuzzer without a GPU: what its generator produces (the risky values, their
combinations, rounds mixing good and hostile requests), how it judges each kind of request, and a
whole run against a stand-in server."""

import functools
import json
import math
import random

import pytest
from stand_in import JsonHandler, serving

from sglang_gemma4.gpu.checks import fuzz, sampling_fuzz

VOCAB = 262144


@functools.cache
def generated(count=640, seed=3, width=16):
    return sampling_fuzz.rounds(random.Random(seed), count, VOCAB, width)


def sampling_of(endpoint, payload):
    return payload["sampling_params"] if endpoint == "/generate" else payload


def test_the_same_seed_generates_the_same_requests():
    assert generated(100, seed=9) == generated(100, seed=9)
    assert generated(100, seed=9) != generated(100, seed=10)


def test_every_round_mixes_good_and_hostile_requests():
    for batch in generated():
        kinds = [kind for kind, _, _ in batch]
        assert kinds.count("good") == kinds.count("hostile") == 8


def test_good_requests_are_ordinary():
    for batch in generated():
        for kind, endpoint, payload in batch:
            if kind == "good":
                assert set(sampling_of(endpoint, payload)) - {
                    "max_new_tokens",
                    "max_tokens",
                    "model",
                    "stream",
                    "prompt",
                    "messages",
                    "text",
                } == {"temperature"}


def test_hostile_values_reach_every_bound_and_combination():
    seen = {
        "temperature": set(),
        "bias": set(),
        "repetition_penalty": set(),
        "frequency_penalty": set(),
        "top_p": set(),
        "top_k": set(),
        "min_p": set(),
        "stop_regex": set(),
    }
    forms, combos, endpoints, streamed = set(), set(), set(), set()
    for batch in generated(1600):
        for kind, endpoint, payload in batch:
            if kind != "hostile":
                continue
            endpoints.add(endpoint)
            streamed.add(payload["stream"])
            fields = sampling_of(endpoint, payload)
            seen["temperature"].add(fields["temperature"])
            bias = fields.get("logit_bias")
            if bias:
                seen["bias"].update(bias.values())
                banned = sum(1 for v in bias.values() if v == -math.inf)
                forms.add(
                    "all" if banned == VOCAB else "all-but-one" if banned == VOCAB - 1 else "some"
                )
                if banned == VOCAB - 1:
                    (kept,) = fields["stop_token_ids"]
                    assert str(kept) not in bias
                    assert fields.get("min_new_tokens", fields.get("min_tokens")) == 4
            for name in seen:
                if name in fields:
                    seen[name].add(fields[name])
            combos.add(len(set(fields) & set(seen)))
    assert seen["temperature"] == set(sampling_fuzz.TEMPERATURES)
    assert seen["bias"] == set(sampling_fuzz.BIASES)
    assert seen["repetition_penalty"] == set(sampling_fuzz.REPETITION)
    assert seen["frequency_penalty"] == set(sampling_fuzz.ADDITIVE)
    assert seen["stop_regex"] == set(sampling_fuzz.STOP_REGEX)
    assert forms == {"all", "all-but-one", "some"}
    assert {2, 3, 4}.issubset(
        combos
    )  # a risky field alone with the temperature, and several together
    assert endpoints == set(fuzz.ENDPOINTS) and streamed == {True, False}


def test_every_request_bounds_its_generation():
    for batch in generated():
        for _, _, payload in batch:
            assert (
                payload.get("max_tokens", payload.get("sampling_params", {}).get("max_new_tokens"))
                == 8
            )


@pytest.mark.parametrize(
    "kind, outcome, passed",
    [
        ("good", "ok", True),
        ("good", "client-error", False),
        ("good", "server-error", False),
        ("hostile", "ok", True),
        ("hostile", "client-error", True),
        ("hostile", "server-error", False),
        ("hostile", "no-answer", False),
        ("hostile", "bad-body", False),
        ("good", "not-sent", False),
    ],
)
def test_judge(kind, outcome, passed):
    assert sampling_fuzz.judge(kind, outcome) is passed


class StandIn(JsonHandler):
    """Serves good requests, refuses hostile ones (400), and answers 500 to some hostile ones when
    told."""

    log_path = None
    fail_hostile = False
    refuse_good = False

    def do_POST(self):
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        if payload == fuzz.PROBE:
            with open(self.log_path, "a") as log:
                log.write(decode_line(40) + "\n" + decode_line(80) + "\n")
            return self.answer(200, {"text": "x" * 80, "meta_info": {"prompt_tokens": 4}})
        fields = payload.get("sampling_params", payload)
        good = set(fields) <= {
            "max_new_tokens",
            "max_tokens",
            "temperature",
            "model",
            "stream",
            "prompt",
            "messages",
            "text",
        }
        if good and not self.refuse_good:
            body = (
                {"text": "ok", "meta_info": {}}
                if self.path == "/generate"
                else {"choices": [{"index": 0, "text": "ok"}]}
            )
            if payload.get("stream"):
                return self.answer(200, None, events=[body, "[DONE]"])
            return self.answer(200, body)
        if self.fail_hostile and "logit_bias" in fields:
            return self.answer(500, {"error": {"message": "device-side assert"}})
        return self.answer(400, {"error": {"message": "sampling_params.logit_bias ..."}})

    def do_GET(self):  # /health
        self.answer(200, {})


def decode_line(tokens: int) -> str:
    return (
        f"[2026-11-24 10:00:01] Decode batch, #running-req: 1, #full token: {tokens}, "
        f"full token usage: 0.00, #swa token: {tokens}, swa token usage: 0.00, cuda graph: False, "
        f"gen throughput (token/s): 50.00, #queue-req: 0"
    )


def stand_in_run(tmp_path, monkeypatch, fail_hostile=False, refuse_good=False):
    monkeypatch.setattr(sampling_fuzz.time, "sleep", lambda s: None)
    monkeypatch.setattr(fuzz.time, "sleep", lambda s: None)
    log = tmp_path / "server.log"
    log.write_text("")
    monkeypatch.setattr(StandIn, "log_path", log)
    monkeypatch.setattr(StandIn, "fail_hostile", fail_hostile)
    monkeypatch.setattr(StandIn, "refuse_good", refuse_good)
    with serving(StandIn) as url:
        passed = sampling_fuzz.run(url, log, tmp_path, count=32, seed=5, vocab=512, workers=4)
    return passed, json.loads((tmp_path / "sampling_fuzz.json").read_text())


def test_a_run_against_a_server_that_refuses_the_hostile_requests_passes(tmp_path, monkeypatch):
    passed, result = stand_in_run(tmp_path, monkeypatch)
    assert passed and result["verdict"] == "PASS"
    assert result["outcomes"] == {"good ok": 16, "hostile client-error": 16}
    assert result["answers_5xx"] == result["good_not_served"] == result["server_deaths"] == 0
    assert result["pool_drained"] and result["good_request_answered"]


def test_a_5xx_fails_the_run(tmp_path, monkeypatch):
    passed, result = stand_in_run(tmp_path, monkeypatch, fail_hostile=True)
    assert not passed and result["verdict"] == "FAIL" and result["answers_5xx"] > 0
    assert all(f["kind"] == "hostile" and f["status"] == 500 for f in result["failures"])


def test_a_good_request_refused_fails_the_run(tmp_path, monkeypatch):
    passed, result = stand_in_run(tmp_path, monkeypatch, refuse_good=True)
    assert not passed and result["good_not_served"] == 16 and result["answers_5xx"] == 0
