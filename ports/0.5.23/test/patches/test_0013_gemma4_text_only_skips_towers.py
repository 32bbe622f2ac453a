"""0013 on sglang 0.5.23: Gemma4ForConditionalGeneration served without --enable-multimodal counts as text-only and
neither builds nor loads its vision and audio towers; with --enable-multimodal it builds both.
The class is built on CPU with light stand-ins for its heavy parts (text model, towers, embedders,
logits processor), so the test sees exactly which of them __init__ creates.  0.5.23 reads the
pipeline group and the multimodal flag from the published config (get_parallel, get_mm)."""

from types import SimpleNamespace

import pytest
import torch
from gemma4_config import server_args, write_config
from torch import nn

from sglang_gemma4.gpu.serve.variants import text_config

from sglang.srt.arg_groups.overrides import model_config_of
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
    for name in ("Gemma4VisionEncoder", "Gemma4AudioEncoder", "Gemma4MultimodalEmbedder", "LogitsProcessor"):
        monkeypatch.setattr(gemma4_mm, name, type(name, (StandIn,), {}))
    monkeypatch.setattr(gemma4_mm, "Gemma4TextModel", TextModelStandIn)
    # one pipeline stage, without sglang's process groups
    pp_group = SimpleNamespace(is_first_rank=True, is_last_rank=True, world_size=1)
    monkeypatch.setattr(gemma4_mm, "get_parallel", lambda: SimpleNamespace(pp_group=pp_group))

    def make(enable_multimodal):
        # transformers' default tower configs: only whether the towers exist matters here
        config = gemma4_mm.Gemma4Config(text_config=text_config("e4b"), vision_config={}, audio_config={})
        assert config.vision_config is not None and config.audio_config is not None
        # raising=False: upstream's gemma4_mm does not read the flag at all
        monkeypatch.setattr(gemma4_mm, "get_mm", lambda: SimpleNamespace(enable_multimodal=enable_multimodal),
                            raising=False)
        return gemma4_mm.Gemma4ForConditionalGeneration(config)

    return make


@pytest.mark.parametrize("enable_multimodal", [None, False])
def test_text_only_builds_no_towers(build, enable_multimodal):
    model = build(enable_multimodal)
    assert StandIn.built == ["Gemma4TextModel", "LogitsProcessor"]
    assert model.vision_tower is model.embed_vision is model.audio_tower is model.embed_audio is None
    assert not [n for n, _ in model.named_parameters() if "vision" in n or "audio" in n]


def test_multimodal_builds_both_towers(build):
    model = build(True)
    assert StandIn.built == ["Gemma4VisionEncoder", "Gemma4MultimodalEmbedder", "Gemma4AudioEncoder",
                             "Gemma4MultimodalEmbedder", "Gemma4TextModel", "LogitsProcessor"]
    assert model.vision_tower is not None and model.audio_tower is not None


def test_text_only_skips_the_towers_weights(build):
    model = build(None)
    weight = torch.ones(2)
    checkpoint = [("model.vision_tower.encoder.layers.0.self_attn.q_proj.linear.weight", weight),
                  ("model.embed_vision.embedding_projection.weight", weight),
                  ("model.audio_tower.layers.0.self_attn.q_proj.linear.weight", weight),
                  ("model.embed_audio.embedding_projection.weight", weight)]
    assert model.load_weights(checkpoint) == set()


def test_the_class_is_text_only_unless_multimodal_is_asked_for(tmp_path):
    model = write_config(tmp_path / "m", "31b", "conditional")
    assert not model_config_of(server_args(model)).is_multimodal
    assert model_config_of(server_args(model, "--enable-multimodal")).is_multimodal
