"""0276: sglang's Gemma-4 audio tower computes what transformers' reference does. A frame attends
to itself and the 11 frames before it (sglang kept Gemma-3n's 13-frame band), and the light
convolution's fused projection is clamped to its bounds before the GLU gate (sglang clamped the
gated product). Checked on CPU in float32: sglang's encoder, its weights loaded through
Gemma4ForConditionalGeneration.load_weights from transformers' Gemma4AudioModel with random
weights and clip bounds that bind, against that model on random log-mel features.

sglang 0.5.23's copy of test/patches/test_0276_*: 0.5.23's load_weights reads lm_head_is_tied (set
in Gemma4ForConditionalGeneration.__init__) for every weight it loads by name, so the audio-only
stand-in states it, and the test runs with the port's one_process_group fixture
(ports/0.5.23/test/patches/conftest.py), as 0.5.23 builds its groups. Its norms are BaseFusedOps."""

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from sglang.kernels.fused_op import BaseFusedOp
from sglang.srt.models import gemma4_audio, gemma4_mm

CLIP = 2.0  # binds on the tails of O(1) activations, as a trained tower's bounds do


def reference_tower(seed: int):
    from transformers.models.gemma4.configuration_gemma4 import Gemma4AudioConfig
    from transformers.models.gemma4.modeling_gemma4 import Gemma4AudioModel

    config = Gemma4AudioConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, output_proj_dims=48
    )
    tower = Gemma4AudioModel(config).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in tower.state_dict().items():
            if name.endswith(("_min", "_max")):
                tensor.fill_(-CLIP if name.endswith("_min") else CLIP)
            elif tensor.is_floating_point():
                fan_in = tensor.shape[-1] if tensor.dim() > 1 else 1
                std = fan_in**-0.5 if tensor.dim() > 1 else 0.1
                mean = 1.0 if tensor.dim() == 1 and "bias" not in name else 0.0
                tensor.copy_(torch.randn(tensor.shape, generator=g) * std + mean)
    return config, tower


class AudioOnly(nn.Module):
    """What Gemma4ForConditionalGeneration.load_weights reads, around sglang's audio encoder."""

    stacked_params_mapping = gemma4_mm.Gemma4ForConditionalGeneration.stacked_params_mapping
    _RE_AUDIO_LAYER = gemma4_mm.Gemma4ForConditionalGeneration._RE_AUDIO_LAYER
    _remap_audio_tower_name = staticmethod(
        gemma4_mm.Gemma4ForConditionalGeneration._remap_audio_tower_name
    )
    _remap_tower_name = staticmethod(gemma4_mm.Gemma4ForConditionalGeneration._remap_tower_name)
    _get_k_eq_v_layers = gemma4_mm.Gemma4ForConditionalGeneration._get_k_eq_v_layers
    load_weights = gemma4_mm.Gemma4ForConditionalGeneration.load_weights

    def __init__(self, config):
        super().__init__()
        self.config = SimpleNamespace(
            text_config=SimpleNamespace(attention_k_eq_v=False, num_experts=0)
        )
        self.audio_tower = gemma4_audio.Gemma4AudioEncoder(config, prefix="audio_tower")
        self.vision_tower = None
        self.language_model = SimpleNamespace(start_layer=0, end_layer=0)
        self.pp_group = SimpleNamespace(world_size=1)
        # as __init__ sets it for one pipeline rank: no separate lm_head to fill from the embedding
        self.lm_head_is_tied = True


def served_tower(config, reference):
    model = AudioOnly(config).eval()
    weights = [(f"model.audio_tower.{n}", t) for n, t in reference.state_dict().items()]
    loaded = model.load_weights(weights)
    assert {n for n in loaded if "_min" in n or "_max" in n}, "clip bounds were not loaded"
    # float32 on the CPU on any host: a CUDA host would pick the norms' 16-bit CUDA kernels
    for module in model.modules():
        if isinstance(module, BaseFusedOp):
            module._forward_method = module.forward_native
    return model.audio_tower


@pytest.mark.parametrize("seed", [0, 1])
def test_audio_tower_matches_transformers(one_process_group, seed):
    config, reference = reference_tower(seed)
    tower = served_tower(config, reference)
    g = torch.Generator().manual_seed(100 + seed)
    frames = 200 + 37 * seed  # 50+ frames after subsampling: many 12-frame chunks
    features = torch.randn(2, frames, 128, generator=g)
    valid = torch.ones(2, frames, dtype=torch.bool)
    valid[1, frames - 60 :] = False  # the second item is shorter: padding stays out
    with torch.no_grad():
        expected = reference(features, valid).last_hidden_state
        served, padding = tower(features, ~valid)
    n = expected.shape[1]
    assert served.shape[1] >= n
    keep = ~padding[:, :n]
    error = (served[:, :n] - expected)[keep].abs().max() / expected[keep].abs().max()
    assert error < 1e-4, f"relative max error {error:.2e}"


def test_a_frame_attends_to_itself_and_the_eleven_before():
    chunk, past = 12, 12  # Gemma-4's attention_chunk_size, attention_context_left - 1
    mask = gemma4_audio.local_attention_mask(chunk, past, 0)
    assert mask.shape == (chunk, chunk + past)
    for query in range(chunk):
        keys = (mask[query].nonzero().flatten() - past).tolist()  # positions in the chunk
        assert keys == list(range(query - 11, query + 1))
    # a right context of 2 adds the one frame after
    ahead = gemma4_audio.local_attention_mask(chunk, past, 2)
    assert ahead[0].nonzero().flatten().tolist()[-1] - past == 1


def test_glu_bounds_clamp_the_projection_before_the_gate(one_process_group):
    from sglang.srt.layers.clippable_linear import ClippableGLUParallelLinear

    glu = ClippableGLUParallelLinear(8, 4)
    torch.manual_seed(0)
    with torch.no_grad():
        glu.linear.weight.normal_()
        glu.output_min.fill_(-0.5)
        glu.output_max.fill_(0.5)
    x = torch.randn(16, 8)
    merged = (x @ glu.linear.weight.T).clamp(-0.5, 0.5)
    expected = merged[:, :4] * torch.sigmoid(merged[:, 4:])
    torch.testing.assert_close(glu(x), expected)
