"""0070: with tensor parallelism, a dense Gemma-4 layer without PLE lets FlashInfer's fused kernel do
its attention output's all-reduce inside post_attention_layernorm; MoE and PLE layers, one GPU, and
batches the fusion does not take keep 0.5.12's path.  Layers are built on CPU with stand-ins for the
attention, MLP and MoE parts; a fake second rank supplies the other half of every all-reduce."""

from types import SimpleNamespace

import pytest
import torch
from torch import nn
from transformers.models.gemma4.configuration_gemma4 import Gemma4TextConfig

from kernel_inputs import randn
from two_ranks import TwoRanks, install
from sglang.srt.models import gemma4_causal as gemma4
from sglang_gemma4.variants import text_config


class StandIn(nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()
        self.norm = SimpleNamespace(with_scale=False)  # what __init__ reads of the router


class PartialSumAttention(nn.Module):
    """This rank's o_proj output; o_proj's own all-reduce adds the other rank's unless skipped."""

    def __init__(self, partial, ranks):
        super().__init__()
        self.partial, self.ranks, self.skips = partial, ranks, []

    def forward(self, positions, hidden_states, forward_batch, skip_all_reduce=False):
        self.skips.append(skip_all_reduce)
        return self.partial if skip_all_reduce else self.ranks.all_reduce(self.partial)


@pytest.fixture
def make_layer(monkeypatch):
    for name in ("Gemma4Attention", "Gemma4MLP", "ReplicatedLinear", "Gemma4Router", "Gemma4MoE"):
        monkeypatch.setattr(gemma4, name, StandIn)

    def make(variant, tp_size):
        monkeypatch.setattr(gemma4, "get_tensor_model_parallel_world_size", lambda: tp_size)
        return gemma4.Gemma4DecoderLayer(0, Gemma4TextConfig(**text_config(variant)))

    return make


@pytest.mark.parametrize("variant, tp_size, fused", [
    ("31b", 2, True), ("31b", 1, False), ("26b-a4b", 2, False), ("e4b", 2, False), ("e2b", 2, False)])
def test_only_tensor_parallel_dense_layers_without_ple_fuse(make_layer, variant, tp_size, fused):
    assert make_layer(variant, tp_size).fuse_attention_all_reduce is fused


def dense_layer(make_layer, ranks, partial):
    layer = make_layer("31b", 2)
    with torch.no_grad():
        for i, norm in enumerate([layer.input_layernorm, layer.post_attention_layernorm,
                                  layer.pre_feedforward_layernorm, layer.post_feedforward_layernorm]):
            norm.weight.copy_(randn(norm.weight.shape[0], seed=10 + i).abs() + 0.5)
        layer.layer_scalar.fill_(0.8)
    layer.self_attn = PartialSumAttention(partial, ranks)
    layer.mlp = nn.Identity()
    return layer


@pytest.mark.parametrize("fused_declines", [False, True])
def test_fused_layer_matches_the_unfused_layer(monkeypatch, make_layer, fused_declines):
    tokens, hidden = 4, 5376
    x, partial, other = randn(tokens, hidden, seed=1), randn(tokens, hidden, seed=2), randn(tokens, hidden, seed=3)
    outputs = {}
    for fusion_applies in (False, True):
        ranks = TwoRanks(other, fused_declines=fused_declines)
        install(monkeypatch, ranks)
        monkeypatch.setattr(gemma4, "apply_flashinfer_allreduce_fusion", lambda batch: fusion_applies)
        layer = dense_layer(make_layer, ranks, partial)
        out, _ = layer(positions=torch.arange(tokens), hidden_states=x.clone(), per_layer_input=None,
                       forward_batch=None)
        outputs[fusion_applies] = out
        assert layer.self_attn.skips == [fusion_applies]  # o_proj skips its all-reduce only when fused
        assert len(ranks.fused_calls) == int(fusion_applies)
        # exactly one all-reduce either way: in o_proj, in the fallback, or inside the fused kernel
        assert ranks.all_reduce_calls == (int(fused_declines) if fusion_applies else 1)
    torch.testing.assert_close(outputs[True], outputs[False], rtol=1e-5, atol=1e-5)


def test_batch_size_reaches_the_fusion_predicate(monkeypatch, make_layer):
    sizes = []
    monkeypatch.setattr(gemma4, "apply_flashinfer_allreduce_fusion", lambda batch: sizes.append(batch) or False)
    ranks = TwoRanks(randn(7, 5376, seed=4))
    install(monkeypatch, ranks)
    layer = dense_layer(make_layer, ranks, randn(7, 5376, seed=5))
    layer(positions=torch.arange(7), hidden_states=randn(7, 5376, seed=6), per_layer_input=None, forward_batch=None)
    assert sizes == [7] and layer.self_attn.skips == [False] and not ranks.fused_calls
