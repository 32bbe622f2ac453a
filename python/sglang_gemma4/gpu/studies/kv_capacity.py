"""Where a server's GPU memory goes, and how many full-attention tokens long requests get, read
from its start-up log: sglang (0.5.12's and 0.5.17's wording) and vLLM (v1 engine).

    python -m sglang_gemma4.gpu.studies.kv_capacity LOG [LOG ...] [--variant 26b-a4b]
        [--context 32768]
        [--gpu-total-gib 79.19 | --gpu-txt OUT/gpu.txt] [--json]

A LOG may be a glob pattern, expanded when the report runs (the runner's kv-capacity experiment
names the logs its servers will write); a pattern that matches nothing adds nothing, a plain path
that does not exist is an error.

Per log, in GiB: the memory the fraction grants (sglang: --mem-fraction-static x the memory free
before the weights load; vLLM: --gpu-memory-utilization x the GPU's total, given by
--gpu-total-gib or --gpu-txt), the weights, each KV pool (tokens, GiB, bytes per token over all
its layers), other static buffers, CUDA graphs, what is left for activations, and the gap between
the grant and what the server holds.  Then the KV capacity seen by requests of --context tokens: how
many fit at once and the full-attention tokens they hold together.  An sglang request needs its
context in the full-attention pool and one sliding window plus a page in the SWA pool, what its
scheduler reserves (the window of the variant whose checkpoint the log's model path names, else
--variant's); vLLM logs its own concurrency at its context length.
The sizes a log does not state are left blank, not guessed.
"""

import argparse
import glob
import json
import re
import sys
from pathlib import Path

from sglang_gemma4.gpu.serve.pool_usage import pool_sizes
from sglang_gemma4.gpu.serve.variants import VARIANTS

NUMBER = r"([\d,]+(?:\.\d+)?)"
SGLANG = {
    "free_at_start_gib": r"Load weight begin\. avail mem=([\d.]+) GB",
    "weights_gib": r"Load weight end\..*?mem usage=([\d.]+) GB",
    "kv_total_gib": r"SWAKVPool mem usage: ([\d.]+) GB",
    "free_after_pools_gib": r"Memory pool end\. avail mem=([\d.]+) GB",
    "free_after_start_gib": r"max_total_num_tokens=\d+,.*?available_gpu_mem=([\d.]+) GB",
    "max_running_requests": r"max_total_num_tokens=\d+,.*?max_running_requests=(\d+)",
    "context_len": r"max_total_num_tokens=\d+,.*?context_len=(\d+)",
    "mem_fraction_static": r"mem_fraction_static=([\d.]+)",
    "page_size": r"page_size=(\d+)",
}
# "[Full |SWA ]KV Cache is allocated. [dtype: ..., ]#tokens: N, K size: a GB, V size: b GB" (or "KV
# size")
KV_ALLOCATED = re.compile(
    r"KV Cache is allocated\. (?:dtype: [\w.]+, )?#tokens: (\d+), "
    r"(?:K size: ([\d.]+) GB, V size: ([\d.]+) GB|KV size: ([\d.]+) GB)"
)
# decode, prefill and draft captures; 0.5.12: "Capture cuda graph end. Time elapsed: ... mem usage=X
# GB."
GRAPH_END = re.compile(r"Capture [\w ]*?(?:CUDA|cuda) graph end\..*?mem usage=([\d.]+) GB")
# sglang's unified pool (one buffer for both KV kinds): the buffer's bytes, beside each side's cap
UNIFIED_BYTES = re.compile(r"total_bytes=(\d+) \(=[\d.]+ GB\), full_max_total_num_tokens=")
POST_CAPTURE_KV = re.compile(
    r"Post-capture KV sizing: KV cache allocated\..*?KV size: ([\d.]+) GB, "
    r"avail mem=([\d.]+) GB"
)
VLLM = {
    "weights_gib": r"Model loading took ([\d.]+) GiB",
    "kv_total_gib": r"Available KV cache memory: (-?[\d.]+) GiB",
    "graphs_estimated_gib": r"Estimated CUDA graph memory: ([\d.]+) GiB",
    "graphs_gib": r"Graph capturing finished in [\d.]+ secs?, took (-?[\d.]+) GiB",
    "kv_tokens": rf"GPU KV cache size: {NUMBER} tokens",
    "context_len": rf"Maximum concurrency for {NUMBER} tokens per request",
    "max_concurrency": r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x",
    "gpu_memory_utilization": r"gpu[_-]memory[_-]utilization['\"]?\s*[=:]\s*([\d.]+)",
}


def _first(pattern: str, text: str):
    match = re.search(pattern, text)
    if not match:
        return None
    value = match.group(1).replace(",", "")
    return float(value) if "." in value else int(value)


