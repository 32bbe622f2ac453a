"""A/B benchmarks with sglang.bench_serving: each server setup in turn, same GPU, same call.

    python -m sglang_gemma4.gpu.studies.bench --variant 26b-a4b --out DIR \\
        [--builds pristine patched] [--config 'NAME=BUILD [KEY=VALUE ...] [flags]' ...]
        [--workloads chat summarization batch1] [--model DIR] [-- server flags for all]
    python -m sglang_gemma4.gpu.studies.bench --variant 26b-a4b --out DIR --summarize-only

A setup is a build (pristine or patched) with its environment and extra launch flags: `--builds`
gives the plain builds, `--config` named variations of them, e.g.
`--config 'r0.15=patched SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW=1 --swa-full-tokens-ratio
0.15'`; the launcher's options among the flags go to it (--static-kv, --tp N, --dp N). For each
setup: start the server (launch preset), run every workload (random-ids prompts, no dataset
download), stop it.  Appends to DIR/bench.jsonl (bench_serving's records plus setup/
variant/workload, the server's KV pool sizes and its pool usage during the workload; for the batch-1
workloads also how many token gaps were over twice the median and after which tokens) and writes
DIR/summary.md (medians, and the ratio when there are two setups), DIR/summary.png and a pool-usage
plot per setup.  The beside workloads (BESIDE_WORKLOADS) run beside.py instead of bench_serving:
streams decoding while long prompts prefill, their token gaps before and during.  `--summarize-only`
rebuilds the tables from DIR/bench.jsonl, e.g. after setups ran in separate calls.  The bench client
always runs from the pristine build.
"""

import argparse
import itertools
import json
import re
import shlex
import subprocess
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from sglang_gemma4.gpu import REPO
from sglang_gemma4.gpu.serve import pool_usage
from sglang_gemma4.gpu.serve.presets import full_acceptance_problem
from sglang_gemma4.gpu.serve.server import Server, in_build, patched_env

