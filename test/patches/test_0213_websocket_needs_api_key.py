"""0213: the /v1/realtime websocket is checked like an HTTP request: with --api-key set, a handshake
without that key (or with another) is refused before the handler runs (HTTP 403 to the client);
with the key it opens. Browsers apply no CORS to websockets, so a handshake from a web page (it
carries an Origin) opens only for the origins --cors-allow-origins lists; clients that send no
Origin are not affected."""

import pytest
from starlette.websockets import WebSocketDisconnect
from stub_server import bearer, serve

import sglang.srt.entrypoints.http_server as http_server


@pytest.fixture
def opened(monkeypatch):
    """The websockets that reached the realtime handler; each is answered "ready" and closed."""
    opened = []

    class Transcription:
        async def handle_websocket(self, ws):
            opened.append(ws.headers.get("origin"))
            await ws.accept()
            await ws.send_text("ready")
            await ws.close()

    monkeypatch.setattr(
        http_server.app.state, "openai_serving_transcription", Transcription(), raising=False
    )
    return opened


def connect(client, headers=None) -> str:
    with client.websocket_connect("/v1/realtime", headers=headers or {}) as ws:
        return ws.receive_text()


def refused(client, headers=None) -> bool:
    try:
        connect(client, headers)
    except WebSocketDisconnect as e:
        return e.code == 1008
    return False


def test_without_keys_the_websocket_opens(monkeypatch, opened):
    client, _ = serve(monkeypatch)
    assert connect(client) == "ready" and opened == [None]


def test_with_an_api_key_the_websocket_needs_it(monkeypatch, opened):
    client, _ = serve(monkeypatch, api_key="user", admin_api_key="admin")
    assert refused(client)
    assert refused(client, bearer("wrong"))
    assert refused(client, bearer("admin"))
    assert opened == []
    assert connect(client, bearer("user")) == "ready" and opened == [None]


def test_a_web_page_opens_it_only_from_a_listed_origin(monkeypatch, opened):
    client, _ = serve(monkeypatch)
    assert refused(client, {"Origin": "https://page.example"})
    client, _ = serve(monkeypatch, cors_allow_origins=["https://app.example"])
    assert refused(client, {"Origin": "https://page.example"})
    assert opened == []
    assert connect(client, {"Origin": "https://app.example"}) == "ready"
    assert opened == ["https://app.example"]
