"""Image parity: sglang's image path (vision tower, embedder, the soft tokens in the text model)
against transformers' Gemma-4 on the same random weights, towers included.

    python -m sglang_gemma4.gpu.checks.image_parity --out DIR [--variants e4b 26b-a4b 31b]
        [--builds patched] [--dry-run]

Per variant: a reduced-layer Gemma4ForConditionalGeneration checkpoint whose text model and
published vision tower (and E2B/E4B's audio tower) carry random weights; prompts of one seeded
noise PNG each (square, wide, tall: the processor gives each its own number of soft tokens) and a
question. transformers runs each through its own processor, two greedy steps, in float32 (the
reference) and bfloat16 (the noise floor); each build's server, started as the preset's
--multimodal, gets the same text and PNGs in one /generate batch. Bounds, comparison and tables
as parity.py's; a build whose prompt length differs from the processor's fails with both
numbers. Writes DIR/parity.jsonl and DIR/parity.md; exits non-zero when a build is out of bounds.
"""

import argparse
import io
from pathlib import Path

from sglang_gemma4.gpu.checks.openai_suite import data_url, png
from sglang_gemma4.gpu.checks.parity import (
    LAYERS,
    STEPS,
    bounds,
    compare,
    logprob_steps,
    passes,
    record,
    top,
    write_report,
)
from sglang_gemma4.gpu.serve.checkpoint import write_checkpoint
from sglang_gemma4.gpu.serve.server import Server

IMAGE_SIZES = ((224, 224), (640, 480), (96, 512))  # width x height
QUESTION = "What does this picture show?"
# decode graphs as served; prefill eager (an image prompt's prefill carries the tower's embeddings)
FLAGS = (
    "--multimodal",
    "--disable-radix-cache",
    "--cuda-graph-max-bs-decode",
    "8",
    "--cuda-graph-backend-prefill",
    "disabled",
)


def noise_png(width: int, height: int, generator) -> bytes:
    import torch

    pixels = torch.randint(0, 256, (height, width * 3), generator=generator, dtype=torch.uint8)
    return png(width, height, rows=b"".join(b"\x00" + bytes(row.tolist()) for row in pixels))


def image_items(image_token: str, seed: int = 0) -> list[tuple[str, bytes]]:
    """(prompt text with one image placeholder, PNG) per IMAGE_SIZES entry."""
    import torch

    g = torch.Generator().manual_seed(seed)
    return [(f"{image_token} {QUESTION}", noise_png(w, h, g)) for w, h in IMAGE_SIZES]


def reference(model_dir: Path, items: list[tuple[str, bytes]], device: str = "cuda") -> dict:
    """transformers' greedy steps per item in float32 and bfloat16 ({dtype: [steps, ...]}) and the
    processor's prompt lengths ("prompt_tokens")."""
    import torch
    from PIL import Image
    from transformers import AutoProcessor
    from transformers.models.gemma4.modeling_gemma4 import Gemma4ForConditionalGeneration

    processor = AutoProcessor.from_pretrained(model_dir)
    model = Gemma4ForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32)
    model = model.to(device).eval()
    inputs = [
        processor(
            text=text, images=[Image.open(io.BytesIO(data)).convert("RGB")], return_tensors="pt"
        ).to(device)
        for text, data in items
    ]
    out = {"prompt_tokens": [int(i["input_ids"].shape[1]) for i in inputs]}
    with torch.no_grad():
        for dtype in (torch.float32, torch.bfloat16):
            model.to(dtype)
            out[str(dtype).removeprefix("torch.")] = [
                greedy_steps(model, {**i, "pixel_values": i["pixel_values"].to(dtype)})
                for i in inputs
            ]
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return out


def greedy_steps(model, inputs: dict) -> list[dict]:
    """STEPS greedy steps: the whole image prompt, then one token at a time on its cache."""
    import torch

    steps, past = [], None
    for _ in range(STEPS):
        result = model(**inputs, past_key_values=past, use_cache=True, logits_to_keep=1)
        steps.append(top(result.logits[0, -1]))
        past = result.past_key_values
        inputs = {"input_ids": torch.tensor([[steps[-1]["top1"]]], device=model.device)}
    return steps


def request(items: list[tuple[str, bytes]]) -> dict:
    """The /generate batch: each prompt's text with its PNG inline."""
    return {
        "text": [text for text, _ in items],
        "image_data": [[data_url(data)] for _, data in items],
    }


def checkpoint(variant: str, checkpoints: Path) -> Path:
    model_dir = checkpoints / f"{variant}-images"
    if not any(model_dir.glob("*.safetensors")):
        write_checkpoint(
            variant,
            model_dir,
            layers=LAYERS[variant],
            arch="conditional",
            weights="random",
            seed=0,
            device="cuda",
        )
    return model_dir


def server(variant: str, build: str, model_dir: Path, out: Path) -> Server:
    return Server(
        variant,
        build,
        out / f"{variant}-{build}.log",
        model=str(model_dir.resolve()),
        extra=list(FLAGS),
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True)
    parser.add_argument("--variants", nargs="+", default=["e4b", "26b-a4b", "31b"])
    parser.add_argument("--builds", nargs="+", default=["patched"], choices=["pristine", "patched"])
    parser.add_argument("--checkpoints", default="checkpoints/parity")
    parser.add_argument(
        "--dry-run", action="store_true", help="print each server's command line instead of running"
    )
    args = parser.parse_args()
    out, checkpoints = Path(args.out), Path(args.checkpoints)
    if args.dry_run:
        for variant in args.variants:
            for build in args.builds:
                print(server(variant, build, checkpoints / f"{variant}-images", out).describe())
        return 0
    out.mkdir(parents=True, exist_ok=True)
    rows, ok = [], True
    for variant in args.variants:
        model_dir = checkpoint(variant, checkpoints)
        from transformers import AutoProcessor

        items = image_items(AutoProcessor.from_pretrained(model_dir).image_token)
        ref = reference(model_dir, items)
        noise = compare(ref["float32"], ref["bfloat16"])
        bound = bounds(noise, len(items))
        common = {
            "variant": variant,
            "arch": "conditional, images",
            "layers": LAYERS[variant],
            "image_sizes": [f"{w}x{h}" for w, h in IMAGE_SIZES],
            "prompt_tokens": ref["prompt_tokens"],
            "bound": bound,
        }
        record(rows, out, {**common, "build": "transformers-bf16", **noise, "passed": None})
        for build in args.builds:
            try:
                with server(variant, build, model_dir, out) as s:
                    answers = logprob_steps(s, request(items))
                served_tokens = [a["prompt_tokens"] for a in answers]
                if served_tokens != ref["prompt_tokens"]:
                    raise RuntimeError(
                        f"prompt tokens differ: the processor's {ref['prompt_tokens']}, the "
                        f"server's {served_tokens}"
                    )
                result = compare(ref["float32"], [a["steps"] for a in answers])
            except RuntimeError as e:
                result = {"error": str(e)[-800:]}
            passed = passes(result, bound)
            ok &= passed
            record(rows, out, {**common, "build": build, **result, "passed": passed})
    write_report(rows, out, "transformers float32 on the checkpoint's bf16 weights, one image each")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
