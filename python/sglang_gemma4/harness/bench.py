"""A/B benchmarks with sglang.bench_serving: each build's server in turn, same GPU, same call.

    python -m sglang_gemma4.harness.bench --variant 26b-a4b --out DIR \\
        [--builds pristine patched] [--workloads chat summarization batch1] [--model DIR] [-- server flags]

For each build: start the server (launch preset), run every workload (random-ids prompts, no
dataset download), stop it.  Writes DIR/bench.jsonl (bench_serving's records plus build/variant/
workload and the server's KV pool sizes), DIR/summary.md (medians and patched/pristine ratios)
and DIR/summary.png.  Runs the bench client from the pristine build so both see the same client.
"""

import argparse
import json
import os
import subprocess
from pathlib import Path

from sglang_gemma4.harness import pool_usage
from sglang_gemma4.harness.server import Server, patched_env

# name: (input len, output len, prompts, max concurrency)
WORKLOADS = {
    "chat": (1000, 1000, 64, 32),
    "summarization": (8000, 1000, 48, 32),
    "long-prefill": (7000, 10, 30, 30),
    "decode-burst": (100, 1000, 64, 64),
    "batch1": (128, 256, 8, 1),
}
METRICS = ("output_throughput", "median_tpot_ms", "median_ttft_ms", "median_itl_ms", "duration",
           "peak_running_req", "peak_queue_req", "peak_full_token_usage", "peak_swa_token_usage",
           "retracted_reqs", "prefill_cached_tokens")


def run_workload(server: Server, name: str, tokenizer: str, out: Path) -> dict:
    input_len, output_len, prompts, concurrency = WORKLOADS[name]
    raw = out / f"{server.variant}-{server.build}-{name}.jsonl"
    prefix = os.environ.get("SGLANG_GEMMA4_PREFIX", "/tmp/sglang-gemma4")
    # --tokenize-prompt sends the random ids as input_ids: sent as text, they would be re-tokenized
    # by the server into other (with this tokenizer, ~4x more) tokens.
    command = (f". {prefix}/env-pristine.sh && python3 -m sglang.bench_serving --backend sglang "
               f"--host 127.0.0.1 --port {server.port} --dataset-name random-ids --tokenize-prompt "
               f"--tokenizer {tokenizer} --random-input-len {input_len} --random-output-len {output_len} "
               f"--random-range-ratio 1.0 --num-prompts {prompts} --max-concurrency {concurrency} --seed 1 "
               f"--output-file {raw}")
    log_before = len(server.log_path.read_text(errors="replace"))
    with open(out / f"{server.variant}-{server.build}-{name}.client.log", "w") as log:
        subprocess.run(["bash", "-c", command], stdout=log, stderr=subprocess.STDOUT, check=True)
    log = server.log_path.read_text(errors="replace")
    if "[http_server] Error" in log[log_before:]:
        # bench_serving counts a rejected request as a success with its requested output length.
        raise RuntimeError(f"{name}: the server rejected requests during the run (see {server.log_path}); "
                           "its numbers would count them as served")
    record = json.loads(raw.read_text().splitlines()[-1])
    if not record.get("total_output_tokens_retokenized"):
        # Streamed text that decodes to nothing makes TTFT and ITL read 0: refuse such a run.
        raise RuntimeError(f"{name}: the streamed output decoded to no text (retokenized tokens = 0); "
                           f"its latencies are meaningless. Client log: {raw.with_suffix('.client.log')}")
    # Pool sizes from the start-up lines; peaks, queueing and re-prefill from this workload's lines.
    record.update(build=server.build, variant=server.variant, workload=name, command=command,
                  **pool_usage.pool_sizes(log), **pool_usage.summary(pool_usage.parse(log[log_before:])))
    return record


def summarize(records: list[dict], builds: list[str]) -> str:
    lines = ["| workload | metric | " + " | ".join(builds) + (" | ratio |" if len(builds) == 2 else " |"),
             "|---|---|" + "---|" * len(builds) + ("---|" if len(builds) == 2 else "")]
    by_key = {(r["workload"], r["build"]): r for r in records}
    for workload in dict.fromkeys(r["workload"] for r in records):
        for metric in METRICS:
            values = [by_key.get((workload, b), {}).get(metric) for b in builds]
            cells = " | ".join(f"{v:.2f}" if isinstance(v, (int, float)) else "-" for v in values)
            ratio = ""
            if len(builds) == 2 and all(isinstance(v, (int, float)) and v for v in values):
                ratio = f" {values[1] / values[0]:.3f} |"
            lines.append(f"| {workload} | {metric} | {cells} |{ratio}")
    return "\n".join(lines)


def plot(records: list[dict], builds: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = list(dict.fromkeys(r["workload"] for r in records))
    by_key = {(r["workload"], r["build"]): r for r in records}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / len(builds)
    for ax, metric in zip(axes, ("output_throughput", "median_tpot_ms")):
        for i, build in enumerate(builds):
            values = [by_key.get((w, build), {}).get(metric) or 0 for w in workloads]
            ax.bar([x + i * width for x in range(len(workloads))], values, width, label=build)
        ax.set_xticks([x + width * (len(builds) - 1) / 2 for x in range(len(workloads))], workloads)
        ax.set_title(metric)
        ax.legend()
    fig.suptitle(f"{records[0]['variant']}: " + " vs ".join(builds))
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--builds", nargs="+", default=["pristine", "patched"])
    parser.add_argument("--workloads", nargs="+", default=["chat", "summarization", "batch1"], choices=sorted(WORKLOADS))
    parser.add_argument("--model", help="checkpoint dir (default: the launch preset's config-only one, dummy weights)")
    parser.add_argument("--patched-env", nargs="*", default=[], metavar="KEY=VALUE",
                        help="environment of the patched server only, e.g. a patch's opt-in switch")
    parser.add_argument("extra", nargs="*", help="launch_server flags after --")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    records = []
    for build in args.builds:
        server = Server(args.variant, build, out / f"{args.variant}-{build}.server.log", model=args.model,
                        extra=args.extra, env=patched_env(args.patched_env) if build == "patched" else {})
        with server:
            tokenizer = args.model or str(Path(__file__).resolve().parents[3] / "checkpoints" / args.variant)
            for workload in args.workloads:
                record = run_workload(server, workload, tokenizer, out)
                record["ready_s"] = round(server.ready_s, 1)
                records.append(record)
                with open(out / "bench.jsonl", "a") as f:
                    f.write(json.dumps(record) + "\n")
                print(f"{args.variant} {build} {workload}: " + ", ".join(
                    f"{m}={record.get(m, 0):.2f}" for m in METRICS), flush=True)
            pool_usage.plot(pool_usage.parse(server.log_path.read_text(errors="replace")),
                            out / f"{args.variant}-{build}-pools.png", f"{args.variant} {build}: KV pools over the run")
    table = summarize(records, args.builds)
    (out / "summary.md").write_text(f"# {args.variant}: {' vs '.join(args.builds)}\n\n{table}\n")
    plot(records, args.builds, out / "summary.png")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
