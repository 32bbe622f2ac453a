"""Where a served decode step's time goes: on the GPU, or waiting for the scheduler (issue #10).

    python -m sglang_gemma4.gpu.studies.step_trace --variant 26b-a4b --out DIR
        [--builds pristine patched]
        [--config 'NAME=BUILD [KEY=VALUE ...] [flags]' ...] [--steps 60] [--streams 1] [--prompt-len
        128] [-- server flags for every setup]

For each setup (a plain build, or a named variation of one as in bench.py): start the server
(launch preset, dummy weights), stream --streams greedy requests at once (--prompt-len prompt tokens
each, different prompts, 2000 output tokens) and, once each has decoded 256 tokens (the same context
length for every setup: decode attention's cost moves with it), record `--steps` scheduler steps
with the torch profiler through the server's /start_profile (GPU activity only: kernels and CUDA API
calls, so that the profiler adds little to the scheduler's own CPU time; it still slows CUDA calls,
so periods read longer than the TPOT).
From the trace, per decode step (one CUDA-graph replay to the next on the GPU): the period, the
graph's span on the GPU, the kernel time outside the graph (sampling, metadata) and the GPU's idle
time, and how many device-to-host copies ran between the replays (a host read of a GPU value: the
scheduler waiting for the GPU). Idle time well above zero means the step waits on the CPU, not on
the GPU: kernels cannot shorten it.
Each step also keeps its kernels' time by name, inside the graph and between the replays, so that
step-trace.md can say which kernels differ between setups.
Writes DIR/<variant>-<setup>-steps.jsonl (a row per step) and DIR/step-trace.md (medians per setup).
"""

import argparse
import gzip
import json
import statistics
import threading
import time
import urllib.request
from pathlib import Path

from sglang_gemma4.gpu.serve.server import Server, admin_key
from sglang_gemma4.gpu.studies.bench import Setup, add_setup_arguments, chosen_setups

PROMPT_LEN, OUTPUT_LEN, TRACE_AFTER = 128, 2000, 256
GPU_EVENTS = ("kernel", "gpu_memset", "gpu_memcpy")
TOP_KERNELS = 20


