"""Every route that sglang's HTTP app (sglang.srt.entrypoints.http_server.app) registers, one entry
per (method, path), with its class:

- public: a client's route. `body` names the model FastAPI reads the JSON body into (None: the route
  takes no body; "multipart": a form; "websocket"), `example` is a valid body and `fields` the kind
  of value each field takes (the kinds of gpu/checks/fuzz.py's `value`), which the fuzzer varies.
- admin: administration or debugging (weights, tensors, NCCL groups, pause/continue, abort, flush
  cache, profiling, dump folders, logging...): off by default, open only with the admin API key.

test/patches/test_0200_route_table.py fails when the app registers a route this table lacks or the
table names one the app lacks (a route added or removed upstream is noticed at rebase), and when a
field named here is not a field of the route's body model. The fuzzer (gpu/checks/fuzz.py) sends
generated requests to every route in it.
"""

from dataclasses import dataclass, field

PUBLIC, ADMIN = "public", "admin"


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    cls: str
    body: str | None = None
    example: dict | None = None
    fields: dict = field(default_factory=dict)
    # registered only when this holds (an environment variable, a server argument)
    only_when: str = ""
    note: str = ""


MESSAGES = [{"role": "user", "content": "hi"}]
SAMPLING_KINDS = {
    "max_new_tokens": "count",
    "temperature": "float",
    "top_p": "float",
    "top_k": "top_k",
    "stop": "texts",
    "n": "choices",
    "stop_token_ids": "ids",
    "logit_bias": "bias",
}
OPENAI_KINDS = {
    "model": "text",
    "max_tokens": "count",
    "temperature": "float",
    "top_p": "float",
    "n": "choices",
    "stop": "texts",
    "seed": "seed",
    "logit_bias": "bias",
    "stream": "bool",
    "user": "text",
    "response_format": "object",
    "cache_salt": "text",
    "extra_key": "text",
    "rid": "rid",
}
GENERATE_KINDS = {
    "text": "texts",
    "input_ids": "ids",
    "sampling_params": "sampling",
    "stream": "bool",
    "rid": "rid",
    "return_logprob": "bool",
    "top_logprobs_num": "top",
    "logprob_start_len": "count",
    "token_ids_logprob": "ids",
    "lora_path": "texts",
    "image_data": "texts",
    "video_data": "texts",
    "audio_data": "texts",
    "session_params": "object",
    "custom_logit_processor": "texts",
    "return_hidden_states": "bool",
    "bootstrap_room": "count",
    "bootstrap_host": "texts",
    "extra_key": "texts",
    "priority": "count",
    "input_embeds": "ids",
}
GENERATE = {"text": "hi", "sampling_params": {"max_new_tokens": 4}}
CHAT = {"model": "default", "messages": MESSAGES, "max_tokens": 4}
COMPLETION = {"model": "default", "prompt": "hi", "max_tokens": 4}
EMBED = {"text": "hi"}
OLLAMA_OPTIONS = {"num_predict": 4}


def _public(method, path, body=None, example=None, fields=None, **kw):
    return Route(method, path, PUBLIC, body, example, fields or {}, **kw)


def _admin(method, path, body=None, **kw):
    return Route(method, path, ADMIN, body, **kw)


def _both(methods, route_factory, path, *args, **kw):
    return [route_factory(m, path, *args, **kw) for m in methods]


