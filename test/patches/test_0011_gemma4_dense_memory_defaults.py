"""0011: on a GPU where sglang picks chunked_prefill_size 8192 itself (H100-class memory), dense
Gemma-4 gets 4096 and an auto mem_fraction_static below 0.88 is raised to 0.88; MoE Gemma-4, other
models and every value the user passes keep what upstream gives them.  ServerArgs is built from the
real CLI parser on CPU from config.json alone, with the GPU memory it would see on an H100."""

import json
import logging

import pytest
from gemma4_config import server_args

from sglang_gemma4.gpu.serve.variants import write_config

import sglang.srt.server_args as server_args_module

H100_MIB = 81559


@pytest.fixture(autouse=True)
def h100_memory(monkeypatch):
    monkeypatch.setattr(
        server_args_module, "get_device_memory_capacity", lambda device=None: H100_MIB
    )


def upstream(model_dir, *extra):
    """What 0.5.12 picks for the same arguments: the nudges' predicate forced off."""
    original = server_args_module.ServerArgs._is_dense_gemma4
    server_args_module.ServerArgs._is_dense_gemma4 = lambda self: False
    try:
        return server_args(model_dir, *extra)
    finally:
        server_args_module.ServerArgs._is_dense_gemma4 = original


@pytest.mark.parametrize("variant", ["31b", "e4b", "e2b"])
@pytest.mark.parametrize("arch", ["causal", "conditional"])
def test_dense_gemma4_gets_smaller_chunks_and_a_larger_pool(tmp_path, caplog, variant, arch):
    model = write_config(tmp_path / "m", variant, arch)
    before = upstream(model)
    assert before.chunked_prefill_size == 8192 and before.mem_fraction_static < 0.88
    with caplog.at_level(logging.INFO):
        after = server_args(model)
    assert after.chunked_prefill_size == 4096
    assert after.mem_fraction_static == 0.88
    assert "Gemma4 dense: chunked_prefill_size 8192 -> 4096" in caplog.messages
    # the auto fraction it raised was computed for the smaller chunk, so it lies above upstream's
    raised = [
        float(m.split()[3])
        for m in caplog.messages
        if m.startswith("Gemma4 dense: mem_fraction_static ")
    ]
    assert len(raised) == 1 and before.mem_fraction_static <= raised[0] < 0.88


@pytest.mark.parametrize("arch", ["causal", "conditional"])
def test_moe_gemma4_is_left_alone(tmp_path, arch):
    model = write_config(tmp_path / "m", "26b-a4b", arch)
    before, after = upstream(model), server_args(model)
    assert (after.chunked_prefill_size, after.mem_fraction_static) == (
        before.chunked_prefill_size,
        before.mem_fraction_static,
    )
    assert after.chunked_prefill_size == 8192


def test_other_models_are_left_alone(tmp_path):
    model = tmp_path / "llama"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "hidden_size": 256,
                "intermediate_size": 512,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "num_hidden_layers": 2,
                "vocab_size": 1000,
                "max_position_embeddings": 4096,
            }
        )
    )
    before, after = upstream(model), server_args(model)
    assert (after.chunked_prefill_size, after.mem_fraction_static) == (
        8192,
        before.mem_fraction_static,
    )
    assert after.mem_fraction_static < 0.88


@pytest.mark.parametrize(
    "flags, chunk, fraction",
    [
        (["--chunked-prefill-size", "8192"], 8192, 0.88),  # 8192 passed on purpose is kept
        (["--mem-fraction-static", "0.8"], 4096, 0.8),  # a smaller fraction passed is kept
        (["--chunked-prefill-size", "8192", "--mem-fraction-static", "0.85"], 8192, 0.85),
    ],
)
def test_values_the_user_passed_are_kept(tmp_path, flags, chunk, fraction):
    after = server_args(write_config(tmp_path / "m", "31b", "causal"), *flags)
    assert (after.chunked_prefill_size, after.mem_fraction_static) == (chunk, fraction)


def test_a_smaller_gpu_keeps_its_own_chunk_size(tmp_path, monkeypatch):
    monkeypatch.setattr(
        server_args_module, "get_device_memory_capacity", lambda device=None: 40 * 1024
    )
    after = server_args(write_config(tmp_path / "m", "31b", "causal"))
    assert after.chunked_prefill_size == 4096  # A100-40GB's own choice, not the nudge's
