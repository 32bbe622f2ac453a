"""0002: a Gemma-4 MTP assistant checkpoint (model_type gemma4_assistant) loads with the transformers
release sglang pins, is remapped like the target's config, and promotes NEXTN to FROZEN_KV_MTP."""

import json

import pytest

from sglang.srt.server_args import _resolve_speculative_algorithm_alias
from sglang.srt.utils.hf_transformers_utils import get_config
from sglang_gemma4.checkpoint import write_checkpoint
from sglang_gemma4.variants import VARIANTS, assistant_text_config


@pytest.fixture(scope="module", params=["26b-a4b", "31b"])
def draft(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param)
    (out / "corpus.md").write_text("the draft proposes tokens and the target checks them\n" * 40)
    write_checkpoint(request.param, out / "draft", arch="assistant", repo_root=out, log=lambda *_: None)
    return request.param, out / "draft"


def test_config_loads_with_target_fields_remapped(draft):
    variant, path = draft
    written = json.loads((path / "config.json").read_text())
    assert written["model_type"] == "gemma4_assistant"
    config = get_config(str(path), trust_remote_code=False)
    assert config.architectures == ["Gemma4AssistantForCausalLM"]
    assert config.backbone_hidden_size == VARIANTS[variant]["hidden_size"]
    assert config.use_ordered_embeddings is False
    shape, text = assistant_text_config(variant), config.text_config
    assert text.hidden_size == shape["hidden_size"] and text.layer_types == shape["layer_types"]
    # sglang's convention: base fields describe the full-attention layers, swa_* the sliding ones.
    assert (text.head_dim, text.num_key_value_heads) == (shape["global_head_dim"], shape["num_global_key_value_heads"])
    assert (text.swa_head_dim, text.swa_num_key_value_heads) == (shape["head_dim"], shape["num_key_value_heads"])
    assert text.v_head_dim == text.head_dim and text.swa_v_head_dim == text.swa_head_dim


def test_nextn_with_an_assistant_draft_becomes_frozen_kv_mtp(draft):
    _, path = draft
    assert _resolve_speculative_algorithm_alias("NEXTN", str(path)) == "FROZEN_KV_MTP"
    with pytest.raises(ValueError, match="EAGLE3"):
        _resolve_speculative_algorithm_alias("EAGLE3", str(path))