ROUTES: list[Route] = [
    # Generation: sglang's native API
    *_both(("POST", "PUT"), _public, "/generate", "GenerateReqInput", GENERATE, GENERATE_KINDS),
    *_both(
        ("POST", "PUT"),
        _public,
        "/encode",
        "EmbeddingReqInput",
        EMBED,
        {
            "text": "texts",
            "input_ids": "ids",
            "rid": "rid",
            "image_data": "texts",
            "dimensions": "count",
        },
    ),
    *_both(
        ("POST", "PUT"),
        _public,
        "/classify",
        "EmbeddingReqInput",
        EMBED,
        {"text": "texts", "rid": "rid"},
    ),
    _public(
        "POST",
        "/vertex_generate",
        "VertexGenerateReqInput",
        {"instances": [{"text": "hi"}], "parameters": {"sampling_params": {"max_new_tokens": 4}}},
        {"instances": "objects", "parameters": "object"},
    ),
    _public(
        "GET",
        "/open_session",
        "OpenSessionReqInput",
        {"capacity_of_str_len": 1000},
        {
            "capacity_of_str_len": "count",
            "session_id": "text",
            "streaming": "bool",
            "timeout": "float",
        },
    ),
    _public(
        "POST",
        "/open_session",
        "OpenSessionReqInput",
        {"capacity_of_str_len": 1000},
        {
            "capacity_of_str_len": "count",
            "session_id": "text",
            "streaming": "bool",
            "timeout": "float",
        },
    ),
    *_both(
        ("GET", "POST"),
        _public,
        "/close_session",
        "CloseSessionReqInput",
        {"session_id": "none-such"},
        {"session_id": "text"},
    ),
    _public(
        "POST",
        "/parse_function_call",
        "ParseFunctionCallReq",
        {"text": "hi", "tool_call_parser": "gemma4", "tools": []},
        {"text": "text", "tool_call_parser": "text", "tools": "objects"},
    ),
    _public(
        "POST",
        "/separate_reasoning",
        "SeparateReasoningReqInput",
        {"text": "hi", "reasoning_parser": "gemma4"},
        {"text": "text", "reasoning_parser": "text", "return_blocks": "bool"},
    ),
    # OpenAI-compatible API
    _public(
        "POST",
        "/v1/completions",
        "CompletionRequest",
        COMPLETION,
        {**OPENAI_KINDS, "prompt": "texts", "echo": "bool", "logprobs": "top", "suffix": "text"},
    ),
    _public(
        "POST",
        "/v1/chat/completions",
        "ChatCompletionRequest",
        CHAT,
        {
            **OPENAI_KINDS,
            "messages": "objects",
            "tools": "objects",
            "tool_choice": "text",
            "max_completion_tokens": "count",
            "reasoning_effort": "text",
            "chat_template_kwargs": "object",
            "logprobs": "bool",
            "top_logprobs": "top",
        },
    ),
    _public(
        "POST",
        "/invocations",
        "ChatCompletionRequest",
        CHAT,
        {**OPENAI_KINDS, "messages": "objects"},
        note="SageMaker: the chat route",
    ),
    _public(
        "POST",
        "/v1/embeddings",
        "EmbeddingRequest",
        {"model": "default", "input": "hi"},
        {"model": "text", "input": "texts", "dimensions": "count", "encoding_format": "text"},
    ),
    _public(
        "POST",
        "/v1/classify",
        "ClassifyRequest",
        {"model": "default", "input": "hi"},
        {"model": "text", "input": "texts"},
    ),
    *[
        _public(
            "POST",
            p,
            "TokenizeRequest",
            {"model": "default", "prompt": "hi"},
            {"model": "text", "prompt": "texts", "add_special_tokens": "bool"},
        )
        for p in ("/tokenize", "/v1/tokenize")
    ],
    *[
        _public(
            "POST",
            p,
            "DetokenizeRequest",
            {"model": "default", "tokens": [5, 6]},
            {"model": "text", "tokens": "ids", "skip_special_tokens": "bool"},
        )
        for p in ("/detokenize", "/v1/detokenize")
    ],
    _public(
        "POST",
        "/v1/score",
        "ScoringRequest",
        {"query": "q", "items": ["a", "b"], "label_token_ids": [5, 6]},
        {"query": "texts", "items": "texts", "label_token_ids": "ids", "apply_softmax": "bool"},
    ),
    *_both(
        ("POST", "PUT"),
        _public,
        "/v1/rerank",
        "V1RerankReqInput",
        {"query": "q", "documents": ["a", "b"]},
        {"query": "text", "documents": "texts", "top_n": "count"},
    ),
    _public(
        "POST",
        "/v1/responses",
        "ResponsesRequest",
        {"model": "default", "input": "hi", "max_output_tokens": 4},
        {
            "model": "text",
            "input": "texts",
            "max_output_tokens": "count",
            "temperature": "float",
            "stream": "bool",
            "instructions": "text",
            "tools": "objects",
        },
    ),
    _public("GET", "/v1/responses/{response_id}", note="path parameter only"),
    _public("POST", "/v1/responses/{response_id}/cancel", note="path parameter only"),
    _public("POST", "/v1/audio/transcriptions", "multipart", note="a form with an audio file"),
    _public("WEBSOCKET", "/v1/realtime", "websocket", note="realtime transcription"),
    _public("GET", "/v1/models"),
    _public("GET", "/v1/models/{model:path}"),
    # Anthropic-compatible API
    _public(
        "POST",
        "/v1/messages",
        "AnthropicMessagesRequest",
        {"model": "default", "max_tokens": 4, "messages": MESSAGES},
        {
            "model": "text",
            "max_tokens": "count",
            "messages": "objects",
            "system": "texts",
            "temperature": "float",
            "stop_sequences": "texts",
            "stream": "bool",
            "tools": "objects",
        },
    ),
    _public(
        "POST",
        "/v1/messages/count_tokens",
        "AnthropicCountTokensRequest",
        {"model": "default", "messages": MESSAGES},
        {"model": "text", "messages": "objects", "system": "texts"},
    ),
    # Ollama-compatible API
    _public(
        "POST",
        "/api/generate",
        "OllamaGenerateRequest",
        {"model": "default", "prompt": "hi", "stream": False, "options": OLLAMA_OPTIONS},
        {
            "model": "text",
            "prompt": "text",
            "system": "text",
            "stream": "bool",
            "options": "ollama_options",
        },
    ),
    _public(
        "POST",
        "/api/chat",
        "OllamaChatRequest",
        {"model": "default", "messages": MESSAGES, "stream": False, "options": OLLAMA_OPTIONS},
        {"model": "text", "messages": "objects", "stream": "bool", "options": "ollama_options"},
    ),
    _public("POST", "/api/show", "OllamaShowRequest", {"model": "default"}, {"model": "text"}),
    _public("GET", "/api/tags"),
    # Health and information
    _public("GET", "/"),
    _public("GET", "/health"),
    _public("GET", "/health_generate"),
    _public("GET", "/ping", note="SageMaker health"),
    _public("GET", "/get_model_info"),
    _public("GET", "/model_info"),
    _public("GET", "/get_server_info", note="server arguments: redacted"),
    _public("GET", "/server_info", note="server arguments: redacted"),
    _public("GET", "/get_load"),
    _public("GET", "/v1/loads", note="query parameters dp_rank, include, format"),
    _public("GET", "/metrics", only_when="--enable-metrics (mounted at launch)"),
    # FastAPI's API documentation
    *[
        _admin("GET", p, note="API documentation")
        for p in ("/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc")
    ],
    # Administration and debugging
    _admin("GET", "/get_weight_version"),
    _admin("GET", "/weight_version"),
    *_both(("POST", "PUT"), _admin, "/set_internal_state", "SetInternalStateReq"),
    *_both(("GET", "POST"), _admin, "/flush_cache", note="query parameter timeout"),
    _admin("POST", "/add_external_corpus"),
    _admin("POST", "/remove_external_corpus"),
    _admin("GET", "/list_external_corpora"),
    *_both(("GET", "POST"), _admin, "/clear_hicache_storage_backend"),
    _admin("POST", "/hicache/storage-backend/clear"),
    _admin("PUT", "/hicache/storage-backend", "AttachHiCacheStorageReqInput"),
    _admin("DELETE", "/hicache/storage-backend"),
    _admin("GET", "/hicache/storage-backend"),
    *_both(("GET", "POST"), _admin, "/start_profile", "ProfileReq"),
    *_both(("GET", "POST"), _admin, "/stop_profile"),
    *_both(("GET", "POST"), _admin, "/set_trace_level", note="query parameter level"),
    *_both(("GET", "POST"), _admin, "/freeze_gc"),
    *_both(("GET", "POST"), _admin, "/start_expert_distribution_record"),
    *_both(("GET", "POST"), _admin, "/stop_expert_distribution_record"),
    *_both(("GET", "POST"), _admin, "/dump_expert_distribution_record"),
    _admin("POST", "/update_weights_from_disk", "UpdateWeightFromDiskReqInput"),
    _admin(
        "POST",
        "/init_weights_send_group_for_remote_instance",
        "InitWeightsSendGroupForRemoteInstanceReqInput",
    ),
    _admin("POST", "/send_weights_to_remote_instance", "SendWeightsToRemoteInstanceReqInput"),
    _admin("GET", "/get_remote_instance_transfer_engine_info"),
    _admin("GET", "/remote_instance_transfer_engine_info"),
    _admin("POST", "/init_weights_update_group", "InitWeightsUpdateGroupReqInput"),
    _admin("POST", "/destroy_weights_update_group", "DestroyWeightsUpdateGroupReqInput"),
    _admin("POST", "/update_weights_from_tensor", "UpdateWeightsFromTensorReqInput"),
    _admin("POST", "/update_weights_from_distributed", "UpdateWeightsFromDistributedReqInput"),
    _admin("POST", "/update_weights_from_ipc", "UpdateWeightsFromIPCReqInput"),
    _admin("POST", "/update_weight_version", "UpdateWeightVersionReqInput"),
    *_both(("GET", "POST"), _admin, "/get_weights_by_name", "GetWeightsByNameReqInput"),
    *_both(
        ("GET", "POST"), _admin, "/release_memory_occupation", "ReleaseMemoryOccupationReqInput"
    ),
    *_both(("GET", "POST"), _admin, "/resume_memory_occupation", "ResumeMemoryOccupationReqInput"),
    *_both(("GET", "POST"), _admin, "/weights_checker", "CheckWeightsReqInput"),
    *_both(("GET", "POST"), _admin, "/slow_down", "SlowDownReqInput"),
    _admin("POST", "/load_lora_adapter", "LoadLoRAAdapterReqInput"),
    _admin("POST", "/load_lora_adapter_from_tensors", "LoadLoRAAdapterFromTensorsReqInput"),
    _admin("POST", "/unload_lora_adapter", "UnloadLoRAAdapterReqInput"),
    *_both(("GET", "POST"), _admin, "/configure_logging", "ConfigureLoggingReq"),
    _admin("POST", "/abort_request", "AbortReq"),
    _admin("POST", "/pause_generation", "PauseGenerationReqInput"),
    _admin("POST", "/continue_generation", "ContinueGenerationReqInput"),
    _admin("POST", "/scale_elastic_ep"),
    _admin("GET", "/is_scaling_elastic_ep"),
    _admin("POST", "/dumper/{method}", only_when="DUMPER_SERVER_PORT=reuse"),
]

BY_KEY = {(r.method, r.path): r for r in ROUTES}
assert len(BY_KEY) == len(ROUTES), "a (method, path) listed twice"


def public() -> list[Route]:
    return [r for r in ROUTES if r.cls == PUBLIC]


def admin() -> list[Route]:
    return [r for r in ROUTES if r.cls == ADMIN]


def registered(app) -> set[tuple[str, str]]:
    """(method, path) of every route `app` (a FastAPI app) registers, included routers' too. HEAD is
    left out where GET serves the path (Starlette answers HEAD with the GET route); a websocket
    route's method is WEBSOCKET."""
    pairs = set()

    def walk(routes, prefix=""):
        for route in routes:
            if hasattr(
                route, "original_router"
            ):  # a router included into the app (FastAPI >= 0.120)
                walk(route.original_router.routes, prefix + route.include_context.prefix)
                continue
            path = prefix + route.path
            methods = getattr(route, "methods", None)
            if methods is None:
                pairs.add(
                    ("WEBSOCKET" if "websocket" in type(route).__name__.lower() else "MOUNT", path)
                )
            for method in methods or ():
                pairs.add((method, path))

    walk(app.routes)
    return {(m, p) for m, p in pairs if m != "HEAD" or ("GET", p) not in pairs}
