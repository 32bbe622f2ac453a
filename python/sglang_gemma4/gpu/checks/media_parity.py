"""Media parity: sglang's image or audio path (the tower, its embedder, the soft tokens in the
text model) against transformers' Gemma-4 on the same random weights, towers included.

    python -m sglang_gemma4.gpu.checks.media_parity --out DIR --media image|audio
        [--variants ...] [--builds patched] [--dry-run]

Per variant: a reduced-layer Gemma4ForConditionalGeneration checkpoint whose text model and
published towers (vision; E2B/E4B also audio) carry random weights; three prompts, each one seeded
noise item and a question: PNGs square, wide and tall, or 16 kHz WAVs of 1, 2.5 and 4 s (the
processor gives each its own number of soft tokens). transformers runs each through its own
processor, two greedy steps, in float32 (the reference) and bfloat16 (the noise floor); each
build's server, started as the preset's --multimodal, gets the same text and media inline in one
/generate batch. Bounds, comparison and tables as parity.py's; a build whose prompt length differs
from the processor's fails with both numbers. Writes DIR/parity.jsonl and DIR/parity.md; exits
non-zero when a build is out of bounds.
"""

import argparse
import io
import wave
from dataclasses import dataclass
from pathlib import Path

from sglang_gemma4.gpu.checks.openai_suite import data_url, png
from sglang_gemma4.gpu.checks.parity import (
    LAYERS,
    STEPS,
    bounds,
    compare,
    logprob_steps,
    passes,
    random_checkpoint,
    record,
    top,
    write_report,
)
from sglang_gemma4.gpu.serve.checkpoint import MULTIMODAL_TOKENS
from sglang_gemma4.gpu.serve.server import Server

IMAGE_SIZES = ((224, 224), (640, 480), (96, 512))  # width x height
AUDIO_SECONDS = (1.0, 2.5, 4.0)
AUDIO_RATE = 16_000  # what the feature extractor and sglang's loader read at
QUESTION = "What is in this recording or picture?"
# decode graphs as served; prefill eager (a media prompt's prefill carries the tower's embeddings)
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


def noise_wav(seconds: float, generator) -> bytes:
    """Mono 16-bit PCM of uniform noise at a third of full scale."""
    import torch

    samples = (torch.rand(int(seconds * AUDIO_RATE), generator=generator) * 2 - 1) * 0.33
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(AUDIO_RATE)
        w.writeframes((samples * 32767).to(torch.int16).numpy().tobytes())
    return buffer.getvalue()


def decoded(kind: str, data: bytes) -> dict:
    """The processor's keyword for one item: a PIL image, or the WAV's samples in [-1, 1]."""
    if kind == "image":
        from PIL import Image

        return {"images": [Image.open(io.BytesIO(data)).convert("RGB")]}
    import numpy as np

    with wave.open(io.BytesIO(data)) as w:
        pcm = w.readframes(w.getnframes())
    return {"audio": [np.frombuffer(pcm, dtype=np.int16).astype(np.float32) / 32768]}


@dataclass(frozen=True)
class Medium:
    placeholder: str  # the token the processor expands into the item's soft tokens
    field: str  # /generate's field
    mime: str
    variants: tuple[str, ...]  # the presets' variants with this tower


MEDIA = {
    "image": Medium(
        MULTIMODAL_TOKENS["image_token"], "image_data", "image/png", ("e4b", "26b-a4b", "31b")
    ),
    "audio": Medium(MULTIMODAL_TOKENS["audio_token"], "audio_data", "audio/wav", ("e2b", "e4b")),
}


def media_items(kind: str, placeholder: str, seed: int = 0) -> list[tuple[str, bytes]]:
    """(prompt text with one placeholder, the item's file) per size or length."""
    import torch

    g = torch.Generator().manual_seed(seed)
    files = (
        [noise_png(w, h, g) for w, h in IMAGE_SIZES]
        if kind == "image"
        else [noise_wav(s, g) for s in AUDIO_SECONDS]
    )
    return [(f"{placeholder} {QUESTION}", data) for data in files]


