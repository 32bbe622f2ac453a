"""Wait for a server someone else started (e.g. `make serve`), then send it one greedy request.

    python -m sglang_gemma4.gpu.checks.ask [--url http://127.0.0.1:30000] [--timeout 400]

Exits non-zero when the server is not ready in time or the request fails.
"""

import argparse
import json

from sglang_gemma4.gpu.serve.server import http_json, wait_ready


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default="http://127.0.0.1:30000")
    parser.add_argument("--timeout", type=float, default=400)
    args = parser.parse_args()
    if not wait_ready(args.url, args.timeout):
        print(f"ask: {args.url} not ready in {args.timeout:.0f} s")
        return 1
    status, body = http_json(
        "POST",
        f"{args.url}/generate",
        {"text": "The patch stack", "sampling_params": {"max_new_tokens": 12, "temperature": 0}},
    )
    print(
        f"ask: /generate -> {status} {json.loads(body)['text'][:120]!r}"
        if status == 200
        else f"ask: {status} {body[:300]}"
    )
    return 0 if status == 200 else 1


if __name__ == "__main__":
    raise SystemExit(main())
