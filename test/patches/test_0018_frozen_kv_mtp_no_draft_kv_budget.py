"""0018: a frozen-KV MTP draft (Gemma 4's assistant) owns no KV pool, so the target's KV budget
keeps no room for its layers. On CPU: resolving the speculative sizing config records no draft
layers for FROZEN_KV_MTP (EAGLE, whose draft has its own pool, still records the draft's 4), and the
hybrid SWA pool configurator, driven with Gemma 4 26B-A4B's KV shapes, then charges a token what it
charges without speculation (184,320 bytes) where it charged 4 phantom full-attention layers more
(200,704) before the patch."""

from types import SimpleNamespace

import pytest
import torch

from sglang.srt.model_executor import pool_configurator
from sglang.srt.model_executor.model_runner_components import spec_aux_hidden_state
from sglang.srt.model_executor.pool_configurator import HybridSWAPoolConfigurator
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

DRAFT_LAYERS = 4  # the 26B-A4B assistant: 3 sliding + 1 full, all reading the target's KV
# Gemma 4 26B-A4B as sglang's config parser presents it: full layers 2 KV heads x 512, sliding 8 x
# 256.
FULL_LAYERS, SWA_LAYERS, SWA_RATIO = 5, 25, 0.8
FULL_TOKEN_BYTES = 2 * (512 + 512) * 2
SWA_TOKEN_BYTES = 8 * (256 + 256) * 2
NO_SPEC_CELL = FULL_LAYERS * FULL_TOKEN_BYTES + SWA_RATIO * SWA_LAYERS * SWA_TOKEN_BYTES


@pytest.fixture
def draft_config_reads(monkeypatch):
    """The assistant draft's config, as ModelConfig.from_server_args would load it from disk."""
    reads = []

    def from_server_args(server_args, model_path, model_revision, is_draft_model):
        reads.append(model_path)
        return SimpleNamespace(
            num_nextn_predict_layers=None,
            num_hidden_layers=DRAFT_LAYERS,
            num_attention_layers=DRAFT_LAYERS,
        )

    monkeypatch.setattr(
        spec_aux_hidden_state.ModelConfig, "from_server_args", staticmethod(from_server_args)
    )
    return reads


def sizing_config(algorithm: str):
    return spec_aux_hidden_state.resolve_spec_aux_hidden_state_config(
        server_args=SimpleNamespace(
            speculative_draft_model_path="/ckpt/26b-a4b-assistant",
            speculative_draft_model_revision=None,
        ),
        model_config=None,
        spec_algorithm=SpeculativeAlgorithm.from_string(algorithm),
        is_draft_worker=False,
    )


def test_frozen_kv_mtp_records_no_draft_layers(draft_config_reads):
    assert sizing_config("EAGLE").eagle_draft_num_layers == DRAFT_LAYERS
    assert sizing_config("FROZEN_KV_MTP").eagle_draft_num_layers is None
    assert draft_config_reads == ["/ckpt/26b-a4b-assistant"]  # EAGLE's only


def gemma4_26b_a4b_pool(monkeypatch, algorithm: str, spec_aux_config) -> HybridSWAPoolConfigurator:
    monkeypatch.setattr(pool_configurator, "get_parallel", lambda: SimpleNamespace(attn_tp_size=1))
    model_config = SimpleNamespace(
        full_attention_layer_ids=list(range(5, 30, 6)),
        swa_attention_layer_ids=[i for i in range(30) if i % 6 != 5],
        get_num_kv_heads=lambda tp: 2,
        head_dim=512,
        v_head_dim=512,
        get_swa_num_kv_heads=lambda tp: 8,
        swa_head_dim=256,
        swa_v_head_dim=256,
        hf_config=SimpleNamespace(architectures=["Gemma4ForConditionalGeneration"]),
    )
    kvc = SimpleNamespace(
        kv_cache_dtype_str="auto",
        kv_cache_dtype=torch.bfloat16,
        model_config=model_config,
        server_args=SimpleNamespace(swa_full_tokens_ratio=SWA_RATIO),
        sliding_window_size=1023,
        page_size=1,
        spec_algorithm=SpeculativeAlgorithm.from_string(algorithm),
        is_draft_worker=False,
        spec_aux_config=spec_aux_config,
    )
    return HybridSWAPoolConfigurator(kvc)


def test_frozen_kv_mtp_pool_costs_a_token_what_no_speculation_does(monkeypatch, draft_config_reads):
    no_spec = gemma4_26b_a4b_pool(monkeypatch, "NONE", sizing_config("NONE"))
    frozen = gemma4_26b_a4b_pool(monkeypatch, "FROZEN_KV_MTP", sizing_config("FROZEN_KV_MTP"))
    eagle = gemma4_26b_a4b_pool(monkeypatch, "EAGLE", sizing_config("EAGLE"))
    assert no_spec._cell_size == NO_SPEC_CELL == 184_320
    assert frozen._cell_size == NO_SPEC_CELL
    assert eagle._cell_size == NO_SPEC_CELL + DRAFT_LAYERS * FULL_TOKEN_BYTES == 200_704
    budget = 20 * 10**9
    assert frozen.calculate_pool_sizes(budget, 1).full_max_total_num_tokens == budget // 184_320
