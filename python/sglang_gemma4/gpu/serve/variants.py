"""Published shapes of the Gemma-4 checkpoints (see the shared gemma4-variants note), as the text
config fields of transformers' Gemma4TextConfig.  Used to write config.json files for tests and
random-weight checkpoints; no weights are involved here."""

import json
from pathlib import Path

COMMON = {
    "vocab_size": 262144,
    "head_dim": 256,
    "global_head_dim": 512,
    "rms_norm_eps": 1e-6,
    "hidden_activation": "gelu_pytorch_tanh",
    "tie_word_embeddings": True,
    "final_logit_softcapping": 30.0,
    "rope_parameters": {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {
            "rope_type": "proportional",
            "partial_rotary_factor": 0.25,
            "rope_theta": 1000000.0,
        },
    },
}

VARIANTS = {
    "e2b": {
        "hidden_size": 1536,
        "intermediate_size": 6144,
        "use_double_wide_mlp": True,
        "num_hidden_layers": 35,
        "num_attention_heads": 8,
        "num_key_value_heads": 1,
        "sliding_window": 512,
        "full_attention_every": 5,
        "num_kv_shared_layers": 20,
        "hidden_size_per_layer_input": 256,
        "vocab_size_per_layer_input": 262144,
        "max_position_embeddings": 131072,
    },
    "e4b": {
        "hidden_size": 2560,
        "intermediate_size": 10240,
        "num_hidden_layers": 42,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "sliding_window": 512,
        "full_attention_every": 6,
        "num_kv_shared_layers": 18,
        "hidden_size_per_layer_input": 256,
        "vocab_size_per_layer_input": 262144,
        "max_position_embeddings": 131072,
    },
    "26b-a4b": {
        "hidden_size": 2816,
        "intermediate_size": 2112,
        "num_hidden_layers": 30,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "num_global_key_value_heads": 2,
        "attention_k_eq_v": True,
        "sliding_window": 1024,
        "full_attention_every": 6,
        "num_kv_shared_layers": 0,
        "hidden_size_per_layer_input": 0,
        "enable_moe_block": True,
        "num_experts": 128,
        "top_k_experts": 8,
        "moe_intermediate_size": 704,
        "max_position_embeddings": 262144,
    },
    "31b": {
        "hidden_size": 5376,
        "intermediate_size": 21504,
        "num_hidden_layers": 60,
        "num_attention_heads": 32,
        "num_key_value_heads": 16,
        "num_global_key_value_heads": 4,
        "attention_k_eq_v": True,
        "sliding_window": 1024,
        "full_attention_every": 6,
        "num_kv_shared_layers": 0,
        "hidden_size_per_layer_input": 0,
        "max_position_embeddings": 262144,
    },
}

# MTP assistant drafts (Gemma4AssistantForCausalLM): 4 layers that keep no KV of their own and read
# the target's. Published for 26B-A4B and 31B; the E2B/E4B drafts' centroid-head shapes are not
# confirmed, so they are not generated.
ASSISTANT_COMMON = {
    "hidden_size": 1024,
    "intermediate_size": 8192,
    "num_hidden_layers": 4,
    "layer_types": ["sliding_attention"] * 3 + ["full_attention"],
    "num_kv_shared_layers": 4,
    "attention_k_eq_v": True,
    "hidden_size_per_layer_input": 0,
    # no per-layer inputs: transformers 5.12+ rejects a PLE vocabulary without them
    "vocab_size_per_layer_input": 0,
}
ASSISTANTS = {
    "26b-a4b": {
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "num_global_key_value_heads": 2,
    },
    "31b": {"num_attention_heads": 32, "num_key_value_heads": 16, "num_global_key_value_heads": 4},
}

# The multimodal towers of Gemma4ForConditionalGeneration (config.json of a --load-format dummy
# checkpoint: what a served model builds and holds). E2B/E4B: transformers' Gemma4VisionConfig and
# Gemma4AudioConfig defaults are their published 768 x 16 vision and 1024 x 12 conformer audio
# towers.
SMALL_VISION = {}
LARGE_VISION = {
    "hidden_size": 1152,
    "intermediate_size": 4304,
    "num_hidden_layers": 27,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,  # full multi-head attention (the config's default is 12)
    "head_dim": 72,
}
TOWERS = {  # variant: (vision_config, audio_config or None)
    "e2b": (SMALL_VISION, {}),
    "e4b": (SMALL_VISION, {}),
    "26b-a4b": (LARGE_VISION, None),
    "31b": (LARGE_VISION, None),
}

ARCHS = {
    "causal": "Gemma4ForCausalLM",
    "conditional": "Gemma4ForConditionalGeneration",
    "assistant": "Gemma4AssistantForCausalLM",
}


def text_config(variant: str) -> dict:
    """Gemma4TextConfig fields of `variant`, with its sliding/full layer pattern spelled out."""
    shape = dict(VARIANTS[variant])
    every = shape.pop("full_attention_every")
    layers = shape["num_hidden_layers"]
    shape["layer_types"] = [
        "full_attention" if (i + 1) % every == 0 else "sliding_attention" for i in range(layers)
    ]
    shape["layer_types"][-1] = "full_attention"  # Gemma-4 always ends on a full-attention layer
    return {**COMMON, **shape, "model_type": "gemma4_text"}


def write_config(directory: Path, variant: str, arch: str) -> Path:
    """Write config.json alone (no weights) for `variant` served as `arch` ("causal" or
    "conditional"): enough for sglang's server arguments to resolve."""
    text = text_config(variant)
    if arch == "causal":
        config = {**text, "architectures": [ARCHS[arch]]}
    else:
        from transformers.models.gemma4.configuration_gemma4 import Gemma4Config

        config = Gemma4Config(text_config=text).to_dict()
        config["architectures"] = [ARCHS[arch]]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=1))
    return directory


def assistant_text_config(variant: str) -> dict:
    """Gemma4TextConfig fields of the MTP assistant draft for target `variant`."""
    if variant not in ASSISTANTS:
        raise ValueError(f"no MTP assistant shape for {variant} (known: {', '.join(ASSISTANTS)})")
    target = VARIANTS[variant]
    return {
        **COMMON,
        **ASSISTANT_COMMON,
        **ASSISTANTS[variant],
        "sliding_window": target["sliding_window"],
        "max_position_embeddings": target["max_position_embeddings"],
        "model_type": "gemma4_text",
    }
