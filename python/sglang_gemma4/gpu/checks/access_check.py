"""Access check: a served build lets in what docs/access.md says, on a real server (uvicorn, the
warm-up, the scheduler behind the routes).

    python -m sglang_gemma4.gpu.checks.access_check --out DIR [--variant e2b] [--build patched]
        [--dry-run]
        [-- extra flags]

Two servers of the variant (dummy weights, no CUDA graphs: a quick start): one with no keys, one
with --api-key and --admin-api-key. Each is sent the probes below; a probe passes when the answer's
status (and, where named, a header or the body) is the one the patched build gives. Writes
DIR/access.jsonl (a record per probe) and the servers' logs; exits 1 when a probe of the patched
build fails. A pristine build is expected to fail most of them (its defaults are open).
"""

import argparse
import json
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from sglang_gemma4.gpu.serve.presets import NO_GRAPHS
from sglang_gemma4.gpu.serve.server import Server, http_json

USER, ADMIN = "user-key-0123456789", "admin-key-9876543210"
PAGE = "https://page.example"
CLIENT_TEMPLATE = "{{ messages[0]['content'] }}"
GENERATE = {"text": "Hello", "sampling_params": {"max_new_tokens": 4, "temperature": 0}}
CHAT_WITH_TEMPLATE = {
    "model": "default",
    "messages": [{"role": "user", "content": "hi"}],
    "max_tokens": 4,
    "chat_template_kwargs": {"chat_template": CLIENT_TEMPLATE},
}


@dataclass(frozen=True)
class Probe:
    name: str
    method: str  # or WEBSOCKET: a handshake, answered 101 when it opens
    path: str
    expect: int
    key: str | None = None
    body: dict | None = None
    origin: str | None = None
    absent_header: str | None = None  # a header the answer must not carry
    absent_text: tuple = ()  # strings the body must not hold
    backend: bool = (
        False  # its answer needs what serves the route (serving classes, scheduler, model)
    )


@dataclass
class Answer:
    status: int
    headers: dict = field(default_factory=dict)
    text: str = ""


OPEN_SERVER = [
    Probe("generation is open", "POST", "/generate", 200, body=GENERATE, backend=True),
    Probe("models are listed", "GET", "/v1/models", 200),
    Probe("server info is open", "GET", "/server_info", 200, backend=True),
    Probe("a cache flush is an admin route", "POST", "/flush_cache", 403),
    Probe(
        "loading weights is an admin route",
        "POST",
        "/update_weights_from_disk",
        403,
        body={"model_path": "/x"},
    ),
    Probe("pausing is an admin route", "POST", "/pause_generation", 403, body={}),
    Probe(
        "aborting everything is an admin route",
        "POST",
        "/abort_request",
        403,
        body={"abort_all": True},
    ),
    Probe("the API docs are an admin route", "GET", "/docs", 403),
    Probe(
        "no CORS for a web page",
        "GET",
        "/v1/models",
        200,
        origin=PAGE,
        absent_header="access-control-allow-origin",
    ),
    Probe(
        "a client chat template is refused",
        "POST",
        "/v1/chat/completions",
        400,
        body=CHAT_WITH_TEMPLATE,
        backend=True,
    ),
    Probe("a web page cannot open the websocket", "WEBSOCKET", "/v1/realtime", 403, origin=PAGE),
]
KEYED_SERVER = [
    Probe("generation needs the API key", "POST", "/generate", 401, body=GENERATE),
    Probe(
        "generation with the API key",
        "POST",
        "/generate",
        200,
        key=USER,
        body=GENERATE,
        backend=True,
    ),
    Probe("the admin key is not an API key", "POST", "/generate", 401, key=ADMIN, body=GENERATE),
    Probe("the API key is not an admin key", "POST", "/flush_cache", 401, key=USER),
    Probe("the admin key flushes the cache", "POST", "/flush_cache", 200, key=ADMIN, backend=True),
    Probe(
        "server info hides the keys",
        "GET",
        "/server_info",
        200,
        key=USER,
        absent_text=(USER, ADMIN),
        backend=True,
    ),
    Probe("health needs no key", "GET", "/health", 200, backend=True),
    Probe("the websocket needs the API key", "WEBSOCKET", "/v1/realtime", 403),
]
SETUPS = {
    "open": ([], OPEN_SERVER),
    "keyed": (["--api-key", USER, "--admin-api-key", ADMIN], KEYED_SERVER),
}


