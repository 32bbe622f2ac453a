"""Smoke check: each variant's server comes up, answers /generate and /v1/chat/completions.

    python -m sglang_gemma4.gpu.checks.smoke --out DIR [--build pristine|patched] [--variants ...]
        [--mtp]
        [--env KEY=VALUE ...] [-- extra flags]

Writes DIR/smoke.jsonl (one record per server) and DIR/<variant>-<build>.log; prints a table.
"""

import argparse
import json
import time
from pathlib import Path

from sglang_gemma4.gpu.serve.pool_usage import pool_sizes
from sglang_gemma4.gpu.serve.presets import full_acceptance_problem
from sglang_gemma4.gpu.serve.server import Server, http_json, patched_env


def check(server: Server) -> dict:
    record = {
        "variant": server.variant + ("+mtp" if server.mtp else ""),
        "build": server.build,
        "ready_s": round(server.ready_s or 0, 1),
    }
    t = time.monotonic()
    status, body = http_json(
        "POST",
        f"{server.url}/generate",
        {
            "text": "The quick brown fox",
            "sampling_params": {"max_new_tokens": 16, "temperature": 0},
        },
    )
    record["generate"] = status
    answer = json.loads(body) if status == 200 else {}
    record["generate_tokens"] = (
        answer.get("meta_info", {}).get("completion_tokens") if answer else body[:300]
    )
    # What a dummy-weight model emits decides whether streamed text (and bench TTFT) is non-empty.
    record["generate_text"] = answer.get("text", "")[:80]
    record["generate_ids"] = answer.get("output_ids", [])[:8]
    if server.mtp:
        meta = answer.get("meta_info", {})
        # the accept length the server reports for this request: its 16 tokens take a few decode
        # steps, and the scheduler logs a decode line (with its accept length) every 40
        record["spec_verify_ct"] = meta.get("spec_verify_ct")
        record["spec_accept_length"] = meta.get("spec_accept_length")
        problem = full_acceptance_problem(record["spec_accept_length"])
        if problem:  # a dummy-weight server whose simulated acceptance did not apply
            record["error"] = problem
    status, body = http_json(
        "POST",
        f"{server.url}/v1/chat/completions",
        {"model": "default", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 16},
    )
    record["chat"] = status
    record["chat_tokens"] = (
        json.loads(body).get("usage", {}).get("completion_tokens") if status == 200 else body[:300]
    )
    record["requests_s"] = round(time.monotonic() - t, 2)
    record.update(pool_sizes(server.log_path.read_text(errors="replace")))
    return record


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True)
    parser.add_argument("--build", default="patched", choices=["pristine", "patched"])
    parser.add_argument("--variants", nargs="+", default=["e2b", "e4b", "26b-a4b", "31b"])
    parser.add_argument(
        "--mtp", action="store_true", help="serve with the preset's MTP assistant draft"
    )
    parser.add_argument(
        "--env",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="the servers' environment, e.g. a patch's switch",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print each server's command line instead of running"
    )
    parser.add_argument("extra", nargs="*", help="launch_server flags after --")
    args = parser.parse_args()
    out = Path(args.out)
    records = []
    for variant in args.variants:
        name = f"{variant}{'-mtp' if args.mtp else ''}-{args.build}"
        server = Server(
            variant,
            args.build,
            out / f"{name}.log",
            mtp=args.mtp,
            extra=args.extra,
            env=patched_env(args.env),
        )
        if args.dry_run:
            print(server.describe())
            continue
        try:
            with server:
                record = check(server)
        except RuntimeError as e:
            record = {"variant": variant, "build": args.build, "error": str(e)[-1500:]}
        records.append(record)
        with open(out / "smoke.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")
        print(json.dumps(record), flush=True)
    if args.dry_run:
        return 0
    print(
        (
            "\n| variant | build | ready s | /generate | chat | full pool | swa pool "
            "|\n|---|---|---|---|---|---|---|"
        )
    )
    for r in records:
        print(
            f"| {r['variant']} | {r['build']} | {r.get('ready_s', 'FAIL')} | "
            f"{r.get('generate', '-')} "
            f"({r.get('generate_tokens', '-')}) | {r.get('chat', '-')} | "
            f"{r.get('full_layer_tokens', '-')} | "
            f"{r.get('swa_layer_tokens', '-')} |"
        )
    return (
        0
        if all(
            r.get("generate") == 200 and r.get("chat") == 200 and "error" not in r for r in records
        )
        else 1
    )


if __name__ == "__main__":
    raise SystemExit(main())
