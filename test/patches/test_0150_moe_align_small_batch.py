"""0150: up to 128 (token, expert) pairs, moe_align_block_size lays the pairs out for the fused-MoE
kernel in one Triton launch. Checked against a Python reference of the layout on fresh random
routing (decode-sized batches, EP-filtered pairs, one crowded expert), through Triton's interpreter
on CPU; on a GPU also against sgl_kernel's two-launch path it replaces (switch off)."""

import importlib

import pytest
import torch
from kernel_inputs import DEVICE, LaunchSpy

# the package re-exports the function under the module's name: fetch the module itself
align_module = importlib.import_module(
    "sglang.srt.layers.moe.moe_runner.triton_utils.moe_align_block_size"
)
moe_align_block_size = align_module.moe_align_block_size

EXPERTS, TOP_K = 128, 8


def routed(tokens: int, seed: int, experts: int = EXPERTS, top_k: int = TOP_K) -> torch.Tensor:
    """Each token's top-k distinct experts, drawn at random (as a router picks them)."""
    g = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randperm(experts, generator=g)[:top_k] for _ in range(tokens)]).to(
        torch.int32
    )


def reference_layout(topk_ids: torch.Tensor, block_size: int, experts: int):
    """Rows per expert (slot = expert + 1; slot 0 holds EP-filtered pairs, id -1), each expert's
    pairs padded to whole blocks in expert order: (total rows, {slot: (first row, pairs)}, expert
    of each block)."""
    flat = topk_ids.flatten().tolist()
    segments, row, block_experts = {}, 0, []
    for slot in range(experts + 1):
        pairs = {i for i, e in enumerate(flat) if e + 1 == slot}
        if pairs:
            segments[slot] = (row, pairs)
            blocks = -(-len(pairs) // block_size)
            block_experts += [slot - 1] * blocks
            row += blocks * block_size
    return row, segments, block_experts


def assert_layout(
    topk_ids: torch.Tensor, block_size: int, experts: int, sorted_ids, expert_ids, post_pad
):
    numel = topk_ids.numel()
    total, segments, block_experts = reference_layout(topk_ids.cpu(), block_size, experts)
    sorted_ids, expert_ids = sorted_ids.cpu().tolist(), expert_ids.cpu().tolist()
    assert post_pad.item() == total
    for first, pairs in segments.values():
        padded_end = first + -(-len(pairs) // block_size) * block_size
        assert set(sorted_ids[first : first + len(pairs)]) == pairs  # any order within an expert
        assert sorted_ids[first + len(pairs) : padded_end] == [numel] * (
            padded_end - first - len(pairs)
        )
    assert sorted_ids[total:] == [numel] * (len(sorted_ids) - total)
    assert expert_ids[: total // block_size] == block_experts


@pytest.mark.parametrize("block_size", [16, 32, 64])
@pytest.mark.parametrize("tokens", [1, 2, 3, 8, 16])
def test_decode_batches_match_the_reference_layout(tokens, block_size, monkeypatch):
    monkeypatch.setenv("SGLANG_OPT_MOE_ALIGN_SMALL_BATCH", "1")
    topk_ids = routed(tokens, seed=tokens * 31 + block_size).to(DEVICE)
    assert_layout(
        topk_ids, block_size, EXPERTS, *moe_align_block_size(topk_ids, block_size, EXPERTS)
    )


def test_pairs_an_ep_rank_filtered_out_get_blocks_of_expert_minus_one():
    topk_ids = routed(4, seed=5)
    topk_ids[topk_ids % 3 == 0] = -1  # experts another rank holds
    topk_ids = topk_ids.to(DEVICE)
    sorted_ids, expert_ids, post_pad = moe_align_block_size(topk_ids, 16, EXPERTS)
    assert expert_ids[0].item() == -1
    assert_layout(topk_ids, 16, EXPERTS, sorted_ids, expert_ids, post_pad)


def test_one_crowded_expert_spans_several_blocks():
    g = torch.Generator().manual_seed(11)
    topk_ids = torch.randint(0, EXPERTS, (100, 1), generator=g, dtype=torch.int32)
    topk_ids[::2] = 3  # 50 of 100 pairs on expert 3: four blocks of 16
    topk_ids = topk_ids.to(DEVICE)
    sorted_ids, expert_ids, post_pad = moe_align_block_size(topk_ids, 16, EXPERTS)
    assert expert_ids.cpu().tolist().count(3) >= 4
    assert_layout(topk_ids, 16, EXPERTS, sorted_ids, expert_ids, post_pad)


@pytest.mark.kill_switch
def test_only_small_batches_with_the_switch_on_take_the_one_launch(monkeypatch):
    calls = []
    monkeypatch.setattr(
        align_module, "sgl_moe_align_block_size", lambda *args: calls.append(args), raising=False
    )
    monkeypatch.setenv("SGLANG_OPT_MOE_ALIGN_SMALL_BATCH", "1")
    moe_align_block_size(routed(16, seed=1).to(DEVICE), 16, EXPERTS)  # 128 pairs
    assert calls == []
    moe_align_block_size(routed(17, seed=1).to(DEVICE), 16, EXPERTS)  # 136 pairs
    assert len(calls) == 1
    moe_align_block_size(
        routed(8, seed=1, experts=32).to(DEVICE), 16, 32
    )  # 64 pairs, more than experts + 1
    assert len(calls) == 2
    monkeypatch.setenv("SGLANG_OPT_MOE_ALIGN_SMALL_BATCH", "0")
    moe_align_block_size(routed(1, seed=1).to(DEVICE), 16, EXPERTS)
    assert len(calls) == 3


def test_up_to_32_pairs_run_on_one_warp(monkeypatch):
    monkeypatch.setenv("SGLANG_OPT_MOE_ALIGN_SMALL_BATCH", "1")
    spy = LaunchSpy(align_module._moe_align_small_batch_kernel, ("num_warps",))
    monkeypatch.setattr(align_module, "_moe_align_small_batch_kernel", spy)
    for tokens in (1, 4, 5, 16):  # 8, 32, 40 and 128 pairs
        topk_ids = routed(tokens, seed=tokens).to(DEVICE)
        assert_layout(topk_ids, 16, EXPERTS, *moe_align_block_size(topk_ids, 16, EXPERTS))
    assert spy.launches == [(1,), (1,), (4,), (4,)]


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [1, 2, 4, 7, 16])
def test_same_layout_as_sgl_kernel(tokens, monkeypatch):
    topk_ids = routed(tokens, seed=tokens).to(DEVICE)
    monkeypatch.setenv("SGLANG_OPT_MOE_ALIGN_SMALL_BATCH", "0")
    theirs = moe_align_block_size(topk_ids, 16, EXPERTS)
    monkeypatch.setenv("SGLANG_OPT_MOE_ALIGN_SMALL_BATCH", "1")
    ours = moe_align_block_size(topk_ids, 16, EXPERTS)
    for layout in (theirs, ours):
        assert_layout(topk_ids, 16, EXPERTS, *layout)
    total = ours[2].item()
    assert theirs[2].item() == total
    assert torch.equal(ours[1][: total // 16], theirs[1][: total // 16])
    # rows within an expert's block may come in another order: compare each block as a set
    for block in range(total // 16):
        rows = slice(block * 16, (block + 1) * 16)
        assert sorted(ours[0][rows].tolist()) == sorted(theirs[0][rows].tolist())
