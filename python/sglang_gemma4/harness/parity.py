"""Parity: greedy next token and log-probabilities of sglang (pristine and patched) against
transformers' own Gemma-4 on the same random weights and prompts.

    python -m sglang_gemma4.harness.parity --out DIR [--variants e2b e4b 26b-a4b 31b] [--builds ...]

Per variant: write a reduced-layer random-weight checkpoint (checkpoint.py), run transformers'
Gemma-4 in float32 on the GPU over prompts whose lengths cross the sliding window, then each sglang
build's server on the same prompts sent as one batch.  Compares the next-token choice (top-1
agreement) and the log-probabilities of the reference's top 20 tokens (max |delta|).  Writes
DIR/parity.jsonl and DIR/parity.md; exits non-zero when a threshold fails.
"""

import argparse
import json
from pathlib import Path

from sglang_gemma4.checkpoint import hf_config, reduced_text_config, write_checkpoint
from sglang_gemma4.harness.server import FAST_START, Server, http_json

LAYERS = {"e2b": 8, "e4b": 8, "26b-a4b": 4, "31b": 4}
TOP = 20
MIN_TOP1_AGREEMENT = 0.9  # bf16 serving vs a float32 reference: near-ties may flip
MAX_LOGPROB_DELTA = 0.5


def prompt_lengths(text: dict) -> list[int]:
    window = text["sliding_window"]
    return [7, 64, window - 3, window + 40, 2 * window + 100]


def prompts(text: dict, seed: int = 0) -> list[list[int]]:
    import torch

    g = torch.Generator().manual_seed(seed)
    return [[2] + torch.randint(5, text["vocab_size"], (n - 1,), generator=g).tolist() for n in prompt_lengths(text)]


def reference(model_dir: Path, text: dict, batch: list[list[int]]) -> list[dict]:
    """transformers' log-probabilities of the next token after each prompt (float32, GPU)."""
    import torch
    from transformers.models.gemma4.modeling_gemma4 import Gemma4ForCausalLM

    # The checkpoint's config.json is in sglang's text-only layout; give transformers its own.
    model = Gemma4ForCausalLM.from_pretrained(model_dir, config=hf_config(text, "causal"), dtype=torch.float32)
    model = model.to("cuda").eval()
    out = []
    with torch.no_grad():
        for ids in batch:
            logits = model(input_ids=torch.tensor([ids], device="cuda")).logits[0, -1].float()
            logprobs = torch.log_softmax(logits, -1)
            top = torch.topk(logprobs, TOP)
            out.append({"top1": int(top.indices[0]), "top": dict(zip(top.indices.tolist(), top.values.tolist()))})
    del model
    torch.cuda.empty_cache()
    return out


def served(server: Server, batch: list[list[int]]) -> list[dict]:
    status, body = http_json("POST", f"{server.url}/generate", {
        "input_ids": batch, "return_logprob": True, "top_logprobs_num": TOP, "logprob_start_len": -1,
        "sampling_params": [{"max_new_tokens": 1, "temperature": 0} for _ in batch]}, timeout=600)
    if status != 200:
        raise RuntimeError(f"/generate answered {status}: {body[:500]}")
    out = []
    for answer in json.loads(body):
        top = answer["meta_info"]["output_top_logprobs"][0]  # [(logprob, id, text), ...]
        out.append({"top1": int(answer["meta_info"]["output_token_logprobs"][0][1]),
                    "top": {int(t[1]): float(t[0]) for t in top}})
    return out


def compare(ref: list[dict], got: list[dict]) -> dict:
    agree = sum(r["top1"] == g["top1"] for r, g in zip(ref, got)) / len(ref)
    deltas = [abs(r["top"][t] - g["top"][t]) for r, g in zip(ref, got) for t in r["top"] if t in g["top"]]
    overlap = sum(len(set(r["top"]) & set(g["top"])) for r, g in zip(ref, got)) / (TOP * len(ref))
    return {"top1_agreement": agree, "max_abs_dlogprob": max(deltas) if deltas else None, "top20_overlap": overlap}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--variants", nargs="+", default=list(LAYERS))
    parser.add_argument("--builds", nargs="+", default=["pristine", "patched"])
    parser.add_argument("--checkpoints", default="checkpoints/parity")
    parser.add_argument("extra", nargs="*", help="launch_server flags after --")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, ok = [], True
    for variant in args.variants:
        text = reduced_text_config(variant, LAYERS[variant])
        model_dir = Path(args.checkpoints) / variant
        if not any(model_dir.glob("*.safetensors")):
            write_checkpoint(variant, model_dir, layers=LAYERS[variant], weights="random", seed=0)
        batch = prompts(text)
        ref = reference(model_dir, text, batch)
        for build in args.builds:
            server = Server(variant, build, out / f"{variant}-{build}.log", model=str(model_dir.resolve()),
                            # eager forward by default: the captured paths are not compared here
                            extra=["--disable-radix-cache", *(args.extra or FAST_START)])
            try:
                with server:
                    result = compare(ref, served(server, batch))
            except RuntimeError as e:
                result = {"error": str(e)[-800:]}
            passed = ("error" not in result and result["top1_agreement"] >= MIN_TOP1_AGREEMENT
                      and result["max_abs_dlogprob"] is not None and result["max_abs_dlogprob"] <= MAX_LOGPROB_DELTA)
            ok &= passed
            row = {"variant": variant, "layers": LAYERS[variant], "build": build, "prompt_lengths": prompt_lengths(text),
                   **result, "passed": passed}
            rows.append(row)
            with open(out / "parity.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
    table = ["| variant | layers | build | top-1 agreement | max abs dlogprob (ref top 20) | top-20 overlap | pass |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        table.append(f"| {r['variant']} | {r['layers']} | {r['build']} | {r.get('top1_agreement', 'ERR')} | "
                     f"{r.get('max_abs_dlogprob', '-')} | {r.get('top20_overlap', '-')} | {'yes' if r['passed'] else 'NO'} |")
    thresholds = f"thresholds: top-1 agreement >= {MIN_TOP1_AGREEMENT}, max |dlogprob| <= {MAX_LOGPROB_DELTA}"
    (out / "parity.md").write_text("\n".join(table) + f"\n\n{thresholds}\n")
    print("\n".join(table) + "\n" + thresholds)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
