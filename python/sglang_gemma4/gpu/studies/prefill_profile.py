"""Where a long prefill's time goes, chunk by chunk.

    python -m sglang_gemma4.gpu.studies.prefill_profile --variant 26b-a4b --out DIR
        [--builds pristine patched]
        [--config 'NAME=BUILD [KEY=VALUE ...] [flags]' ...] [--prompt-len 131072] [--chunk 8192]
        [-- server flags for every setup]
    python -m sglang_gemma4.gpu.studies.prefill_profile --out DIR --report
    python -m sglang_gemma4.gpu.studies.prefill_profile --out DIR --from-trace TRACE.json.gz
        --label NAME

For each setup (as in bench.py): start the server (launch preset, dummy weights, its own window),
prefill a warm-up prompt of two chunks (the extend kernels compile outside the trace), then record
one --prompt-len prompt (one output token, --chunked-prefill-size --chunk) with the torch profiler
through /start_profile and /stop_profile (GPU activity only). From the trace, per chunk (its prefix:
the tokens before it): the GPU time of the full-attention layers' extend attention and the
sliding-window layers' (each chunk runs one extend-attention kernel per layer, in layer order), of
the MoE (experts and routing), of the other GEMMs and of everything else, the GPU's idle time within
the step, and the gap since the previous chunk's step (the scheduler between them).
Writes DIR/<variant>-<setup>-chunks.jsonl (a row per chunk; the last also has the whole request's
seconds, profiled) and DIR/prefill-profile.md (a table per setup, from every *-chunks.jsonl in DIR:
setups run in separate calls share it); --report rewrites it, --from-trace reduces a kept trace
(DIR/<variant>-<setup>-trace/) again. No GPU is needed for either.
"""

import argparse
import gzip
import json
import time
from pathlib import Path

from sglang_gemma4.gpu.serve.server import http_json
from sglang_gemma4.gpu.serve.variants import text_config
from sglang_gemma4.gpu.studies.bench import add_setup_arguments, chosen_setups
from sglang_gemma4.gpu.studies.profile import kernel_group
from sglang_gemma4.gpu.studies.step_trace import GPU_EVENTS, server_for, union_us, written_trace

PROMPT_LEN, CHUNK = 131072, 8192
# sglang's Triton extend attention (triton_ops/extend_attention.py): one launch per layer per chunk;
# patch 0105 runs full layers with query-head groups through _fwd_kernel_gqa_packed
EXTEND_KERNELS = ("_fwd_kernel", "_fwd_kernel_unified", "_fwd_kernel_gqa_packed")
COLUMNS = (
    "full_attention_ms",
    "swa_attention_ms",
    "moe_ms",
    "gemm_ms",
    "other_ms",
    "idle_in_step_ms",
    "gap_before_ms",
)


def gpu_kernels(events: list[dict]) -> list[tuple[float, float, str]]:
    """The trace's GPU work as (start, end, name) in time order (us)."""
    return sorted(
        (e["ts"], e["ts"] + e["dur"], e.get("name", ""))
        for e in events
        if e.get("ph") == "X" and e.get("cat") in GPU_EVENTS
    )


def largest_idle(kernels: list[tuple], start: float, end: float) -> tuple[float, float]:
    """The longest stretch within [start, end] in which no kernel runs, as (from, to)."""
    best, busy_until = (start, start), start
    for s, e, _ in kernels:
        if e <= start or s >= end:
            continue
        if s - busy_until > best[1] - best[0]:
            best = (busy_until, s)
        busy_until = max(busy_until, e)
    return (busy_until, end) if end - busy_until > best[1] - best[0] else best


def chunk_layers(kernels: list[tuple], layers: int) -> list[list[tuple]]:
    """The extend-attention launches, `layers` per chunk, chunk by chunk."""
    attention = [k for k in kernels if k[2] in EXTEND_KERNELS]
    if not attention or len(attention) % layers:
        raise ValueError(
            f"{len(attention)} extend-attention kernels are not whole chunks of {layers} layers"
        )
    return [attention[i : i + layers] for i in range(0, len(attention), layers)]


