"""The smoke check's record of one server: its answers, and with MTP the accept length the server
reported, a dummy-weight run at the maximum marked as an error (the simulated acceptance did not
apply), which fails the check."""

import json

import pytest

from sglang_gemma4.gpu.checks import smoke
from sglang_gemma4.gpu.serve.server import Server


def checked(tmp_path, monkeypatch, accept_len: float) -> dict:
    server = Server("26b-a4b", "patched", tmp_path / "26b-a4b-mtp-patched.log", mtp=True)
    server.log_path.write_text("full_layer_tokens=456407, swa_layer_tokens=53281\n")
    meta = {
        "completion_tokens": 16,
        "spec_verify_ct": round(15 / accept_len),
        "spec_accept_length": accept_len,
    }
    answers = {
        "/generate": {"text": "a b c", "output_ids": [5, 6, 7], "meta_info": meta},
        "/v1/chat/completions": {"usage": {"completion_tokens": 16}},
    }
    monkeypatch.setattr(
        smoke,
        "http_json",
        lambda method, url, payload: (200, json.dumps(answers[url.removeprefix(server.url)])),
    )
    return smoke.check(server)


def test_an_mtp_record_keeps_the_accept_length_the_server_reported(tmp_path, monkeypatch):
    record = checked(tmp_path, monkeypatch, 2.67)
    assert (record["generate"], record["chat"], record["spec_accept_length"]) == (200, 200, 2.67)
    assert record["swa_layer_tokens"] == 53281 and "error" not in record


def test_an_mtp_record_that_accepted_every_draft_is_an_error(tmp_path, monkeypatch):
    record = checked(tmp_path, monkeypatch, 4.0)
    assert record["generate"] == 200 and "logged accept length 4.00" in record["error"]


@pytest.mark.parametrize("accept_len, status", [(2.67, 0), (4.0, 1)])
def test_full_acceptance_fails_the_check(tmp_path, monkeypatch, capsys, accept_len, status):
    record = checked(tmp_path, monkeypatch, accept_len)
    monkeypatch.setattr(smoke, "check", lambda server: record)
    monkeypatch.setattr(Server, "start", lambda self, timeout=540: self)
    monkeypatch.setattr(
        "sys.argv", ["smoke", "--out", str(tmp_path), "--variants", "26b-a4b", "--mtp"]
    )
    assert smoke.main() == status