def union_us(intervals: list[tuple[float, float]]) -> float:
    """Total length of the union of (start, end) intervals."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def busy_between(intervals: list[tuple], start: float, end: float) -> float:
    """Time within [start, end] covered by the union of (start, end, ...) intervals."""
    return union_us(
        [(max(s, start), min(e, end)) for s, e, *_ in intervals if e > start and s < end]
    )


def short_name(kernel: str) -> str:
    """A kernel's name cut to its first 90 characters (a C++ name runs to a page; its start names
    the kernel and its functor)."""
    return kernel.removeprefix("void ")[:90]


def time_by_name(kernels) -> dict[str, float]:
    """Summed duration per short kernel name of (start, end, name) intervals."""
    times: dict[str, float] = {}
    for start, end, name in kernels:
        key = short_name(name)
        times[key] = times.get(key, 0.0) + end - start
    return times


def graph_replays(events: list[dict]) -> tuple[list[list[tuple]], list[tuple]]:
    """The GPU work of each CUDA-graph replay, (start, end, name) sorted, replays in time order; and
    the GPU intervals outside every replay."""
    launches = {
        e["args"]["correlation"]
        for e in events
        if e.get("ph") == "X" and e.get("name", "").startswith("cudaGraphLaunch")
    }
    replays, others = {}, []
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in GPU_EVENTS:
            continue
        correlation = e.get("args", {}).get("correlation")
        if correlation in launches:
            replays.setdefault(correlation, []).append(
                (e["ts"], e["ts"] + e["dur"], e.get("name", ""))
            )
        else:
            others.append((e["ts"], e["ts"] + e["dur"], e.get("name", "")))
    return sorted((sorted(kernels) for kernels in replays.values()), key=lambda k: k[0][0]), others


def decode_steps(events: list[dict]) -> list[dict]:
    """A row per CUDA-graph replay that has a next one (us): period to the next replay's first
    kernel, the replay's span and busy time, and what the GPU did before the next replay: its busy
    time, its device-to-host copies and its idle time."""
    replays, others = graph_replays(events)
    host_reads = [
        e["ts"]
        for e in events
        if e.get("ph") == "X" and e.get("cat") == "gpu_memcpy" and "DtoH" in e.get("name", "")
    ]
    rows = []
    for this, following in zip(replays, replays[1:]):
        start, end, next_start = this[0][0], max(e for _, e, _ in this), following[0][0]
        outside = busy_between(others, end, next_start)
        between = [k for k in others if end <= k[0] < next_start]
        rows.append(
            {
                "period_us": next_start - start,
                "graph_span_us": end - start,
                "graph_busy_us": union_us([k[:2] for k in this]),
                "graph_kernels": len(this),
                "outside_graph_busy_us": outside,
                "idle_us": next_start - end - outside,
                "host_reads": sum(end <= ts < next_start for ts in host_reads),
                "graph_kernel_us": time_by_name(this),
                "outside_kernel_us": time_by_name(between),
            }
        )
    return rows


def summarize(rows_by_setup: dict[str, list[dict]]) -> str:
    keys = ("period_us", "graph_span_us", "graph_busy_us", "outside_graph_busy_us", "idle_us")
    lines = [
        "| setup | steps | "
        + " | ".join(f"median {k[:-3].replace('_', ' ')} (us)" for k in keys)
        + " | steps with a host read |",
        "|---|---|" + "---|" * (len(keys) + 1),
    ]
    for setup, rows in rows_by_setup.items():
        medians = [statistics.median(r[k] for r in rows) if rows else float("nan") for k in keys]
        reads = sum(r.get("host_reads", 0) > 0 for r in rows)
        lines.append(
            f"| {setup} | {len(rows)} | "
            + " | ".join(f"{m:.1f}" for m in medians)
            + f" | {reads} |"
        )
    return "\n".join(lines)


def kernel_table(rows_by_setup: dict[str, list[dict]], top: int = TOP_KERNELS) -> str:
    """Median us per step of each kernel (by short name, a step without it counting 0), inside the
    graph and between replays, for the `top` kernels largest in any setup: where two setups' steps
    differ."""
    medians: dict[tuple[str, str], dict[str, float]] = {}
    for setup, rows in rows_by_setup.items():
        for where, key in (("graph", "graph_kernel_us"), ("between", "outside_kernel_us")):
            names = {name for row in rows for name in row.get(key, {})}
            for name in names:
                medians.setdefault((where, name), {})[setup] = statistics.median(
                    row[key].get(name, 0.0) for row in rows
                )
    largest = sorted(medians, key=lambda k: -max(medians[k].values()))[:top]
    setups = list(rows_by_setup)
    lines = [
        "| where | kernel | " + " | ".join(f"{s} (us)" for s in setups) + " |",
        "|---|---|" + "---|" * len(setups),
    ]
    for where, name in largest:
        lines.append(
            f"| {where} | `{name}` | "
            + " | ".join(f"{medians[(where, name)].get(s, 0.0):.1f}" for s in setups)
            + " |"
        )
    return "\n".join(lines)


def stream_tokens(url: str, request: dict, count: int, decoded: threading.Event) -> None:
    """Stream the request to its end; set `decoded` once `count` chunks (one a decode step) came."""
    data = json.dumps(request).encode()
    http = urllib.request.Request(
        url + "/generate", data=data, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(http, timeout=600) as response:
        for chunks, _ in enumerate(line for line in response if line.startswith(b"data:")):
            if chunks + 1 >= count:
                decoded.set()
    decoded.set()  # a short stream must not leave the waiter to its timeout


def written_trace(trace_dir: Path, timeout: float) -> Path | None:
    """The profiler's trace once its size has held for 3 s (it is written after the last step)."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        traces = sorted(trace_dir.glob("*.trace.json.gz"))
        size = traces[-1].stat().st_size if traces else None
        if size and size == last:
            return traces[-1]
        last = size
        time.sleep(3)
    return None


