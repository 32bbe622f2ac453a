"""Parity: greedy next token and log-probabilities of sglang (pristine and patched) against
transformers' own Gemma-4 on the same random weights and prompts.

    python -m sglang_gemma4.gpu.checks.parity --out DIR [--variants e2b e4b 26b-a4b 31b]
        [--builds ...]
        [--arch causal|conditional] [--server-flags "--tp-size 2 ..."] [--long 32768 100000]

Per variant: write a reduced-layer random-weight checkpoint (checkpoint.py), run transformers'
Gemma-4 on the GPU over prompts whose lengths cross the sliding window (two greedy steps: prefill,
then one decode; --long adds prompts of those lengths, which sglang prefills in chunks over a
growing cached prefix), in float32 (the reference) and in bfloat16 (the noise floor of bf16
itself), then each sglang build's server on the same prompts sent as one batch.  Compares the
greedy choices (top-1 agreement) and the log-probabilities of the reference's top 20 tokens (max
|delta|); the bounds come from transformers' own bf16 deviation in the same run.  Writes
DIR/parity.jsonl and DIR/parity.md; exits non-zero when a build is out of bounds.
"""

import argparse
import json
import shlex
from pathlib import Path

from sglang_gemma4.gpu.serve.checkpoint import (
    hf_config,
    hf_model_class,
    ordinary_ids,
    reduced_text_config,
    token_ids,
    write_checkpoint,
)
from sglang_gemma4.gpu.serve.presets import NO_GRAPHS, PARITY_GRAPHS
from sglang_gemma4.gpu.serve.server import Server, http_json, patched_env

LAYERS = {"e2b": 8, "e4b": 8, "26b-a4b": 4, "31b": 4}
TOP = 20
STEPS = 2  # the prefill's next token, then one decode step (CUDA-graph replay where graphs are on)
# transformers prefills each prompt in chunks over its own cache: a long prompt's attention masks
# stay chunk x prompt, not prompt x prompt
REFERENCE_CHUNK = 8192
# A build passes when it stays within the noise of bf16 itself: transformers' own bf16 run, on the
# same weights and prompts, measured against the float32 reference in the same call.
NOISE_FACTOR, NOISE_SLACK = 2.0, 0.05


def prompt_lengths(text: dict, long: tuple[int, ...] = ()) -> list[int]:
    window = text["sliding_window"]
    return [7, 33, 64, 200, window - 3, window + 40, 2 * window + 100, 3 * window + 17, *long]


def prompts(text: dict, long: tuple[int, ...] = (), seed: int = 0) -> list[list[int]]:
    import torch

    g = torch.Generator().manual_seed(seed)
    bos, ordinary = token_ids(text["vocab_size"])["bos_token_id"], ordinary_ids(text["vocab_size"])
    return [
        [bos] + torch.randint(0, ordinary, (n - 1,), generator=g).tolist()
        for n in prompt_lengths(text, long)
    ]


def top(logits) -> dict:
    import torch

    logprobs = torch.log_softmax(logits.float(), -1)
    best = torch.topk(logprobs, TOP)
    return {
        "top1": int(best.indices[0]),
        "top": dict(zip(best.indices.tolist(), best.values.tolist())),
    }


def reference(
    model_dir: Path, text: dict, batch: list[list[int]], arch: str
) -> dict[str, list[list[dict]]]:
    """transformers' next-token log-probabilities over STEPS greedy steps per prompt, in float32
    (the reference) and in bfloat16 (the noise floor), on the GPU."""
    import torch

    # config.json is in sglang's layout (text-only, or with the published towers); give transformers
    # the config the weights were written from.
    model = hf_model_class(arch).from_pretrained(
        model_dir, config=hf_config(text, arch), dtype=torch.float32
    )
    model = model.to("cuda").eval()
    out = {}
    with torch.no_grad():
        for dtype in (
            torch.float32,
            torch.bfloat16,
        ):  # the weights are bf16 values: exact both ways
            model.to(dtype)
            out[str(dtype).removeprefix("torch.")] = [greedy_steps(model, ids) for ids in batch]
    del model
    torch.cuda.empty_cache()
    return out