def reference(
    model_dir: Path, kind: str, items: list[tuple[str, bytes]], device: str = "cuda"
) -> dict:
    """transformers' greedy steps per item in float32 and bfloat16 ({dtype: [steps, ...]}) and the
    processor's prompt lengths ("prompt_tokens")."""
    import torch
    from transformers import AutoProcessor
    from transformers.models.gemma4.modeling_gemma4 import Gemma4ForConditionalGeneration

    processor = AutoProcessor.from_pretrained(model_dir)
    model = Gemma4ForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32)
    model = model.to(device).eval()
    inputs = [
        processor(text=text, **decoded(kind, data), return_tensors="pt").to(device)
        for text, data in items
    ]
    out = {"prompt_tokens": [int(i["input_ids"].shape[1]) for i in inputs]}
    with torch.no_grad():
        for dtype in (torch.float32, torch.bfloat16):
            model.to(dtype)
            out[str(dtype).removeprefix("torch.")] = [
                greedy_steps(
                    model, {k: v.to(dtype) if v.is_floating_point() else v for k, v in i.items()}
                )
                for i in inputs
            ]
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return out


def greedy_steps(model, inputs: dict) -> list[dict]:
    """STEPS greedy steps: the prompt with its media, then one token at a time on its cache."""
    import torch

    steps, past = [], None
    for _ in range(STEPS):
        result = model(**inputs, past_key_values=past, use_cache=True, logits_to_keep=1)
        steps.append(top(result.logits[0, -1]))
        past = result.past_key_values
        inputs = {"input_ids": torch.tensor([[steps[-1]["top1"]]], device=model.device)}
    return steps


def request(kind: str, items: list[tuple[str, bytes]]) -> dict:
    """The /generate batch: each prompt's text with its file inline."""
    medium = MEDIA[kind]
    return {
        "text": [text for text, _ in items],
        medium.field: [[data_url(data, medium.mime)] for _, data in items],
    }


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
    parser.add_argument("--media", required=True, choices=list(MEDIA))
    parser.add_argument("--variants", nargs="+", help="default: those with the medium's tower")
    parser.add_argument("--builds", nargs="+", default=["patched"], choices=["pristine", "patched"])
    parser.add_argument("--checkpoints", default="checkpoints/parity")
    parser.add_argument(
        "--dry-run", action="store_true", help="print each server's command line instead of running"
    )
    args = parser.parse_args()
    out, checkpoints = Path(args.out), Path(args.checkpoints)
    variants = args.variants or list(MEDIA[args.media].variants)
    if args.dry_run:
        for variant in variants:
            for build in args.builds:
                print(server(variant, build, checkpoints / f"{variant}-media", out).describe())
        return 0
    out.mkdir(parents=True, exist_ok=True)
    rows, ok = [], True
    for variant in variants:
        model_dir = checkpoints / f"{variant}-media"
        random_checkpoint(variant, model_dir, "conditional")
        items = media_items(args.media, MEDIA[args.media].placeholder)
        ref = reference(model_dir, args.media, items)
        noise = compare(ref["float32"], ref["bfloat16"])
        bound = bounds(noise, len(items))
        common = {
            "variant": variant,
            "arch": f"conditional, {args.media}",
            "layers": LAYERS[variant],
            "items": [f"{w}x{h}" for w, h in IMAGE_SIZES]
            if args.media == "image"
            else [f"{s} s" for s in AUDIO_SECONDS],
            "prompt_tokens": ref["prompt_tokens"],
            "bound": bound,
        }
        record(rows, out, {**common, "build": "transformers-bf16", **noise, "passed": None})
        for build in args.builds:
            try:
                with server(variant, build, model_dir, out) as s:
                    answers = logprob_steps(s, request(args.media, items))
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
    write_report(
        rows, out, f"transformers float32 on the checkpoint's bf16 weights, one {args.media} each"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