def server_for(variant: str, setup: Setup, flags: list[str], out: Path) -> Server:
    return Server(
        variant,
        setup.build,
        out / f"{variant}-{setup.name}.server.log",
        extra=[*flags, *setup.flags],
        env=setup.env,
        admin_key=admin_key(),
    )


def request_for(stream: int, prompt_len: int, output_len: int = OUTPUT_LEN) -> dict:
    """A greedy streamed /generate request; each stream its own prompt (no radix-cache hits between
    them)."""
    return {
        "input_ids": [1000 + (stream * 7 + i) % 5000 for i in range(prompt_len)],
        "stream": True,
        "sampling_params": {"max_new_tokens": output_len, "ignore_eos": True, "temperature": 0},
    }


def trace_one(
    variant: str,
    setup: Setup,
    steps: int,
    flags: list[str],
    out: Path,
    streams: int = 1,
    prompt_len: int = PROMPT_LEN,
) -> list[dict]:
    name = f"{variant}/{setup.name}"
    trace_dir = out / f"{variant}-{setup.name}-trace"
    with server_for(variant, setup, flags, out) as server:
        decoded = [threading.Event() for _ in range(streams)]
        done = [
            threading.Thread(
                target=stream_tokens,
                args=(server.url, request_for(i, prompt_len), TRACE_AFTER, event),
            )
            for i, event in enumerate(decoded)
        ]
        for thread in done:
            thread.start()
        deadline = time.monotonic() + 300
        if not all(event.wait(max(0.0, deadline - time.monotonic())) for event in decoded):
            raise RuntimeError(
                f"{name}: the {streams} requests did not decode {TRACE_AFTER} tokens in 300 s"
            )
        status, body = server.admin_json(
            "POST",
            "/start_profile",
            {
                "output_dir": str(trace_dir),
                "num_steps": steps,
                "activities": ["GPU"],
                "record_shapes": False,
            },
        )
        if status != 200:
            raise RuntimeError(f"{name}: /start_profile answered {status}: {body[:300]}")
        for thread in done:
            thread.join()
        trace = written_trace(trace_dir, timeout=300)
    if trace is None:
        raise RuntimeError(f"{name}: no trace under {trace_dir}")
    with gzip.open(trace, "rt") as f:
        rows = decode_steps(json.load(f)["traceEvents"])
    if not rows:
        raise RuntimeError(f"{name}: no CUDA-graph replays matched in {trace}")
    with open(out / f"{variant}-{setup.name}-steps.jsonl", "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--variant", default="26b-a4b", choices=["e2b", "e4b", "26b-a4b", "31b"])
    parser.add_argument("--out", required=True)
    add_setup_arguments(parser)
    parser.add_argument("--steps", type=int, default=60, help="scheduler steps recorded per setup")
    parser.add_argument(
        "--streams", type=int, default=1, help="requests decoding at once (each its own prompt)"
    )
    parser.add_argument(
        "--prompt-len", type=int, default=PROMPT_LEN, help="prompt tokens of each request"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print each server's command line instead of running"
    )
    parser.add_argument("flags", nargs="*", help="launch_server flags for every setup, after --")
    args = parser.parse_args()
    out = Path(args.out)
    if args.dry_run:
        for setup in chosen_setups(args):
            print(server_for(args.variant, setup, args.flags, out).describe())
        return 0
    out.mkdir(parents=True, exist_ok=True)
    rows = {}
    for setup in chosen_setups(
        args
    ):  # the table so far after each, so a run cut short keeps what it traced
        rows[setup.name] = trace_one(
            args.variant, setup, args.steps, args.flags, out, args.streams, args.prompt_len
        )
        table = (
            f"# {args.variant}: {args.streams} request(s) of {args.prompt_len} prompt "
            f"tokens decoding, {args.steps} "
            f"steps traced per setup\n\n{summarize(rows)}\n\nKernels, median us per step:\n\n"
            f"{kernel_table(rows)}\n"
        )
        (out / "step-trace.md").write_text(table)
        print(table, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