def greedy_steps(model, ids: list[int]) -> list[dict]:
    """STEPS greedy steps of `model` after the prompt `ids`: the prompt in REFERENCE_CHUNK pieces
    on one cache, then one token at a time; only the last position's logits are computed."""
    import torch
    from transformers import DynamicCache

    cache, steps = DynamicCache(config=model.config), []
    pieces = [ids[i : i + REFERENCE_CHUNK] for i in range(0, len(ids), REFERENCE_CHUNK)]
    for _ in range(STEPS):
        for piece in pieces:
            logits = model(
                input_ids=torch.tensor([piece], device=model.device),
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            ).logits
        steps.append(top(logits[0, -1]))
        pieces = [[steps[-1]["top1"]]]
    return steps


def logprob_steps(server: Server, prompts: dict) -> list[dict]:
    """/generate of a batch (`prompts`: input_ids, or text with media) for STEPS greedy tokens:
    per prompt {"steps": [{"top1", "top"}, ...], "prompt_tokens": the server's count}."""
    count = len(next(iter(prompts.values())))
    status, body = http_json(
        "POST",
        f"{server.url}/generate",
        {
            **prompts,
            "return_logprob": True,
            "top_logprobs_num": TOP,
            "logprob_start_len": -1,
            "sampling_params": [
                {"max_new_tokens": STEPS, "temperature": 0, "ignore_eos": True}
                for _ in range(count)
            ],
        },
        timeout=600,
    )
    if status != 200:
        raise RuntimeError(f"/generate answered {status}: {body[:500]}")
    out = []
    for answer in json.loads(body):
        meta = answer["meta_info"]
        steps = [
            {"top1": int(chosen[1]), "top": {int(t[1]): float(t[0]) for t in tops}}
            for chosen, tops in zip(meta["output_token_logprobs"], meta["output_top_logprobs"])
        ]
        out.append({"steps": steps, "prompt_tokens": meta.get("prompt_tokens")})
    return out


def served(server: Server, batch: list[list[int]]) -> list[list[dict]]:
    return [answer["steps"] for answer in logprob_steps(server, {"input_ids": batch})]


def compare(ref: list[list[dict]], got: list[list[dict]]) -> dict:
    """Top-1 agreement over every step; log-probability deltas on the reference's top 20, over the
    steps whose history is the same on both sides (every earlier step agreed)."""
    agree = total = 0
    deltas, overlaps = [], []
    for r_steps, g_steps in zip(ref, got):
        for r, g in zip(r_steps, g_steps):
            total += 1
            deltas += [abs(r["top"][t] - g["top"][t]) for t in r["top"] if t in g["top"]]
            overlaps.append(len(set(r["top"]) & set(g["top"])) / TOP)
            if r["top1"] != g["top1"]:
                break  # the next step would continue a different text
            agree += 1
    return {
        "top1_agreement": round(agree / total, 4),
        "max_abs_dlogprob": round(max(deltas), 4) if deltas else None,
        "top20_overlap": round(sum(overlaps) / len(overlaps), 4),
        "steps_compared": total,
    }


def bounds(noise: dict, prompts_count: int) -> dict:
    return {
        "max_abs_dlogprob": round(NOISE_FACTOR * noise["max_abs_dlogprob"] + NOISE_SLACK, 4),
        "top1_agreement": round(noise["top1_agreement"] - 1 / prompts_count, 4),
    }


def passes(result: dict, bound: dict) -> bool:
    return (
        "error" not in result
        and result["max_abs_dlogprob"] is not None
        and result["max_abs_dlogprob"] <= bound["max_abs_dlogprob"]
        and result["top1_agreement"] >= bound["top1_agreement"]
    )


