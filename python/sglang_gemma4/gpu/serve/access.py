"""Who a server started with these launch_server flags lets in: the launcher prints it before the
server starts.

The patched build closes sglang's open defaults (patches 0210-0214, 0245): admin routes need
--admin-api-key, /server_info and logs redact keys, CORS is off unless origins are listed, the
realtime websocket checks the API key and a web page's origin, a request may not replace the
chat template, and a multimodal server takes media inline only. A build without those patches
(pristine sglang) keeps upstream's defaults; which one will serve is read from the installed
sglang's files, without importing it.
"""

import argparse
import importlib.util
from pathlib import Path

TRUE = {"1", "true", "yes", "y", "on"}

# Each default: (a file of the sglang package, a name only the patched file holds)
PATCHED = {
    "admin": ("srt/utils/auth.py", "def route_auth_level"),
    "redact": ("srt/server_args.py", "def redact_secrets"),
    "cors": ("srt/server_args.py", "cors_allow_origins"),
    "websocket": ("srt/utils/auth.py", "_websocket_origin_allowed"),
    "template": ("srt/server_args.py", "enable_client_chat_template"),
    "media": ("srt/utils/common.py", "def _check_media_source"),
}


def installed_sglang() -> Path | None:
    """The sglang package the server will import (found, not imported: that takes seconds)."""
    spec = importlib.util.find_spec("sglang")
    return Path(spec.origin).parent if spec and spec.origin else None


def patched_defaults(sglang: Path | None) -> set[str]:
    """Which of PATCHED the sglang package at `sglang` has."""
    if sglang is None:
        return set()
    texts = {}
    for path, _ in PATCHED.values():
        if path not in texts:
            file = sglang / path
            texts[path] = file.read_text(errors="replace") if file.is_file() else ""
    return {name for name, (path, marker) in PATCHED.items() if marker in texts[path]}


def _flags(server_argv: list[str]) -> argparse.Namespace:
    """The access flags among launch_server's arguments (the last of a repeated flag wins, as
    there)."""
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", default="30000")
    p.add_argument("--api-key")
    p.add_argument("--admin-api-key")
    p.add_argument("--cors-allow-origins", nargs="+")
    p.add_argument("--enable-client-chat-template", action="store_true")
    p.add_argument("--enable-multimodal", action="store_true")
    return p.parse_known_args(server_argv)[0]


def summary(server_argv: list[str], env: dict, sglang: Path | None) -> list[str]:
    """One line per default: what the server started with `server_argv` (launch_server's arguments)
    and environment `env` lets through."""
    f, have = _flags(server_argv), patched_defaults(sglang)
    where = f"{f.host}:{f.port}"
    lines = [
        "API routes: need --api-key"
        if f.api_key
        else f"API routes: open to anyone who reaches {where} (no --api-key)"
    ]
    if "admin" not in have:
        lines.append(
            "admin routes (weights, NCCL groups, pause/abort, caches, profiling): OPEN "
            "as upstream sglang "
            "leaves them: to anyone without keys, to every --api-key holder with it"
        )
    elif env.get("SGLANG_OPEN_ADMIN_ROUTES", "").strip().lower() in TRUE:
        lines.append(
            "admin routes: OPEN as upstream sglang leaves them (SGLANG_OPEN_ADMIN_ROUTES is set)"
        )
    elif f.admin_api_key:
        lines.append("admin routes: open to --admin-api-key only")
    else:
        lines.append("admin routes: closed (403); --admin-api-key KEY opens them to that key")
    lines.append(
        "server info and logs: keys redacted"
        if "redact" in have
        else "server info: publishes --api-key and --admin-api-key (upstream sglang)"
    )
    if "cors" not in have:
        lines.append("CORS: any origin, with credentials (upstream sglang)")
    elif not f.cors_allow_origins:
        lines.append("CORS: off; --cors-allow-origins ORIGIN... allows those web origins")
    elif "*" in f.cors_allow_origins:
        lines.append("CORS: any origin, without credentials")
    else:
        lines.append(f"CORS: {' '.join(f.cors_allow_origins)}")
    if "websocket" not in have:
        lines.append("websocket /v1/realtime: no key check (upstream sglang)")
    else:
        lines.append(
            "websocket /v1/realtime: "
            f"{'needs --api-key' if f.api_key else 'no key (no --api-key)'}; "
            "web pages only from CORS origins"
        )
    if "template" not in have:
        lines.append("client chat templates: accepted (upstream sglang)")
    elif f.enable_client_chat_template:
        lines.append("client chat templates: accepted (--enable-client-chat-template)")
    else:
        lines.append("client chat templates: refused; --enable-client-chat-template accepts them")
    if f.enable_multimodal:  # a text-only server refuses media before loading any
        sources = {part.strip() for part in env.get("SGLANG_MM_MEDIA_SOURCES", "").split(",")} & {
            "url",
            "path",
        }
        if "media" not in have:
            lines.append(
                (
                    "media: fetched from any URL and read from any server path a request "
                    "names (upstream sglang)"
                )
            )
        elif not sources:
            lines.append(
                (
                    "media: inline (base64) only; SGLANG_MM_MEDIA_SOURCES=url,path allows "
                    "URLs, server paths"
                )
            )
        else:
            named = {"url": "fetched from URLs", "path": "read from server paths"}
            lines.append(
                "media: inline, and "
                f"{' and '.join(named[s] for s in sorted(sources, reverse=True))} "
                f"(SGLANG_MM_MEDIA_SOURCES)"
            )
    return lines
