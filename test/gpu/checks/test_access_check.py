"""The access check (gpu/checks/access_check.py): its probes, sent to the patched HTTP app in
process (a stub tokenizer manager behind it, so the probes that need the serving classes and the
model are left to the GPU run), all pass;
a wrong status, a CORS header that should be absent and a key in a body are each reported; the
websocket handshake it sends is answered with its status; a dry run prints its two servers, the
second with both keys."""

import socket
import sys
import threading
from pathlib import Path

import patched_tree  # noqa: F401  (the patched sglang first on sys.path)
import pytest

from sglang_gemma4.gpu.checks import access_check
from sglang_gemma4.gpu.checks.access_check import Answer, Probe

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "patches"))
from stub_server import serve  # noqa: E402


def in_process(client):
    """send(probe) -> Answer through the app in process."""
    from starlette.websockets import WebSocketDisconnect

    def send(probe: Probe) -> Answer:
        headers = {
            **({"Authorization": f"Bearer {probe.key}"} if probe.key else {}),
            **({"Origin": probe.origin} if probe.origin else {}),
        }
        if probe.method == "WEBSOCKET":
            try:
                with client.websocket_connect(probe.path, headers=headers):
                    return Answer(101)
            except WebSocketDisconnect as e:
                return Answer(403 if e.code == 1008 else 500)
        answer = client.request(probe.method, probe.path, json=probe.body, headers=headers)
        return Answer(answer.status_code, dict(answer.headers), answer.text)

    return send


@pytest.mark.parametrize("setup", list(access_check.SETUPS))
def test_every_probe_passes_against_the_patched_app(monkeypatch, setup):
    flags, probes = access_check.SETUPS[setup]
    keys = dict(zip(("api_key", "admin_api_key"), flags[1::2]))
    client, _ = serve(monkeypatch, **keys)
    records = access_check.run_probes([p for p in probes if not p.backend], in_process(client))
    assert [r for r in records if not r["ok"]] == []
    assert len(records) >= 4


def test_each_kind_of_failure_is_reported():
    probe = Probe(
        "p",
        "GET",
        "/v1/models",
        200,
        absent_header="access-control-allow-origin",
        absent_text=("k1",),
    )
    assert access_check.judge(probe, Answer(200, {}, "ok")) is None
    assert "answered 403, expected 200" in access_check.judge(probe, Answer(403, {}, "no"))
    assert "carries access-control-allow-origin" in access_check.judge(
        probe, Answer(200, {"access-control-allow-origin": "*"}, "")
    )
    assert "holds ['k1']" in access_check.judge(probe, Answer(200, {}, '{"api_key": "k1"}'))

    def refused(probe):
        raise ConnectionRefusedError("no server")

    handshake = Probe("w", "WEBSOCKET", "/v1/realtime", 403)
    assert access_check.judge(handshake, Answer(401)) is None  # uvicorn without a websocket library
    assert "answered 101" in access_check.judge(handshake, Answer(101))

    (record,) = access_check.run_probes([probe], refused)
    assert not record["ok"] and "ConnectionRefusedError" in record["problem"]


def test_the_handshake_reads_the_status_it_is_answered():
    received = []
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def answer():
        conn, _ = listener.accept()
        with conn:
            received.append(conn.recv(4096).decode())
            conn.sendall(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n")

    thread = threading.Thread(target=answer)
    thread.start()
    port = listener.getsockname()[1]
    assert (
        access_check.handshake(
            f"http://127.0.0.1:{port}", "/v1/realtime", {"Origin": "https://x.example"}
        )
        == 403
    )
    thread.join()
    listener.close()
    (request,) = received
    assert request.startswith("GET /v1/realtime HTTP/1.1\r\n") and "Upgrade: websocket" in request
    assert "Origin: https://x.example" in request


def test_a_dry_run_prints_both_servers(capsys):
    assert access_check.main(["--out", "/tmp/access", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(line.startswith("patched: ") for line in lines)
    assert "--api-key" not in lines[0] and "--admin-api-key" in lines[1] and "--api-key" in lines[1]
