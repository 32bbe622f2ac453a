"""0165: once warmed up, before it reports ready, the HTTP server asks its own /freeze_gc endpoint
to move everything alive into the collector's permanent generation (the scheduler, detokenizer and
tokenizer processes), so that later full collections do not walk the start-up heap:

- on by default, the request reaches the real endpoint, which freezes through the tokenizer manager;
  with the admin key when one is set, else the API key, else none (with 0210, which closes admin
  routes to all but the admin key, the server's own per-process key instead of those two);
- SGLANG_OPT_FREEZE_GC_AFTER_WARMUP=0: no request;
- a refused or failed request is a warning: the server still reports ready (its launch callback
runs)."""

import logging
from types import SimpleNamespace

import pytest
import requests
from fastapi.testclient import TestClient

import sglang.srt.entrypoints.http_server as http_server

URL = "http://127.0.0.1:30000"


def server_args(api_key=None, admin_api_key=None):
    return SimpleNamespace(
        checkpoint_engine_wait_weights_before_ready=False,
        is_ep_scale_joiner=False,
        skip_server_warmup=False,
        delete_ckpt_after_loading=False,
        debug_tensor_dump_input_file=None,
        api_key=api_key,
        admin_api_key=admin_api_key,
        url=lambda: URL,
        ssl_verify=lambda: True,
    )


def own_key_or(header: dict) -> dict:
    """The header of the server's request to its own admin route: with admin routes closed to all
    but the admin key (0210), a server without one sends its per-process key."""
    key = getattr(http_server, "_own_admin_key", None)
    return {"Authorization": f"Bearer {key}"} if key else header


@pytest.fixture
def server(monkeypatch, request):
    """The HTTP app with a tokenizer manager that records each freeze; requests.post goes to the
    app. Returns (posted requests as (url, headers), freezes, ready callbacks)."""
    posted, freezes, ready = [], [], []
    args = server_args(**getattr(request, "param", {}))

    class TokenizerManager:
        server_args = args  # what the app checks a request's key against

        async def freeze_gc(self):
            freezes.append("frozen")

    monkeypatch.setattr(
        http_server, "_global_state", SimpleNamespace(tokenizer_manager=TokenizerManager())
    )
    # sglang 0.5.18+ reads the warm-up switch from its serving config (absent before: nothing to
    # stub)
    monkeypatch.setattr(
        http_server, "get_serving", lambda: SimpleNamespace(skip_server_warmup=False), raising=False
    )
    client = TestClient(http_server.app)

    def post(url, headers=None, **kwargs):
        """The app's answer, as requests returns it."""
        posted.append((url, headers))
        assert url.startswith(URL)
        answer = client.post(url[len(URL) :], headers=headers)
        response = requests.Response()
        response.status_code, response.reason, response.url = (
            answer.status_code,
            answer.reason_phrase,
            url,
        )
        response._content = answer.content
        return response

    monkeypatch.setattr(http_server.requests, "post", post)
    return posted, freezes, ready, args


def warm_up(args, ready):
    http_server._wait_and_warmup(
        args, launch_callback=lambda: ready.append("ready"), execute_warmup_func=lambda _: True
    )


@pytest.mark.parametrize(
    "server, header",
    [
        ({}, own_key_or({})),
        ({"api_key": "k"}, own_key_or({"Authorization": "Bearer k"})),
        ({"api_key": "k", "admin_api_key": "admin"}, {"Authorization": "Bearer admin"}),
    ],
    indirect=["server"],
)
def test_a_warm_server_freezes_its_collector(monkeypatch, server, header):
    posted, freezes, ready, args = server
    monkeypatch.delenv("SGLANG_OPT_FREEZE_GC_AFTER_WARMUP", raising=False)
    warm_up(args, ready)
    assert posted == [(URL + "/freeze_gc", header)]
    assert freezes == ["frozen"] and ready == ["ready"]


@pytest.mark.kill_switch
def test_the_kill_switch_sends_nothing(monkeypatch, server):
    posted, freezes, ready, args = server
    monkeypatch.setenv("SGLANG_OPT_FREEZE_GC_AFTER_WARMUP", "0")
    warm_up(args, ready)
    assert posted == [] and freezes == [] and ready == ["ready"]


def test_a_failed_freeze_is_a_warning_and_the_server_stays_ready(monkeypatch, server, caplog):
    _, freezes, ready, args = server
    monkeypatch.delenv("SGLANG_OPT_FREEZE_GC_AFTER_WARMUP", raising=False)

    def refused(url, **kwargs):
        raise requests.exceptions.ConnectionError("connection refused")

    monkeypatch.setattr(http_server.requests, "post", refused)
    with caplog.at_level(logging.WARNING):
        warm_up(args, ready)
    assert freezes == [] and ready == ["ready"]
    warnings = [
        r
        for r in caplog.records
        if r.levelno == logging.WARNING and "freez" in r.getMessage().lower()
    ]
    assert len(warnings) == 1
    cause = (
        warnings[0].exc_info[1] if warnings[0].exc_info else ""
    )  # in its message or its traceback
    assert "connection refused" in f"{warnings[0].getMessage()} {cause}"