# name: (input len, output len, prompts, max concurrency)
WORKLOADS = {
    "chat": (1000, 1000, 64, 32),
    "summarization": (8000, 1000, 48, 32),
    "summarization-80": (8000, 1000, 80, 80),  # as many requests as the KV pools admit at once
    "long-prefill": (7000, 10, 30, 30),
    "decode-burst": (100, 1000, 64, 64),
    # issue #8 part 2's TPOT points besides decode-burst's 100/1000
    "in3000-out100": (3000, 100, 64, 32),
    "in500-out500": (500, 500, 64, 32),
    "batch1": (128, 256, 8, 1),
    # batch-1 decode at a long context, where the full-attention layers' decode kernel weighs
    "batch1-long": (8000, 256, 8, 1),
    # the KV-capacity comparison (patches 0016/0017): the same loads at 32 and at 64 requests at
    # once
    "summarization-80-at-16": (
        8000,
        1000,
        80,
        16,
    ),  # 16 x 9000 tokens fit the switched-on full pool
    "summarization-80-at-32": (8000, 1000, 80, 32),
    "summarization-80-at-64": (8000, 1000, 80, 64),
    "chat-at-32": (1000, 1000, 64, 32),
    "chat-at-64": (1000, 1000, 128, 64),
    # the model's own window: one long prompt at a time, then four 60K prompts arriving together;
    # three of 64K, so that the median is not the first, which may compile the long path's kernels
    "long-16k": (16384, 64, 2, 1),
    "long-64k": (65536, 64, 3, 1),
    "long-128k": (131072, 64, 1, 1),
    "long-250k": (250000, 64, 1, 1),
    "long-4x60k": (60000, 64, 4, 4),
    # two whole-window prompts at once: both run together where the pool holds 500,000 tokens
    "long-2x250k": (250000, 64, 2, 2),
}
# name: (streams decoding, their prompt and output lengths, the long prompts sent at once beside
# them): the running streams' token gaps before and while the long prompts prefill (beside.py, its
# own client) (4000 output tokens: the streams are stopped once the long prompts answered, and must
# not end before)
BESIDE_WORKLOADS = {
    "long-128k-beside-chat": (8, 128, 4000, (131072,)),
    "long-3x60k-beside-chat": (8, 128, 4000, (60000, 60000, 60000)),
}
# a server may refuse these for its pool (the answer is recorded, not measured)
MAY_NOT_FIT = {name for name in [*WORKLOADS, *BESIDE_WORKLOADS] if name.startswith("long-")}
# name: (text tokens, output len, prompts, max concurrency, images per prompt, image size): random
# images through the server's multimodal processor (bench_serving's image dataset), which needs a
# checkpoint made with --arch conditional (--model) and a server that serves images
IMAGE_WORKLOADS = {
    "images-6": (128, 64, 64, 16, 6, "720p"),
}
# name: (the workload whose prompts and loads it takes, what each request adds to its sampling
# parameters): structured output's cost. The schema never closes (an array of free strings), so
# every request decodes its full output length under the grammar, whatever the weights emit.
OPEN_SCHEMA = {
    "type": "object",
    "properties": {"notes": {"type": "array", "items": {"type": "string"}}},
    "required": ["notes"],
}
CONSTRAINED_WORKLOADS = {
    "chat-json": ("chat", {"json_schema": json.dumps(OPEN_SCHEMA)}),
    "batch1-json": ("batch1", {"json_schema": json.dumps(OPEN_SCHEMA)}),
}
# one request at a time: bench_serving keeps every token gap of these (--output-details), to tell
# where a request's mean gap (its TPOT) leaves the median step
GAP_DETAIL_WORKLOADS = ("batch1", "batch1-long")
PER_REQUEST_DETAILS = ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors")
METRICS = (
    "output_throughput",
    "median_tpot_ms",
    "median_ttft_ms",
    "median_itl_ms",
    "mean_itl_ms",
    "p99_itl_ms",
    "long_gaps_per_req",
    "long_gap_ms_per_token",
    "median_decode_tok_s_at_peak",
    "decode_stall_ms_per_step",
    "duration",
    "peak_running_req",
    "peak_queue_req",
    "peak_full_token_usage",
    "peak_swa_token_usage",
    "retracted_reqs",
    "prefill_cached_tokens",
    "median_accept_len",
    # the beside workloads: the running streams' gaps before and during the long prefill, its TTFT
    "itl_before_p50_ms",
    "itl_before_p99_ms",
    "itl_during_p50_ms",
    "itl_during_p99_ms",
    "longest_gap_during_ms",
    "long_ttft_ms",
)

ENV_PAIR = re.compile(r"^[A-Z_][A-Z0-9_]*=")


@dataclass(frozen=True)
class Setup:
    """One server setup of a comparison: its name in the tables, build, environment, extra flags."""

    name: str
    build: str
    env: dict = field(default_factory=dict)
    flags: tuple = ()


def parse_setup(spec: str) -> Setup:
    """'NAME=BUILD [KEY=VALUE ...] [launch flags ...]' (environment pairs first)."""
    words = shlex.split(spec)
    name, _, build = (words[0] if words else "").partition("=")
    if not re.fullmatch(r"[\w.+-]+", name) or build not in ("pristine", "patched"):
        raise SystemExit(
            f"--config wants 'NAME=pristine|patched [KEY=VALUE ...] [flags]', got {spec!r}"
        )
    pairs = list(itertools.takewhile(ENV_PAIR.match, words[1:]))
    flags = words[1 + len(pairs) :]
    return Setup(name, build, patched_env(pairs), tuple(flags))


def add_setup_arguments(parser: argparse.ArgumentParser) -> None:
    """--builds and --config: the setups a comparison runs (chosen_setups reads them)."""
    parser.add_argument(
        "--builds",
        nargs="*",
        choices=["pristine", "patched"],
        help="plain builds to compare (default pristine patched when no --config is given)",
    )
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        type=parse_setup,
        dest="setups",
        metavar="'NAME=BUILD [KEY=VALUE ...] [flags]'",
        help="a named setup; repeat for more",
    )


def chosen_setups(args: argparse.Namespace, patched_build_env: dict | None = None) -> list[Setup]:
    """The plain builds (pristine and patched unless --builds or a --config says otherwise; the
    plain patched build with `patched_build_env`), then the named setups."""
    builds = (
        args.builds if args.builds is not None else [] if args.setups else ["pristine", "patched"]
    )
    return [
        Setup(b, b, (patched_build_env or {}) if b == "patched" else {}) for b in builds
    ] + args.setups


