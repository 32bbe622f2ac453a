"""Sampling values that can make a request's probabilities NaN or infinite, sent to a live server in
batches that mix them with good requests: logit biases at and past every bound (+-100, float32's
limits, -inf, -inf on every token but the one the min-new-tokens penalizer also bans), vanishing and
huge repetition penalties, additive penalties past +-2, temperatures from 1e-6 up, top-p/top-k/min-p
at their edges, and their combinations; streaming and not, on /generate and the OpenAI routes.

    python -m sglang_gemma4.gpu.checks.sampling_fuzz --start e2b --out DIR [--requests 400]
        [--seed N]
    python -m sglang_gemma4.gpu.checks.sampling_fuzz --url URL --log SERVER_LOG --out DIR ...

Each round sends --workers requests at once, half of them good (an ordinary prompt, temperature 0,
0.7 or 1), so that the scheduler batches them with the hostile ones. PASS only if no answer is a 5xx
or missing, every good request is answered 2xx with a sensible body, the server never dies, and
afterwards the KV pool has drained and a probe request is answered (gpu/checks/fuzz.py's probe).
Writes DIR/sampling_fuzz.json, with the slowest good answer.
"""

import math
import random
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sglang_gemma4.gpu.checks import fuzz
from sglang_gemma4.gpu.serve.presets import NO_GRAPHS
from sglang_gemma4.gpu.serve.server import Server

TEMPERATURES = [0.0, 1e-6, 1e-5, 1e-3, 0.1, 0.5, 0.7, 1.0, 2.0, 100.0, 1e30, 3.4e38]
BIASES = [
    -math.inf,
    -3.4e38,
    -1e30,
    -101.0,
    -100.0,
    -1.0,
    0.0,
    1e-45,
    1.0,
    100.0,
    100.5,
    1e10,
    3.4e38,
]
REPETITION = [1e-45, 1e-30, 1e-6, 0.009, 0.01, 0.5, 1.0, 2.0, 2.5, 1e6]
ADDITIVE = [-1e30, -2.5, -2.0, 0.0, 2.0, 2.5, 1e30]
TOP_P = [1e-30, 0.01, 0.5, 1.0]
TOP_K = [-1, 1, 2, 50]
MIN_P = [0.0, 0.5, 0.99, 1.0]
STOP_REGEX = ["(a+)+$", "(\\w+\\s?)+$", "(.*)*x", "x.*y", "\\n\\n"]
GOOD_PROMPTS = ["Write a short line about rivers.", "Count: one, two,", "hello"]
MAX_TOKENS = 8


def logit_bias(rng: random.Random, vocab: int) -> tuple[dict, dict]:
    """(logit_bias, the sampling fields that go with it)."""
    # every-token forms are 262144 keys (megabytes of JSON): one pick in nine
    form = rng.choices(["one", "some", "all-but-one", "all"], weights=[3, 4, 1, 1])[0]
    if form == "one":
        return {str(rng.randrange(vocab)): rng.choice(BIASES)}, {}
    if form == "some":
        return {
            str(rng.randrange(vocab)): rng.choice(BIASES) for _ in range(rng.randint(2, 64))
        }, {}
    banned = {str(i): -math.inf for i in range(vocab)}
    if form == "all":
        return banned, {}
    # the one token left is a stop token that min_new_tokens also bans: a row of -inf after the
    # penalizer
    kept = rng.randrange(vocab)
    del banned[str(kept)]
    return banned, {"stop_token_ids": [kept], "min_new_tokens": 4}


def hostile_sampling(rng: random.Random, vocab: int) -> dict:
    """Two to five of the risky fields, each at a risky value, over a low or odd temperature."""
    fields = {"temperature": rng.choice(TEMPERATURES)}
    for name in rng.sample(
        [
            "logit_bias",
            "repetition_penalty",
            "frequency_penalty",
            "presence_penalty",
            "top_p",
            "top_k",
            "min_p",
            "stop_regex",
        ],
        rng.randint(1, 4),
    ):
        if name == "logit_bias":
            bias, extra = logit_bias(rng, vocab)
            fields.update(extra, logit_bias=bias)
        elif name == "repetition_penalty":
            fields[name] = rng.choice(REPETITION)
        elif name in ("frequency_penalty", "presence_penalty"):
            fields[name] = rng.choice(ADDITIVE)
        elif name == "top_p":
            fields[name] = rng.choice(TOP_P)
        elif name == "top_k":
            fields[name] = rng.choice(TOP_K)
        elif name == "min_p":
            fields[name] = rng.choice(MIN_P)
        else:
            fields[name] = rng.choice(STOP_REGEX)
    return fields


def good_sampling(rng: random.Random) -> dict:
    return {"temperature": rng.choice([0.0, 0.7, 1.0])}


