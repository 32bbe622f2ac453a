"""0060: the pieces of the tensor-parallel all-reduce + RMSNorm fusion for Gemma-4 — the wrapper that
asks FlashInfer's fused kernel for norm(all_reduce(x)) and falls back to the separate all-reduce and
norm, the attention's o_proj that can skip its own all-reduce, and the auto-enable rule.  On CPU, with
the fused kernel and the all-reduce replaced by fakes that simulate a second rank."""

import pytest
import torch
from gemma4_config import server_args, write_config

import sglang.srt.models.gemma4_causal as gemma4
import sglang.srt.server_args as server_args_module
from kernel_inputs import randn
from kernel_inputs import rmsnorm_reference as rmsnorm
from two_ranks import TwoRanks, install
from sglang.srt.layers.layernorm import RMSNorm

EPS = 1e-6


@pytest.fixture
def norm():
    layer = RMSNorm(64, eps=EPS)
    with torch.no_grad():
        layer.weight.copy_(randn(64, seed=1).abs() + 0.5)
    return layer


def test_fused_path_normalises_the_reduced_sum_once_with_a_zero_residual(monkeypatch, norm):
    x, other = randn(5, 64, seed=2), randn(5, 64, seed=3)
    ranks = TwoRanks(other)
    install(monkeypatch, ranks)
    out = gemma4.all_reduce_rmsnorm(x, norm)
    torch.testing.assert_close(out, rmsnorm(x + other, norm.weight, EPS), rtol=1e-5, atol=1e-5)
    assert ranks.all_reduce_calls == 0  # the fused kernel did the reduction
    [call] = ranks.fused_calls
    assert torch.equal(call["residual"], torch.zeros_like(x))
    assert call["weight"] is norm.weight and call["eps"] == EPS


def test_declined_fusion_all_reduces_then_normalises(monkeypatch, norm):
    x, other = randn(3, 64, seed=4), randn(3, 64, seed=5)
    ranks = TwoRanks(other, fused_declines=True)
    install(monkeypatch, ranks)
    out = gemma4.all_reduce_rmsnorm(x, norm)
    torch.testing.assert_close(out, rmsnorm(x + other, norm.weight, EPS), rtol=1e-5, atol=1e-5)
    assert ranks.all_reduce_calls == 1 and len(ranks.fused_calls) == 1


class Recorder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.kwargs = None

    def forward(self, x, **kwargs):
        self.kwargs = kwargs
        return x, None


def kv_shared_attention(o_proj) -> gemma4.Gemma4Attention:
    """A Gemma4Attention with identity projections, norms, rotary and attention: enough to run its
    forward on CPU down to o_proj."""
    attn = gemma4.Gemma4Attention.__new__(gemma4.Gemma4Attention)
    torch.nn.Module.__init__(attn)
    attn.num_heads, attn.num_kv_heads, attn.head_dim = 2, 1, 8
    attn.q_size, attn.kv_size = 16, 8
    attn.is_kv_shared_layer, attn.kv_shared_layer_index = True, 0
    attn.qkv_proj = lambda h: (h, None)
    attn.q_norm = torch.nn.Identity()
    attn.rotary_emb = lambda positions, q, k: (q, k)
    attn.attn = lambda q, k, v, forward_batch, save_kv_cache: q
    attn.o_proj = o_proj
    return attn


@pytest.mark.parametrize("skip", [True, False])
def test_attention_passes_skip_all_reduce_to_o_proj(skip):
    o_proj = Recorder()
    attn = kv_shared_attention(o_proj)
    hidden = randn(3, 32, seed=6)
    out = attn(positions=torch.arange(3), hidden_states=hidden, forward_batch=None, skip_all_reduce=skip)
    assert o_proj.kwargs == {"skip_all_reduce": skip}
    assert torch.equal(out, hidden[:, :16])


def test_attention_all_reduces_by_default():
    o_proj = Recorder()
    kv_shared_attention(o_proj)(positions=torch.arange(2), hidden_states=randn(2, 32), forward_batch=None)
    assert o_proj.kwargs == {"skip_all_reduce": False}


@pytest.fixture
def hopper(monkeypatch):
    monkeypatch.setattr(server_args_module, "is_sm90_supported", lambda *a, **k: True)
    monkeypatch.setattr(server_args_module, "get_device_name", lambda *a, **k: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(server_args_module, "get_device_memory_capacity", lambda device=None: 81559)


@pytest.mark.parametrize("arch", ["causal", "conditional"])
def test_gemma4_auto_enables_the_fusion_with_tensor_parallel(tmp_path, hopper, arch):
    model = write_config(tmp_path / "m", "31b", arch)
    assert server_args(model, "--tp-size", "2").enable_flashinfer_allreduce_fusion
    assert not server_args(model).enable_flashinfer_allreduce_fusion  # one GPU: nothing to reduce
    assert not server_args(model, "--tp-size", "2",
                           "--enforce-disable-flashinfer-allreduce-fusion").enable_flashinfer_allreduce_fusion
