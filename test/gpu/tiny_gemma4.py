"""Gemma-4 variants at toy width, for transformers runs on CPU."""

from sglang_gemma4.gpu.serve.checkpoint import reduced_text_config


def tiny(variant: str) -> dict:
    """The variant's structure at toy width, for weight-init checks on CPU."""
    c = reduced_text_config(variant, 6 if variant.startswith("e") else 4)
    c.update(
        hidden_size=64,
        intermediate_size=128,
        vocab_size=512,
        head_dim=16,
        global_head_dim=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size_per_layer_input=512,
    )
    if c.get("hidden_size_per_layer_input"):
        c["hidden_size_per_layer_input"] = 16
    if c.get("num_global_key_value_heads"):
        c["num_global_key_value_heads"] = 1
    if c.get("enable_moe_block"):
        c.update(num_experts=8, top_k_experts=2, moe_intermediate_size=32)
    return c
