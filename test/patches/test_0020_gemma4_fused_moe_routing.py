"""0020: Gemma-4 MoE routing in one Triton launch, checked against a float32 torch reference on
fresh random logits (ties included) and against the torch routing it replaces.  Small shapes run
on CPU through Triton's interpreter; the full grid runs on a GPU."""

import itertools
from types import SimpleNamespace

import pytest
import torch

from kernel_inputs import DEVICE, gpu_marks
from sglang.srt.layers.gemma4_fused_ops import fused_gemma4_routing_supported, gemma4_fused_routing
from sglang.srt.models import gemma4_causal

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
TOKENS = (1, 8, 64, 512, 4096)
# (experts, top-k) pairs x dtypes, token counts cycled through: 36 shape/dtype cases.
GRID = [(e, k, dtype, TOKENS[i % len(TOKENS)])
        for i, ((e, k), dtype) in enumerate(itertools.product(
            [(e, k) for e in (8, 64, 128, 256) for k in (1, 2, 8)], DTYPES))]


def reference(logits: torch.Tensor, scale: torch.Tensor, k: int):
    """float32 torch: the k largest logits (lowest expert id first among equals, as a stable
    descending sort orders them), softmax over them, times the experts' scales."""
    values, ids = torch.sort(logits.float(), dim=-1, descending=True, stable=True)
    values, ids = values[:, :k], ids[:, :k]
    return torch.softmax(values, dim=-1) * scale.float()[ids], ids.to(torch.int32)


def random_logits(tokens: int, experts: int, dtype, seed: int, ties: bool = False) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(tokens, experts, generator=g) * 3
    if ties:  # few distinct values: many equal logits in every row, also among the top k
        logits = torch.randint(-2, 3, (tokens, experts), generator=g).float()
    return logits.to(dtype).to(DEVICE)


def random_scale(experts: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed + 1)
    return (1 + 0.1 * torch.randn(experts, generator=g)).to(DEVICE)


@pytest.mark.parametrize("experts, k, dtype, tokens",
                         [pytest.param(*c, marks=gpu_marks(c[3])) for c in GRID])
