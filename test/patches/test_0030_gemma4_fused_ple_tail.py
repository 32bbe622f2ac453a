"""0030: the per-layer-input (PLE) tail of Gemma-4 E2B/E4B decoder layers in three fused kernels,
checked against float32 torch references on fresh random inputs.  Small shapes run on CPU through
Triton's interpreter; the larger ones on a GPU."""

import pytest
import torch
from kernel_inputs import DEVICE, gpu_marks, randn
from kernel_inputs import rmsnorm_reference as rmsnorm
from torch import nn

from sglang.kernels.ops.layernorm.gemma4_fused_ops import (
    gemma_gelu_tanh_mul,
    gemma_rmsnorm_residual_scalar,
)
from sglang.srt.layers.layernorm import Gemma4RMSNorm, RMSNorm
from sglang.srt.models.gemma4_causal import Gemma4DecoderLayer

TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1.6e-2, torch.float16: 2e-3}


@pytest.mark.parametrize(
    "tokens, width, dtype",
    [
        pytest.param(t, n, d, marks=gpu_marks(t))
        for t, n, d in [
            (1, 256, torch.bfloat16),
            (5, 256, torch.float16),
            (8, 100, torch.float32),
            (64, 256, torch.bfloat16),
            (4096, 256, torch.bfloat16),
            (512, 256, torch.float16),
        ]
    ],
)
def test_gelu_tanh_mul_matches_float32(tokens, width, dtype):
    gate, other = (
        randn(tokens, width, dtype=dtype, seed=1, scale=3),
        randn(tokens, width, dtype=dtype, seed=2),
    )
    expected = torch.nn.functional.gelu(gate.float(), approximate="tanh") * other.float()
    out = gemma_gelu_tanh_mul(gate, other)
    assert out.dtype == dtype and out.shape == gate.shape
    torch.testing.assert_close(out.float(), expected, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


def test_gelu_tanh_mul_reads_one_layer_of_the_per_layer_inputs():
    per_layer_inputs = randn(6, 4, 32, seed=3)  # (tokens, layers, width), as the model holds them
    gate, ple = randn(6, 32, seed=4, scale=2), per_layer_inputs[:, 2, :]
    assert not ple.is_contiguous()
    expected = torch.nn.functional.gelu(gate, approximate="tanh") * ple
    torch.testing.assert_close(gemma_gelu_tanh_mul(gate, ple), expected, rtol=1e-5, atol=1e-6)
    assert gemma_gelu_tanh_mul(gate[:0], ple[:0]).shape == (0, 32)


@pytest.mark.parametrize(
    "tokens, width, dtype",
    [
        pytest.param(t, n, d, marks=gpu_marks(t))
        for t, n, d in [
            (3, 1536, torch.bfloat16),
            (8, 2560, torch.float32),
            (256, 2560, torch.bfloat16),
        ]
    ],
)
def test_rmsnorm_residual_without_scalar(tokens, width, dtype):
    x, residual = (
        randn(tokens, width, dtype=dtype, seed=5, scale=4),
        randn(tokens, width, dtype=dtype, seed=6),
    )
    weight = randn(width, seed=7).abs() + 0.5
    out = gemma_rmsnorm_residual_scalar(x, weight, residual, None, 1e-6)
    expected = rmsnorm(x, weight, 1e-6) + residual.float()
    torch.testing.assert_close(out.float(), expected, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


class Projection(nn.Module):
    """Stands in for ReplicatedLinear: returns (x @ W.T, None)."""

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.weight = weight

    def forward(self, x):
        return x @ self.weight.t(), None


def ple_layer(hidden: int, ple_width: int, dtype) -> Gemma4DecoderLayer:
    """A decoder layer holding only what the PLE tail uses, with random weights."""
    layer = Gemma4DecoderLayer.__new__(Gemma4DecoderLayer)
    nn.Module.__init__(layer)
    layer.post_feedforward_layernorm = RMSNorm(hidden, eps=1e-6)
    layer.post_per_layer_input_norm = Gemma4RMSNorm(hidden, eps=1e-6)
    with torch.no_grad():
        layer.post_feedforward_layernorm.weight.copy_(randn(hidden, seed=8).abs() + 0.5)
        layer.post_per_layer_input_norm.weight.copy_(randn(hidden, seed=9).abs() + 0.5)
    layer.to(DEVICE)
    layer.per_layer_input_gate = Projection(
        randn(ple_width, hidden, dtype=dtype, seed=10, scale=hidden**-0.5)
    )
    layer.per_layer_projection = Projection(
        randn(hidden, ple_width, dtype=dtype, seed=11, scale=ple_width**-0.5)
    )
    layer.layer_scalar = torch.tensor([0.7], device=DEVICE)
    return layer


def ple_tail_reference(layer, hidden_states, residual, per_layer_input):
    """The tail's math in float32 (upstream's unfused sequence, without its bf16 roundings)."""
    h = rmsnorm(hidden_states, layer.post_feedforward_layernorm.weight, 1e-6) + residual.float()
    gate = h @ layer.per_layer_input_gate.weight.float().t()
    gated = torch.nn.functional.gelu(gate, approximate="tanh") * per_layer_input.float()
    contribution = gated @ layer.per_layer_projection.weight.float().t()
    out = rmsnorm(contribution, layer.post_per_layer_input_norm.weight, 1e-6) + h
    return out * layer.layer_scalar.float()


@pytest.mark.parametrize(
    "tokens, hidden, dtype",
    [
        pytest.param(t, h, d, marks=gpu_marks(t))
        for t, h, d in [
            (4, 256, torch.float32),
            (3, 512, torch.bfloat16),
            (128, 1536, torch.bfloat16),
            (64, 2560, torch.bfloat16),
        ]
    ],
)
def test_fused_ple_tail_matches_float32_reference(tokens, hidden, dtype):
    ple_width = 64 if hidden <= 512 else 256
    layer = ple_layer(hidden, ple_width, dtype)
    hidden_states = randn(tokens, hidden, dtype=dtype, seed=12, scale=2)
    residual = randn(tokens, hidden, dtype=dtype, seed=13)
    per_layer_input = randn(tokens, 3, ple_width, dtype=dtype, seed=14)[:, 1, :]
    out = layer.fused_ple_tail(hidden_states, residual, per_layer_input)
    expected = ple_tail_reference(layer, hidden_states, residual, per_layer_input)
    assert out.dtype == dtype and out.shape == hidden_states.shape
    # bf16: the fused path rounds h, gate, the gated product and the projection to bf16 on the way.
    tolerance = {torch.float32: 1e-4, torch.bfloat16: 5e-2}[dtype]
    torch.testing.assert_close(out.float(), expected, rtol=tolerance, atol=tolerance)
