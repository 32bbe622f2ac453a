"""Fakes of the tensor-parallel (TP=2) collectives for Gemma-4's all-reduce + RMSNorm tests (0060,
0070): this rank's partial sum plus a fixed one from the other rank."""

import torch

import sglang.srt.models.gemma4_causal as gemma4
from kernel_inputs import rmsnorm_reference as rmsnorm


class TwoRanks:
    """Counts the all-reduces and the fused-kernel calls; with `fused_declines` the kernel answers
    (None, None), as FlashInfer's does when it cannot run."""

    def __init__(self, other: torch.Tensor, fused_declines: bool = False):
        self.other, self.fused_declines = other, fused_declines
        self.all_reduce_calls, self.fused_calls = 0, []

    def all_reduce(self, x):
        self.all_reduce_calls += 1
        return x + self.other

    def fused(self, input_tensor, residual, weight, eps, **kwargs):
        self.fused_calls.append({"residual": residual.clone(), "weight": weight, "eps": eps})
        if self.fused_declines:
            return None, None
        summed = input_tensor.float() + self.other.float() + residual.float()
        return rmsnorm(summed, weight, eps).to(input_tensor.dtype), summed.to(input_tensor.dtype)


def install(monkeypatch, ranks: TwoRanks) -> None:
    monkeypatch.setattr(gemma4, "tensor_model_parallel_all_reduce", ranks.all_reduce)
    monkeypatch.setattr(gemma4, "flashinfer_allreduce_residual_rmsnorm", ranks.fused)
