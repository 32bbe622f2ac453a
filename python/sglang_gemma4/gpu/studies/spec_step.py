"""Where one speculative decoding step's time goes with frozen-KV MTP: the draft loop, the target
verify and the bookkeeping between them.

    python -m sglang_gemma4.gpu.studies.spec_step --variant 26b-a4b --out DIR [--build patched]
        [--env KEY=VALUE ... --label NAME]
        [--batch-sizes 1 4 16 32] [--accept-len 2.8] [--steps 40] [-- server flags]
    python -m sglang_gemma4.gpu.studies.spec_step --report DIR/<variant>-<build>-spec-step.jsonl

One server: the launch preset with --mtp (3 steps, 4 draft tokens, top-k 1; dummy weights) and the
acceptance sglang's verify simulates (SGLANG_SIMULATE_ACC_LEN, match-expected; by default the
variant's presets.SIMULATED_ACCEPT_LEN). Per batch size: that many greedy streams
(prompt 128 token ids, 1024 new tokens); once every stream has 64 tokens, --steps scheduler steps
under the torch profiler (GPU activity) through /start_profile, then the streams are closed and the
server drained (/v1/loads) before the next batch size. From
the trace, per speculative step (one draft-loop graph replay to the next): the draft loop's GPU
time (and each of its forwards, split at the softmax that ends each), the verify graph's, the GPU
work outside both graphs before and after the verify, and the GPU's idle time in those two gaps
(the host preparing the next graph: its CPU time is not traced, the idle GPU is what it costs).
The bytes each part must read against the HBM floor: weights and KV (the context at the trace's
start). The target's experts count as many distinct experts as the batch x 4 verify tokens are
expected to pick under uniform routing: the trace cannot tell which experts ran. To measure them,
serve random-weight checkpoints (dummy weights route every token alike) with sglang's
`--expert-distribution-recorder-mode per_pass` and read, per verify pass and layer, the distinct
expert ids from /dump_expert_distribution_record. A run whose server logged the maximum accept
length (every draft accepted: the simulation did not apply) is refused. The draft loop's graph and
the verify graph are told apart by their kernel counts (the target's layers outnumber three forwards
of the 4-layer assistant), which assumes sglang's default full decode graphs: one graph launch per
forward.
Writes DIR/<variant>-<label>-spec-step.jsonl (a record per batch size: its steps, its bytes) and
DIR/<variant>-<label>-spec-step.md (medians per batch size).
"""

import argparse
import gzip
import json
import re
import statistics
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

from sglang_gemma4.gpu import REPO
from sglang_gemma4.gpu.serve.checkpoint import write_checkpoint
from sglang_gemma4.gpu.serve.pool_usage import parse, summary
from sglang_gemma4.gpu.serve.presets import (
    MTP_DRAFT_TOKENS,
    MTP_STEPS,
    SIMULATED_ACCEPT_LEN,
    full_acceptance_problem,
    simulated_acceptance,
)
from sglang_gemma4.gpu.serve.server import Server, admin_key, http_json, patched_env
from sglang_gemma4.gpu.serve.variants import VARIANTS, assistant_text_config, text_config
from sglang_gemma4.gpu.studies.profile import HBM_BYTES_PER_S, active_bytes, weight_bytes
from sglang_gemma4.gpu.studies.step_trace import (
    busy_between,
    graph_replays,
    request_for,
    union_us,
    written_trace,
)

PROMPT_LEN, OUTPUT_LEN, TRACE_AFTER = 128, 1024, 64
DRAFT_FORWARDS = MTP_STEPS  # one draft forward per step
FORWARD_END = re.compile(
    "softmax", re.IGNORECASE
)  # each draft forward ends with a softmax over its logits
PARTS = (
    "period",
    "draft_busy",
    "pre_verify_busy",
    "pre_verify_idle",
    "verify_busy",
    "post_verify_busy",
    "post_verify_idle",
)


def label_replays(replays: list[list[tuple]]) -> list[str]:
    """'verify' or 'draft' per replay: the verify graph runs the whole target (30 or 60 layers), the
    draft loop's graph 3 forwards of the 4-layer assistant, so it launches far fewer kernels."""
    counts = [len(kernels) for kernels in replays]
    if len(set(counts)) < 2:
        raise ValueError(
            f"cannot tell the draft loop's graph from the verify graph: kernels per replay {counts}"
        )
    middle = (min(counts) + max(counts)) / 2
    return ["verify" if count > middle else "draft" for count in counts]


