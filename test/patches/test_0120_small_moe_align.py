"""0120: the MoE align of a few (token, expert) pairs in one Triton launch (opt-in).  Its outputs
against a torch reference on fresh random routings (on CPU in Triton's interpreter), including
experts that span several blocks, and when moe_align_block_size takes it."""

import importlib

import pytest
import torch

from kernel_inputs import DEVICE

# the package re-exports the function under the module's name: import the module itself
align = importlib.import_module("sglang.srt.layers.moe.moe_runner.triton_utils.moe_align_block_size")


def routing(tokens: int, top_k: int, experts: int, seed: int, crowd: int | None = None) -> torch.Tensor:
    """top_k distinct experts per token; with `crowd`, drawn from the first `crowd` experts only, so
    that many tokens share an expert."""
    g = torch.Generator().manual_seed(seed)
    pool = crowd or experts
    ids = torch.stack([torch.randperm(pool, generator=g)[:top_k] for _ in range(tokens)])
    return ids.to(torch.int32).to(DEVICE)


def reference(topk_ids: torch.Tensor, block_size: int) -> tuple[list[int], list[int], int]:
    """Pairs grouped by expert id (ascending), in pair order within an expert, each expert's group
    padded with the sentinel (the pair count) to whole blocks; one expert id per block."""
    flat = topk_ids.flatten().tolist()
    sorted_ids, expert_ids = [], []
    for expert in sorted(set(flat)):
        pairs = [i for i, e in enumerate(flat) if e == expert]
        blocks = -(-len(pairs) // block_size)
        sorted_ids += pairs + [len(flat)] * (blocks * block_size - len(pairs))
        expert_ids += [expert] * blocks
    return sorted_ids, expert_ids, len(sorted_ids)


@pytest.mark.parametrize("tokens, top_k, experts, block_size, crowd", [
    (1, 8, 128, 16, None),   # a batch-1 decode step of 26B-A4B: 8 experts, one block each
    (8, 8, 128, 16, None),   # 64 pairs, the most it takes
    (5, 8, 128, 16, 12),     # tokens sharing experts
    (8, 4, 64, 4, 6),        # experts with more pairs than a block holds: several blocks each
    (3, 2, 8, 64, None),     # one tall block per expert
])
def test_matches_the_reference(tokens, top_k, experts, block_size, crowd):
    topk_ids = routing(tokens, top_k, experts, seed=tokens * 100 + top_k, crowd=crowd)
    sorted_ids, expert_ids, total = align.small_moe_align_block_size(topk_ids, block_size)
    want_sorted, want_experts, want_total = reference(topk_ids, block_size)
    numel = topk_ids.numel()
    assert total.item() == want_total
    assert sorted_ids[:want_total].tolist() == want_sorted
    assert (sorted_ids[want_total:] == numel).all()  # the rest of the buffer is padding too
    assert sorted_ids.numel() == numel * block_size  # the buffer size the general path allocates
    assert expert_ids[:want_total // block_size].tolist() == want_experts


def test_moe_align_block_size_takes_it_for_few_pairs_when_switched_on(monkeypatch):
    def general(*args):
        calls.append("general")

    def small(topk_ids, block_size):
        calls.append(("small", topk_ids.numel()))
        return None

    monkeypatch.setattr(align, "sgl_moe_align_block_size", general, raising=False)
    monkeypatch.setattr(align, "small_moe_align_block_size", small)
    cases = [("1", 8, 128), ("1", 64, 128), ("1", 65, 128), ("1", 16, 8), ("0", 8, 128)]
    for switch, pairs, experts in cases:
        monkeypatch.setenv("SGLANG_OPT_SMALL_MOE_ALIGN", switch)
        calls = []
        align.moe_align_block_size(routing(pairs, 1, experts, seed=pairs), 16, experts)
        small_taken = calls == [("small", pairs)]
        assert small_taken == (switch == "1" and pairs <= min(64, experts)), (switch, pairs, experts, calls)
