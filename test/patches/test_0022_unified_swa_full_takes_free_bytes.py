"""0022: in sglang's unified hybrid-SWA pool (--enable-unified-memory) the full-attention side's cap
is every byte of the buffer but one request's SWA window, prefill chunk and pages, not the static
split the pool was sized from, so one prompt can take what the SWA side does not hold; the joint
byte budget still bounds both sides, and the server's token count (the longest prompt it admits) is
the grown cap. SGLANG_OPT_UNIFIED_SWA_FULL_TAKES_FREE_BYTES=0 keeps the static caps."""

from types import SimpleNamespace

import pytest
from unified_swa_pool import build_pool, prefill_long_prompt

from sglang.srt.environ import envs
from sglang.srt.mem_cache import kv_cache_configurator
from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator

WINDOW, CHUNK = 256, 128  # a small pool's window and chunk: the sizing rule is the same
FULL, SWA = 4_000, 700  # the static split the pool is sized from
FULL_BYTES, SWA_BYTES = (
    5 * 2 * 2 * 512 * 2,
    25 * 2 * 8 * 256 * 2,
)  # 26B-A4B's KV per token, all layers


def reserve() -> int:
    return WINDOW + CHUNK + 1 + 2


def test_the_full_side_grows_into_the_bytes_the_swa_side_does_not_hold():
    bundle = build_pool("26b-a4b", full_tokens=FULL, swa_tokens=SWA, swa_reserve_tokens=reserve())
    total = FULL * FULL_BYTES + SWA * SWA_BYTES
    assert bundle.full_max_total_num_tokens == (total - reserve() * SWA_BYTES) // FULL_BYTES
    allocator = bundle.token_to_kv_pool_allocator
    assert allocator.full_available_size() == bundle.full_max_total_num_tokens
    # one prompt longer than the static split's full side, its passed windows freed as it is
    # prefilled
    prompt = bundle.full_max_total_num_tokens - CHUNK
    assert prompt > FULL
    slots = prefill_long_prompt(allocator, prompt, CHUNK, WINDOW)
    assert slots.numel() == prompt
    # the scheduler's view of the full side counts down from the grown cap; about a chunk is left
    assert allocator.full_available_size() == bundle.full_max_total_num_tokens - prompt
    assert allocator.available_size() < 2 * CHUNK
    # pool usage and the idle leak check count the slots in use against each side's cap
    full_free, swa_free = allocator.conserved_available_sizes()
    assert full_free == bundle.full_max_total_num_tokens - prompt and swa_free == SWA - WINDOW


def test_pool_stats_count_a_grown_full_side_against_its_cap():
    from sglang.srt.managers.scheduler_components.pool_stats_observer import (
        SchedulerPoolStatsObserver,
    )

    bundle = build_pool("26b-a4b", full_tokens=FULL, swa_tokens=SWA, swa_reserve_tokens=reserve())
    allocator = bundle.token_to_kv_pool_allocator
    cap = bundle.full_max_total_num_tokens
    slots = prefill_long_prompt(allocator, cap // 2, CHUNK, WINDOW)
    observer = SimpleNamespace(
        token_to_kv_pool_allocator=allocator,
        full_tokens_per_layer=cap,
        swa_tokens_per_layer=SWA,
        enable_hisparse=False,
        tree_cache=SimpleNamespace(full_evictable_size=lambda: 0, swa_evictable_size=lambda: 0),
    )
    stats = SchedulerPoolStatsObserver._get_swa_token_info(observer)
    # every slot the prompt holds is in use, no more (what the idle leak check balances)
    assert stats.full_num_used == slots.numel() and stats.swa_num_used == WINDOW


def test_without_a_reserve_the_static_caps_stay():
    bundle = build_pool("26b-a4b", full_tokens=FULL, swa_tokens=4_000)
    assert bundle.full_max_total_num_tokens == FULL
    allocator = bundle.token_to_kv_pool_allocator
    prefill_long_prompt(allocator, FULL - 1_000, CHUNK, WINDOW)
    # the scheduler sees the static split's full side, whatever bytes are free
    assert allocator.full_available_size() == 1_000 < allocator.available_size()


@pytest.mark.parametrize("switch", [True, False])
def test_the_configurator_reserves_one_requests_window_and_chunk(monkeypatch, switch):
    monkeypatch.setattr(
        kv_cache_configurator, "get_spec", lambda: SimpleNamespace(speculative_num_draft_tokens=4)
    )
    configurator = SimpleNamespace(
        server_args=SimpleNamespace(chunked_prefill_size=8192),
        sliding_window_size=1023,
        page_size=1,
    )
    with envs.SGLANG_OPT_UNIFIED_SWA_FULL_TAKES_FREE_BYTES.override(switch):
        got = KVCacheConfigurator._unified_swa_reserve_tokens(configurator)
    assert got == (1023 + 8192 + 4 + 2 if switch else None)
