"""Where one decode step's GPU time goes, per shape and batch size (issue #10 part 1).

    python -m sglang_gemma4.gpu.studies.profile --variant 26b-a4b --out DIR [--build patched]
        [--batch-sizes 1 4 16 64] [--env KEY=VALUE ...] [--label NAME]
    python -m sglang_gemma4.gpu.studies.profile --report DIR/<variant>-<label>-profile.jsonl

Two runs of `sglang.bench_one_batch` on the variant's config-only checkpoint (full size, dummy
weights), prompt 256 tokens, 32 decode steps per batch size, on sglang's static KV split for both
builds (pristine cannot serve the unified pool that 26B-A4B's preset serves: its served decode step
differs by the pool's indexing only, chat at 64 x0.995 on it):
- CUDA graphs on: the median decode step time, which is what serving sees;
- CUDA graphs off, the torch profiler on 3 decode steps: every GPU kernel's time, for attribution.
Writes DIR/<variant>-<label>-profile.jsonl (per batch size: graph step time, eager kernel time per
step by kernel and by group, the weight bytes a step must read) and
DIR/<variant>-<label>-profile.md: per batch size the groups' shares, the top kernels, and the
weight-streaming kernels (GEMMs and the MoE experts) as achieved bandwidth against the HBM floor.
Bench_one_batch's own logs and traces stay in DIR; the traces are deleted once attributed.  --report
rewrites the .md from a .jsonl (e.g. after a change to the kernel groups), no GPU needed.
"""

import argparse
import gzip
import json
import os
import re
import subprocess
from collections import defaultdict
from pathlib import Path

from sglang_gemma4.gpu import REPO
from sglang_gemma4.gpu.serve.checkpoint import write_checkpoint
from sglang_gemma4.gpu.serve.presets import BACKENDS, model_flags
from sglang_gemma4.gpu.serve.server import describe, in_build, patched_env

PROMPT_LEN, DECODE_STEPS, PROFILED_STEPS = 256, 32, 3
# Nominal HBM bandwidth (bytes/s) by device name; the floor is the active weights read once per
# step.
HBM_BYTES_PER_S = {"H100": 3.35e12, "H200": 4.8e12}
# Kernel name -> group, first match wins (Triton kernels keep their Python names).
GROUPS = [
    ("moe experts", r"fused_moe|moe_align|moe_sum|count_and_sort_expert"),
    ("routing", r"gemma4_routing|topk|TopK|softmax"),
    ("attention", r"decode_att|extend_att|_fwd_kernel|_fwd_grouped_kernel|attention|flash"),
    ("rope + kv store", r"rope|store_kvcache"),
    ("gemm", r"gemm(?!a)|Gemm|cutlass|nvjet|sm90_xmma|cublas|splitK"),  # not "gemma"
    ("norm", r"rmsnorm|RMSNorm|norm_kernel|layernorm|_norm"),
    ("sampling/logits", r"argmax|sampl|multinomial|logit|tanh_kernel"),
    ("elementwise", r"elementwise|vectorized|unrolled|copy|fill|mul_|add_|Reduce|reduce"),
]


def kernel_group(name: str) -> str:
    return next((group for group, pattern in GROUPS if re.search(pattern, name)), "other")


def kernel_times(trace_path: Path, steps: int) -> dict[str, float]:
    """GPU kernel time per decode step (us), by kernel name, from a torch profiler chrome trace."""
    opener = gzip.open if trace_path.suffix == ".gz" else open
    with opener(trace_path, "rt") as f:
        events = json.load(f)["traceEvents"]
    totals = defaultdict(float)
    for event in events:
        if event.get("cat") == "kernel" and event.get("ph") == "X":
            totals[event["name"]] += event["dur"] / steps
    return dict(totals)


def weight_bytes(config_dir: Path) -> dict[str, int]:
    """bf16 bytes of the text model's weights, built on the meta device by transformers: the expert
    weights, the ones every token reads, and the per-layer-input table (looked up, not streamed)."""
    import torch
    from transformers import AutoConfig, Gemma4ForCausalLM

    config = AutoConfig.from_pretrained(config_dir)
    config = getattr(config, "text_config", config)
    with torch.device("meta"):
        model = Gemma4ForCausalLM(config)
    sizes = {"experts": 0, "dense": 0, "lookup_tables": 0}
    for name, param in model.named_parameters():  # tied lm_head counted once, as embed_tokens
        kind = (
            "experts"
            if ".experts." in name
            else "lookup_tables"
            if "per_layer" in name and "embed" in name
            else "dense"
        )
        sizes[kind] += param.numel() * 2
    sizes["num_experts"] = getattr(config, "num_experts", 0) or 0
    sizes["top_k"] = getattr(config, "top_k_experts", 0) or 0
    return sizes