def workload_seed(name: str) -> int:
    """The prompts' seed, one per workload: a server runs several workloads in turn, and prompts
    that repeat an earlier workload's would hit its radix cache (a prefix hit that a setup keeping
    less KV would not get)."""
    return zlib.crc32(name.encode())


def dataset_args(name: str) -> list[str]:
    if name in CONSTRAINED_WORKLOADS:
        shape, grammar = CONSTRAINED_WORKLOADS[name]
        # bench_serving's extra body replaces the whole sampling_params of its /generate requests
        sampling = {
            "temperature": 0.0,
            "max_new_tokens": WORKLOADS[shape][1],
            "ignore_eos": True,
            **grammar,
        }
        words = dataset_args(shape)
        words[words.index("--seed") + 1] = str(workload_seed(name))
        return [*words, "--extra-request-body", json.dumps({"sampling_params": sampling})]
    if name in IMAGE_WORKLOADS:
        input_len, output_len, prompts, concurrency, images, size = IMAGE_WORKLOADS[name]
        dataset = [
            "--dataset-name",
            "image",
            "--image-count",
            str(images),
            "--image-resolution",
            size,
        ]
    else:
        input_len, output_len, prompts, concurrency = WORKLOADS[name]
        # --tokenize-prompt sends the random ids as input_ids: sent as text, they would be
        # re-tokenized by the server into other (with this tokenizer, ~4x more) tokens.
        dataset = ["--dataset-name", "random-ids", "--tokenize-prompt"]
    return [
        *dataset,
        "--random-input-len",
        str(input_len),
        "--random-output-len",
        str(output_len),
        "--random-range-ratio",
        "1.0",
        "--num-prompts",
        str(prompts),
        "--max-concurrency",
        str(concurrency),
        "--seed",
        str(workload_seed(name)),
    ]