def test_matches_float32_reference(experts, k, dtype, tokens):
    logits, scale = random_logits(tokens, experts, dtype, seed=tokens + experts + k), random_scale(experts, k)
    weights, ids = gemma4_fused_routing(logits, scale, k)
    ref_weights, ref_ids = reference(logits, scale, k)
    assert weights.dtype == torch.float32 and ids.dtype == torch.int32 and ids.shape == (tokens, k)
    # Logits are upcast exactly, so the choice is exact in every dtype; the math is fp32.
    assert torch.equal(ids, ref_ids)
    torch.testing.assert_close(weights, ref_weights, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("experts, k, dtype", [(8, 2, torch.float32), (64, 8, torch.bfloat16),
                                               (128, 8, torch.float16), (256, 1, torch.float32)])
def test_ties_take_the_lowest_expert_first(experts, k, dtype):
    logits, scale = random_logits(4, experts, dtype, seed=7, ties=True), random_scale(experts, 7)
    weights, ids = gemma4_fused_routing(logits, scale, k)
    ref_weights, ref_ids = reference(logits, scale, k)
    assert torch.equal(ids, ref_ids)
    torch.testing.assert_close(weights, ref_weights, rtol=1e-5, atol=1e-6)


def test_signed_zeros_tie_and_nan_logits_are_never_chosen():
    # -0.0 == 0.0: the lower id first; a NaN logit ranks below every real one, -inf included.
    logits = torch.tensor([[0.0, -0.0, float("nan"), -float("inf"), 1.0, -0.0]], device=DEVICE)
    weights, ids = gemma4_fused_routing(logits, torch.ones(6, device=DEVICE), 5)
    assert ids.tolist() == [[4, 0, 1, 5, 3]]
    ref = torch.softmax(torch.tensor([1.0, 0.0, 0.0, 0.0, -float("inf")]), dim=-1)
    torch.testing.assert_close(weights.cpu(), ref[None], rtol=1e-6, atol=0)


def test_masked_experts_and_empty_batch():
    logits = torch.full((2, 8), -float("inf"), device=DEVICE)  # -inf: an expert masked out
    logits[0, 5], logits[1, 2], logits[1, 6] = 1.0, 0.5, 0.5
    weights, ids = gemma4_fused_routing(logits, torch.ones(8, device=DEVICE), 3)
    assert ids.tolist() == [[5, 0, 1], [2, 6, 0]]  # then the lowest-id masked experts, weight 0
    assert weights.tolist() == [[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]]
    weights, ids = gemma4_fused_routing(torch.randn(0, 8, device=DEVICE), torch.ones(8, device=DEVICE), 2)
    assert weights.shape == ids.shape == (0, 2)


def test_non_contiguous_logits():
    full = random_logits(6, 128, torch.float32, seed=3)
    logits, scale = full[:, ::2], random_scale(64, 3)  # stride 2 along experts
    weights, ids = gemma4_fused_routing(logits, scale, 8)
    ref_weights, ref_ids = reference(logits, scale, 8)
    assert torch.equal(ids, ref_ids)
    torch.testing.assert_close(weights, ref_weights, rtol=1e-5, atol=1e-6)


def test_support_predicate_falls_back_outside_the_kernel():
    x = torch.zeros(3, 128, device=DEVICE)
    assert fused_gemma4_routing_supported(x, 8)
    assert not fused_gemma4_routing_supported(torch.zeros(3, 2048, device=DEVICE), 8)  # E > 1024
    assert not fused_gemma4_routing_supported(x.to(torch.float64), 8)
    assert not fused_gemma4_routing_supported(x, 129)
    assert not fused_gemma4_routing_supported(x[0], 8)


def gemma4_routing_function(monkeypatch, experts: int, k: int, scale: torch.Tensor):
    """The routing closure Gemma4MoE hands to TopK, built without distributed state."""
    captured = {}
    monkeypatch.setattr(gemma4_causal, "get_tensor_model_parallel_world_size", lambda: 1)
    monkeypatch.setattr(gemma4_causal, "get_global_server_args", lambda: SimpleNamespace(ep_num_redundant_experts=0))
    monkeypatch.setattr(gemma4_causal, "get_moe_impl_class", lambda quant_config: lambda **kwargs: torch.nn.Identity())
    monkeypatch.setattr(gemma4_causal, "TopK", lambda **kwargs: captured.update(kwargs) or torch.nn.Identity())
    config = SimpleNamespace(num_experts=experts, top_k_experts=k, hidden_size=16, moe_intermediate_size=8)
    moe = gemma4_causal.Gemma4MoE(hidden_size=16, layer_id=0, config=config).to(scale.device)
    with torch.no_grad():
        moe.per_expert_scale.copy_(scale)
    return captured["custom_routing_function"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_model_uses_the_kernel_and_agrees_with_the_torch_routing(monkeypatch, dtype):
    experts, k = 128, 8
    scale = random_scale(experts, 11)
    logits = random_logits(5, experts, dtype, seed=11)
    calls = []
    monkeypatch.setattr(gemma4_causal, "gemma4_fused_routing",
                        lambda *a: calls.append(a) or gemma4_fused_routing(*a))
    # The switch is read when the layer is built (the closure runs inside captured graphs).
    monkeypatch.setenv("SGLANG_OPT_USE_FUSED_GEMMA4_ROUTING", "0")  # the kill switch
    torch_path = gemma4_routing_function(monkeypatch, experts, k, scale)(None, logits, k, True)
    assert not calls
    monkeypatch.delenv("SGLANG_OPT_USE_FUSED_GEMMA4_ROUTING")  # on by default
    fused = gemma4_routing_function(monkeypatch, experts, k, scale)(None, logits, k, True)
    assert len(calls) == 1
    # Equal logits may be ordered (even chosen, at the k-th place) differently by torch.topk, so
    # compare what MoE consumes: the chosen logit values, and each common expert's weight.
    chosen = lambda ids: torch.sort(logits.float().gather(1, ids.long()), dim=-1).values
    assert torch.equal(chosen(fused[1]), chosen(torch_path[1]))
    # The torch path rounds its softmax to the logits' dtype; the kernel stays in fp32.
    tolerance = {torch.float32: 1e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    for token in range(logits.shape[0]):
        mine = dict(zip(fused[1][token].tolist(), fused[0][token].tolist()))
        theirs = dict(zip(torch_path[1][token].tolist(), torch_path[0][token].tolist()))
        common = sorted(set(mine) & set(theirs))
        assert len(common) >= k - 1
        torch.testing.assert_close(torch.tensor([mine[e] for e in common]), torch.tensor([theirs[e] for e in common]),
                                   rtol=tolerance, atol=tolerance)