def as_request(rng: random.Random, sampling: dict) -> tuple[str, dict]:
    """The sampling fields as a request of a random route, streaming or not."""
    endpoint = rng.choice(fuzz.ENDPOINTS)
    stream = rng.random() < 0.3
    prompt = rng.choice(GOOD_PROMPTS)
    if endpoint == "/generate":
        params = {"max_new_tokens": MAX_TOKENS, **sampling}
        return endpoint, {"text": prompt, "sampling_params": params, "stream": stream}
    fields = dict(sampling)
    if "min_new_tokens" in fields:
        fields["min_tokens"] = fields.pop("min_new_tokens")
    payload = {"model": "default", "max_tokens": MAX_TOKENS, "stream": stream, **fields}
    if endpoint == "/v1/completions":
        payload["prompt"] = prompt
    else:
        payload["messages"] = [{"role": "user", "content": prompt}]
    return endpoint, payload


def rounds(
    rng: random.Random, count: int, vocab: int, width: int
) -> list[list[tuple[str, str, dict]]]:
    """`count` requests as (kind, endpoint, payload) in rounds of `width`, good and hostile
    alternating."""
    cases = []
    for i in range(count):
        kind = "good" if i % 2 == 0 else "hostile"
        sampling = good_sampling(rng) if kind == "good" else hostile_sampling(rng, vocab)
        cases.append((kind, *as_request(rng, sampling)))
    return [cases[i : i + width] for i in range(0, len(cases), width)]


def judge(kind: str, outcome: str) -> bool:
    """A good request must be served; a hostile one served or refused as a client error."""
    return outcome == "ok" if kind == "good" else outcome in ("ok", "client-error")


def verdict(results: list[dict], server_alive: bool, good_answered: bool, drained: bool) -> bool:
    return (
        bool(results)
        and all(r["passed"] for r in results)
        and server_alive
        and good_answered
        and drained
    )


def run(
    url: str,
    log_path: Path,
    out: Path,
    count: int,
    seed: int,
    vocab: int,
    workers: int,
    alive=None,
    time_limit: float = 400,
) -> bool:
    rng = random.Random(seed)
    started = time.monotonic()

    def one(case):
        kind, endpoint, payload = case
        if time.monotonic() - started > time_limit:
            return {
                "kind": kind,
                "endpoint": endpoint,
                "outcome": "not-sent",
                "passed": False,
                "seconds": 0,
                "status": 0,
                "request": "",
                "answer": "not sent: time limit reached",
            }
        sent = time.monotonic()
        status, body = fuzz.send(url, endpoint, payload, timeout=60)
        outcome = fuzz.classify(endpoint, payload.get("stream") is True, status, body)
        return {
            "kind": kind,
            "endpoint": endpoint,
            "status": status,
            "outcome": outcome,
            "passed": judge(kind, outcome),
            "seconds": round(time.monotonic() - sent, 2),
            "request": fuzz.encode(payload).decode()[:300],
            "answer": body[:300],
        }

    results = []
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for batch in rounds(rng, count, vocab, workers):
            results += list(pool.map(one, batch))
    time.sleep(5)  # let aborted requests leave the scheduler before the probe
    server_alive = (alive or (lambda: fuzz.serving(url)))()
    good_answered, drained, lines = (
        fuzz.probe(url, log_path) if server_alive else (False, False, [])
    )
    passed = verdict(results, server_alive, good_answered, drained)
    outcomes: dict = {}
    for r in results:
        key = f"{r['kind']} {r['outcome']}"
        outcomes[key] = outcomes.get(key, 0) + 1
    good_seconds = [r["seconds"] for r in results if r["kind"] == "good" and r["outcome"] == "ok"]
    summary = {
        "seed": seed,
        "requests": count,
        "seconds": round(time.monotonic() - started, 1),
        "outcomes": outcomes,
        "server_deaths": 0 if server_alive else 1,
        "answers_5xx": sum(1 for r in results if r["outcome"] == "server-error"),
        "good_not_served": sum(1 for r in results if r["kind"] == "good" and not r["passed"]),
        "slowest_good_seconds": max(good_seconds, default=None),
        "good_request_answered": good_answered,
        "pool_drained": drained,
        "probe_decode_lines": lines,
        "failures": [r for r in results if not r["passed"]][:30],
        "verdict": "PASS" if passed else "FAIL",
    }
    fuzz.write_summary(out, "sampling_fuzz.json", summary)
    return passed


def main() -> int:
    parser = fuzz.server_parser(
        __doc__,
        requests=400,
        workers=16,
        time_limit=400,
        workers_help="requests in flight at once (one round)",
    )
    args = fuzz.parse_run_args(parser)
    out = Path(args.out)
    server = (
        Server(args.start, "patched", out / f"{args.start}-patched.log", extra=list(NO_GRAPHS))
        if args.start
        else None
    )

    def fuzz_run(url, log_path, seed, **kw):
        return run(url, log_path, out, args.requests, seed, args.vocab, args.workers, **kw)

    return fuzz.run_against_server(args, server, "sampling fuzz", fuzz_run)


if __name__ == "__main__":
    raise SystemExit(main())
