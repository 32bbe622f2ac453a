"""The harness's HTTP helpers (the readiness wait shared by Server.start and `ask`, raw and JSON
posts) against a local stand-in server, and Server's guards against outliving or mistaking a server:
a port still served after the wait (one that frees within it is taken), SIGTERM while starting or
serving."""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sglang_gemma4.gpu.checks import ask
from sglang_gemma4.gpu.serve import server as server_module
from sglang_gemma4.gpu.serve.server import Server, http_json, wait_ready


class StandIn(BaseHTTPRequestHandler):
    ready_after = 2  # /health_generate answers 503 this many times first
    calls = 0

    def reply(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        StandIn.calls += 1
        self.reply(200 if StandIn.calls > StandIn.ready_after else 503, {})

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.reply(200, {"text": " w0" * request["sampling_params"]["max_new_tokens"]})

    def log_message(self, *args):
        pass


@pytest.fixture
def url(monkeypatch):
    monkeypatch.setattr(server_module, "READY_POLL_S", 0.05)  # the stand-in is up at once
    StandIn.calls = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_waits_through_503_until_ready(url):
    assert wait_ready(url, timeout=30)
    assert StandIn.calls == StandIn.ready_after + 1


def test_gives_up_when_the_server_dies_or_time_runs_out(url):
    assert not wait_ready(url, timeout=30, alive=lambda: False)
    assert not wait_ready("http://127.0.0.1:9", timeout=1)


def test_ask_sends_one_greedy_request(url, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["ask", "--url", url, "--timeout", "30"])
    assert ask.main() == 0
    assert "/generate -> 200" in capsys.readouterr().out


def test_posts_bytes_as_they_are_and_objects_as_json(url):
    # Bytes carry what json.dumps would refuse to write as sent (e.g. NaN); the stand-in parses
    # both.
    assert http_json("POST", f"{url}/generate", b'{"sampling_params": {"max_new_tokens": 2}}') == (
        200,
        '{"text": " w0 w0"}',
    )
    assert http_json("POST", f"{url}/generate", {"sampling_params": {"max_new_tokens": 1}}) == (
        200,
        '{"text": " w0"}',
    )


def test_server_refuses_a_port_another_process_serves(url, tmp_path, monkeypatch):
    # A leftover server on the port would answer the readiness check and the benchmark instead.
    monkeypatch.setattr(server_module, "PORT_WAIT_S", 1)
    port = int(url.rsplit(":", 1)[1])
    server = Server("e2b", "patched", tmp_path / "server.log", port=port)
    started = time.monotonic()
    with pytest.raises(
        RuntimeError, match=f"port {port} is still served by another process 1 s on"
    ):
        server.start(timeout=5)
    assert time.monotonic() - started >= 1  # it waited for the port first
    assert server.process is None and not (tmp_path / "server.log").exists()


def test_a_port_that_frees_within_the_wait_is_taken():
    # the server of a run just cut off by its time limit, still being stopped when the next run
    # starts
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    threading.Timer(0.6, listener.close).start()
    assert not server_module.port_freed(port, within=0.1)
    assert server_module.port_freed(port, within=10)


FAKE_LAUNCH = """#!/usr/bin/env bash
# stand-in for the launcher (VARIANT --port N): leaves its pid, then serves 200s, or never
echo $$ > "$FAKE_PID"
[ "$FAKE_READY" = 1 ] || exec sleep 600
exec "$FAKE_PYTHON" -c '
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
class Ok(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def log_message(self, *args):
        pass
HTTPServer(("127.0.0.1", int(sys.argv[1])), Ok).serve_forever()' "$3"
"""

HARNESS = """
import sys, time
from pathlib import Path
from sglang_gemma4.gpu.serve import server as s
s.LAUNCHER = (sys.argv[1],)
s.READY_POLL_S = 0.05
with s.Server("e2b", "patched", Path(sys.argv[2]), port=int(sys.argv[3]), env={"SGLANG_OPT_SWITCH": "1"}) as running:
    print("ready", flush=True)
    time.sleep(600)
"""  # noqa: E501 (the script is run as it stands)


@pytest.mark.parametrize("ready", [True, False], ids=["serving", "starting"])
def test_sigterm_to_the_harness_stops_its_server(tmp_path, ready):
    # A stage cut off by its time limit gets SIGTERM: the server it started must not outlive it.
    launch = tmp_path / "launch.sh"
    launch.write_text(FAKE_LAUNCH)
    launch.chmod(0o755)
    (tmp_path / "env-patched.sh").write_text("true\n")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    pid_file = tmp_path / "pid"
    env = {
        **os.environ,
        "SGLANG_GEMMA4_PREFIX": str(tmp_path),
        "FAKE_PID": str(pid_file),
        "FAKE_READY": "1" if ready else "0",
        "FAKE_PYTHON": sys.executable,
    }
    harness = subprocess.Popen(
        [sys.executable, "-c", HARNESS, str(launch), str(tmp_path / "server.log"), str(port)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    if ready:
        assert harness.stdout.readline().strip() == "ready"
        # the server log's first line says which build, switches and port it is the log of
        first = (tmp_path / "server.log").read_text().splitlines()[0]
        assert first.startswith("patched: env SGLANG_OPT_SWITCH=1 ") and f"--port {port}" in first
    else:
        deadline = time.monotonic() + 30
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    server_pid = int(pid_file.read_text())
    os.kill(server_pid, 0)  # running
    harness.send_signal(signal.SIGTERM)
    try:
        assert harness.wait(timeout=90) == 128 + signal.SIGTERM
        with pytest.raises(ProcessLookupError):
            os.kill(server_pid, 0)
    finally:  # on failure, leave no stand-in behind
        try:
            os.killpg(server_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
