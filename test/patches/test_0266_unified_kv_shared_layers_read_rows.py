"""0266: E2B/E4B's KV-shared layers store no K/V of their own: their extend reads this chunk's rows
back from the cache by slot. sglang 0.5.17's unified pool (--enable-unified-memory) hands out
page-major views, (pages, page_size, heads, dim), which indexing by slot turned into (tokens, 1,
heads, dim) rows at page size 1 (0185's GEMM path failed on them with "permute(sparse_coo)", E2B
with a 32K prompt on an H200; the extend kernels take a row's stride(1) as its head stride, so a
second KV head, E4B's, read another token's row) and into pages at larger page sizes. The rows now
reach the kernels as (tokens, heads, dim), the cache's values."""

import pytest
import torch
from kernel_inputs import DEVICE, attention_layer, kv_shared_layer_extend

HEADS, KV_HEADS, DIM = 8, 2, 64  # E4B's grouping (8 query heads on 2 KV heads), a narrow width


@pytest.mark.parametrize("page_size", [1, 4])
def test_a_kv_shared_layer_reads_its_rows_from_page_major_views(page_size):
    g = torch.Generator().manual_seed(page_size)
    pages = 6
    # the unified pool's view: every page's entry holds other layers' rows around this layer's
    raw = torch.randn(pages, page_size, 3, KV_HEADS, DIM, generator=g).to(DEVICE)
    k_cache, v_cache = raw[:, :, 0], raw[:, :, 2]
    chunk = torch.tensor([7, 2, 9, 23, 0], device=DEVICE) % (pages * page_size)
    q = torch.zeros(len(chunk), HEADS * DIM, device=DEVICE)

    seen = kv_shared_layer_extend(k_cache, v_cache, chunk, attention_layer(HEADS, DIM), q)

    for got, cache in (seen["k"], k_cache), (seen["v"], v_cache):
        assert got.shape == (len(chunk), KV_HEADS, DIM)
        want = cache.reshape(pages * page_size, KV_HEADS, DIM)[chunk]
        torch.testing.assert_close(got, want, rtol=0, atol=0)