def long_gaps(itls: list[list[float]]) -> dict:
    """Every request's token gaps (seconds, as bench_serving's --output-details writes them) against
    their median: how many gaps per request are over twice it, the time those add over the median
    per gap (what lifts the mean gap, and TPOT, above the median ITL), and the output tokens they
    come before (the first steps after a prefill, or a stall every Nth step)."""
    gaps = sorted(gap for request in itls for gap in request)
    median = gaps[len(gaps) // 2]
    long = [
        (token, gap)
        for request in itls
        for token, gap in enumerate(request, start=1)
        if gap > 2 * median
    ]
    return {
        "long_gaps_per_req": len(long) / len(itls),
        "long_gap_ms_per_token": 1000 * sum(gap - median for _, gap in long) / len(gaps),
        "long_gap_tokens": sorted(token for token, _ in long),
    }


def client_command(server: Server, name: str, tokenizer: str, raw: Path) -> list[str]:
    """The client of a workload, writing its record (the last line of `raw`): bench_serving, or
    beside.py."""
    if name in BESIDE_WORKLOADS:
        streams, chat_len, chat_out, long_lens = BESIDE_WORKLOADS[name]
        return [
            "python3",
            "-m",
            "sglang_gemma4.gpu.studies.beside",
            "--url",
            server.url,
            "--out",
            str(raw),
            "--streams",
            str(streams),
            "--chat-len",
            str(chat_len),
            "--chat-out",
            str(chat_out),
            "--long",
            *map(str, long_lens),
        ]
    command = [
        "python3",
        "-m",
        "sglang.bench_serving",
        "--backend",
        "sglang",
        "--host",
        "127.0.0.1",
        "--port",
        str(server.port),
        "--tokenizer",
        tokenizer,
        *dataset_args(name),
        "--output-file",
        str(raw),
    ]
    if name in GAP_DETAIL_WORKLOADS:
        command.append("--output-details")
    if name in MAY_NOT_FIT:
        # bench_serving's warm-up sends the first prompt once: its KV would answer the measured one
        # from the radix cache (and a long prompt's warm-up costs as much as the run)
        command += ["--warmup-requests", "0"]
    return command


def run_workload(server: Server, setup: str, name: str, tokenizer: str, out: Path) -> dict:
    raw = out / f"{server.variant}-{setup}-{name}.jsonl"
    command = client_command(server, name, tokenizer, raw)
    log_before = len(server.log_path.read_text(errors="replace"))
    with open(out / f"{server.variant}-{setup}-{name}.client.log", "w") as log:
        # bench_serving exits 1 when no request succeeded: a refused long prompt is read from the
        # server's log first
        client = subprocess.run(
            in_build("pristine", command, harness=name in BESIDE_WORKLOADS),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    log = server.log_path.read_text(errors="replace")
    refusal = next(
        (line for line in log[log_before:].splitlines() if "[http_server] Error" in line), None
    )
    beside = name in BESIDE_WORKLOADS and raw.exists()
    record = json.loads(raw.read_text().splitlines()[-1]) if beside else {}
    refusal = (
        refusal and refusal.split("[http_server] Error", 1)[1].strip(": ") or record.get("refused")
    )
    if refusal and name in MAY_NOT_FIT:
        return {
            "setup": setup,
            "build": server.build,
            "variant": server.variant,
            "workload": name,
            "command": shlex.join(command),
            "refused": refusal,
            **pool_usage.pool_sizes(log),
        }
    if client.returncode:
        raise subprocess.CalledProcessError(client.returncode, client.args)
    if refusal:
        # bench_serving counts a rejected request as a success with its requested output length.
        raise RuntimeError(
            f"{name}: the server rejected requests during the run (see {server.log_path}); "
            "its numbers would count them as served"
        )
    record = record or json.loads(raw.read_text().splitlines()[-1])
    if "itls" in record:
        record.update(long_gaps(record["itls"]))
        for key in PER_REQUEST_DETAILS:  # they stay in the raw file only
            record.pop(key, None)
    if name not in BESIDE_WORKLOADS and not record.get("total_output_tokens_retokenized"):
        # Streamed text that decodes to nothing makes TTFT and ITL read 0: refuse such a run.
        raise RuntimeError(
            f"{name}: the streamed output decoded to no text (retokenized tokens = 0); "
            f"its latencies are meaningless. Client log: {raw.with_suffix('.client.log')}"
        )
    # Pool sizes from the start-up lines; peaks, queueing, re-prefill and MTP's accept length from
    # this workload's lines.
    record.update(
        setup=setup,
        build=server.build,
        variant=server.variant,
        workload=name,
        command=shlex.join(command),
        **pool_usage.pool_sizes(log),
        **pool_usage.summary(pool_usage.parse(log[log_before:])),
    )
    # The harness serves MTP from config-only checkpoints only (dummy weights), where every draft is
    # accepted unless the simulated acceptance applies.
    problem = full_acceptance_problem(record.get("median_accept_len"))
    if problem:
        raise RuntimeError(f"{name}: {problem} (server log: {server.log_path})")
    return record


def summarize(records: list[dict], setups: list[str]) -> str:
    lines = [
        "| workload | metric | "
        + " | ".join(setups)
        + (" | ratio |" if len(setups) == 2 else " |"),
        "|---|---|" + "---|" * len(setups) + ("---|" if len(setups) == 2 else ""),
    ]
    by_key = {(r["workload"], r["setup"]): r for r in records}
    for workload in dict.fromkeys(r["workload"] for r in records):
        for metric in METRICS:
            values = [by_key.get((workload, b), {}).get(metric) for b in setups]
            if all(v is None for v in values):  # e.g. the accept length of runs without MTP
                continue
            cells = " | ".join(f"{v:.2f}" if isinstance(v, (int, float)) else "-" for v in values)
            ratio = ""
            if len(setups) == 2 and all(isinstance(v, (int, float)) and v for v in values):
                ratio = f" {values[1] / values[0]:.3f} |"
            lines.append(f"| {workload} | {metric} | {cells} |{ratio}")
        refused = [by_key.get((workload, b), {}).get("refused") for b in setups]
        if any(refused):
            lines.append(
                f"| {workload} | refused | " + " | ".join(r or "-" for r in refused) + " |"
            )
    return "\n".join(lines)


def plot(records: list[dict], setups: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = list(dict.fromkeys(r["workload"] for r in records))
    by_key = {(r["workload"], r["setup"]): r for r in records}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / len(setups)
    for ax, metric in zip(axes, ("output_throughput", "median_tpot_ms")):
        for i, setup in enumerate(setups):
            values = [by_key.get((w, setup), {}).get(metric) or 0 for w in workloads]
            ax.bar([x + i * width for x in range(len(workloads))], values, width, label=setup)
        ax.set_xticks([x + width * (len(setups) - 1) / 2 for x in range(len(workloads))], workloads)
        ax.set_title(metric)
        ax.legend()
    fig.suptitle(f"{records[0]['variant']}: " + " vs ".join(setups))
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def write_summary(records: list[dict], out: Path) -> str:
    setups = list(dict.fromkeys(r["setup"] for r in records))
    table = summarize(records, setups)
    (out / "summary.md").write_text(
        f"# {records[0]['variant']}: {' vs '.join(setups)}\n\n{table}\n"
    )
    plot(records, setups, out / "summary.png")
    return table


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--variant", required=True)
    parser.add_argument("--out", required=True)
    add_setup_arguments(parser)
    parser.add_argument(
        "--workloads",
        nargs="+",
        default=["chat", "summarization", "batch1"],
        choices=sorted(
            {**WORKLOADS, **IMAGE_WORKLOADS, **CONSTRAINED_WORKLOADS, **BESIDE_WORKLOADS}
        ),
    )
    parser.add_argument(
        "--model",
        help="checkpoint dir (default: the launch preset's config-only one, dummy weights)",
    )
    parser.add_argument(
        "--mtp",
        action="store_true",
        help="every setup serves with the preset's MTP assistant draft",
    )
    parser.add_argument(
        "--patched-env",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="environment of the plain patched build's server, e.g. a patch's opt-in switch",
    )
    parser.add_argument(
        "--summarize-only", action="store_true", help="only rebuild the tables from DIR/bench.jsonl"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print each server's command line instead of running"
    )
    parser.add_argument("extra", nargs="*", help="launch_server flags for every setup, after --")
    args = parser.parse_args()
    out = Path(args.out)
    if args.summarize_only:
        if args.dry_run:
            return 0
        print(
            write_summary(
                [json.loads(line) for line in (out / "bench.jsonl").read_text().splitlines()], out
            )
        )
        return 0
    out.mkdir(parents=True, exist_ok=True)
    records, deaths = [], []
    for setup in chosen_setups(args, patched_env(args.patched_env)):
        server = Server(
            args.variant,
            setup.build,
            out / f"{args.variant}-{setup.name}.server.log",
            model=args.model,
            mtp=args.mtp,
            extra=[*args.extra, *setup.flags],
            env=setup.env,
        )
        if args.dry_run:
            print(server.describe())
            continue
        with server:
            tokenizer = args.model or str(REPO / "checkpoints" / args.variant)
            for workload in args.workloads:
                record = run_workload(server, setup.name, workload, tokenizer, out)
                # what the server ran with, so a row says which switches and flags it measured
                record.update(
                    ready_s=round(server.ready_s, 1),
                    server_env=setup.env,
                    mtp=args.mtp,
                    server_flags=[*args.extra, *setup.flags],
                )
                records.append(record)
                with open(out / "bench.jsonl", "a") as f:
                    f.write(json.dumps(record) + "\n")
                print(
                    f"{args.variant} {setup.name} {workload}: "
                    + ", ".join(f"{m}={record.get(m) or 0:.2f}" for m in METRICS),
                    flush=True,
                )
            if died := server.death_once_idle():
                print(f"{args.variant} {setup.name}: the server died once idle: {died}", flush=True)
                deaths.append(setup.name)
            pool_usage.plot(
                pool_usage.parse(server.log_path.read_text(errors="replace")),
                out / f"{args.variant}-{setup.name}-pools.png",
                f"{args.variant} {setup.name}: KV pools over the run",
            )
    if not args.dry_run:
        print(write_summary(records, out))
    return 1 if deaths else 0


if __name__ == "__main__":
    raise SystemExit(main())
