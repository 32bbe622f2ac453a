"""Malformed and hostile requests against a running server: each must get a clear 4xx (or a clean
error in the stream) and the server must keep serving the next good request.

    python -m sglang_gemma4.gpu.checks.bad_input --url http://127.0.0.1:30000 --out DIR
        [--vocab 262144] [--context 32768]

Writes DIR/bad_input.jsonl and DIR/bad_input.md.  Bounded: one request per case, 60 s timeout each.
"""

import argparse
import json
import math
import socket
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sglang_gemma4.gpu.serve.presets import NO_GRAPHS
from sglang_gemma4.gpu.serve.server import Server, http_json


def aborted_stream(url: str, rid: str | None = None) -> tuple[int, str]:
    """Start a streamed generation and close the socket after the first bytes."""
    parts = urllib.parse.urlsplit(url)
    body = json.dumps(
        {
            "text": "count slowly",
            "stream": True,
            "sampling_params": {"max_new_tokens": 2000, "ignore_eos": True},
            **({"rid": rid} if rid else {}),
        }
    )
    with socket.create_connection((parts.hostname, parts.port), timeout=60) as s:
        s.sendall(
            (
                f"POST /generate HTTP/1.1\r\nHost: {parts.hostname}\r\nContent-Type: "
                "application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n{body}"
            ).encode()
        )
        first = s.recv(200).decode(errors="replace")
    return int(first.split()[1]) if first.startswith("HTTP/") else 0, "closed after first bytes"


def abort_leaves_prefixed_rids(url: str) -> tuple[int, str]:
    """A request whose rid "0" prefixes another's is dropped by its client: the other one must still
    finish (the scheduler matched abort rids by prefix). Its status, and how it finished."""
    other = {
        "text": "count slowly",
        "rid": "0abc-prefix-victim",
        "sampling_params": {"max_new_tokens": 1000, "ignore_eos": True},
    }
    with ThreadPoolExecutor(max_workers=1) as pool:
        victim = pool.submit(http_json, "POST", f"{url}/generate", other, 120)
        time.sleep(0.5)
        aborted_stream(url, rid="0")
        status, body = victim.result()
    try:
        reason = json.loads(body)["meta_info"]["finish_reason"]
    except (ValueError, KeyError, TypeError):
        return 0, body[:200]
    return (status if reason.get("type") == "length" else 0), json.dumps(reason)


def cases(vocab: int, context: int) -> list[tuple[str, str, object]]:
    """(name, endpoint, payload): payload bytes are sent as they are, anything else as JSON."""
    chat = "/v1/chat/completions"
    msg = [{"role": "user", "content": "hi"}]
    return [
        ("invalid JSON", "/generate", b'{"text": "hi", '),
        ("JSON array body", "/generate", b"[1, 2, 3]"),
        ("text of wrong type", "/generate", {"text": 42}),
        ("empty prompt", "/generate", {"text": ""}),
        ("empty input_ids", "/generate", {"input_ids": []}),
        (
            "negative max_new_tokens",
            "/generate",
            {"text": "hi", "sampling_params": {"max_new_tokens": -5}},
        ),
        (
            "huge max_new_tokens",
            "/generate",
            {"text": "hi", "sampling_params": {"max_new_tokens": 10**12}},
        ),
        ("token id >= vocab", "/generate", {"input_ids": [2, vocab + 7]}),
        ("negative token id", "/generate", {"input_ids": [2, -3]}),
        ("prompt longer than context", "/generate", {"input_ids": [2] + [100] * (context + 10)}),
        (
            "temperature negative",
            "/generate",
            {"text": "hi", "sampling_params": {"temperature": -1}},
        ),
        ("top_p above 1", "/generate", {"text": "hi", "sampling_params": {"top_p": 5}}),
        ("top_k zero", "/generate", {"text": "hi", "sampling_params": {"top_k": 0}}),
        (
            "NaN temperature",
            "/generate",
            b'{"text": "hi", "sampling_params": {"temperature": NaN}}',
        ),
        ("unknown sampling key", "/generate", {"text": "hi", "sampling_params": {"bogus": 1}}),
        (
            "NaN logit_bias (sampled)",
            "/generate",
            b'{"text": "hi", "sampling_params": {"temperature": 0.7, "logit_bias": {"17": NaN}}}',
        ),
        (
            "logit_bias value not a number",
            "/generate",
            {"text": "hi", "sampling_params": {"temperature": 0.7, "logit_bias": {"17": "x"}}},
        ),
        ("chat: no messages", chat, {"model": "default", "messages": []}),
        ("chat: messages not a list", chat, {"model": "default", "messages": "hi"}),
        (
            "chat: bad role",
            chat,
            {"model": "default", "messages": [{"role": "wizard", "content": "hi"}]},
        ),
        (
            "chat: negative max_tokens",
            chat,
            {"model": "default", "messages": msg, "max_tokens": -1},
        ),
        ("chat: n = 0", chat, {"model": "default", "messages": msg, "n": 0}),
        (
            "chat: logprobs with huge top_logprobs",
            chat,
            {"model": "default", "messages": msg, "logprobs": True, "top_logprobs": 10**6},
        ),
        (
            "completions: prompt of dicts",
            "/v1/completions",
            {"model": "default", "prompt": [{"a": 1}]},
        ),
        # sampling values that make a probability row NaN: refused, or that request aborted
        (
            "float32-sized logit_bias at temperature 0.5",
            "/generate",
            {"text": "hi", "sampling_params": {"temperature": 0.5, "logit_bias": {"17": 3.4e38}}},
        ),
        (
            "vanishing repetition_penalty",
            "/generate",
            {"text": "hi", "sampling_params": {"temperature": 0.5, "repetition_penalty": 1e-30}},
        ),
        (
            "-inf on every token",
            "/generate",
            {
                "text": "hi",
                "sampling_params": {
                    "temperature": 0.7,
                    "logit_bias": {str(i): -math.inf for i in range(vocab)},
                },
            },
        ),
        (
            "-inf on every token but a stop token min_new_tokens bans",
            "/generate",
            {
                "text": "hi",
                "sampling_params": {
                    "temperature": 0.7,
                    "min_new_tokens": 4,
                    "stop_token_ids": [17],
                    "logit_bias": {str(i): -math.inf for i in range(vocab) if i != 17},
                },
            },
        ),
        # fields the server sets for itself, and its own rid namespace
        (
            "internal positional_embed_overrides",
            "/generate",
            {"text": "hi", "positional_embed_overrides": [1]},
        ),
        (
            "internal http_worker_ipc",
            "/generate",
            {"text": "hi", "http_worker_ipc": "ipc:///tmp/x"},
        ),
        ("extra_key list on one prompt", "/generate", {"text": "hi", "extra_key": ["a", "b"]}),
        (
            "rid in the health checks' namespace",
            "/generate",
            {"text": "hi", "rid": "HEALTH_CHECK_1"},
        ),
    ]


