"""Shared by the kernel patches' tests: fresh random inputs on the test device, the float32 RMSNorm
reference, and which shapes the Triton interpreter can afford on CPU."""

import pytest
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
INTERPRETED_MAX_TOKENS = 8  # the interpreter runs programs one by one in numpy


def gpu_marks(tokens: int) -> list:
    """Cases with more tokens than the interpreter can afford run on a GPU only."""
    return [pytest.mark.gpu] if tokens > INTERPRETED_MAX_TOKENS else []


def randn(*shape, dtype=torch.float32, seed=0, scale=1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype).to(DEVICE)


def rmsnorm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
