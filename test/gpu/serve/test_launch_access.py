"""The launcher says, before the server starts, who the server lets in: API routes, admin routes,
server info redaction, CORS, the realtime websocket and client chat templates, from the server's
flags and environment and from which build will serve (the patched tree's files hold the patches'
names; a pristine build keeps upstream's open defaults). The harness's profiling runs start their
servers with an admin key and call /start_profile with it."""

import shutil
from pathlib import Path

import patched_tree
import pytest
from sglang_server_args import parse_server_args

from sglang_gemma4.gpu.serve import access, launch, presets, server
from sglang_gemma4.gpu.serve.server import Server

PATCHED_SGLANG = patched_tree.TREE / "python" / "sglang"


@pytest.fixture
def pristine(tmp_path) -> Path:
    """An sglang package whose files hold none of the patches (their names removed)."""
    root = tmp_path / "sglang"
    for path, _ in access.PATCHED.values():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(PATCHED_SGLANG / path, root / path)
        text = (root / path).read_text()
        for other_path, marker in access.PATCHED.values():
            if other_path == path:
                text = text.replace(marker, "upstream")
        (root / path).write_text(text)
    return root


def test_the_patched_tree_has_every_default():
    assert access.patched_defaults(PATCHED_SGLANG) == set(access.PATCHED)


def test_defaults_of_the_patched_build():
    lines = access.summary(["--host", "0.0.0.0", "--port", "8000"], {}, PATCHED_SGLANG)
    assert lines == [
        "API routes: open to anyone who reaches 0.0.0.0:8000 (no --api-key)",
        "admin routes: closed (403); --admin-api-key KEY opens them to that key",
        "server info and logs: keys redacted",
        "CORS: off; --cors-allow-origins ORIGIN... allows those web origins",
        "websocket /v1/realtime: no key (no --api-key); web pages only from CORS origins",
        "client chat templates: refused; --enable-client-chat-template accepts them",
    ]


def test_flags_that_open_them():
    argv = [
        "--api-key",
        "u",
        "--admin-api-key",
        "a",
        "--cors-allow-origins",
        "https://a.example",
        "https://b.example",
        "--enable-client-chat-template",
    ]
    lines = access.summary(argv, {}, PATCHED_SGLANG)
    assert "API routes: need --api-key" in lines
    assert "admin routes: open to --admin-api-key only" in lines
    assert "CORS: https://a.example https://b.example" in lines
    assert "websocket /v1/realtime: needs --api-key; web pages only from CORS origins" in lines
    assert "client chat templates: accepted (--enable-client-chat-template)" in lines
    assert "CORS: any origin, without credentials" in access.summary(
        ["--cors-allow-origins=*"], {}, PATCHED_SGLANG
    )
    opened = access.summary([], {"SGLANG_OPEN_ADMIN_ROUTES": "1"}, PATCHED_SGLANG)
    assert (
        "admin routes: OPEN as upstream sglang leaves them (SGLANG_OPEN_ADMIN_ROUTES is set)"
        in opened
    )
    # the last of a repeated flag wins, as in launch_server; a prefix is not the flag
    assert "API routes: need --api-key" not in access.summary(["--api", "x"], {}, PATCHED_SGLANG)


def test_a_pristine_build_is_named_open(pristine):
    assert access.patched_defaults(pristine) == set()
    lines = access.summary(["--admin-api-key", "a"], {}, pristine)
    assert lines[1].startswith(
        "admin routes (weights, NCCL groups, pause/abort, caches, profiling): OPEN"
    )
    assert "CORS: any origin, with credentials (upstream sglang)" in lines
    assert "client chat templates: accepted (upstream sglang)" in lines
    assert access.summary([], {}, None) == access.summary([], {}, pristine)


def test_the_launcher_prints_them_before_the_server_starts(monkeypatch, capsys):
    execs = []
    monkeypatch.setattr(launch.os, "execv", lambda path, argv: execs.append(argv))
    monkeypatch.setattr(launch.access, "installed_sglang", lambda: PATCHED_SGLANG)
    monkeypatch.delenv("SGLANG_OPEN_ADMIN_ROUTES", raising=False)
    launch.main(
        [
            "e2b",
            "--model",
            "m",
            "--no-prebuild",
            "--admin-api-key",
            "a",
            "--",
            "--cors-allow-origins",
            "https://a.example",
        ]
    )
    printed = capsys.readouterr().out.splitlines()
    assert "launch_gemma4: admin routes: open to --admin-api-key only" in printed
    assert "launch_gemma4: CORS: https://a.example" in printed
    assert (
        "launch_gemma4: client chat templates: refused; --enable-client-chat-template accepts them"
        in printed
    )
    (argv,) = execs
    assert argv[argv.index("--admin-api-key") + 1] == "a"
    assert (
        "a" not in " ".join(line for line in printed if "admin" in line).split()
    )  # the key is not printed


def test_the_access_flags_parse_with_the_patched_sglang():
    args = [
        *presets.server_args("e2b", "/ckpt", api_key="u", admin_api_key="a"),
        "--cors-allow-origins",
        "*",
        "--enable-client-chat-template",
    ]
    parsed = parse_server_args(args)
    assert (parsed.api_key, parsed.admin_api_key, parsed.cors_allow_origins) == ("u", "a", ["*"])
    assert parsed.enable_client_chat_template


def test_profiling_servers_hold_an_admin_key(tmp_path, monkeypatch, argv_of_start):
    sent = []
    s = Server("e2b", "patched", tmp_path / "log", admin_key=server.admin_key())
    argv = argv_of_start(s)
    assert argv[argv.index("--admin-api-key") + 1] == s.admin_key and argv.index(
        "--admin-api-key"
    ) < argv.index("--")
    monkeypatch.setattr(server, "http_json", lambda *a, **k: sent.append((a, k)) or (200, ""))
    s.admin_json("POST", "/start_profile", {"num_steps": 1})
    ((positional, keywords),) = sent
    assert positional[1].endswith("/start_profile") and keywords["headers"] == {
        "Authorization": f"Bearer {s.admin_key}"
    }
    with pytest.raises(RuntimeError, match="admin route"):
        Server("e2b", "patched", tmp_path / "log").admin_json("POST", "/start_profile")


def test_step_trace_starts_its_servers_with_an_admin_key(tmp_path):
    from sglang_gemma4.gpu.studies import bench, step_trace

    one = step_trace.server_for("e2b", bench.Setup("patched", "patched"), [], tmp_path)
    other = step_trace.server_for("e2b", bench.Setup("pristine", "pristine"), [], tmp_path)
    assert one.admin_key and other.admin_key and one.admin_key != other.admin_key


def test_a_multimodal_server_says_where_media_may_come_from(pristine):
    assert not any(line.startswith("media") for line in access.summary([], {}, PATCHED_SGLANG))
    mm = ["--enable-multimodal"]
    (line,) = [x for x in access.summary(mm, {}, PATCHED_SGLANG) if x.startswith("media")]
    assert line.startswith("media: inline (base64) only")
    (line,) = [
        x
        for x in access.summary(mm, {"SGLANG_MM_MEDIA_SOURCES": "path, url"}, PATCHED_SGLANG)
        if x.startswith("media")
    ]
    assert line == (
        "media: inline, and fetched from URLs and read from server paths (SGLANG_MM_MEDIA_SOURCES)"
    )
    (line,) = [x for x in access.summary(mm, {}, pristine) if x.startswith("media")]
    assert "any URL" in line and "(upstream sglang)" in line