def record(rows: list[dict], out: Path, row: dict) -> None:
    """One result row: kept for the report, appended to DIR/parity.jsonl, printed."""
    rows.append(row)
    with open(out / "parity.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps(row), flush=True)


def write_report(rows: list[dict], out: Path, reference_note: str) -> None:
    """DIR/parity.md (and stdout): a row per build, its bound and verdict."""
    table = [
        (
            "| variant | layers | build | top-1 agreement | max abs dlogprob (ref top 20) | "
            "top-20 overlap | bound | pass |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        verdict = "noise floor" if r["passed"] is None else ("yes" if r["passed"] else "NO")
        table.append(
            f"| {r['variant']} | {r['layers']} | {r['build']} | {r.get('top1_agreement', 'ERR')} | "
            f"{r.get('max_abs_dlogprob', '-')} | {r.get('top20_overlap', '-')} | "
            f">= {r['bound']['top1_agreement']}, <= {r['bound']['max_abs_dlogprob']} | {verdict} |"
        )
    rule = (
        f"Reference: {reference_note}, {STEPS} greedy steps per prompt. "
        "A build passes with top-1 agreement >= transformers-bf16's minus one prompt and "
        "max |dlogprob| <= "
        f"{NOISE_FACTOR} x transformers-bf16's + {NOISE_SLACK}."
    )
    (out / "parity.md").write_text("\n".join(table) + f"\n\n{rule}\n")
    print("\n".join(table) + "\n" + rule)


def random_checkpoint(variant: str, model_dir: Path, arch: str) -> None:
    """The variant's reduced-layer checkpoint of `arch` with random weights, written on the GPU
    unless `model_dir` holds it."""
    if not any(model_dir.glob("*.safetensors")):
        write_checkpoint(
            variant,
            model_dir,
            layers=LAYERS[variant],
            arch=arch,
            weights="random",
            seed=0,
            device="cuda",
        )


def checkpoint_dir(args: argparse.Namespace, variant: str) -> Path:
    return Path(args.checkpoints) / (variant if args.arch == "causal" else f"{variant}-{args.arch}")


def servers(
    variant: str, model_dir: Path, args: argparse.Namespace, out: Path
) -> list[tuple[str, Server]]:
    """(build, server) for each build compared on `variant`; "-eager" builds run without CUDA
    graphs."""
    chosen = []
    for build in args.builds + (["patched-eager"] if variant in args.eager_variants else []):
        eager = build.endswith("-eager")
        chosen.append(
            (
                build,
                Server(
                    variant,
                    build.removesuffix("-eager"),
                    out / f"{variant}-{build}.log",
                    model=str(model_dir.resolve()),
                    extra=[
                        "--disable-radix-cache",
                        *(NO_GRAPHS if eager else PARITY_GRAPHS),
                        *shlex.split(args.server_flags),
                    ],
                    env=patched_env(args.patched_env) if build.startswith("patched") else {},
                ),
            )
        )
    return chosen


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True)
    parser.add_argument("--variants", nargs="+", default=list(LAYERS))
    parser.add_argument(
        "--builds",
        nargs="+",
        default=["pristine", "patched"],
        help="pristine | patched; add -eager (e.g. patched-eager) for CUDA graphs off",
    )
    parser.add_argument(
        "--eager-variants",
        nargs="*",
        default=[],
        help="variants that also run patched-eager (E2B/E4B: graphs on vs off, patch 0001)",
    )
    parser.add_argument("--checkpoints", default="checkpoints/parity")
    parser.add_argument(
        "--arch",
        default="causal",
        choices=["causal", "conditional"],
        help="the checkpoint's class: Gemma4ForCausalLM or Gemma4ForConditionalGeneration",
    )
    parser.add_argument(
        "--server-flags", default="", help="more launch flags for every server, e.g. '--tp-size 2'"
    )
    parser.add_argument(
        "--patched-env",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="environment of the patched servers only, e.g. the kernels' opt-in switches",
    )
    parser.add_argument(
        "--long",
        nargs="*",
        type=int,
        default=[],
        metavar="TOKENS",
        help="more prompts of these lengths (e.g. 32768 100000), prefilled over a long prefix",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print each server's command line instead of running"
    )
    args = parser.parse_args()
    out = Path(args.out)
    if args.dry_run:
        for variant in args.variants:
            for _, server in servers(variant, checkpoint_dir(args, variant), args, out):
                print(server.describe())
        return 0
    out.mkdir(parents=True, exist_ok=True)
    rows, ok = [], True
    for variant in args.variants:
        text = reduced_text_config(variant, LAYERS[variant])
        model_dir = checkpoint_dir(args, variant)
        random_checkpoint(variant, model_dir, args.arch)
        batch = prompts(text, tuple(args.long))
        ref = reference(model_dir, text, batch, args.arch)
        noise = compare(ref["float32"], ref["bfloat16"])
        bound = bounds(noise, len(batch))
        common = {
            "variant": variant,
            "arch": args.arch,
            "layers": LAYERS[variant],
            "prompt_lengths": prompt_lengths(text, tuple(args.long)),
            "bound": bound,
        }
        record(rows, out, {**common, "build": "transformers-bf16", **noise, "passed": None})
        for build, server in servers(variant, model_dir, args, out):
            try:
                with server:
                    result = compare(ref["float32"], served(server, batch))
            except RuntimeError as e:
                result = {"error": str(e)[-800:]}
            passed = passes(result, bound)
            ok &= passed
            record(rows, out, {**common, "build": build, **result, "passed": passed})
    write_report(rows, out, "transformers float32 on the checkpoint's bf16 weights")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
