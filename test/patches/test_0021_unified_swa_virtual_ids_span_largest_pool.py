"""0021: in sglang's unified hybrid-SWA pool the full-attention side mints the virtual slot ids both
sides bind, so the SWA side's virtual-to-physical table must span the full side's id space. With
Gemma-4's shapes an SWA token outweighs a full-attention token 10x (25 sliding layers of 8 x 256
against 5 full of 2 x 512): the buffer holds 10x more full-attention slots than SWA slots, and a
prompt longer than the SWA side's slot count gets ids past the end of its table."""

import pytest
from unified_swa_pool import build_pool, prefill_long_prompt

WINDOW, CHUNK = 256, 128  # a window and chunk of their own: the ids, not the sizes, matter here


@pytest.mark.parametrize("variant", ["26b-a4b", "31b"])
def test_a_prompt_longer_than_the_swa_side_holds_gets_slots(variant):
    bundle = build_pool(variant, full_tokens=4_000, swa_tokens=700)
    allocator = bundle.token_to_kv_pool_allocator
    pool = bundle.unified_memory_pool
    assert pool.max_slots("full") == 10 * pool.max_slots("swa")  # the same bytes, 10x the entries
    prompt = 3 * pool.max_slots("swa")  # ids well past the SWA side's own slot count
    slots = prefill_long_prompt(allocator, prompt, CHUNK, WINDOW)
    assert slots.numel() == prompt and int(slots.max()) >= pool.max_slots("swa")
    # the window's SWA slots are bound, the passed ones are not, and each resolves to its own SWA
    # slot
    swa_side = allocator.swa_attn_allocator
    window_ids = slots[-WINDOW:]
    physical = swa_side.virtual_to_physical[window_ids]
    assert bool((physical >= 0).all()) and physical.unique().numel() == WINDOW
    assert bool((swa_side.virtual_to_physical[slots[:-WINDOW]] == -1).all())
    assert all(allocator.swa_attn_allocator.is_slot_allocated(int(v)) for v in window_ids[:8])


def test_the_swa_table_spans_the_virtual_id_space():
    bundle = build_pool("26b-a4b", full_tokens=4_000, swa_tokens=400)
    allocator = bundle.token_to_kv_pool_allocator
    ids = bundle.unified_memory_pool.max_virtual_slots()
    assert ids == bundle.unified_memory_pool.max_slots("full")
    for side in (allocator.full_attn_allocator, allocator.swa_attn_allocator):
        assert side.virtual_to_physical.numel() == ids + 1
    # the SWA side still holds only its own bytes' worth of physical slots
    assert (
        allocator.swa_attn_allocator.physical_to_virtual.numel()
        == bundle.unified_memory_pool.max_slots("swa") + 1
    )
