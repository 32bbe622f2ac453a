"""Out-of-vocabulary input_ids: does one bad request take the server down?

    python crash_repro/out-of-vocab-input-ids/repro.py --build pristine|patched --out DIR [--variant e2b]

Starts the build's server (config-only checkpoint, dummy weights, no CUDA graphs: fast start),
sends one /generate whose input_ids hold vocab_size + 7, then a good request.  Prints one JSON line:
the bad request's status and whether the server still answers.  Exit 0 when it survives.
"""

import argparse
import json
import time
from pathlib import Path

from sglang_gemma4.harness.server import Server, http

VOCAB = 262144


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", required=True, choices=["pristine", "patched"])
    parser.add_argument("--variant", default="e2b")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = Path(args.out)
    server = Server(args.variant, args.build, out / f"{args.variant}-{args.build}.log",
                    extra=["--disable-cuda-graph", "--disable-piecewise-cuda-graph"])
    with server:
        try:
            status, body = http("POST", f"{server.url}/generate",
                                {"input_ids": [2, 100, VOCAB + 7], "sampling_params": {"max_new_tokens": 4}}, timeout=60)
        except OSError as e:
            status, body = 0, repr(e)
        time.sleep(3)  # a device-side assert surfaces asynchronously
        try:
            alive, _ = http("POST", f"{server.url}/generate", {"text": "still there?",
                                                               "sampling_params": {"max_new_tokens": 4}}, timeout=30)
        except OSError:
            alive = 0
        result = {"build": args.build, "variant": args.variant, "bad_request_status": status,
                  "bad_request_answer": body[:200], "server_answers_after": alive == 200,
                  "scheduler_exception_in_log": "Scheduler hit an exception" in server.log_path.read_text()}
    print(json.dumps(result))
    return 0 if result["server_answers_after"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