def good_request(url: str) -> bool:
    """Whether the server still answers an ordinary request (False once it has died)."""
    try:
        status, _ = http_json(
            "POST",
            f"{url}/generate",
            {"text": "ok", "sampling_params": {"max_new_tokens": 4}},
            timeout=60,
        )
    except OSError:
        return False
    return status == 200


PREFIX_ABORT = "a dropped rid '0' leaves rid '0abc...' running"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default="http://127.0.0.1:30000")
    parser.add_argument(
        "--start",
        metavar="VARIANT",
        help="start this variant's patched server (dummy weights) first",
    )
    parser.add_argument("--out", required=True)
    parser.add_argument("--vocab", type=int, default=262144)
    parser.add_argument("--context", type=int, default=32768)
    parser.add_argument(
        "--dry-run", action="store_true", help="print the started server's command line instead"
    )
    args = parser.parse_args()
    out = Path(args.out)
    if args.start:
        server = Server(
            args.start, "patched", out / f"{args.start}-patched.log", extra=list(NO_GRAPHS)
        )
        if args.dry_run:
            print(server.describe())
            return 0
        out.mkdir(parents=True, exist_ok=True)
        with server:
            args.url = server.url
            return run(args, out)
    if args.dry_run:
        return 0
    out.mkdir(parents=True, exist_ok=True)
    return run(args, out)


def run(args, out: Path) -> int:
    rows = []
    all_cases = cases(args.vocab, args.context) + [
        ("stream aborted by the client", "/generate", None),
        (PREFIX_ABORT, "/generate", None),
    ]
    for name, path, payload in all_cases:
        started = time.monotonic()
        try:
            if name == PREFIX_ABORT:
                status, body = abort_leaves_prefixed_rids(args.url)
            elif payload is None:
                status, body = aborted_stream(args.url)
            else:
                status, body = http_json("POST", f"{args.url}{path}", payload, timeout=60)
        except OSError as e:
            status, body = 0, f"{type(e).__name__}: {e}"
        alive = good_request(args.url)
        clear = 400 <= status < 500 or (payload is None and status == 200)
        row = {
            "case": name,
            "endpoint": path,
            "status": status,
            "answer": body[:200],
            "seconds": round(time.monotonic() - started, 2),
            "server_alive_after": alive,
            "ok": clear and alive,
        }
        rows.append(row)
        with open(out / "bad_input.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
    table = ["| case | endpoint | status | serves next | ok |", "|---|---|---|---|---|"]
    table += [
        f"| {r['case']} | {r['endpoint']} | {r['status']} | {r['server_alive_after']} | "
        f"{'yes' if r['ok'] else 'NO'} |"
        for r in rows
    ]
    (out / "bad_input.md").write_text("\n".join(table) + "\n")
    print("\n".join(table))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
