"""Image parity (checks/image_parity.py): the PNGs and the /generate batch it sends, how it reads
the server's answer, and its transformers reference on CPU: a toy-width conditional model whose
vision tower carries random weights, behind the processor of a conditional checkpoint."""

import io
import json
import shlex

import pytest
import torch
from PIL import Image
from safetensors import safe_open
from tiny_gemma4 import tiny

from sglang_gemma4.gpu.checks import image_parity, parity
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
    "head_dim": 16,
}


def test_each_prompt_has_one_placeholder_and_a_noise_png_of_its_size():
    items = image_parity.image_items("<|image|>", seed=3)
    assert [t.count("<|image|>") for t, _ in items] == [1, 1, 1]
    sizes = [Image.open(io.BytesIO(data)).size for _, data in items]
    assert sizes == list(image_parity.IMAGE_SIZES)
    pixels = [Image.open(io.BytesIO(data)).convert("RGB").getdata() for _, data in items]
    assert all(len(set(p)) > 1000 for p in pixels)  # noise, not a flat colour
    assert image_parity.image_items("<|image|>", seed=3) == items
    assert image_parity.image_items("<|image|>", seed=4) != items


def test_the_batch_sends_each_png_inline_beside_its_text_and_reads_prompt_tokens(monkeypatch):
    items = image_parity.image_items("<|image|>")
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
    got = parity.logprob_steps(parity.Server("e4b", "patched", "log"), image_parity.request(items))
    assert sent["text"] == [t for t, _ in items]
    assert [len(urls) for urls in sent["image_data"]] == [1, 1, 1]
    assert all(u[0].startswith("data:image/png;base64,") for u in sent["image_data"])
    assert len(sent["sampling_params"]) == len(items) and sent["top_logprobs_num"] == parity.TOP
    assert got[0] == {
        "steps": [{"top1": 7, "top": {7: -0.1, 8: -2.0}}, {"top1": 9, "top": {9: -0.2}}],
        "prompt_tokens": 300,
    }


def test_the_stage_serves_the_random_checkpoint_as_the_presets_multimodal(tmp_path, capsys):
    (step,) = expand("image-parity:e4b", tmp_path).steps
    argv = list(step.argv)
    assert argv[argv.index("--variants") + 1 :] == ["e4b", "--builds", "patched"]
    server = image_parity.server("e4b", "patched", tmp_path / "e4b-images", tmp_path)
    words = shlex.split(server.describe().split(": ", 1)[1])
    assert words[words.index("--model-path") + 1] == str((tmp_path / "e4b-images").resolve())
    assert "--enable-multimodal" in words and "--load-format" not in words
    assert "--multimodal" not in words


@pytest.fixture(scope="module")
def tiny_images_checkpoint(tmp_path_factory):
    """A conditional checkpoint's tokenizer and processor, with a toy-width E4B and vision tower in
    random weights over them (its config.json is the toy one)."""
    out = tmp_path_factory.mktemp("e4b-images")
    write_checkpoint("e4b", out, arch="conditional", repo_root=out, log=lambda *_: None)
    text = {**tiny("e4b"), "vocab_size": VOCAB, "vocab_size_per_layer_input": VOCAB}
    config = conditional_config({**text, **token_ids(VOCAB)}, (TINY_VISION, None))
    write_random_weights(config, "conditional", VOCAB, out, seed=0, log=lambda *_: None)
    return out


def test_random_weights_of_a_conditional_checkpoint_cover_its_vision_tower(tiny_images_checkpoint):
    with safe_open(str(tiny_images_checkpoint / "model.safetensors"), "pt") as f:
        names = list(f.keys())
        tower = [n for n in names if "vision_tower" in n]
        assert tower and all(f.get_tensor(n).abs().max() > 0 for n in tower)


def test_the_reference_reads_each_image_through_the_processor(tiny_images_checkpoint):
    items = image_parity.image_items("<|image|>")
    ref = image_parity.reference(tiny_images_checkpoint, items, device="cpu")
    # the processor sizes each picture's soft tokens by its shape
    assert len(set(ref["prompt_tokens"])) > 1
    assert [len(steps) for steps in ref["float32"]] == [parity.STEPS] * len(items)
    # same question, different picture: the image reaches the logits
    first = [steps[0]["top"] for steps in ref["float32"]]
    assert first[0] != first[1] != first[2]
    noise = parity.compare(ref["float32"], ref["bfloat16"])
    assert noise["max_abs_dlogprob"] is not None and noise["max_abs_dlogprob"] < 1.0
    # the reference is transformers': the same picture twice gives the same steps
    again = image_parity.reference(tiny_images_checkpoint, items[:1], device="cpu")
    assert again["float32"][0] == ref["float32"][0]
    assert torch.get_default_dtype() == torch.float32
