"""sglang's HTTP app (sglang.srt.entrypoints.http_server.app: its routes and middleware) in process,
with the tokenizer manager replaced by a stub: for tests of which requests the server lets through,
not of what the handlers then do. The stub records every attribute a handler reads from it, so a
test can tell that a request reached a handler (the scheduler behind it is never there)."""

import re
from types import SimpleNamespace

from fastapi.testclient import TestClient
from starlette.routing import WebSocketRoute

import sglang.srt.entrypoints.http_server as http_server

TOKEN_LIMIT = 32768


class StubTokenizerManager:
    """What /v1/models and /flush_cache read, real; anything else a handler reads is recorded and
    answered with an awaitable that fails."""

    def __init__(self, **server_args):
        self.server_args = SimpleNamespace(
            **{"api_key": None, "admin_api_key": None, "enable_lora": False, **server_args}
        )
        self.served_model_name = "gemma-4"
        self.model_config = SimpleNamespace(context_len=TOKEN_LIMIT)
        self.reached: list[str] = []

    async def flush_cache(self, timeout_s=0.0):
        self.reached.append("flush_cache")
        return SimpleNamespace(success=True, message="")

    async def freeze_gc(self):
        self.reached.append("freeze_gc")

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        self.reached.append(name)

        async def not_served(*args, **kwargs):
            raise RuntimeError(f"the stub serves no {name}")

        return not_served


def serve(monkeypatch, **server_args) -> tuple[TestClient, StubTokenizerManager]:
    """A client of the app whose tokenizer manager is a stub with these server args (api_key=...,
    admin_api_key=...). An exception a handler lets out is answered 500, as uvicorn does."""
    manager = StubTokenizerManager(**server_args)
    monkeypatch.setattr(
        http_server,
        "_global_state",
        SimpleNamespace(tokenizer_manager=manager, template_manager=None, scheduler_info={}),
    )
    http_server.app.middleware_stack = (
        None  # built again on the next request, for these server args
    )
    return TestClient(http_server.app, raise_server_exceptions=False), manager


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def http_routes(app=None) -> list[tuple[str, str, object]]:
    """(method, a path it serves, endpoint) for every HTTP route of the app, those of included
    routers too; path parameters filled in with "x"."""
    app = app or http_server.app
    found = []

    def walk(routes):
        for route in routes:
            included = getattr(route, "original_router", None)
            if included is not None:
                walk(included.routes)
                continue
            if isinstance(route, WebSocketRoute) or not getattr(route, "methods", None):
                continue
            path = re.sub(r"\{[^}]*\}", "x", route.path)
            for method in sorted(route.methods - {"HEAD"}) or ["HEAD"]:
                found.append((method, path, route.endpoint))

    walk(app.router.routes)
    return found
