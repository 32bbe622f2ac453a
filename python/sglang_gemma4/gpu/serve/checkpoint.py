"""Gemma-4 checkpoints with the real shapes and no real weights (`sglang-gemma4 checkpoint`).

Writes config.json (the variant's published shapes, optionally fewer layers), a tokenizer and a
generation config, and with --weights random a safetensors checkpoint made by transformers' own
Gemma-4 classes, initialised so that activations stay O(1) through every layer (checked and
reported per layer).  sglang's `--load-format dummy` sets every tensor to ~1e-3, which is fine for
speed but makes every output degenerate; these weights behave numerically like a trained net.

The tokenizer is a byte-level BPE trained on this repository's text and padded to the model's
262144-entry vocabulary with filler words at the lowest ids and the special tokens at the top, so
the ids a random or a dummy-weight model emits decode to visible text (bench tools count streamed
text: ids that decode to nothing, like skipped specials, would read as zero tokens).

--arch conditional writes Gemma4ForConditionalGeneration with the published vision (and audio)
tower shapes and a processor (processor_config.json), so image requests can be served; with
--weights random the towers carry random weights too (image parity).

--arch assistant writes the MTP draft (Gemma4AssistantForCausalLM) of a 26B-A4B or 31B target:
config and tokenizer only, to be served with --load-format dummy.
"""

import json
import math
from pathlib import Path

from sglang_gemma4.gpu.serve.variants import (
    ARCHS,
    TOWERS,
    VARIANTS,
    assistant_text_config,
    text_config,
)