def chunk_spans(kernels: list[tuple], chunks: list[list[tuple]]) -> list[tuple[float, float]]:
    """Each chunk's step on the GPU: from the end of the longest idle stretch between the previous
    chunk's last attention launch and its first, to the start of the one after its last (the trace's
    ends at either end)."""
    splits = [
        largest_idle(kernels, this[-1][1], following[0][0])
        for this, following in zip(chunks, chunks[1:])
    ]
    starts = [kernels[0][0], *(to for _, to in splits)]
    ends = [*(since for since, _ in splits), max(e for _, e, _ in kernels)]
    return list(zip(starts, ends))


def chunk_rows(events: list[dict], layer_types: list[str], chunk: int) -> list[dict]:
    """A row per prefill chunk (ms): its prefix, span, the full-attention and SWA layers' extend
    attention, MoE (experts and routing), other GEMMs, the rest of its kernels, the GPU's idle time
    within the step, and the gap since the previous step ended."""
    kernels = gpu_kernels(events)
    chunks = chunk_layers(kernels, len(layer_types))
    full = {i for i, kind in enumerate(layer_types) if kind == "full_attention"}
    rows, previous_end = [], None
    for index, (launches, (start, end)) in enumerate(zip(chunks, chunk_spans(kernels, chunks))):
        inside = [k for k in kernels if start <= k[0] < end]
        ms = {name: 0.0 for name in COLUMNS}
        for layer, (s, e, _) in enumerate(launches):
            ms["full_attention_ms" if layer in full else "swa_attention_ms"] += (e - s) / 1000
        for s, e, name in inside:
            if name not in EXTEND_KERNELS:
                group = kernel_group(name)
                key = (
                    "moe_ms"
                    if group in ("moe experts", "routing")
                    else "gemm_ms"
                    if group == "gemm"
                    else "other_ms"
                )
                ms[key] += (e - s) / 1000
        ms["idle_in_step_ms"] = (end - start - union_us([k[:2] for k in inside])) / 1000
        ms["gap_before_ms"] = 0.0 if previous_end is None else (start - previous_end) / 1000
        rows.append(
            {
                "chunk": index,
                "prefix_tokens": index * chunk,
                "span_ms": (end - start) / 1000,
                **{key: round(value, 3) for key, value in ms.items()},
            }
        )
        previous_end = end
    return rows


def table(rows: list[dict]) -> str:
    """The chunks' rows as markdown, and their totals."""
    keys = ("span_ms", *COLUMNS)
    lines = [
        "| chunk | prefix tokens | "
        + " | ".join(k.removesuffix("_ms").replace("_", " ") + " (ms)" for k in keys)
        + " |",
        "|---|---|" + "---|" * len(keys),
    ]
    lines += [
        f"| {r['chunk']} | {r['prefix_tokens']} | " + " | ".join(f"{r[k]:.1f}" for k in keys) + " |"
        for r in rows
    ]
    lines.append("| all | | " + " | ".join(f"{sum(r[k] for r in rows):.1f}" for k in keys) + " |")
    return "\n".join(lines)


