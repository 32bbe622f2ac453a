"""0256: in sglang's unified hybrid-SWA pool (--enable-unified-memory) a full-attention slot and an
SWA slot of one token take their bytes from one buffer, so each side's free count can cover a
prefill chunk while the pair does not. The eviction before an allocation then freed nothing (each
side "fit") and the allocation failed: the scheduler died with "Out of memory" although the radix
cache held enough to evict (two 250,000-token prompts on 26B-A4B). Now it evicts until the
allocator's joint count fits, and admission counts the pairs the pool's free and evictable bytes
hold, so that it does not admit a chunk no eviction can serve."""

import pytest
import torch
from swa_serving import Serving, maintained_every_step, request  # noqa: F401 (a fixture)
from unified_swa_pool import build_pool

from sglang.srt.mem_cache.allocation import alloc_token_slots
from sglang.srt.mem_cache.base_prefix_cache import InsertParams
from sglang.srt.mem_cache.radix_cache import RadixKey

WINDOW, CHUNK = 1024, 512
pytestmark = pytest.mark.usefixtures("maintained_every_step")  # Serving builds batches


def unified_serving(cached_tokens: int = 0) -> Serving:
    """The scheduler's bookkeeping on the unified pool with 26B-A4B's layer shapes; a finished
    prompt of `cached_tokens` in its radix cache (both sides held, nothing locking it)."""
    allocator = build_pool(
        "26b-a4b", full_tokens=12_000, swa_tokens=4_000, swa_reserve_tokens=WINDOW + CHUNK + 3
    ).token_to_kv_pool_allocator
    serving = Serving(page_size=1, window=WINDOW, allocator=allocator, max_context_len=16_384)
    if cached_tokens:
        slots = allocator.alloc(cached_tokens)
        key = RadixKey(list(range(cached_tokens)))
        serving.cache.insert(InsertParams(key=key, value=slots))
    return serving


def fill_full_side_until_joint_short(allocator, need: int) -> torch.Tensor:
    """A running prompt's full-attention KV (its passed window's SWA slots freed) takes the buffer
    until one more `need`-token allocation fits each side's count but not both at once; its
    slots."""
    taken = []
    while allocator.available_size() >= need:
        step = max(1, (allocator.available_size() - need) // 2)
        slots = allocator.alloc(step)
        assert slots is not None
        allocator.free_swa(slots)
        taken.append(slots)
    assert allocator.full_available_size() >= need
    assert allocator.swa_available_size() >= need
    assert allocator.available_size() < need
    return torch.cat(taken)


@pytest.mark.parametrize("chunk", [CHUNK, 3 * CHUNK])
def test_a_chunk_evicts_the_cache_until_both_sides_fit(chunk):
    # the cache holds more SWA slots than the full side's cap leaves aside (0022)
    serving = unified_serving(cached_tokens=1_800)
    allocator, cache = serving.allocator, serving.cache
    fill_full_side_until_joint_short(allocator, chunk)
    cached = cache.full_evictable_size() + cache.swa_evictable_size()

    slots = alloc_token_slots(cache, chunk)

    assert slots.numel() == chunk and torch.unique(slots).numel() == chunk
    assert 0 < cache.full_evictable_size() + cache.swa_evictable_size() < cached


def test_an_allocation_no_eviction_can_serve_still_fails_with_sglangs_message():
    serving = unified_serving(cached_tokens=1_800)
    allocator, cache = serving.allocator, serving.cache
    fill_full_side_until_joint_short(allocator, CHUNK)
    with pytest.raises(RuntimeError, match="Out of memory"):
        alloc_token_slots(cache, 40 * CHUNK)


def test_admission_cuts_a_chunk_to_the_pairs_the_pool_holds():
    """A prompt whose chunk fits each side's count but not the pairs, with nothing evictable: it is
    admitted with a chunk the pairs hold, the rest for later rounds (before: the whole chunk, whose
    allocation killed the scheduler)."""
    serving = unified_serving()
    allocator = serving.allocator
    allocator.alloc(1_800)  # running requests' windows: both sides held, not evictable
    fill_full_side_until_joint_short(allocator, CHUNK)
    pairs = allocator.available_size()
    # a short decode: the SWA budget (chunk + 16 tokens) stays below what the SWA count shows
    req = request("r", list(range(CHUNK)), max_new_tokens=16)
    req.init_next_round_input(serving.cache)

    adder = serving.adder(CHUNK)
    adder.add_one_req(req, False, None)
    assert adder.can_run_list == [req]
    batch = serving.batch([req])
    batch.prepare_for_extend()

    assert 0 < batch.extend_num_tokens <= pairs < CHUNK
    assert adder.new_chunked_req is req
