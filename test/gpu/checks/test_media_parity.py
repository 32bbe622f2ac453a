"""Media parity (checks/media_parity.py): the PNGs and WAVs and the /generate batch it sends, how
it reads the server's answer, and its transformers reference on CPU: a toy-width conditional model
whose vision and audio towers carry random weights, behind the processor of a conditional
checkpoint."""

import io
import json
import shlex
import wave

import pytest
from PIL import Image
from safetensors import safe_open
from tiny_gemma4 import tiny

from sglang_gemma4.gpu.checks import media_parity, parity
from sglang_gemma4.gpu.serve.checkpoint import (
    conditional_config,
    token_ids,
    write_checkpoint,
    write_random_weights,
)
from sglang_gemma4.gpu.stages.table import expand

VOCAB = 262_144  # the conditional checkpoint's tokenizer: the placeholders' ids need its size
TINY_VISION = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 16,
}
TINY_AUDIO = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2}


def test_each_prompt_has_one_placeholder_and_a_noise_png_of_its_size():
    items = media_parity.media_items("image", "<|image|>", seed=3)
    assert [t.count("<|image|>") for t, _ in items] == [1, 1, 1]
    sizes = [Image.open(io.BytesIO(data)).size for _, data in items]
    assert sizes == list(media_parity.IMAGE_SIZES)
    pixels = [Image.open(io.BytesIO(data)).convert("RGB").getdata() for _, data in items]
    assert all(len(set(p)) > 1000 for p in pixels)  # noise, not a flat colour
    assert media_parity.media_items("image", "<|image|>", seed=3) == items
    assert media_parity.media_items("image", "<|image|>", seed=4) != items


def test_each_audio_prompt_has_a_16_khz_noise_wav_of_its_length():
    items = media_parity.media_items("audio", "<|audio|>", seed=3)
    assert [t.count("<|audio|>") for t, _ in items] == [1, 1, 1]
    for (_, data), seconds in zip(items, media_parity.AUDIO_SECONDS):
        with wave.open(io.BytesIO(data)) as w:
            assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, 16_000)
            assert w.getnframes() == int(seconds * 16_000)
        (samples,) = media_parity.decoded("audio", data)["audio"]
        assert samples.dtype.name == "float32" and 0.3 < abs(samples).max() <= 0.34


@pytest.mark.parametrize("kind", ["image", "audio"])
def test_the_batch_sends_each_file_inline_beside_its_text_and_reads_prompt_tokens(
    monkeypatch, kind
):
    items = media_parity.media_items(kind, "<|x|>")
    sent = {}

    def answer(method, url, payload, timeout):
        sent.update(payload)
        meta = {
            "output_token_logprobs": [[-0.1, 7, None], [-0.2, 9, None]],
            "output_top_logprobs": [[[-0.1, 7, None], [-2.0, 8, None]], [[-0.2, 9, None]]],
            "prompt_tokens": 300,
        }
        return 200, json.dumps([{"meta_info": meta}] * len(items))

    monkeypatch.setattr(parity, "http_json", answer)
    got = parity.logprob_steps(
        parity.Server("e4b", "patched", "log"), media_parity.request(kind, items)
    )
    field, mime = {"image": ("image_data", "image/png"), "audio": ("audio_data", "audio/wav")}[kind]
    assert sent["text"] == [t for t, _ in items]
    assert [len(urls) for urls in sent[field]] == [1, 1, 1]
    assert all(u[0].startswith(f"data:{mime};base64,") for u in sent[field])
    assert len(sent["sampling_params"]) == len(items) and sent["top_logprobs_num"] == parity.TOP
    assert got[0] == {
        "steps": [{"top1": 7, "top": {7: -0.1, 8: -2.0}}, {"top1": 9, "top": {9: -0.2}}],
        "prompt_tokens": 300,
    }


def test_the_stages_serve_the_random_checkpoint_as_the_presets_multimodal(tmp_path):
    (image,) = expand("image-parity:e4b", tmp_path).steps
    argv = list(image.argv)
    assert argv[argv.index("--media") :] == ["--media", "image", "--variants", "e4b"] + [
        "--builds",
        "patched",
    ]
    (audio,) = expand("audio-parity", tmp_path).steps
    assert "--variants" not in audio.argv and "audio" in audio.argv  # the module's e2b, e4b
    assert media_parity.MEDIA["audio"].variants == ("e2b", "e4b")
    server = media_parity.server("e4b", "patched", tmp_path / "e4b-media", tmp_path)
    words = shlex.split(server.describe().split(": ", 1)[1])
    assert words[words.index("--model-path") + 1] == str((tmp_path / "e4b-media").resolve())
    assert "--enable-multimodal" in words and "--load-format" not in words
    assert "--multimodal" not in words


@pytest.fixture(scope="module")
def tiny_media_checkpoint(tmp_path_factory):
    """A conditional checkpoint's tokenizer and processor, with a toy-width E4B and its towers in
    random weights over them (its config.json is the toy one)."""
    out = tmp_path_factory.mktemp("e4b-media")
    write_checkpoint("e4b", out, arch="conditional", repo_root=out, log=lambda *_: None)
    text = {**tiny("e4b"), "vocab_size": VOCAB, "vocab_size_per_layer_input": VOCAB}
    config = conditional_config({**text, **token_ids(VOCAB)}, (TINY_VISION, TINY_AUDIO))
    write_random_weights(config, "conditional", VOCAB, out, seed=0, log=lambda *_: None)
    return out


def test_random_weights_of_a_conditional_checkpoint_cover_its_towers(tiny_media_checkpoint):
    with safe_open(str(tiny_media_checkpoint / "model.safetensors"), "pt") as f:
        names = list(f.keys())
        for tower in ("vision_tower", "audio_tower"):
            weights = [n for n in names if tower in n]
            assert weights and all(f.get_tensor(n).abs().max() > 0 for n in weights), tower


@pytest.mark.parametrize("kind", ["image", "audio"])
def test_the_reference_reads_each_item_through_the_processor(tiny_media_checkpoint, kind):
    from transformers import AutoProcessor

    placeholder = media_parity.MEDIA[kind].placeholder
    # the token the run puts in its prompts is the one this checkpoint's processor expands
    assert getattr(AutoProcessor.from_pretrained(tiny_media_checkpoint), f"{kind}_token") == (
        placeholder
    )
    items = media_parity.media_items(kind, placeholder)
    ref = media_parity.reference(tiny_media_checkpoint, kind, items, device="cpu")
    # the processor sizes each item's soft tokens by its shape or length
    assert len(set(ref["prompt_tokens"])) > 1
    assert [len(steps) for steps in ref["float32"]] == [parity.STEPS] * len(items)
    # same question, different item: the tower's output reaches the logits
    first = [steps[0]["top"] for steps in ref["float32"]]
    assert first[0] != first[1] != first[2]
    noise = parity.compare(ref["float32"], ref["bfloat16"])
    assert noise["max_abs_dlogprob"] is not None and noise["max_abs_dlogprob"] < 1.0
    # the reference is transformers': the same picture twice gives the same steps
    again = media_parity.reference(tiny_media_checkpoint, kind, items[:1], device="cpu")
    assert again["float32"][0] == ref["float32"][0]