def forward_times(draft: list[tuple], forwards: int) -> list[float] | None:
    """GPU time of each draft forward: the draft loop's kernels up to and including each softmax
    (what follows the last joins the last forward); None unless there are `forwards` softmaxes."""
    groups, current = [], []
    for kernel in draft:
        current.append(kernel[:2])
        if FORWARD_END.search(kernel[2]):
            groups.append(current)
            current = []
    if len(groups) != forwards:
        return None
    groups[-1] += current
    return [union_us(group) for group in groups]


def spec_steps(events: list[dict], forwards: int = DRAFT_FORWARDS) -> list[dict]:
    """A row per speculative step that has a next one (us): a draft-loop replay, the verify replay
    after it, and what the GPU did up to the next draft-loop replay."""
    replays, others = graph_replays(events)
    labels = label_replays(replays)
    rows = []
    for i in range(len(replays) - 2):
        if labels[i : i + 3] != ["draft", "verify", "draft"]:
            continue
        draft, verify, next_draft = replays[i : i + 3]
        draft_end, verify_start = max(k[1] for k in draft), verify[0][0]
        verify_end, next_start = max(k[1] for k in verify), next_draft[0][0]
        before, after = (
            busy_between(others, draft_end, verify_start),
            busy_between(others, verify_end, next_start),
        )
        rows.append(
            {
                "period_us": next_start - draft[0][0],
                "draft_span_us": draft_end - draft[0][0],
                "draft_busy_us": union_us([k[:2] for k in draft]),
                "draft_forwards_us": forward_times(draft, forwards),
                "pre_verify_busy_us": before,
                "pre_verify_idle_us": verify_start - draft_end - before,
                "verify_span_us": verify_end - verify_start,
                "verify_busy_us": union_us([k[:2] for k in verify]),
                "post_verify_busy_us": after,
                "post_verify_idle_us": next_start - verify_end - after,
            }
        )
    return rows


def kv_token_bytes(config: dict) -> dict[str, int]:
    """KV bytes per token and layer, as sglang's pool stores them (bf16 K and V; full-attention
    layers with the global KV heads and head dim)."""
    full_heads = config.get("num_global_key_value_heads") or config["num_key_value_heads"]
    return {
        "full_attention": 2 * full_heads * config["global_head_dim"] * 2,
        "sliding_attention": 2 * config["num_key_value_heads"] * config["head_dim"] * 2,
    }


def kv_read_bytes(
    layer_types: list[str], token_bytes: dict[str, int], context: int, window: int
) -> int:
    """KV one request's attention reads over these layers at `context` tokens."""
    return sum(
        token_bytes[t] * (context if t == "full_attention" else min(context, window))
        for t in layer_types
    )


def step_bytes(
    variant: str, target: dict, draft_weights: int, batch: int, context: int
) -> dict[str, float]:
    """Bytes a speculative step must read: the verify (the target's weights for batch x 4 tokens,
    its KV) and the draft loop (3 forwards of the assistant's weights and the target KV it
    reads)."""
    config = text_config(variant)
    token_bytes, window = kv_token_bytes(config), config["sliding_window"]
    draft_layers = assistant_text_config(variant)["layer_types"]
    return {
        "verify_weights": active_bytes(target, batch * MTP_DRAFT_TOKENS),
        "verify_kv": batch * kv_read_bytes(config["layer_types"], token_bytes, context, window),
        "draft_weights": DRAFT_FORWARDS * draft_weights,
        "draft_kv": DRAFT_FORWARDS
        * batch
        * kv_read_bytes(draft_layers, token_bytes, context, window),
    }


def draft_weight_bytes(variant: str) -> int:
    """bf16 bytes of the assistant draft as transformers builds it (on the meta device): no K/V
    projections, which its layers do not need (sglang's fused qkv_proj still holds and reads
    them)."""
    import torch
    from transformers import Gemma4AssistantConfig, Gemma4AssistantForCausalLM

    config = Gemma4AssistantConfig(
        text_config=assistant_text_config(variant),
        backbone_hidden_size=VARIANTS[variant]["hidden_size"],
    )
    with torch.device("meta"):
        model = Gemma4AssistantForCausalLM(config)
    return sum(param.numel() for param in model.parameters()) * 2


def median(rows: list[dict], key: str) -> float:
    return statistics.median(row[key] for row in rows) if rows else float("nan")


def forward_medians(rows: list[dict]) -> str:
    split = [row["draft_forwards_us"] for row in rows if row["draft_forwards_us"]]
    if not split:
        return "n/a"
    return " / ".join(
        f"{statistics.median(f[i] for f in split):.1f}" for i in range(DRAFT_FORWARDS)
    )


def floor_us(nbytes: float, bandwidth: float | None) -> str:
    """Time to read `nbytes` at the HBM's nominal bandwidth ('?' on a GPU not in
    HBM_BYTES_PER_S)."""
    return f"{nbytes / bandwidth * 1e6:.1f}" if bandwidth else "?"


