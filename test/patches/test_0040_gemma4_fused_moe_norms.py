"""0040: the norms between attention and the MoE block of Gemma-4 26B-A4B layers (post-attention
norm, residual add, and the dense-FF, router and expert input norms) in one kernel, checked against
a float32 torch reference on fresh random inputs.  Small shapes run on CPU through Triton's
interpreter; the larger ones on a GPU."""

from types import SimpleNamespace

import pytest
import torch
from kernel_inputs import DEVICE, gpu_marks, randn
from kernel_inputs import rmsnorm_reference as rmsnorm
from torch import nn

from sglang.kernels.ops.layernorm.gemma4_fused_ops import gemma4_post_attention_norms
from sglang.srt.layers.layernorm import RMSNorm
from sglang.srt.models.gemma4_causal import Gemma4DecoderLayer, Gemma4Router

EPS = 1e-6


def reference(attn, residual, w_post, w_ff, router_scale, w_moe):
    """float32 math; the new residual is rounded to the model dtype before its norms, as the model
    stores it before reading it."""
    new_residual = (rmsnorm(attn, w_post) + residual.float()).to(attn.dtype)
    return (
        new_residual.float(),
        rmsnorm(new_residual, w_ff),
        rmsnorm(new_residual, router_scale),
        rmsnorm(new_residual, w_moe),
    )


@pytest.mark.parametrize(
    "tokens, hidden, dtype",
    [
        pytest.param(t, h, d, marks=gpu_marks(t))
        for t, h, d in [
            (1, 2816, torch.bfloat16),
            (5, 2816, torch.float32),
            (8, 1000, torch.bfloat16),
            (64, 2816, torch.bfloat16),
            (512, 2816, torch.bfloat16),
            (4096, 2816, torch.bfloat16),
        ]
    ],
)
def test_matches_float32_reference(tokens, hidden, dtype):
    attn = randn(tokens, hidden, dtype=dtype, seed=1, scale=3)
    residual = randn(tokens, hidden, dtype=dtype, seed=2, scale=5)
    weights = [randn(hidden, seed=s).abs() + 0.5 for s in (3, 4, 5, 6)]
    outputs = gemma4_post_attention_norms(attn, residual, *weights, EPS, EPS)
    tolerance = {torch.float32: 1e-5, torch.bfloat16: 1.6e-2}[dtype]
    for name, got, expected in zip(
        ("residual", "ff", "router", "moe"), outputs, reference(attn, residual, *weights)
    ):
        assert got.dtype == dtype and got.shape == attn.shape, name
        torch.testing.assert_close(got.float(), expected, rtol=tolerance, atol=tolerance, msg=name)


def test_strided_rows_and_empty_batch():
    attn = randn(4, 2, 256, seed=7)[:, 1, :]  # rows strided, last dim contiguous
    residual = randn(4, 256, seed=8)
    weights = [randn(256, seed=s).abs() + 0.5 for s in (9, 10, 11, 12)]
    for got, expected in zip(
        gemma4_post_attention_norms(attn, residual, *weights), reference(attn, residual, *weights)
    ):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert all(
        o.shape == (0, 256) for o in gemma4_post_attention_norms(attn[:0], residual[:0], *weights)
    )


def moe_layer(hidden: int) -> Gemma4DecoderLayer:
    """A decoder layer holding only the norms and the router, with random weights."""
    layer = Gemma4DecoderLayer.__new__(Gemma4DecoderLayer)
    nn.Module.__init__(layer)
    for i, name in enumerate(
        ("post_attention_layernorm", "pre_feedforward_layernorm", "pre_feedforward_layernorm_2")
    ):
        norm = RMSNorm(hidden, eps=EPS)
        with torch.no_grad():
            norm.weight.copy_(randn(hidden, seed=20 + i).abs() + 0.5)
        setattr(layer, name, norm)
    layer.router = Gemma4Router(
        SimpleNamespace(hidden_size=hidden, rms_norm_eps=EPS, num_experts=8)
    )
    with torch.no_grad():
        layer.router.scale.copy_(randn(hidden, seed=30).abs() + 0.5)
    return layer.to(DEVICE)


def test_layer_feeds_the_router_the_scaled_norm():
    hidden = 512
    layer = moe_layer(hidden)
    attn, residual = randn(3, hidden, seed=31, scale=2), randn(3, hidden, seed=32)
    ff_input, new_residual, router_input, moe_input = layer.fused_post_attention_norms(
        attn, residual
    )
    router_scale = layer.router.scale * hidden**-0.5  # what Gemma4Router.forward multiplies by
    expected = reference(
        attn,
        residual,
        layer.post_attention_layernorm.weight,
        layer.pre_feedforward_layernorm.weight,
        router_scale,
        layer.pre_feedforward_layernorm_2.weight,
    )
    for got, want in zip((new_residual, ff_input, router_input, moe_input), expected):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
