"""KV pool usage over a run, read from the server's own log lines (the scheduler logs every prefill
batch and every `decode_log_interval` decode steps).

    python -m sglang_gemma4.gpu.serve.pool_usage SERVER_LOG [--png FILE] [--by-batch]

Per run: peak running and queued requests, peak full-attention and SWA pool usage, requests
retracted because the pool ran out, and the prompt tokens prefilled and served from the radix cache
(`#cached-token`) — the numbers issue #9 compares across SWA ratios — the median decode rate the
scheduler logged at its largest decode batch and what its lines over 3% below that median add to the
mean step (stalls now and then), and with speculative decoding the median accept length its decode
lines logged. `--by-batch` prints that rate for every decode batch
size: two servers compared at the same batch size measure step speed, apart from scheduling.
"""

import argparse
import json
import re
import statistics
from collections import defaultdict
from datetime import datetime
from pathlib import Path

# a tensor-parallel server tags its scheduler's lines with the rank: "[2026-11-22 16:25:45 TP0] ..."
STAMP = re.compile(
    r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?: [A-Z]+\d+)*\] "
    r"(?:(Prefill|Decode) batch,|KV cache pool is full\. (Retract) requests\.) (.*)$"
)
FIELD = re.compile(r"(#?[a-z][a-z_ -]*?): ([\d.]+)")
GEN_THROUGHPUT = re.compile(r"gen throughput \(token/s\): ([\d.]+)")
POOL_SIZE = re.compile(
    r"\b(full_layer_tokens|swa_layer_tokens|max_total_num_tokens|full_max_total_num_tokens"
    r"|swa_max_total_num_tokens)=(\d+)"
)
# the unified pool (one buffer for both KV kinds) logs each side's cap after the static split's
# sizes, which it then replaces
UNIFIED_CAPS = {
    "full_max_total_num_tokens": "full_layer_tokens",
    "swa_max_total_num_tokens": "swa_layer_tokens",
}


def pool_sizes(log: str) -> dict:
    """The KV pool sizes the server logs at start-up (tokens per layer type)."""
    return {UNIFIED_CAPS.get(name, name): int(value) for name, value in POOL_SIZE.findall(log)}


def parse(log: str) -> list[dict]:
    """One sample per prefill/decode/retract log line: seconds since the first one, the kind and its
    numeric fields (running_req, queue_req, full_token_usage, swa_token_usage, retracted_reqs,
    ...)."""
    samples, start = [], None
    for line in log.splitlines():
        match = STAMP.match(line)
        if not match:
            continue
        when = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S")
        start = start or when
        sample = {
            "t": (when - start).total_seconds(),
            "kind": (match.group(2) or match.group(3)).lower(),
        }
        for name, value in FIELD.findall(match.group(4)):
            key = name.strip().lstrip("#").replace(" ", "_").replace("-", "_")
            sample[key] = float(value)
        rate = GEN_THROUGHPUT.search(match.group(4))
        if rate:
            sample["gen_throughput"] = float(rate.group(1))
        samples.append(sample)
    return samples


def summary(samples: list[dict]) -> dict:
    def peak(key: str) -> float:
        return max((s[key] for s in samples if key in s), default=0.0)

    prefills = [s for s in samples if s["kind"] == "prefill"]
    # the decode rate the scheduler logs at its largest decode batch: a client that receives its
    # stream in bursts can misreport inter-token latency, this cannot. The largest decode batch, not
    # the peak of running requests: that peak can fall on prefill lines only (a pool that fills and
    # retracts)
    rates = decode_rates(samples, min_lines=1)
    accepted = [s["accept_len"] for s in samples if s["kind"] == "decode" and "accept_len" in s]
    return {
        "peak_running_req": peak("running_req"),
        "peak_queue_req": peak("queue_req"),
        "peak_full_token_usage": peak("full_token_usage"),
        "peak_swa_token_usage": peak("swa_token_usage"),
        "peak_full_tokens": peak("full_token"),
        "peak_swa_tokens": peak("swa_token"),
        "prefill_new_tokens": sum(s.get("new_token", 0) for s in prefills),
        "prefill_cached_tokens": sum(s.get("cached_token", 0) for s in prefills),
        # decode ran out of KV pool: these requests went back to the queue and are prefilled again
        "retracted_reqs": sum(
            s.get("retracted_reqs", 0) for s in samples if s["kind"] == "retract"
        ),
        "median_decode_tok_s_at_peak": rates[max(rates)]["median_tok_s"] if rates else 0.0,
        "decode_stall_ms_per_step": decode_stall_ms_per_step(samples, max(rates)) if rates else 0.0,
        **({"median_accept_len": statistics.median(accepted)} if accepted else {}),
    }


def decode_stall_ms_per_step(samples: list[dict], running: int) -> float:
    """What the decode lines at `running` requests that are over 3% slower than their median add to
    the mean decode step (ms): a host stall now and then, which lifts TPOT above the median ITL but
    leaves the median decode rate as it is. A line's rate covers the steps since the line before it,
    so a line right after a prefill (its window holds the prefill, or the idle time before it) is
    left out."""
    rates, after_prefill = [], False
    for s in samples:
        if (
            s["kind"] == "decode"
            and s.get("running_req") == running
            and not after_prefill
            and s.get("gen_throughput")
        ):
            rates.append(s["gen_throughput"])
        after_prefill = s["kind"] == "prefill"
    if not rates:
        return 0.0
    median = statistics.median(rates)
    return (
        1000
        * running
        * sum(1 / rate - 1 / median for rate in rates if rate < 0.97 * median)
        / len(rates)
    )


def decode_rates(samples: list[dict], min_lines: int = 5) -> dict[int, dict]:
    """Per decode batch size (running requests) logged on at least min_lines lines: how many lines
    and their median decode rate (token/s)."""
    rates = defaultdict(list)
    for s in samples:
        if s["kind"] == "decode" and "gen_throughput" in s and "running_req" in s:
            rates[int(s["running_req"])].append(s["gen_throughput"])
    return {
        running: {"lines": len(r), "median_tok_s": statistics.median(r)}
        for running, r in sorted(rates.items())
        if len(r) >= min_lines
    }


def plot(samples: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (pools, requests) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    for key, label in (
        ("full_token_usage", "full-attention pool"),
        ("swa_token_usage", "SWA pool"),
    ):
        points = [(s["t"], s[key]) for s in samples if key in s]
        pools.step([t for t, _ in points], [v for _, v in points], where="post", label=label)
    pools.set_ylabel("usage")
    pools.set_ylim(0, 1.05)
    pools.legend()
    for key, label in (("running_req", "running"), ("queue_req", "queued")):
        points = [(s["t"], s[key]) for s in samples if key in s]
        requests.step([t for t, _ in points], [v for _, v in points], where="post", label=label)
    requests.set_ylabel("requests")
    requests.set_xlabel("seconds since the first batch (values as last logged)")
    requests.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("log")
    parser.add_argument("--png", help="write the usage timeline here")
    parser.add_argument(
        "--by-batch",
        action="store_true",
        help="the median decode rate per decode batch size logged 5 times or more",
    )
    args = parser.parse_args()
    samples = parse(Path(args.log).read_text(errors="replace"))
    print(json.dumps(decode_rates(samples) if args.by_batch else summary(samples), indent=1))
    if args.png:
        plot(samples, Path(args.png), Path(args.log).name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
