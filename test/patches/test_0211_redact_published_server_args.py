"""0211: the server arguments the server publishes carry no credentials: /server_info and
/get_server_info (the top level and each DP rank's internal state), Engine.get_server_info, the gRPC
bridge's server info, a request dump's config snapshot and ServerArgs' repr (the start-up log line)
show api_key, admin_api_key, ssl_keyfile_password (and any field named like a credential, nested
configs and JSON config strings too) as "<redacted>"; every other field as it is."""

import dataclasses
import json
import re
import tempfile
from pathlib import Path

import pytest
from gemma4_config import server_args
from stub_server import bearer, serve

from sglang_gemma4.gpu.serve.variants import write_config

SECRETS = {
    "api_key": "sk-user-1234",
    "admin_api_key": "sk-admin-5678",
    "ssl_keyfile_password": "pem-pass-9012",
}
# ServerArgs fields with a credential-like word in their name that hold none (token counts, maps)
NOT_CREDENTIALS = {
    "ssl_keyfile",
    "bucket_time_to_first_token",
    "bucket_inter_token_latency",
    "speculative_token_map",
    "tbo_token_distribution_threshold",
    "kt_max_deferred_experts_per_token",
    "prefill_delayer_token_usage_low_watermark",
}
CREDENTIAL_WORDS = {
    "key",
    "keyfile",
    "password",
    "passwd",
    "secret",
    "credential",
    "credentials",
    "token",
}


@pytest.fixture(scope="module")
def args():
    model_dir = write_config(Path(tempfile.mkdtemp(prefix="sglang-redact-")), "e2b", "causal")
    args = server_args(
        model_dir, "--api-key", SECRETS["api_key"], "--admin-api-key", SECRETS["admin_api_key"]
    )
    # refused without SSL files to decrypt; set after the checks
    object.__setattr__(args, "ssl_keyfile_password", SECRETS["ssl_keyfile_password"])
    return args


def assert_no_secret(text: str):
    leaked = [name for name, secret in SECRETS.items() if secret in text]
    assert leaked == [], f"published: {leaked}"


@pytest.fixture
def client(monkeypatch, args):
    client, manager = serve(monkeypatch, **dataclasses.asdict(args))
    manager.server_args = args
    manager.startup_time = 1.0
    manager.resolved_config_dict = lambda base: dict(base)

    # what each DP rank's scheduler answers (its resolved args and more)
    async def get_internal_state():
        return [{**json.loads(json.dumps(vars(args), default=str)), "last_gen_throughput": 0.0}]

    manager.get_internal_state = get_internal_state
    return client


@pytest.mark.parametrize("route", ["/server_info", "/get_server_info"])
def test_server_info_redacts_secrets(client, args, route):
    answer = client.get(route, headers=bearer(SECRETS["api_key"]))
    assert answer.status_code == 200, answer.text
    assert_no_secret(answer.text)
    info = answer.json()
    for published in (info, info["internal_states"][0]):
        assert {name: published[name] for name in SECRETS} == dict.fromkeys(SECRETS, "<redacted>")
        assert (
            published["context_length"] == args.context_length
            and published["model_path"] == args.model_path
        )


def test_an_unset_secret_stays_none(args):
    from sglang.srt.server_args import redact_secrets

    published = redact_secrets({**dataclasses.asdict(args), "api_key": None})
    assert published["api_key"] is None and published["admin_api_key"] == "<redacted>"


def test_every_credential_field_is_redacted(args):
    from sglang.srt.server_args import redact_secrets

    published = redact_secrets(dataclasses.asdict(args))
    credential_like = [
        f.name
        for f in dataclasses.fields(args)
        if CREDENTIAL_WORDS & set(f.name.split("_")) and f.name not in NOT_CREDENTIALS
    ]
    assert set(SECRETS) <= set(credential_like)
    filled = {name: "x" for name in credential_like}
    assert {
        name: value for name, value in redact_secrets(filled).items() if value != "<redacted>"
    } == {}
    assert [
        name for name in published if name not in SECRETS and published[name] == "<redacted>"
    ] == []


def test_nested_configs_and_json_strings_are_redacted():
    from sglang.srt.server_args import redact_secrets

    extra = json.dumps({"bucket": "kv", "secret_key": "s3-secret-1", "access_key": "s3-access-2"})
    published = redact_secrets(
        {
            "hicache_storage_backend_extra_config": extra,
            "decode": [{"admin_api_key": "sk-admin-5678", "port": 1}],
        }
    )
    text = json.dumps(published)
    assert "s3-secret-1" not in text and "s3-access-2" not in text and "sk-admin-5678" not in text
    assert json.loads(published["hicache_storage_backend_extra_config"])["bucket"] == "kv"
    assert published["decode"][0]["port"] == 1
    plain = '{"bucket": "kv"}'
    assert redact_secrets({"extra": plain})["extra"] == plain


def test_the_logged_server_args_hold_no_secret(args):
    text = repr(args)
    assert_no_secret(text)
    assert (
        re.search(r"\bapi_key='<redacted>'", text)
        and f"context_length={args.context_length}" in text
    )


def test_the_engine_the_grpc_bridge_and_the_dump_snapshot_redact(args):
    import asyncio
    from types import SimpleNamespace

    from sglang.srt.entrypoints.engine import Engine
    from sglang.srt.entrypoints.grpc_bridge import RuntimeHandle
    from sglang.srt.managers.tokenizer_manager import TokenizerManager

    async def get_internal_state():
        return [dict(SECRETS)]

    manager = SimpleNamespace(
        server_args=args,
        resolved_config_dict=lambda base: dict(base),
        startup_time=1.0,
        get_internal_state=get_internal_state,
    )
    bridge = SimpleNamespace(tokenizer_manager=manager, scheduler_info={})
    assert_no_secret(RuntimeHandle.get_server_info(bridge))
    assert_no_secret(json.dumps(TokenizerManager._dump_config_snapshot(manager), default=str))
    engine = SimpleNamespace(
        tokenizer_manager=manager,
        loop=asyncio.new_event_loop(),
        _scheduler_init_result=SimpleNamespace(scheduler_infos=[{}]),
    )
    info = Engine.get_server_info(engine)
    assert_no_secret(json.dumps(info, default=str))
    assert info["context_length"] == args.context_length