def active_bytes(sizes: dict, batch: int) -> float:
    """Weights one decode step must read: every dense weight, and of the experts the expected share
    that `batch` tokens touch when each picks top_k of num_experts uniformly."""
    if not sizes["num_experts"]:
        return float(sizes["dense"])
    touched = 1 - (1 - sizes["top_k"] / sizes["num_experts"]) ** batch
    return sizes["dense"] + sizes["experts"] * touched


def summarize(record: dict, bandwidth: float | None) -> list[str]:
    """Markdown lines for one batch size."""
    kernels = record["kernels_us"]
    eager_us = sum(kernels.values())
    groups = defaultdict(float)
    for name, us in kernels.items():
        groups[kernel_group(name)] += us
    lines = [
        f"### batch {record['batch']}: graph step {record['graph_step_ms']:.3f} ms, "
        f"eager kernels {eager_us / 1000:.3f} ms per step",
        "",
        "| group | us per step (eager) | share |",
        "|---|---|---|",
    ]
    lines += [
        f"| {g} | {us:.1f} | {us / eager_us:.1%} |"
        for g, us in sorted(groups.items(), key=lambda x: -x[1])
    ]
    lines += ["", "| top kernels | us per step | share |", "|---|---|---|"]
    top = sorted(kernels.items(), key=lambda x: -x[1])[:12]
    lines += [f"| `{name[:90]}` | {us:.1f} | {us / eager_us:.1%} |" for name, us in top]
    streaming_us = groups["gemm"] + groups["moe experts"]
    if streaming_us:
        achieved = record["active_weight_bytes"] / (streaming_us / 1e6)
        line = (
            f"\nWeight-streaming kernels (gemm + moe experts): {streaming_us / 1000:.3f} ms for "
            f"{record['active_weight_bytes'] / 1e9:.2f} GB of active weights = "
            f"{achieved / 1e12:.2f} TB/s"
        )
        if bandwidth:
            floor_ms = record["active_weight_bytes"] / bandwidth * 1000
            line += (
                f"; HBM floor at {bandwidth / 1e12:.2f} TB/s: {floor_ms:.3f} ms "
                f"({floor_ms / record['graph_step_ms']:.0%} of the graph step)"
            )
        if record["weights"]["num_experts"] and record["batch"] > 1:
            line += (
                ". Expert bytes assume uniform routing: above batch 1 they are an upper "
                "bound (a rate "
                "above the HBM's means the tokens shared experts; dummy weights need not "
                "route uniformly)"
            )
        lines.append(line)
    return lines + [""]


def skipped_batches(log_text: str) -> list[int]:
    """Batch sizes bench_one_batch left out because batch x (prompt + decode steps) tokens exceed
    what the KV pool holds (e.g. 31B at batch 64 on one H100)."""
    return [
        int(b)
        for b in re.findall(r"skipping \((\d+), \d+, \d+\) due to max batch size limit", log_text)
    ]