def _last(pattern: re.Pattern, text: str):
    matches = pattern.findall(text)
    return matches[-1] if matches else None


def is_vllm(text: str) -> bool:
    return "GPU KV cache size:" in text or "Model loading took" in text


def parse_sglang(text: str) -> dict:
    found = {key: _first(pattern, text) for key, pattern in SGLANG.items()}
    pools = pool_sizes(text)  # the unified pool's caps replace the static split's sizes
    found["full_tokens"] = pools.get("full_layer_tokens")
    found["swa_tokens"] = pools.get("swa_layer_tokens")
    # each pool's allocation line, told apart by its token count (0.5.12's lines carry no label)
    sizes = {}
    for tokens, k, v, kv in KV_ALLOCATED.findall(text):
        sizes[int(tokens)] = float(kv) if kv else float(k) + float(v)
    found["full_gib"] = sizes.get(found["full_tokens"])
    found["swa_gib"] = (
        sizes.get(found["swa_tokens"]) if found["swa_tokens"] != found["full_tokens"] else None
    )
    if found["kv_total_gib"] is None and found["full_gib"] is not None:
        found["kv_total_gib"] = found["full_gib"] + (found["swa_gib"] or 0.0)
    post_capture = _last(POST_CAPTURE_KV, text)
    if post_capture:  # the pools were resized after graph capture: that is what the server holds
        found["kv_total_gib"], found["free_after_start_gib"] = (
            float(post_capture[0]),
            float(post_capture[1]),
        )
        found["full_gib"] = found["swa_gib"] = None
    unified = UNIFIED_BYTES.findall(text)
    if unified:  # one buffer: its size, no pool of its own per side
        found["kv_total_gib"] = int(unified[-1]) / 2**30
        found["full_gib"] = found["swa_gib"] = None
    graphs = GRAPH_END.findall(text)
    found["graphs_gib"] = sum(map(float, graphs)) if graphs else None
    return found


def parse_vllm(text: str) -> dict:
    found = {key: _first(pattern, text) for key, pattern in VLLM.items()}
    if found["graphs_gib"] is None:
        found["graphs_gib"] = found["graphs_estimated_gib"]
    return found


def _diff(a, *b):
    return None if a is None or any(x is None for x in b) else a - sum(b)


def sglang_rows(found: dict, context: int, window: int) -> dict:
    """Table rows (name -> value) for an sglang log; `window` is the model's sliding window."""
    fraction, start = found["mem_fraction_static"], found["free_at_start_gib"]
    granted = None if fraction is None or start is None else fraction * start
    held = _diff(start, found["free_after_pools_gib"])  # weights, KV pools and other static buffers
    full, swa = found["full_tokens"], found["swa_tokens"]
    per_request_swa = window + (found["page_size"] or 1)  # the scheduler's SWA reservation
    at_once = None
    if full is not None:
        at_once = full / context if swa is None else min(full / context, swa / per_request_swa)
    return {
        "memory granted by the fraction (GiB)": granted,
        "weights (GiB)": found["weights_gib"],
        "full-attention pool (tokens)": full,
        "full-attention pool (GiB)": found["full_gib"],
        "full-attention bytes per token": _per_token(found["full_gib"], full),
        "SWA pool (tokens)": swa,
        "SWA pool (GiB)": found["swa_gib"],
        "SWA bytes per token": _per_token(found["swa_gib"], swa),
        "KV cache (GiB)": found["kv_total_gib"],
        "other static buffers (GiB)": _diff(held, found["weights_gib"], found["kv_total_gib"]),
        "CUDA graphs (GiB)": found["graphs_gib"],
        "left for activations (GiB)": found["free_after_start_gib"],
        "gap: granted less held (GiB)": _diff(granted, held),
        f"{context}-token requests at once": at_once,
        "full-attention tokens they hold": None
        if at_once is None
        else min(full, at_once * context),
    }


def vllm_rows(found: dict, context: int, gpu_total_gib: float | None) -> dict:
    util = found["gpu_memory_utilization"]
    granted = None if util is None or gpu_total_gib is None else util * gpu_total_gib
    at_once = found["max_concurrency"] if found["context_len"] == context else None
    return {
        "memory granted by the fraction (GiB)": granted,
        "weights (GiB)": found["weights_gib"],
        "KV cache (tokens, vLLM's count)": found["kv_tokens"],
        "KV cache (GiB)": found["kv_total_gib"],
        "CUDA graphs (GiB)": found["graphs_gib"],
        "left for activations (GiB)": _diff(
            granted, found["weights_gib"], found["kv_total_gib"], found["graphs_gib"] or 0.0
        ),
        f"{context}-token requests at once": at_once,
        "full-attention tokens they hold": None if at_once is None else at_once * context,
    }