def http_send(url: str):
    """send(probe) -> Answer against the server at `url`."""

    def send(probe: Probe) -> Answer:
        headers = {
            **({"Authorization": f"Bearer {probe.key}"} if probe.key else {}),
            **({"Origin": probe.origin} if probe.origin else {}),
        }
        if probe.method == "WEBSOCKET":
            return Answer(handshake(url, probe.path, headers))
        status, text, answer_headers = http_json(
            probe.method,
            url + probe.path,
            probe.body,
            timeout=120,
            headers=headers,
            with_headers=True,
        )
        return Answer(status, {k.lower(): v for k, v in answer_headers.items()}, text)

    return send


def handshake(url: str, path: str, headers: dict) -> int:
    """The HTTP status a websocket handshake is answered with (101: it opened)."""
    where = urlparse(url)
    lines = [
        f"GET {path} HTTP/1.1",
        f"Host: {where.netloc}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        "Sec-WebSocket-Key: c2dsYW5nLWdlbW1hNC1jaGVjaw==",
        "Sec-WebSocket-Version: 13",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    with socket.create_connection((where.hostname, where.port), timeout=30) as s:
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        status_line = s.recv(4096).split(b"\r\n", 1)[0].decode(errors="replace")
    return int(status_line.split()[1])


def judge(probe: Probe, answer: Answer) -> str | None:
    """What is wrong with `answer`, or None. A refused websocket handshake may be answered with any
    4xx: without a websocket library uvicorn serves the handshake as a plain HTTP request."""
    refused_handshake = (
        probe.method == "WEBSOCKET" and probe.expect >= 400 and 400 <= answer.status < 500
    )
    if answer.status != probe.expect and not refused_handshake:
        return f"answered {answer.status}, expected {probe.expect}: {answer.text[:200]}"
    if probe.absent_header and probe.absent_header in answer.headers:
        return f"carries {probe.absent_header}: {answer.headers[probe.absent_header]}"
    leaked = [s for s in probe.absent_text if s in answer.text]
    if leaked:
        return f"the body holds {leaked}"
    return None


def run_probes(probes: list[Probe], send) -> list[dict]:
    records = []
    for probe in probes:
        try:
            problem = judge(probe, send(probe))
        except OSError as e:
            problem = f"{type(e).__name__}: {e}"
        records.append(
            {
                "probe": probe.name,
                "method": probe.method,
                "path": probe.path,
                "ok": problem is None,
                **({"problem": problem} if problem else {}),
            }
        )
    return records


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", required=True)
    p.add_argument("--variant", default="e2b")
    p.add_argument("--build", default="patched", choices=["pristine", "patched"])
    p.add_argument(
        "--dry-run", action="store_true", help="print each server's command line instead of running"
    )
    p.add_argument("extra", nargs="*", help="launch_server flags after --")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    out = Path(args.out)
    records = []
    for name, (flags, probes) in SETUPS.items():
        server = Server(
            args.variant,
            args.build,
            out / f"{args.variant}-{args.build}-{name}.log",
            extra=[*NO_GRAPHS, *args.extra, *flags],
        )
        if args.dry_run:
            print(server.describe())
            continue
        out.mkdir(parents=True, exist_ok=True)
        with server:
            found = run_probes(probes, http_send(server.url))
            died = server.death()
        records += [{"server": name, "build": args.build, **r} for r in found]
        if died:
            records.append(
                {
                    "server": name,
                    "build": args.build,
                    "probe": "the server survives",
                    "ok": False,
                    "problem": died,
                }
            )
    if args.dry_run:
        return 0
    with open(out / "access.jsonl", "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    print("| server | probe | ok |\n|---|---|---|")
    for r in records:
        print(f"| {r['server']} | {r['probe']} | {'ok' if r['ok'] else 'FAIL: ' + r['problem']} |")
    return 0 if all(r["ok"] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
