"""0015: with SGLANG_TRTLLM_MHA_DEBUG=1, an out-of-range KV index becomes a Python exception naming
where it was found and a dump file, instead of a kernel's illegal address: in trtllm_mha's page
tables before its decode/extend kernels, and in the SWA allocator's new SWA indices.  Fresh random
valid tables stay silent; planted bad entries fire.  Off (the default), nothing is checked."""

from types import SimpleNamespace

import pytest
import torch
from swa_serving import static_swa_allocator

from sglang.srt.layers.attention.trtllm_mha_backend import TRTLLMHAAttnBackend
from sglang.srt.mem_cache.kv_index_traps import (
    KVIndexOutOfRange,
    check_page_table,
    check_token_indices,
)

PAGE, PAGES = 4, 10  # tokens per page, pages in the pool


def random_table(rows: int, seed: int):
    """A valid page table: each row uses ceil(len / PAGE) pages in [0, PAGES); the unused tail of
    every row holds garbage the kernel never reads."""
    g = torch.Generator().manual_seed(seed)
    seq_lens = torch.randint(1, 6 * PAGE + 1, (rows,), generator=g, dtype=torch.int32)
    table = torch.randint(-50, 50, (rows, 6), generator=g, dtype=torch.int32)  # garbage
    for row, length in enumerate(seq_lens.tolist()):
        used = -(-length // PAGE)
        table[row, :used] = torch.randint(0, PAGES, (used,), generator=g, dtype=torch.int32)
    return table, seq_lens


def loaded_dump(message: str) -> dict:
    return torch.load(message.rsplit("dump: ", 1)[1], weights_only=False)


@pytest.mark.parametrize("seed", range(5))
def test_valid_page_tables_are_silent(seed):
    table, seq_lens = random_table(8, seed)
    check_page_table(table, seq_lens, PAGE, PAGES, "test")


@pytest.mark.parametrize("bad", [PAGES, PAGES + 7, -1])
def test_a_used_page_outside_the_pool_fires_with_a_dump(bad):
    table, seq_lens = random_table(8, seed=11)
    row = int(torch.argmax(seq_lens))
    table[row, -(-int(seq_lens[row]) // PAGE) - 1] = bad  # the row's last used page
    with pytest.raises(
        KVIndexOutOfRange, match=r"decode, layer 3: 1 page indices outside \[0, 10\)"
    ) as err:
        check_page_table(table, seq_lens, PAGE, PAGES, "decode, layer 3")
    dump = loaded_dump(str(err.value))
    assert torch.equal(dump["page_table"], table) and torch.equal(dump["cache_seqlens"], seq_lens)
    assert dump["out_of_range"].nonzero().tolist() == [[row, -(-int(seq_lens[row]) // PAGE) - 1]]


def test_a_row_longer_than_its_page_table_fires():
    table, seq_lens = random_table(3, seed=2)
    seq_lens[1] = table.shape[1] * PAGE + 1  # needs one page more than the table has
    table[1] = 0
    with pytest.raises(KVIndexOutOfRange, match="1 rows longer than the page table"):
        check_page_table(table, seq_lens, PAGE, PAGES, "extend")


def test_token_indices():
    check_token_indices(torch.arange(0, 36), 36, "alloc")
    with pytest.raises(KVIndexOutOfRange, match=r"alloc: 2 of 4 token indices outside \[0, 36\)"):
        check_token_indices(torch.tensor([3, 36, 5, -1]), 36, "alloc")


def backend(debug: bool):
    """The trtllm_mha backend's check, without building the backend (no GPU here)."""
    b = TRTLLMHAAttnBackend.__new__(TRTLLMHAAttnBackend)
    b.page_size, b.debug_index_traps = PAGE, debug
    return b


def test_backend_checks_against_the_layer_pool():
    b = backend(debug=True)
    table, seq_lens = random_table(4, seed=5)
    b.forward_metadata = SimpleNamespace(cache_seqlens_int32=seq_lens)
    k_cache = torch.zeros(
        PAGES, PAGE, 1, 8
    )  # [pages, page size, heads, head dim], as the kernel sees it
    b._check_page_table(table, k_cache, SimpleNamespace(layer_id=7), "decode")
    table[0, 0] = PAGES
    with pytest.raises(KVIndexOutOfRange, match="trtllm_mha decode, layer 7"):
        b._check_page_table(table, k_cache, SimpleNamespace(layer_id=7), "decode")


def swa_allocator(monkeypatch, debug: bool, page_size=1, size=64, size_swa=32):
    monkeypatch.setenv("SGLANG_TRTLLM_MHA_DEBUG", "1" if debug else "0")
    return static_swa_allocator(size, size_swa, page_size, device="cpu")


def test_swa_allocator_is_silent_on_its_own_indices(monkeypatch):
    allocator = swa_allocator(monkeypatch, debug=True)
    for _ in range(4):  # up to the whole SWA pool
        assert allocator.alloc(8) is not None


@pytest.mark.parametrize("debug", [True, False])
def test_swa_allocator_trap_fires_only_when_on(monkeypatch, debug):
    allocator = swa_allocator(monkeypatch, debug)
    # Plant an index past the SWA buffers (32 tokens + 1 padding page).
    monkeypatch.setattr(allocator.swa_attn_allocator, "alloc", lambda n: torch.arange(30, 30 + n))
    if debug:
        with pytest.raises(KVIndexOutOfRange, match=r"SWATokenToKVPoolAllocator.alloc: 3 of 6"):
            allocator.alloc(6)
    else:
        assert allocator.alloc(6) is not None


def test_paged_alloc_decode_trap(monkeypatch):
    allocator = swa_allocator(monkeypatch, debug=True, page_size=PAGE)
    monkeypatch.setattr(
        allocator.full_attn_allocator, "alloc_decode", lambda *a: torch.tensor([5, 9])
    )
    # 32 SWA tokens + one padding page: rows 0..35; 36 is one past the end.
    monkeypatch.setattr(
        allocator.swa_attn_allocator, "alloc_decode", lambda *a: torch.tensor([35, 36])
    )
    seq_lens = torch.tensor([6, 10])
    with pytest.raises(
        KVIndexOutOfRange, match=r"alloc_decode: 1 of 2 token indices outside \[0, 36\)"
    ):
        allocator.alloc_decode(seq_lens, seq_lens, last_loc=torch.tensor([4, 8]))