def _per_token(gib, tokens):
    return None if gib is None or not tokens else round(gib * (1 << 30) / tokens)


def served_variant(text: str, default: str) -> str:
    """The variant an sglang log served, from the checkpoint directory its model_path names (this
    repository's checkpoints are named after theirs), else `default`."""
    match = re.search(r"model_path='([^']*)'", text)
    name = Path(match.group(1)).name if match else ""
    return next((v for v in sorted(VARIANTS, key=len, reverse=True) if name.startswith(v)), default)


def sglang_window(variant: str) -> int:
    """sglang's sliding window: the config's less one (it leaves out the current token)."""
    return VARIANTS[variant]["sliding_window"] - 1


def report(
    logs: list[Path], context: int, variant: str, gpu_total_gib: float | None
) -> dict[str, dict]:
    """Per log (by file name, with its folder's where two share one): its rows; `variant` for an
    sglang log whose model path names none."""
    names = [log.name for log in logs]
    table = {}
    for log in logs:
        text = log.read_text(errors="replace")
        name = log.name if names.count(log.name) == 1 else f"{log.parent.name}/{log.name}"
        table[name] = (
            vllm_rows(parse_vllm(text), context, gpu_total_gib)
            if is_vllm(text)
            else sglang_rows(
                parse_sglang(text), context, sglang_window(served_variant(text, variant))
            )
        )
    return table


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.2f}"
    return f"{int(value):,}"


def markdown(table: dict[str, dict]) -> str:
    names = list(table)
    metrics = list(dict.fromkeys(m for rows in table.values() for m in rows))
    lines = ["| | " + " | ".join(f"`{n}`" for n in names) + " |", "|---|" + "---|" * len(names)]
    lines += [
        f"| {m} | " + " | ".join(_cell(table[n].get(m)) for n in names) + " |" for m in metrics
    ]
    return "\n".join(lines)


def expand_logs(names: list[str]) -> tuple[list[Path], list[str]]:
    """(the logs, the plain paths that name no file): each glob pattern expanded, sorted."""
    logs, missing = [], []
    for name in names:
        if glob.has_magic(name):
            logs += [Path(p) for p in sorted(glob.glob(name))]
        elif Path(name).is_file():
            logs.append(Path(name))
        else:
            missing.append(name)
    return logs, missing


def gpu_total_gib(gpu_txt: Path) -> float | None:
    """The GPU's memory from nvidia-smi's 'name, memory.total [MiB], driver' line, or None (with a
    note) where the file is missing: then vLLM's grant is left blank, not guessed."""
    try:
        line = gpu_txt.read_text().splitlines()[0]
    except (OSError, IndexError):
        print(
            f"kv_capacity: no GPU line in {gpu_txt}: vLLM's granted memory left blank",
            file=sys.stderr,
        )
        return None
    match = re.match(r"[^,]+,\s*(\d+)\s*MiB", line)
    if not match:
        raise SystemExit(
            (
                f"kv_capacity: {gpu_txt}: not nvidia-smi's 'name, memory.total [MiB], ...' "
                f"line: {line!r}"
            )
        )
    return int(match.group(1)) / 1024


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kv_capacity",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "logs",
        nargs="+",
        metavar="LOG",
        help="server logs (sglang or vLLM, told apart by content) or glob patterns of them",
    )
    p.add_argument(
        "--variant",
        default="26b-a4b",
        choices=sorted(VARIANTS),
        help="the shape served by an sglang log whose model path names none, for its sliding "
        "window (default 26b-a4b)",
    )
    p.add_argument(
        "--context", type=int, default=32768, help="the long requests' length (default 32768)"
    )
    gpu = p.add_mutually_exclusive_group()
    gpu.add_argument(
        "--gpu-total-gib",
        type=float,
        help="the GPU's memory (nvidia-smi's memory.total / 1024): vLLM's fraction is of it",
    )
    gpu.add_argument(
        "--gpu-txt",
        type=Path,
        help="the same, read from the nvidia-smi line check.sh writes (OUT/gpu.txt)",
    )
    p.add_argument("--json", action="store_true", help="the rows as JSON instead of a table")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    logs, missing = expand_logs(args.logs)
    if missing:
        p.error(f"no such log: {', '.join(missing)}")
    if not logs:
        print(f"kv_capacity: no server log matches {' '.join(args.logs)}")
        return 0
    total = gpu_total_gib(args.gpu_txt) if args.gpu_txt else args.gpu_total_gib
    table = report(logs, args.context, args.variant, total)
    print(json.dumps(table, indent=1) if args.json else markdown(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