def summarize(records: list[dict]) -> str:
    """Markdown: per batch size the median step split into its parts, each draft forward, and the
    draft's and verify's GPU time against their HBM floor."""
    first = records[0]
    bandwidth = next((bw for key, bw in HBM_BYTES_PER_S.items() if key in first["gpu"]), None)
    lines = [
        (
            f"# {first['variant']} ({first['build']}) on {first['gpu']}: one speculative step "
            "(frozen-KV MTP)"
        ),
        "",
        f"{DRAFT_FORWARDS} draft forwards, {MTP_DRAFT_TOKENS} draft tokens, top-k 1; "
        "simulated accept length "
        f"{first['accept_len']}. Medians over the traced steps (us); idle = the GPU "
        "waiting for the host.",
        "",
        "| batch | steps | accept len (logged) | "
        + " | ".join(p.replace("_", " ") for p in PARTS)
        + " | draft forwards |",
        "|---|---|---|" + "---|" * (len(PARTS) + 1),
    ]
    for r in records:
        lines.append(
            f"| {r['batch']} | {len(r['steps'])} | {r['logged_accept_len']:.2f} | "
            + " | ".join(f"{median(r['steps'], p + '_us'):.1f}" for p in PARTS)
            + f" | {forward_medians(r['steps'])} |"
        )
    lines += [
        "",
        "| batch | context | verify GB (weights + KV) | verify floor us | verify busy us "
        "| draft GB | "
        "draft floor us | draft busy us |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        b = r["bytes"]
        verify, draft = b["verify_weights"] + b["verify_kv"], b["draft_weights"] + b["draft_kv"]
        lines.append(
            f"| {r['batch']} | {r['context']} | {verify / 1e9:.3f} | "
            f"{floor_us(verify, bandwidth)} | "
            f"{median(r['steps'], 'verify_busy_us'):.1f} | {draft / 1e9:.3f} | "
            f"{floor_us(draft, bandwidth)} | "
            f"{median(r['steps'], 'draft_busy_us'):.1f} |"
        )
    lines += [
        "",
        "Verify weights count the experts uniform routing would touch with batch x "
        f"{MTP_DRAFT_TOKENS} tokens (an estimate: see the module's text for how to measure them).",
    ]
    return "\n".join(lines) + "\n"


class Stream(threading.Thread):
    """One greedy request, streamed until `close` is set; keeps its latest completion-token
    count."""

    def __init__(self, url: str, seed: int, prompt_len: int = PROMPT_LEN):
        super().__init__(daemon=True)
        self.url, self.seed, self.prompt_len = url, seed, prompt_len
        self.tokens, self.error = 0, None
        self.close = threading.Event()

    def run(self) -> None:
        payload = request_for(self.seed, self.prompt_len, OUTPUT_LEN)
        request = urllib.request.Request(
            self.url + "/generate",
            data=json.dumps(payload).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(
                request, timeout=600
            ) as response:  # closing it aborts the request
                for line in response:
                    if self.close.is_set():
                        return
                    if line.startswith(b"data:") and line.strip() != b"data: [DONE]":
                        self.tokens = json.loads(line[5:])["meta_info"]["completion_tokens"]
        except OSError as e:
            self.error = e


def wait_for(streams: list[Stream], tokens: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while min(s.tokens for s in streams) < tokens:
        failed = [s.error for s in streams if s.error]
        if failed or time.monotonic() > deadline:
            raise RuntimeError(
                (
                    f"streams did not reach {tokens} tokens ({[s.tokens for s in streams]}): "
                    f"{failed[:1]}"
                )
            )
        time.sleep(0.5)


def wait_drained(url: str, timeout: float) -> None:
    """Until the server runs and queues no request (closed streams are aborted as it notices), so
    the next batch size's trace holds only its own requests."""
    deadline = time.monotonic() + timeout
    while True:
        status, body = http_json("GET", url + "/v1/loads?include=core")
        loads = json.loads(body)["loads"] if status == 200 else None
        if (
            loads is not None
            and sum(load["num_running_reqs"] + load["num_waiting_reqs"] for load in loads) == 0
        ):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(
                (
                    f"the server still has requests after {timeout} s (/v1/loads: {status} "
                    f"{body[:200]})"
                )
            )
        time.sleep(0.5)


def logged_accept_len(log: Path, since: int) -> float:
    """The median accept length of the scheduler's decode lines written to `log` after byte `since`
    (a streamed request's meta_info carries none until it finishes, and the traced streams never
    do)."""
    with open(log, "rb") as f:
        f.seek(since)
        accept = summary(parse(f.read().decode(errors="replace"))).get("median_accept_len")
    if accept is None:
        raise RuntimeError(
            f"{log}: no decode line with an accept length: is speculative decoding on?"
        )
    return accept


def trace_batch(
    server: Server, batch: int, steps: int, out: Path, name: str, prompt_len: int = PROMPT_LEN
) -> tuple[list[dict], int, float]:
    """(steps, context at the trace's start, median logged accept length) of `batch` streams."""
    log_start = (
        server.log_path.stat().st_size
    )  # the last batch size's streams are drained: what follows is ours
    streams = [Stream(server.url, seed, prompt_len) for seed in range(batch)]
    for stream in streams:
        stream.start()
    try:
        wait_for(streams, TRACE_AFTER, timeout=300)
        context = prompt_len + min(s.tokens for s in streams)
        trace_dir = out / f"{name}-trace"
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
        trace = written_trace(trace_dir, timeout=300)
        accept = logged_accept_len(server.log_path, log_start)
    finally:
        for stream in streams:
            stream.close.set()
    wait_drained(server.url, timeout=120)
    if trace is None:
        raise RuntimeError(f"{name}: no trace under {trace_dir}")
    with gzip.open(trace, "rt") as f:
        rows = spec_steps(json.load(f)["traceEvents"])
    if not rows:
        raise RuntimeError(f"{name}: no draft -> verify -> draft replays in {trace}")
    return rows, context, accept


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--variant", choices=sorted(SIMULATED_ACCEPT_LEN))
    parser.add_argument("--out")
    parser.add_argument("--build", default="patched", choices=["pristine", "patched"])
    parser.add_argument(
        "--env",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="extra server environment (e.g. an opt-in switch); name the setup with --label",
    )
    parser.add_argument(
        "--label", help="the setup's name in file names and tables (default: the build)"
    )
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 4, 16, 32])
    parser.add_argument(
        "--accept-len", type=float, help="simulated accept length (default: the variant's)"
    )
    parser.add_argument(
        "--steps", type=int, default=40, help="scheduler steps traced per batch size"
    )
    parser.add_argument(
        "--prompt-len",
        type=int,
        default=PROMPT_LEN,
        help="prompt tokens per stream: the context the verify's attention reads (chat: ~1500)",
    )
    parser.add_argument(
        "--report", type=Path, metavar="JSONL", help="only rewrite the .md beside this .jsonl"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the server's command line instead of running"
    )
    parser.add_argument("flags", nargs="*", help="launch_server flags, after --")
    return parser


def main() -> int:
    cli = parser()
    args = cli.parse_args()
    if args.report:
        records = [json.loads(line) for line in args.report.read_text().splitlines()]
        print(summarize(records))
        args.report.with_suffix(".md").write_text(summarize(records))
        return 0
    if not (args.variant and args.out):
        cli.error("--variant and --out are required (or --report)")
    out, accept = Path(args.out), args.accept_len or SIMULATED_ACCEPT_LEN[args.variant]
    label = args.label or args.build
    stem = f"{args.variant}-{label}-spec-step"
    server = Server(
        args.variant,
        args.build,
        out / f"{stem}.server.log",
        mtp=True,
        extra=args.flags,
        env={**simulated_acceptance(args.variant, accept), **patched_env(args.env)},
        admin_key=admin_key(),
    )
    if args.dry_run:
        print(server.describe())
        return 0
    out.mkdir(parents=True, exist_ok=True)
    target_dir = REPO / "checkpoints" / args.variant
    if not (target_dir / "config.json").is_file():  # the launch preset's config-only checkpoint
        write_checkpoint(args.variant, target_dir, repo_root=REPO)
    target, draft = weight_bytes(target_dir), draft_weight_bytes(args.variant)
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
    with server:
        for batch in args.batch_sizes:
            rows, context, logged = trace_batch(
                server, batch, args.steps, out, f"{stem}-batch{batch}", args.prompt_len
            )
            problem = full_acceptance_problem(logged)
            if problem:
                raise RuntimeError(f"batch {batch}: {problem}")
            records.append(
                {
                    "variant": args.variant,
                    "build": label,
                    "env": args.env,
                    "gpu": gpu,
                    "accept_len": accept,
                    "logged_accept_len": logged,
                    "batch": batch,
                    "context": context,
                    "steps": rows,
                    "bytes": step_bytes(args.variant, target, draft, batch, context),
                }
            )
            # the table so far after each batch size, so a run cut short keeps what it traced
            (out / f"{stem}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
            (out / f"{stem}.md").write_text(summarize(records))
    print(summarize(records))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
