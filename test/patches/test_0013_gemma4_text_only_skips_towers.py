"""0013: Gemma4ForConditionalGeneration served without --enable-multimodal counts as text-only and
neither builds nor loads its vision and audio towers; with --enable-multimodal it builds both.
The class is built on CPU with light stand-ins for its heavy parts (text model, towers, embedders,
logits processor), so the test sees exactly which of them __init__ creates."""

from types import SimpleNamespace

import pytest
import torch
from gemma4_config import server_args
from torch import nn

from sglang_gemma4.gpu.serve.variants import text_config, write_config

from sglang.srt.models import gemma4_mm


class StandIn(nn.Module):
    built = []  # the class names built, in order

    def __init__(self, *args, **kwargs):
        super().__init__()
        StandIn.built.append(type(self).__name__)
        self.weight = nn.Parameter(torch.zeros(2))

    def tie_weights(self, *args, **kwargs):  # post_init reaches the text model's
        pass


class TextModelStandIn(StandIn):
    """The text model's embedding is what the LM head ties to."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        StandIn.built[-1] = "Gemma4TextModel"
        self.embed_tokens = nn.Embedding(4, 2)
        self.start_layer, self.end_layer = 0, 1  # one pipeline stage holds every layer


@pytest.fixture
def build(monkeypatch):
    StandIn.built = []
    for name in (
        "Gemma4VisionEncoder",
        "Gemma4AudioEncoder",
        "Gemma4MultimodalEmbedder",
        "LogitsProcessor",
    ):
        monkeypatch.setattr(gemma4_mm, name, type(name, (StandIn,), {}))
    monkeypatch.setattr(gemma4_mm, "Gemma4TextModel", TextModelStandIn)
    # one pipeline stage, without sglang's process groups
    monkeypatch.setattr(
        gemma4_mm,
        "get_pp_group",
        lambda: SimpleNamespace(is_first_rank=True, is_last_rank=True, world_size=1),
    )

    def make(enable_multimodal):
        # transformers' default tower configs: only whether the towers exist matters here
        config = gemma4_mm.Gemma4Config(
            text_config=text_config("e4b"), vision_config={}, audio_config={}
        )
        assert config.vision_config is not None and config.audio_config is not None
        monkeypatch.setattr(
            gemma4_mm,
            "get_global_server_args",
            lambda: SimpleNamespace(enable_multimodal=enable_multimodal),
        )
        return gemma4_mm.Gemma4ForConditionalGeneration(config)

    return make


@pytest.mark.parametrize("enable_multimodal", [None, False])
def test_text_only_builds_no_towers(build, enable_multimodal):
    model = build(enable_multimodal)
    assert StandIn.built == ["Gemma4TextModel", "LogitsProcessor"]
    assert (
        model.vision_tower is model.embed_vision is model.audio_tower is model.embed_audio is None
    )
    assert not [n for n, _ in model.named_parameters() if "vision" in n or "audio" in n]


def test_multimodal_builds_both_towers(build):
    model = build(True)
    assert StandIn.built == [
        "Gemma4VisionEncoder",
        "Gemma4MultimodalEmbedder",
        "Gemma4AudioEncoder",
        "Gemma4MultimodalEmbedder",
        "Gemma4TextModel",
        "LogitsProcessor",
    ]
    assert model.vision_tower is not None and model.audio_tower is not None


def test_text_only_skips_the_towers_weights(build):
    model = build(None)
    weight = torch.ones(2)
    checkpoint = [
        ("model.vision_tower.encoder.layers.0.self_attn.q_proj.linear.weight", weight),
        ("model.embed_vision.embedding_projection.weight", weight),
        ("model.audio_tower.layers.0.self_attn.q_proj.linear.weight", weight),
        ("model.embed_audio.embedding_projection.weight", weight),
    ]
    assert model.load_weights(checkpoint) == set()


def test_the_class_is_text_only_unless_multimodal_is_asked_for(tmp_path):
    model = write_config(tmp_path / "m", "31b", "conditional")
    assert not server_args(model).get_model_config().is_multimodal
    assert server_args(model, "--enable-multimodal").get_model_config().is_multimodal