# Gemma 4's multimodal placeholders, under the names its processor reads from the tokenizer
MULTIMODAL_TOKENS = {
    "image_token": "<|image|>",
    "boi_token": "<|image>",
    "eoi_token": "<image|>",
    "video_token": "<|video|>",
    "audio_token": "<|audio|>",
    "boa_token": "<|audio>",
    "eoa_token": "<audio|>",
}
SPECIAL_TOKENS = (
    "<pad>",
    "<eos>",
    "<bos>",
    "<start_of_turn>",
    "<end_of_turn>",
    *MULTIMODAL_TOKENS.values(),
)
TRAINED_VOCAB = 8192
# A message's content is a string, or a list of parts ({"type": "text", "text": ...} or an image)
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for part in m['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% elif part['type'] == 'image' "
    "%}<|image|>{% endif %}"
    "{% endfor %}{% endif %}<end_of_turn>\n"
    "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


def reduced_text_config(variant: str, layers: int | None = None) -> dict:
    """The variant's text config (transformers' field meanings), optionally with `layers` layers
    that keep its features: the sliding/full pattern, the KV-shared tail, PLE, MoE, k_eq_v."""
    config = text_config(variant)
    total = config["num_hidden_layers"]
    if layers is None or layers >= total:
        return config
    pattern = config["layer_types"]
    shared = config.get("num_kv_shared_layers", 0)
    if shared:
        # Keep a KV-writing prefix that ends on a full-attention layer (so both layer types have
        # KV to share) and the variant's own KV-shared tail pattern.
        shared = max(1, min(layers - 2, round(layers * shared / total)))
        kept = pattern[: layers - shared] + pattern[total - shared :]
        kept[layers - shared - 1] = "full_attention"
        config["num_kv_shared_layers"] = shared
    else:
        kept = pattern[:layers]
    kept[-1] = "full_attention"
    config["num_hidden_layers"] = layers
    config["layer_types"] = kept
    return config


def sglang_text_config(config: dict) -> dict:
    """Text-only (Gemma4ForCausalLM) config.json as sglang 0.5.12 reads it: base fields describe the
    full-attention layers, swa_* the sliding ones (it remaps only the multimodal model_type)."""
    out = dict(config)
    out.update(
        swa_head_dim=config["head_dim"],
        swa_v_head_dim=config["head_dim"],
        swa_num_key_value_heads=config["num_key_value_heads"],
        head_dim=config["global_head_dim"],
        v_head_dim=config["global_head_dim"],
    )
    if config.get("num_global_key_value_heads"):
        out["num_key_value_heads"] = config["num_global_key_value_heads"]
    return out


def ordinary_ids(vocab_size: int) -> int:
    """Ids below this are ordinary tokens (they decode to text); the specials take the ids above."""
    return vocab_size - len(SPECIAL_TOKENS)


def special_ids(vocab_size: int) -> dict[str, int]:
    """The specials take the top ids. A dummy-weight model's degenerate argmax (ties, NaN) lands on
    the lowest ids; specials there decode to nothing (they are skipped) and empty the stream."""
    return {name: ordinary_ids(vocab_size) + i for i, name in enumerate(SPECIAL_TOKENS)}


def token_ids(vocab_size: int) -> dict[str, int]:
    """pad/eos/bos ids for config.json and generation_config.json."""
    ids = special_ids(vocab_size)
    return {
        "pad_token_id": ids["<pad>"],
        "eos_token_id": ids["<eos>"],
        "bos_token_id": ids["<bos>"],
    }


def multimodal_token_ids(vocab_size: int) -> dict[str, int]:
    """Gemma4Config's placeholder ids for the multimodal tokens of this tokenizer."""
    specials = special_ids(vocab_size)
    ids = {name: specials[token] for name, token in MULTIMODAL_TOKENS.items()}
    return {
        "image_token_id": ids["image_token"],
        "boi_token_id": ids["boi_token"],
        "eoi_token_id": ids["eoi_token"],
        "video_token_id": ids["video_token"],
        "audio_token_id": ids["audio_token"],
        # transformers names the last one eoa_token_index, sglang's processor reads eoa_token_id
        "boa_token_id": ids["boa_token"],
        "eoa_token_index": ids["eoa_token"],
        "eoa_token_id": ids["eoa_token"],
    }


def training_text(root: Path) -> list[str]:
    """Text the repository holds (docs, patches, code): enough for a small BPE."""
    files = sorted(
        p
        for ext in ("*.md", "*.py", "*.patch", "*.toml", "*.sh")
        for p in root.rglob(ext)
        if not any(
            part in {"work", ".venv", ".venv-test", ".cache", "dist", "checkpoints"}
            for part in p.relative_to(root).parts
        )
    )
    return [p.read_text(errors="replace") for p in files]


def build_tokenizer(texts: list[str], vocab_size: int):
    """Byte-level BPE of TRAINED_VOCAB entries trained on `texts`, laid out as: filler words
    (" w0", " w1", ...) from id 0, the learned tokens after them, the specials at the top."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    trained = Tokenizer(models.BPE())
    trained.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=TRAINED_VOCAB,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    trained.train_from_iterator(texts, trainer)
    model = json.loads(trained.to_str())["model"]
    learned = [
        t
        for t, _ in sorted(model["vocab"].items(), key=lambda item: item[1])
        if t not in SPECIAL_TOKENS
    ]
    fillers, taken, n = [], set(learned), 0
    while len(fillers) < ordinary_ids(vocab_size) - len(learned):
        if f"Ġw{n}" not in taken:  # "Ġ" is the byte-level space: decodes to " w123"
            fillers.append(f"Ġw{n}")
        n += 1
    vocab = {token: i for i, token in enumerate(fillers + learned)}
    vocab.update(special_ids(vocab_size))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    return tokenizer


def write_tokenizer(out: Path, texts: list[str], vocab_size: int) -> None:
    tokenizer = build_tokenizer(texts, vocab_size)
    for name, expected in special_ids(vocab_size).items():
        assert tokenizer.token_to_id(name) == expected, (name, tokenizer.token_to_id(name))
    tokenizer.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<bos>",
                "eos_token": "<eos>",
                "pad_token": "<pad>",
                "add_bos_token": True,
                "chat_template": CHAT_TEMPLATE,
                "extra_special_tokens": MULTIMODAL_TOKENS,
                "model_max_length": 1 << 20,
            },
            indent=1,
        )
    )
    (out / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"}, indent=1)
    )


def write_processor(out: Path) -> None:
    """processor_config.json: Gemma 4's processor with transformers' default image, video and audio
    settings over the tokenizer in `out`, so that image requests can be served and benchmarked."""
    from transformers import AutoTokenizer
    from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor
    from transformers.models.gemma4.image_processing_gemma4 import Gemma4ImageProcessor
    from transformers.models.gemma4.processing_gemma4 import Gemma4Processor
    from transformers.models.gemma4.video_processing_gemma4 import Gemma4VideoProcessor

    processor = Gemma4Processor(
        feature_extractor=Gemma4AudioFeatureExtractor(),
        image_processor=Gemma4ImageProcessor(),
        tokenizer=AutoTokenizer.from_pretrained(out),
        video_processor=Gemma4VideoProcessor(),
        chat_template=CHAT_TEMPLATE,
    )
    processor.save_pretrained(out)


# A trained tower's clippable linears clamp their inputs and outputs; one bound for all of them
# (a layer's q, k and v share their input, and sglang fuses their input bounds into one) that cuts
# the tails of O(1) activations, so a server that ignored the bounds would differ.
CLIP_BOUND = 2.5


def init_random_(model, seed: int) -> None:
    """Weights that keep activations O(1): matrices ~ N(0, 1/fan_in), norms and scalars near 1,
    embeddings scaled for the model's sqrt(hidden) embedding multiplier, the towers' clip bounds
    at +-CLIP_BOUND. Only what a checkpoint holds: buffers the model derives from its config
    (rotary frequencies, soft caps) keep their values."""
    import torch

    device = next(model.parameters()).device  # same seed, same weights on a given device type
    generator = torch.Generator(device=device).manual_seed(seed)
    saved = set(model.state_dict())

    def normal(shape, std, mean=0.0):
        return torch.randn(shape, generator=generator, device=device) * std + mean

    with torch.no_grad():
        for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
            if not tensor.is_floating_point() or name not in saved:
                continue
            if name.endswith(("_min", "_max")):  # a clippable linear's bounds
                tensor.fill_(-CLIP_BOUND if name.endswith("_min") else CLIP_BOUND)
                continue
            shape = tuple(tensor.shape)
            if (
                name.endswith("layer_scalar")
                or name.endswith("per_expert_scale")
                or name.endswith("router.scale")
            ):
                value = normal(shape, 0.05, 1.0)
            elif "norm" in name and tensor.dim() == 1:
                value = normal(shape, 0.1, 1.0)
            elif "embed_tokens_per_layer" in name:
                value = normal(shape, 1.0 / math.sqrt(shape[-1]))
            elif "embed_tokens" in name:
                # x sqrt(hidden) in the model: RMS 4 into layer 0; as the tied LM head, logits of
                # std ~4, so greedy choices have clear margins.
                value = normal(shape, 4.0 / math.sqrt(shape[-1]))
            elif tensor.dim() >= 2:
                value = normal(shape, 1.0 / math.sqrt(shape[-1]))
            else:
                value = normal(shape, 0.02)
            tensor.copy_(value.to(tensor.dtype))


def hidden_rms(model, input_ids) -> list[float]:
    """RMS of the hidden state after the embedding and after every layer."""
    import torch

    with torch.no_grad():
        out = model(input_ids=input_ids, output_hidden_states=True)
    return [float(h.float().pow(2).mean().sqrt()) for h in out.hidden_states]


def write_checkpoint(
    variant: str,
    out: Path,
    layers: int | None = None,
    arch: str = "causal",
    weights: str = "none",
    seed: int = 0,
    repo_root: Path | None = None,
    device: str = "cpu",
    log=print,
) -> dict:
    if arch == "assistant" and (weights != "none" or layers is not None):
        raise ValueError(
            "an assistant draft is written as config and tokenizer only (serve it with "
            "--load-format dummy): --weights random and --layers do not apply"
        )
    out.mkdir(parents=True, exist_ok=True)
    text = (
        assistant_text_config(variant)
        if arch == "assistant"
        else reduced_text_config(variant, layers)
    )
    ids = token_ids(text["vocab_size"])
    architecture = ARCHS[arch]
    if arch == "causal":
        config = {**sglang_text_config(text), "architectures": [architecture]}
    elif arch == "assistant":
        # transformers' layout (base fields = sliding layers); sglang remaps it when it loads it.
        config = {
            "model_type": "gemma4_assistant",
            "architectures": [architecture],
            "text_config": {**text, **ids},
            "backbone_hidden_size": VARIANTS[variant]["hidden_size"],
            "use_ordered_embeddings": False,
            "tie_word_embeddings": True,
        }
    else:
        multimodal = conditional_config({**text, **ids}, TOWERS[variant])
        config = {**multimodal.to_dict(), "architectures": [architecture]}
    config.update(**ids, torch_dtype="bfloat16")
    report = {
        "variant": variant,
        "arch": architecture,
        "layers": text["num_hidden_layers"],
        "num_kv_shared_layers": text.get("num_kv_shared_layers", 0),
        "weights": weights,
        "seed": seed,
    }
    if weights == "random":  # first: save_pretrained writes its own config files, replaced below
        model_config = multimodal if arch == "conditional" else hf_config(text, arch)
        report["hidden_rms"] = write_random_weights(
            model_config, arch, text["vocab_size"], out, seed, device, log
        )
    (out / "config.json").write_text(json.dumps(config, indent=1))
    (out / "generation_config.json").write_text(json.dumps({**ids, "do_sample": False}, indent=1))
    write_tokenizer(out, training_text(repo_root or Path.cwd()), text["vocab_size"])
    if arch == "conditional":
        write_processor(out)
    (out / "sglang_gemma4_checkpoint.json").write_text(json.dumps(report, indent=1))
    log(
        (
            f"checkpoint: {variant} ({architecture}, {report['layers']} layers, weights "
            f"{weights}) -> {out}"
        )
    )
    return report


def hf_config(text: dict, arch: str):
    """transformers' Gemma-4 config for a text config (its own field meanings); "conditional"
    without towers."""
    from transformers.models.gemma4.configuration_gemma4 import Gemma4Config, Gemma4TextConfig

    return Gemma4TextConfig(**text) if arch == "causal" else Gemma4Config(text_config=text)


def conditional_config(text: dict, towers: tuple):
    """Gemma4Config with `towers` (vision config, audio config or None) and the placeholder ids of
    the text's tokenizer: what a conditional checkpoint's config.json and weights are made from."""
    from transformers.models.gemma4.configuration_gemma4 import Gemma4Config

    vision, audio = towers
    return Gemma4Config(
        text_config=text,
        vision_config=vision,
        audio_config=audio,
        **multimodal_token_ids(text["vocab_size"]),
    )


def hf_model_class(arch: str):
    """transformers' own Gemma-4 class for a checkpoint arch ("causal" or "conditional")."""
    from transformers.models.gemma4.modeling_gemma4 import (
        Gemma4ForCausalLM,
        Gemma4ForConditionalGeneration,
    )

    return Gemma4ForCausalLM if arch == "causal" else Gemma4ForConditionalGeneration


def hf_model(text: dict, arch: str):
    """transformers' own Gemma-4 model for a text config, with random (uninitialised) weights."""
    return hf_model_class(arch)(hf_config(text, arch))


def write_random_weights(
    model_config, arch: str, vocab_size: int, out: Path, seed: int, device: str = "cpu", log=print
) -> list[float]:
    """Random weights (init_random_) of transformers' model for `model_config`, towers included
    for a conditional one, saved in bf16."""
    import torch

    with torch.device(device):  # built where it is initialised: a 31B-wide model is slow on CPU
        model = hf_model_class(arch)(model_config).to(torch.float32)
    init_random_(model, seed)
    probe = torch.randint(
        0, ordinary_ids(vocab_size), (1, 64), generator=torch.Generator().manual_seed(seed)
    )
    rms = hidden_rms(model, probe.to(device))
    log(
        "checkpoint: hidden-state RMS (embedding, then each layer): "
        + " ".join(f"{r:.2f}" for r in rms)
    )
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    return rms