def bench_one_batch_command(
    variant: str, model: Path, out: Path, batches: list[int], eager: bool, run: str
) -> list[str]:
    """bench_one_batch on the launch preset's backends and the variant's own options (so that a
    profiled step is the served one), its result in out/<run>.jsonl; eager runs profile the decode
    steps."""
    command = [
        "python3",
        "-m",
        "sglang.bench_one_batch",
        "--model-path",
        str(model),
        "--load-format",
        "dummy",
        *BACKENDS,
        "--mem-fraction-static",
        "0.85",
        "--cuda-graph-backend-prefill",
        "disabled",
        "--batch-size",
        *map(str, batches),
        "--input-len",
        str(PROMPT_LEN),
        "--output-len",
        str(DECODE_STEPS),
        "--run-name",
        run,
        "--result-filename",
        str(out / f"{run}.jsonl"),
        "--cuda-graph-max-bs-decode",
        str(max(batches)),
        *model_flags(variant),
    ]
    if eager:
        command += [
            "--cuda-graph-backend-decode",
            "disabled",
            "--profile",
            "--profile-stage",
            "decode",
            "--profile-start-step",
            str(DECODE_STEPS // 2),
            "--profile-steps",
            str(PROFILED_STEPS),
            "--profile-filename-prefix",
            run,
        ]
    return command


def bench_one_batch(
    build: str,
    variant: str,
    model: Path,
    out: Path,
    batches: list[int],
    env: dict,
    eager: bool,
    run: str,
) -> Path:
    """One bench_one_batch run; eager ones leave a decode trace per batch size in `out`."""
    result = out / f"{run}.jsonl"
    result.unlink(missing_ok=True)  # bench_one_batch appends
    with open(out / f"{run}.log", "w") as log:
        subprocess.run(
            in_build(build, bench_one_batch_command(variant, model, out, batches, eager, run)),
            stdout=log,
            stderr=subprocess.STDOUT,
            check=True,
            cwd=REPO,
            env={**os.environ, **env, "SGLANG_TORCH_PROFILER_DIR": str(out)},
        )
    return result


def write_report(records: list[dict], md_path: Path) -> str:
    """The markdown for one setup's records (one per measured batch size), written to md_path."""
    first = records[0]
    sizes, gpu = first["weights"], first["gpu"]
    bandwidth = next((bw for key, bw in HBM_BYTES_PER_S.items() if key in gpu), None)
    lines = [
        f"# {first['variant']} ({first['label']}) on {gpu}: one decode step",
        "",
        f"Prompt {PROMPT_LEN} tokens, median of {DECODE_STEPS - 1} decode steps with CUDA "
        "graphs; kernel "
        f"attribution from {PROFILED_STEPS} profiled eager steps. Weights (bf16): dense "
        f"{sizes['dense'] / 1e9:.2f} GB, "
        f"experts {sizes['experts'] / 1e9:.2f} GB, lookup tables "
        f"{sizes['lookup_tables'] / 1e9:.2f} GB.",
        "",
    ]
    if first.get("not_measured"):
        lines += [
            f"Not measured: batch {', '.join(map(str, first['not_measured']))} "
            "(bench_one_batch skips a batch "
            f"whose {PROMPT_LEN + DECODE_STEPS} tokens per request exceed the KV pool).",
            "",
        ]
    for record in records:
        lines += summarize(record, bandwidth)
    text = "\n".join(lines)
    md_path.write_text(text)
    return text


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--variant", choices=["e2b", "e4b", "26b-a4b", "31b"])
    parser.add_argument("--out")
    parser.add_argument("--build", default="patched", choices=["pristine", "patched"])
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 4, 16, 64])
    parser.add_argument(
        "--env", nargs="*", default=[], metavar="KEY=VALUE", help="environment of both runs"
    )
    parser.add_argument("--label", help="name of this setup in file names (default: the build)")
    parser.add_argument(
        "--report", type=Path, metavar="JSONL", help="only rewrite the .md beside this .jsonl"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the bench_one_batch command lines instead"
    )
    args = parser.parse_args()
    if args.report:
        records = [json.loads(line) for line in args.report.read_text().splitlines()]
        print(write_report(records, args.report.with_suffix(".md")))
        return 0
    if not (args.variant and args.out):
        parser.error("--variant and --out are required (or --report)")
    out, label = Path(args.out), args.label or args.build
    model = REPO / "checkpoints" / args.variant
    env = patched_env(args.env)
    if args.dry_run:
        for eager, run in ((False, "graphs"), (True, "eager")):
            command = bench_one_batch_command(
                args.variant, model, out, args.batch_sizes, eager, f"{args.variant}-{label}-{run}"
            )
            print(describe(args.build, env, command))
        return 0
    out.mkdir(parents=True, exist_ok=True)
    if not (model / "config.json").is_file():  # the launch preset's config-only checkpoint
        write_checkpoint(args.variant, model, repo_root=REPO)
    graphs = bench_one_batch(
        args.build,
        args.variant,
        model,
        out,
        args.batch_sizes,
        env,
        False,
        f"{args.variant}-{label}-graphs",
    )
    bench_one_batch(
        args.build,
        args.variant,
        model,
        out,
        args.batch_sizes,
        env,
        True,
        f"{args.variant}-{label}-eager",
    )
    step_ms = {
        r["batch_size"]: r["median_decode_latency"] * 1000
        for r in map(json.loads, graphs.read_text().splitlines())
    }
    skipped = skipped_batches(graphs.with_suffix(".log").read_text())
    sizes = weight_bytes(model)
    gpu = (
        subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
        )
        .stdout.strip()
        .splitlines()[0]
    )
    records = []
    for batch in sorted(step_ms):
        trace = out / (
            f"{args.variant}-{label}-eager_batch{batch}_input{PROMPT_LEN}_output{DECODE_STEPS}"
            "_decode.trace.json.gz"
        )
        records.append(
            {
                "variant": args.variant,
                "label": label,
                "build": args.build,
                "env": env,
                "gpu": gpu,
                "batch": batch,
                "graph_step_ms": step_ms[batch],
                "not_measured": skipped,
                "active_weight_bytes": active_bytes(sizes, batch),
                "weights": sizes,
                "kernels_us": kernel_times(trace, PROFILED_STEPS),
            }
        )
        trace.unlink()  # tens of MB each; every kernel's time is in the record
    jsonl = out / f"{args.variant}-{label}-profile.jsonl"
    jsonl.write_text("".join(json.dumps(record) + "\n" for record in records))
    print(write_report(records, jsonl.with_suffix(".md")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
