"""The bad-input check records a server that died instead of dying with it."""

import json
import math
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sglang_gemma4.gpu.checks import bad_input
from sglang_gemma4.gpu.checks.bad_input import good_request


def test_a_dead_server_reads_as_not_serving():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert good_request(f"http://127.0.0.1:{port}") is False


def test_the_nan_prone_sampling_cases_ban_what_they_say():
    named = {name: payload for name, _, payload in bad_input.cases(vocab=1000, context=100)}
    every = named["-inf on every token"]["sampling_params"]["logit_bias"]
    assert len(every) == 1000 and set(every.values()) == {-math.inf}
    but_stop = named["-inf on every token but a stop token min_new_tokens bans"]["sampling_params"]
    assert len(but_stop["logit_bias"]) == 999 and "17" not in but_stop["logit_bias"]
    assert but_stop["stop_token_ids"] == [17] and but_stop["min_new_tokens"] > 0


class PrefixServer(BaseHTTPRequestHandler):
    """A server whose abort of rid "0" also aborts "0abc..." when `by_prefix`."""

    by_prefix = False
    dropped = threading.Event()

    def do_POST(self):
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if payload.get("stream"):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"data: {}\n\n")
            self.wfile.flush()
            PrefixServer.dropped.set()
            return
        PrefixServer.dropped.wait(10)
        kind = "abort" if self.by_prefix else "length"
        body = json.dumps({"text": "x", "meta_info": {"finish_reason": {"type": kind}}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("by_prefix, status", [(False, 200), (True, 0)])
def test_a_prefix_abort_of_another_request_is_caught(monkeypatch, by_prefix, status):
    monkeypatch.setattr(PrefixServer, "by_prefix", by_prefix)
    monkeypatch.setattr(PrefixServer, "dropped", threading.Event())
    server = ThreadingHTTPServer(("127.0.0.1", 0), PrefixServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        got, how = bad_input.abort_leaves_prefixed_rids(
            f"http://127.0.0.1:{server.server_address[1]}"
        )
    finally:
        server.shutdown()
    assert got == status, how
