"""0050: Gemma-4's fused q/k/v RMSNorm with one program per (token, head), checked against a float32
torch reference on fresh random inputs, in place on q/k/v views of one qkv buffer as the attention
layer passes them.  The kernel alone runs on CPU through Triton's interpreter; the launcher (which
only takes CUDA tensors) and the larger shapes on a GPU, per head and per token.  The attention layer
reads the kill switch once, when it is built, and hands it to the launcher."""

import pytest
import torch
from torch import nn
from transformers.models.gemma4.configuration_gemma4 import Gemma4TextConfig

from kernel_inputs import randn
from kernel_inputs import rmsnorm_reference as rmsnorm
from sglang.srt.layers.gemma4_fused_ops import _gemma_qkv_rmsnorm_per_head_kernel, gemma_qkv_rmsnorm
from sglang.srt.models import gemma4_causal as gemma4
from sglang_gemma4.variants import text_config

EPS = 1e-6
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1.6e-2, torch.float16: 2e-3}
# (q heads, kv heads, head_dim) of Gemma-4's attention layers: 26B-A4B sliding and full, 31B sliding
# and full, E4B, E2B.
SHAPES = [(16, 8, 256), (16, 2, 512), (32, 16, 256), (32, 4, 512), (8, 2, 256), (8, 1, 512)]


def qkv_views(tokens, q_heads, kv_heads, head_dim, dtype, seed):
    """q, k, v as strided column slices of one (tokens, q + 2 kv heads) buffer, like qkv.split."""
    qkv = randn(tokens, (q_heads + 2 * kv_heads) * head_dim, dtype=dtype, seed=seed, scale=3)
    q, k, v = qkv.split([q_heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
    return qkv, q, k, v


def reference(x, heads, head_dim, weight):
    normed = rmsnorm(x.reshape(x.shape[0], heads, head_dim), weight, EPS)
    return normed.reshape(x.shape[0], heads * head_dim)


def expected_norms(q, k, v, q_w, k_w, q_heads, kv_heads, head_dim):
    ones = torch.ones(head_dim, device=q.device)
    if k is None:
        return reference(q, q_heads, head_dim, q_w), None, None
    return (reference(q, q_heads, head_dim, q_w), reference(k, kv_heads, head_dim, k_w),
            reference(v, kv_heads, head_dim, ones))


def check(got, want, dtype):
    for g, w in zip(got, want):
        if w is not None:
            torch.testing.assert_close(g.float(), w, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


@pytest.mark.parametrize("q_heads, kv_heads, head_dim", SHAPES[:2] + SHAPES[-1:])
@pytest.mark.parametrize("has_kv", [True, False])
def test_per_head_kernel_matches_float32(q_heads, kv_heads, head_dim, has_kv):
    tokens, dtype = 3, torch.bfloat16
    qkv, q, k, v = qkv_views(tokens, q_heads, kv_heads, head_dim, dtype, seed=head_dim + q_heads)
    q_w, k_w = randn(head_dim, seed=1).abs() + 0.5, randn(head_dim, seed=2).abs() + 0.5
    want = expected_norms(q, k if has_kv else None, v, q_w, k_w, q_heads, kv_heads, head_dim)
    untouched = qkv[:, q_heads * head_dim:].clone()
    heads = q_heads + (2 * kv_heads if has_kv else 0)
    _gemma_qkv_rmsnorm_per_head_kernel[(tokens, heads)](
        q, k if has_kv else q, v if has_kv else q, q_w, k_w if has_kv else q_w,
        q.stride(0), k.stride(0) if has_kv else 0, v.stride(0) if has_kv else 0,
        NUM_Q_HEADS=q_heads, NUM_KV_HEADS=kv_heads if has_kv else 0, HEAD_DIM=head_dim, eps=EPS,
        BLOCK=head_dim)
    check((q, k, v), want, dtype)
    if not has_kv:  # a KV-shared layer normalises Q only; the K/V columns stay as they were
        assert torch.equal(qkv[:, q_heads * head_dim:], untouched)


@pytest.mark.gpu
@pytest.mark.parametrize("per_head", [True, False])
@pytest.mark.parametrize("tokens", [1, 7, 64, 4096])
@pytest.mark.parametrize("q_heads, kv_heads, head_dim", SHAPES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_launcher_matches_float32_both_ways(per_head, tokens, q_heads, kv_heads, head_dim, dtype):
    _, q, k, v = qkv_views(tokens, q_heads, kv_heads, head_dim, dtype, seed=tokens + head_dim)
    q_w, k_w = randn(head_dim, seed=3).abs() + 0.5, randn(head_dim, seed=4).abs() + 0.5
    want = expected_norms(q, k, v, q_w, k_w, q_heads, kv_heads, head_dim)
    gemma_qkv_rmsnorm(q, k, v, q_w, k_w, q_heads, kv_heads, head_dim, eps=EPS, per_head=per_head)
    check((q, k, v), want, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [1, 300])
def test_launcher_kv_shared_layer_normalises_q_only(tokens):
    q_heads, kv_heads, head_dim = 8, 1, 512
    qkv, q, k, v = qkv_views(tokens, q_heads, kv_heads, head_dim, torch.bfloat16, seed=5)
    q_w = randn(head_dim, seed=6).abs() + 0.5
    want_q = reference(q, q_heads, head_dim, q_w)
    untouched = qkv[:, q_heads * head_dim:].clone()
    gemma_qkv_rmsnorm(q, None, None, q_w, None, q_heads, kv_heads, head_dim, eps=EPS)
    check((q,), (want_q,), torch.bfloat16)
    assert torch.equal(qkv[:, q_heads * head_dim:], untouched)


@pytest.mark.gpu
def test_per_head_and_per_token_kernels_agree_bit_for_bit():
    """Same math, different grid: the two launches give identical bits on the same input."""
    outputs = []
    for per_head in (True, False):
        _, q, k, v = qkv_views(33, 16, 8, 256, torch.bfloat16, seed=7)
        q_w, k_w = randn(256, seed=8).abs() + 0.5, randn(256, seed=9).abs() + 0.5
        gemma_qkv_rmsnorm(q, k, v, q_w, k_w, 16, 8, 256, eps=EPS, per_head=per_head)
        outputs.append(torch.cat([q, k, v], -1))
    assert torch.equal(outputs[0], outputs[1])


class StandIn(nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()


@pytest.mark.parametrize("switch, per_head", [(None, True), ("1", True), ("0", False)])
def test_attention_reads_the_switch_when_built(monkeypatch, switch, per_head):
    if switch is None:
        monkeypatch.delenv("SGLANG_OPT_GEMMA4_QKV_NORM_PER_HEAD", raising=False)
    else:
        monkeypatch.setenv("SGLANG_OPT_GEMMA4_QKV_NORM_PER_HEAD", switch)
    monkeypatch.setattr(gemma4, "get_tensor_model_parallel_world_size", lambda: 1)
    for name in ("QKVParallelLinear", "RowParallelLinear", "RadixAttention"):
        monkeypatch.setattr(gemma4, name, StandIn)
    monkeypatch.setattr(gemma4, "get_rope", StandIn)
    config = Gemma4TextConfig(**text_config("26b-a4b"))
    attn = gemma4.Gemma4Attention(0, config, head_dim=256, max_position_embeddings=1024)
    assert attn.qkv_norm_per_head is per_head