def report(out: Path) -> str:
    """DIR/prefill-profile.md from every setup's chunk rows in DIR."""
    parts = [
        "# Prefill chunk by chunk",
        "",
        "GPU kernel time per chunk under the torch profiler (it slows the host side: "
        "gaps read longer than "
        "unprofiled); idle in step: the GPU waiting within a chunk's step; gap before: "
        "since the previous "
        "chunk's step.",
        "",
    ]
    for path in sorted(out.glob("*-chunks.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        parts += [f"## {path.name.removesuffix('-chunks.jsonl')}", "", table(rows), ""]
    text = "\n".join(parts)
    (out / "prefill-profile.md").write_text(text)
    return text


def prompt(prompt_len: int, seed: int) -> dict:
    """One prompt of its own ids (no radix-cache hit on another), one greedy output token."""
    return {
        "input_ids": [3000 + (seed * 7919 + i * 13) % 5000 for i in range(prompt_len)],
        "sampling_params": {"max_new_tokens": 1, "temperature": 0},
    }


def profile_one(
    variant: str, setup, flags: list[str], out: Path, prompt_len: int, chunk: int
) -> list[dict]:
    name, trace_dir = f"{variant}/{setup.name}", out / f"{variant}-{setup.name}-trace"
    with server_for(variant, setup, flags, out) as server:
        status, body = http_json(
            "POST", server.url + "/generate", prompt(2 * chunk, 1), timeout=300
        )
        if status != 200:
            raise RuntimeError(f"{name}: the warm-up prompt answered {status}: {body[:300]}")
        status, body = http_json(
            "POST",
            server.url + "/start_profile",
            {"output_dir": str(trace_dir), "activities": ["GPU"], "record_shapes": False},
        )
        if status != 200:
            raise RuntimeError(f"{name}: /start_profile answered {status}: {body[:300]}")
        started = time.monotonic()
        status, body = http_json(
            "POST", server.url + "/generate", prompt(prompt_len, 2), timeout=400
        )
        latency = time.monotonic() - started
        http_json("POST", server.url + "/stop_profile", timeout=300)
        if status != 200:
            raise RuntimeError(
                f"{name}: the {prompt_len}-token prompt answered {status}: {body[:300]}"
            )
        trace = written_trace(trace_dir, timeout=300)
    if trace is None:
        raise RuntimeError(f"{name}: no trace under {trace_dir}")
    return reduce_trace(
        trace, variant, chunk, out / f"{variant}-{setup.name}-chunks.jsonl", request_s=latency
    )


def reduce_trace(trace: Path, variant: str, chunk: int, rows_path: Path, **extra) -> list[dict]:
    """A profiler trace of one prompt's prefill as its chunk rows, written to `rows_path` (`extra`
    on the last)."""
    with gzip.open(trace, "rt") as f:
        rows = chunk_rows(json.load(f)["traceEvents"], text_config(variant)["layer_types"], chunk)
    rows[-1].update(extra)
    rows_path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--variant", default="26b-a4b", choices=["e2b", "e4b", "26b-a4b", "31b"])
    parser.add_argument("--out", required=True, type=Path)
    add_setup_arguments(parser)
    parser.add_argument("--prompt-len", type=int, default=PROMPT_LEN)
    parser.add_argument(
        "--chunk", type=int, default=CHUNK, help="the servers' --chunked-prefill-size"
    )
    parser.add_argument("--report", action="store_true", help="only rewrite DIR/prefill-profile.md")
    parser.add_argument(
        "--from-trace",
        type=Path,
        metavar="TRACE",
        help="only reduce this trace (.json.gz) into "
        "DIR/<variant>-<--label>-chunks.jsonl, then the report",
    )
    parser.add_argument("--label", default="trace", help="the setup's name for --from-trace")
    parser.add_argument(
        "--dry-run", action="store_true", help="print each server's command line instead of running"
    )
    parser.add_argument("flags", nargs="*", help="launch_server flags for every setup, after --")
    args = parser.parse_args()
    flags = [*args.flags, "--chunked-prefill-size", str(args.chunk)]
    if args.from_trace:
        reduce_trace(
            args.from_trace,
            args.variant,
            args.chunk,
            args.out / f"{args.variant}-{args.label}-chunks.jsonl",
        )
    if args.report or args.from_trace:
        print(report(args.out))
        return 0
    if args.dry_run:
        for setup in chosen_setups(args):
            print(server_for(args.variant, setup, flags, args.out).describe())
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    for setup in chosen_setups(
        args
    ):  # the report so far after each, so a run cut short keeps what it profiled
        profile_one(args.variant, setup, flags, args.out, args.prompt_len, args.chunk)
        print(report(args.out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
