"""The checkpoint generator: real shapes, features kept with fewer layers, a tokenizer whose every
id decodes to text, a multimodal processor for the conditional class, deterministic O(1)-activation
random weights."""

import json

import pytest
import torch
import transformers
from tiny_gemma4 import tiny

from sglang_gemma4.gpu.serve.checkpoint import (
    CHAT_TEMPLATE,
    CLIP_BOUND,
    SPECIAL_TOKENS,
    build_tokenizer,
    hf_model,
    hidden_rms,
    init_random_,
    reduced_text_config,
    sglang_text_config,
    special_ids,
    write_checkpoint,
)
from sglang_gemma4.gpu.serve.variants import ASSISTANTS, TOWERS, VARIANTS, text_config

PUBLISHED = {  # variant: (hidden, layers, heads, kv heads, kv-shared, PLE, experts)
    "e2b": (1536, 35, 8, 1, 20, 256, None),
    "e4b": (2560, 42, 8, 2, 18, 256, None),
    "26b-a4b": (2816, 30, 16, 8, 0, 0, 128),
    "31b": (5376, 60, 32, 16, 0, 0, None),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_full_configs_have_the_published_shapes(variant):
    c = text_config(variant)
    assert (
        c["hidden_size"],
        c["num_hidden_layers"],
        c["num_attention_heads"],
        c["num_key_value_heads"],
        c["num_kv_shared_layers"],
        c["hidden_size_per_layer_input"],
        c.get("num_experts"),
    ) == PUBLISHED[variant]
    assert c["vocab_size"] == 262144 and c["head_dim"] == 256 and c["global_head_dim"] == 512
    assert (
        len(c["layer_types"]) == c["num_hidden_layers"] and c["layer_types"][-1] == "full_attention"
    )


@pytest.mark.parametrize("variant, layers", [("e2b", 10), ("e4b", 12), ("26b-a4b", 6), ("31b", 6)])
def test_fewer_layers_keep_the_features(variant, layers):
    full, small = text_config(variant), reduced_text_config(variant, layers)
    assert small["num_hidden_layers"] == len(small["layer_types"]) == layers
    assert {"sliding_attention", "full_attention"} <= set(small["layer_types"])
    assert small["layer_types"][-1] == "full_attention"
    for key in (
        "hidden_size",
        "hidden_size_per_layer_input",
        "num_experts",
        "attention_k_eq_v",
        "vocab_size",
    ):
        assert small.get(key) == full.get(key)
    assert (small["num_kv_shared_layers"] > 0) == (full["num_kv_shared_layers"] > 0)


def test_sglang_text_config_puts_full_attention_in_the_base_fields():
    c = sglang_text_config(text_config("26b-a4b"))
    assert (
        c["head_dim"],
        c["num_key_value_heads"],
        c["swa_head_dim"],
        c["swa_num_key_value_heads"],
    ) == (512, 2, 256, 8)
    assert c["v_head_dim"] == 512 and c["swa_v_head_dim"] == 256


def test_tokenizer_decodes_every_ordinary_id_to_text():
    tokenizer = build_tokenizer(
        ["hello gemma world " * 50, "def f(x): return x + 1\n" * 50], vocab_size=20000
    )
    assert tokenizer.get_vocab_size() == 20000
    specials = special_ids(20000)
    assert {tokenizer.token_to_id(name) for name in SPECIAL_TOKENS} == set(specials.values())
    assert all(tokenizer.decode([i]) != "" for i in range(20000) if i not in specials.values())
    assert tokenizer.decode(tokenizer.encode("hello gemma world").ids) == "hello gemma world"


def test_specials_are_at_the_top_and_low_ids_are_whole_words():
    # A dummy-weight model's degenerate argmax picks low ids: they must stream as visible text.
    tokenizer = build_tokenizer(["some text to learn from " * 20], vocab_size=12000)
    assert min(special_ids(12000).values()) == 12000 - len(SPECIAL_TOKENS)
    assert tokenizer.decode([0, 1, 2, 3, 4]) == " w0 w1 w2 w3 w4"


def test_checkpoint_without_weights(tmp_path):
    report = write_checkpoint(
        "e4b", tmp_path / "ck", layers=12, weights="none", repo_root=tmp_path, log=lambda *_: None
    )
    config = json.loads((tmp_path / "ck" / "config.json").read_text())
    assert config["architectures"] == ["Gemma4ForCausalLM"] and config["num_hidden_layers"] == 12
    assert report["num_kv_shared_layers"] == config["num_kv_shared_layers"] > 0
    assert not list((tmp_path / "ck").glob("*.safetensors"))
    assert json.loads((tmp_path / "ck" / "tokenizer_config.json").read_text())["chat_template"]


# published tower shapes: vision (hidden, layers), audio (hidden, layers) or None
TOWER_SHAPES = {
    "e2b": ((768, 16), (1024, 12)),
    "e4b": ((768, 16), (1024, 12)),
    "26b-a4b": ((1152, 27), None),
    "31b": ((1152, 27), None),
}


@pytest.mark.parametrize("variant", sorted(TOWER_SHAPES))
def test_conditional_checkpoint_has_the_published_towers(tmp_path, variant):
    write_checkpoint(
        variant, tmp_path / "ck", arch="conditional", repo_root=tmp_path, log=lambda *_: None
    )
    config = json.loads((tmp_path / "ck" / "config.json").read_text())
    assert config["architectures"] == ["Gemma4ForConditionalGeneration"]
    vision, audio = config["vision_config"], config["audio_config"]
    assert (vision["hidden_size"], vision["num_hidden_layers"]) == TOWER_SHAPES[variant][0]
    assert (audio and (audio["hidden_size"], audio["num_hidden_layers"])) == TOWER_SHAPES[variant][
        1
    ]
    assert config["text_config"]["hidden_size"] == text_config(variant)["hidden_size"]


def test_conditional_checkpoint_processor_expands_images(tmp_path):
    """The processor the server and bench_serving load: the chat template places one image token per
    image, and the processor expands each into boi + its soft tokens + eoi with the config's ids."""
    import numpy as np
    from PIL import Image
    from transformers import AutoConfig, AutoProcessor

    write_checkpoint(
        "e2b", tmp_path / "ck", arch="conditional", repo_root=tmp_path, log=lambda *_: None
    )
    config = json.loads((tmp_path / "ck" / "config.json").read_text())
    processor = AutoProcessor.from_pretrained(tmp_path / "ck")
    assert (
        type(processor).__name__ == "Gemma4Processor"
        and processor.image_token_id == config["image_token_id"]
    )
    images = [
        Image.fromarray(np.random.default_rng(i).integers(0, 256, (h, w, 3), dtype=np.uint8))
        for i, (h, w) in enumerate([(300, 500), (896, 896), (64, 1000)])
    ]
    content = [{"type": "image", "image": {"url": "x"}} for _ in images] + [
        {"type": "text", "text": "describe"}
    ]
    prompt = processor.apply_chat_template(
        [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
    )
    assert prompt.count("<|image|>") == 3 and "describe" in prompt
    ids = processor(text=[prompt], images=[images], return_tensors="pt")["input_ids"][0].tolist()
    soft_tokens = processor.image_processor(images)["num_soft_tokens_per_image"]
    assert ids.count(config["image_token_id"]) == sum(soft_tokens) > 0 and len(set(soft_tokens)) > 1
    assert ids.count(config["boi_token_id"]) == ids.count(config["eoi_token_id"]) == 3
    # what sglang's Gemma 4 processor reads from the config (it names the audio end eoa_token_id)
    loaded = AutoConfig.from_pretrained(tmp_path / "ck")
    assert loaded.eoa_token_id == loaded.eoa_token_index == special_ids(262144)["<audio|>"]
    assert (
        loaded.image_token_id == config["image_token_id"]
        and loaded.boa_token_id == special_ids(262144)["<|audio>"]
    )


def test_chat_template_renders_text_messages_as_before():
    from jinja2 import Template

    messages = [{"role": "user", "content": "hi"}, {"role": "model", "content": "hello"}]
    text = Template(CHAT_TEMPLATE).render(
        messages=messages, bos_token="<bos>", add_generation_prompt=True
    )
    assert (
        text
        == "<bos><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\nhello<end_of_turn>\n"
        "<start_of_turn>model\n"
    )


@pytest.mark.parametrize("variant", sorted(ASSISTANTS))
def test_assistant_draft_checkpoint(tmp_path, variant):
    write_checkpoint(
        variant, tmp_path / "draft", arch="assistant", repo_root=tmp_path, log=lambda *_: None
    )
    config = json.loads((tmp_path / "draft" / "config.json").read_text())
    assert (
        config["architectures"] == ["Gemma4AssistantForCausalLM"]
        and config["model_type"] == "gemma4_assistant"
    )
    assert config["backbone_hidden_size"] == VARIANTS[variant]["hidden_size"]
    text = config["text_config"]
    assert (text["hidden_size"], text["num_hidden_layers"], text["num_kv_shared_layers"]) == (
        1024,
        4,
        4,
    )
    assert text["layer_types"] == ["sliding_attention"] * 3 + ["full_attention"]
    assert text["num_attention_heads"] == VARIANTS[variant]["num_attention_heads"]
    assert text["bos_token_id"] == config["bos_token_id"] == special_ids(262144)["<bos>"]
    # the transformers release sglang pins reads it (5.12+ refuses a PLE vocabulary without PLE)
    loaded = transformers.AutoConfig.from_pretrained(tmp_path / "draft")
    assert (
        loaded.model_type == "gemma4_assistant"
        and loaded.text_config.vocab_size_per_layer_input == 0
    )


def test_assistant_draft_refuses_what_it_cannot_make(tmp_path):
    with pytest.raises(ValueError, match="no MTP assistant shape for e2b"):
        write_checkpoint(
            "e2b", tmp_path / "d", arch="assistant", repo_root=tmp_path, log=lambda *_: None
        )
    with pytest.raises(ValueError, match="config and tokenizer only"):
        write_checkpoint(
            "31b",
            tmp_path / "d",
            arch="assistant",
            weights="random",
            repo_root=tmp_path,
            log=lambda *_: None,
        )


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_random_weights_keep_activations_order_one(variant):
    model = hf_model(tiny(variant), "causal")
    init_random_(model, seed=3)
    rms = hidden_rms(
        model,
        torch.randint(
            0, 512 - len(SPECIAL_TOKENS), (2, 40), generator=torch.Generator().manual_seed(0)
        ),
    )
    assert len(rms) == model.config.num_hidden_layers + 1
    assert all(0.3 < r < 30 for r in rms), rms


def test_random_weights_are_deterministic_per_seed():
    def weights(seed):
        model = hf_model(tiny("26b-a4b"), "causal")
        init_random_(model, seed)
        return {k: v.clone() for k, v in model.state_dict().items()}

    a, b, c = weights(1), weights(1), weights(2)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(
        not torch.equal(a[k], c[k]) for k in a if a[k].is_floating_point() and a[k].numel() > 1
    )


@pytest.mark.parametrize("variant", sorted(TOWERS))
def test_vision_towers_attend_with_every_head(variant):
    from transformers.models.gemma4.configuration_gemma4 import Gemma4VisionConfig

    # transformers and sglang read num_key_value_heads; the towers have no grouped-query attention
    vision = Gemma4VisionConfig(**TOWERS[variant][0])
    assert vision.num_key_value_heads == vision.num_attention_heads


def test_random_audio_tower_clips_as_a_trained_one_and_keeps_derived_buffers():
    from transformers.models.gemma4.configuration_gemma4 import Gemma4AudioConfig
    from transformers.models.gemma4.modeling_gemma4 import Gemma4AudioModel

    config = Gemma4AudioConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2)
    fresh, tower = Gemma4AudioModel(config), Gemma4AudioModel(config)
    init_random_(tower, seed=0)
    bounds = {n: b for n, b in tower.named_buffers() if n.endswith(("_min", "_max"))}
    assert bounds and {float(b) for b in bounds.values()} == {-CLIP_BOUND, CLIP_BOUND}
    # a bound's sign is its name's; what the config derives is left as built
    assert all((float(b) < 0) == n.endswith("_min") for n, b in bounds.items())
    derived = {n: b for n, b in fresh.named_buffers() if n not in fresh.state_dict()}
    assert derived
    assert all(torch.equal(dict(tower.named_buffers())[n], b) for n, b in derived.items())

    mel = torch.Generator().manual_seed(1)
    features = torch.randn(1, 200, 128, generator=mel)  # the feature extractor's 128 mel bins
    mask = torch.ones(1, 200, dtype=torch.bool)
    with torch.no_grad():
        clipped = tower(features, mask).last_hidden_state
        for b in bounds.values():
            b.fill_(float("inf") if b > 0 else -float("inf"))
        unclipped = tower(features, mask).last_hidden_state
    # the bounds trim the tails, they do not flatten: a server that ignored them would differ
    change = (clipped - unclipped).norm() / unclipped.norm()
    assert 0.001 < change < 0.5, change
