"""Crash repros (crash_repro/NAME/): does one bad request take a build's server down?

    python -m sglang_gemma4.gpu.checks.repro --case NAME --build pristine|patched --out DIR
        [--variant e2b]

Starts the build's server (config-only checkpoint, dummy weights, no CUDA graphs: a fast start),
sends the case's request (to /generate or the case's route), then a good one.  Prints one JSON line:
the bad request's status and whether the server still answers.  Exit 0 when it survives.
"""

import argparse
import json
import time
from pathlib import Path

from sglang_gemma4.gpu.checks.bad_input import good_request
from sglang_gemma4.gpu.serve.presets import NO_GRAPHS
from sglang_gemma4.gpu.serve.server import Server, http_json

VOCAB = 262144
# name: raw body (bytes, so that non-standard JSON such as NaN goes as sent) for /generate, or
# (route, body)
CASES = {
    "out-of-vocab-input-ids": json.dumps(
        {"input_ids": [2, 100, VOCAB + 7], "sampling_params": {"max_new_tokens": 4}}
    ).encode(),
    "nan-temperature": (
        b'{"text": "hi", "sampling_params": {"temperature": NaN, "max_new_tokens": 4}}'
    ),
    "huge-top-logprobs": json.dumps(
        {
            "text": "hi",
            "return_logprob": True,
            "top_logprobs_num": 10**6,
            "sampling_params": {"max_new_tokens": 4},
        }
    ).encode(),
    # sampled (temperature > 0): the bias reaches the softmax
    "nan-logit-bias": (
        b'{"text": "hi", "sampling_params": {"temperature": 0.7, "logit_bias": {"17": NaN}, '
        b'"max_new_tokens": 4}}'
    ),
    # xgrammar's regex converter reads past a pattern that starts with NUL: SIGSEGV in the scheduler
    "grammar-leading-nul": json.dumps(
        {"text": "hi", "sampling_params": {"max_new_tokens": 4, "regex": "\x00"}}
    ).encode(),
    # a score request naming no label token: pristine answers 500 ("output_logprobs is empty")
    "score-empty-label-tokens": (
        "/v1/score",
        json.dumps({"query": "q", "items": "x" * 300, "label_token_ids": []}).encode(),
    ),
}


def route_and_body(case: str) -> tuple[str, bytes]:
    spec = CASES[case]
    return spec if isinstance(spec, tuple) else ("/generate", spec)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--case", required=True, choices=sorted(CASES))
    parser.add_argument("--build", required=True, choices=["pristine", "patched"])
    parser.add_argument("--variant", default="e2b")
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--dry-run", action="store_true", help="print the server's command line instead"
    )
    args = parser.parse_args()
    server = Server(
        args.variant,
        args.build,
        Path(args.out) / f"{args.case}-{args.variant}-{args.build}.log",
        extra=list(NO_GRAPHS),
    )
    if args.dry_run:
        print(server.describe())
        return 0
    with server:
        try:
            route, request = route_and_body(args.case)
            status, body = http_json("POST", f"{server.url}{route}", request, timeout=60)
        except OSError as e:
            status, body = 0, repr(e)
        time.sleep(3)  # a device-side assert surfaces asynchronously
        result = {
            "case": args.case,
            "build": args.build,
            "variant": args.variant,
            "bad_request_status": status,
            "bad_request_answer": body[:200],
            "server_answers_after": good_request(server.url),
            "scheduler_exception_in_log": "Scheduler hit an exception"
            in server.log_path.read_text(),
        }
    print(json.dumps(result))
    return 0 if result["server_answers_after"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
