"""sglang's HTTP app (sglang.srt.entrypoints.http_server.app) in process, every route, over ASGI:
the real FastAPI app, its middleware and exception handlers, the real TokenizerManager and serving
classes of request_pipeline.py, with the scheduler replaced by a socket that ends a request where it
would be sent to the scheduler. A request comes back as the server would answer it: an HTTP status
and body; `dispatched` says that it reached the scheduler (the answer is then 200 with no body)."""

import asyncio
import functools
import json
from dataclasses import dataclass

import httpx
from request_pipeline import ADMIN_KEY, Dispatched, front_end

KV_POOL_TOKENS = 1 << 20


@dataclass
class Reply:
    status: int
    body: str = ""
    dispatched: bool = False

    def json(self):
        return json.loads(self.body)


class _Scheduler:
    """Where the tokenizer manager sends requests: each send ends the request there."""

    def send(self, *args, **kwargs):
        raise Dispatched()

    send_pyobj = send


def _admin_key_gate(app):
    """sglang's API-key middleware (utils/auth.py) in front of `app` as a server started with
    --admin-api-key ADMIN_KEY has it, without adding middleware to the shared app."""
    from starlette.requests import Request
    from starlette.responses import JSONResponse

    from sglang.srt.utils.auth import _get_auth_level_from_app_and_scope, decide_request_auth

    async def gate(scope, receive, send):
        if scope["type"] == "http":
            request = Request(scope, receive)
            decision = decide_request_auth(
                method=request.method,
                path=request.url.path,
                authorization_header=request.headers.get("authorization"),
                api_key=None,
                admin_api_key=ADMIN_KEY,
                auth_level=_get_auth_level_from_app_and_scope(app, scope),
            )
            if not decision.allowed:
                await JSONResponse({"error": "Unauthorized"}, decision.error_status_code)(
                    scope, receive, send
                )
                return
        await app(scope, receive, send)

    return gate


class App:
    def __init__(self):
        from sglang.srt.entrypoints import http_server
        from sglang.srt.entrypoints.anthropic.serving import AnthropicServing
        from sglang.srt.entrypoints.ollama.serving import OllamaServing
        from sglang.srt.entrypoints.openai import (
            serving_classify,
            serving_completions,
            serving_embedding,
            serving_rerank,
            serving_score,
            serving_tokenize,
        )
        from sglang.srt.entrypoints.openai.serving_transcription import OpenAIServingTranscription

        self.front_end = front_end()
        self.front_end.republish()
        manager = self.front_end.manager
        manager.send_to_scheduler = _Scheduler()
        # the KV pool's size the scheduler reports at start (a small GPU's): 0286's bound
        manager.max_total_num_tokens = KV_POOL_TOKENS
        templates = http_server._global_state.template_manager
        self.app = app = http_server.app
        # What the server's lifespan sets up (it also starts the scheduler's warm-up, left out here)
        state = app.state
        state.openai_serving_completion = serving_completions.OpenAIServingCompletion(
            manager, templates
        )
        state.openai_serving_chat = manager.serving_chat_class(manager, templates)
        state.openai_serving_embedding = serving_embedding.OpenAIServingEmbedding(
            manager, templates
        )
        state.openai_serving_classify = serving_classify.OpenAIServingClassify(manager, templates)
        state.openai_serving_score = serving_score.OpenAIServingScore(manager)
        state.openai_serving_rerank = serving_rerank.OpenAIServingRerank(manager, templates)
        state.openai_serving_tokenize = serving_tokenize.OpenAIServingTokenize(manager, templates)
        state.openai_serving_detokenize = serving_tokenize.OpenAIServingDetokenize(manager)
        state.openai_serving_transcription = OpenAIServingTranscription(manager)
        state.ollama_serving = OllamaServing(manager)
        state.anthropic_serving = AnthropicServing(state.openai_serving_chat)
        try:
            from sglang.srt.entrypoints.openai.serving_responses import OpenAIServingResponses

            state.openai_serving_responses = OpenAIServingResponses(
                manager, templates, enable_prompt_tokens_details=True
            )
        except Exception:  # optional on a server too (the harmony vocabulary is downloaded)
            pass
        self.manager = manager
        self.loop = self.front_end.loop
        # raise_app_exceptions=False: an exception a route lets out is answered 500, as uvicorn does
        self.client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
            base_url="http://sglang",
            timeout=None,
        )
        self.gated_client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=_admin_key_gate(app), raise_app_exceptions=False),
            base_url="http://sglang",
            timeout=None,
        )

    async def _send(
        self,
        method: str,
        path: str,
        content: bytes | None,
        headers: dict | None,
        gated: bool = False,
    ) -> Reply:
        client = self.gated_client if gated else self.client
        try:
            response = await client.request(method, path, content=content, headers=headers)
        except Dispatched:
            return Reply(200, dispatched=True)
        return Reply(response.status_code, response.text)

    def send(
        self,
        method: str,
        path: str,
        body=None,
        *,
        raw: bytes | None = None,
        headers: dict | None = None,
        timeout: float = 30,
        gated: bool = False,
    ) -> Reply:
        """`body` sent as JSON (NaN and lone surrogates as a client's json.dumps writes them), or
        `raw` bytes as they are. `gated`: through sglang's API-key check, as a server started with
        --admin-api-key ADMIN_KEY runs it (admin routes need the key); otherwise the request carries
        the key, unless it names an Authorization of its own."""
        self.front_end.republish()
        headers = dict(headers or {})
        if not gated and not any(name.lower() == "authorization" for name in headers):
            headers["authorization"] = f"Bearer {ADMIN_KEY}"
        content = raw
        if body is not None:
            content = json.dumps(body, allow_nan=True).encode()
            headers.setdefault("content-type", "application/json")
        return self.loop.run_until_complete(
            asyncio.wait_for(self._send(method, path, content, headers, gated), timeout)
        )

    def post(self, path: str, body=None, **kwargs) -> Reply:
        return self.send("POST", path, body, **kwargs)


@functools.cache
def http_app() -> App:
    """One per test process."""
    return App()
