"""0161 on 0.5.23: without the host's sequence lengths (a speculative step under the overlap
scheduler, a gpu-only batch), an eager step builds the sliding-window KV indices without reading
their total from the GPU: it sizes them by a bound (a window per request), and where the full-to-SWA
translation is not fused into the gather (a static SWA pool) it translates the rows past the GPU's
total to slot 0.  On CPU: the live rows equal a Python reference and the host-lengths path; with the
batch on PyTorch's meta device, where any read of a device value raises, neither the window update
nor the eager target-verify metadata reads one (before the patch each raised)."""

from types import SimpleNamespace

import pytest
import torch

from kernel_inputs import DEVICE
from swa_windows import POOL, SwaPool, batch, reference
from swa_windows_0523 import IDENTITY, MAX_LEN, REQS, WINDOW, NoGather, Translator, meta_batch
from sglang.srt.layers.attention import triton_backend
from sglang.srt.layers.attention.triton_backend import update_sliding_window_buffer
from sglang.srt.mem_cache.base_swa_memory_pool import BaseSWAKVPool
from sglang.srt.model_executor.forward_batch_info import ForwardMode

DRAFT = 4
STALE = -7


def window_update(req_to_token, seq_lens, req_pool_indices, bs, pool=IDENTITY, translator=None, **kw):
    indptr = torch.zeros(REQS + 1, dtype=torch.int32, device=seq_lens.device)
    return update_sliding_window_buffer(indptr, translator or Translator(req_to_token), None, req_pool_indices,
                                        WINDOW, seq_lens, bs, seq_lens.device, pool, **kw)


@pytest.mark.parametrize("bs, seed", [(1, 0), (3, 1), (6, 2)])
def test_eager_update_without_host_lengths(bs, seed):
    req_to_token, seq_lens_cpu, req_pool_indices = batch(bs, seed)
    seq_lens = seq_lens_cpu.to(DEVICE)
    indptr, indices, lens, start = window_update(req_to_token, seq_lens, req_pool_indices, bs)
    indptr2, indices2, lens2, start2 = window_update(req_to_token, seq_lens, req_pool_indices, bs,
                                                    seq_lens_cpu=seq_lens_cpu)
    expected = reference(req_to_token, seq_lens_cpu, req_pool_indices, IDENTITY)
    assert len(indices) == bs * WINDOW  # the bound, not the GPU's total
    assert torch.equal(indices[:len(expected)], expected) and torch.equal(indices2, expected)
    assert torch.equal(indptr, indptr2) and torch.equal(lens, lens2) and torch.equal(start, start2)


class StaticSwaPool(BaseSWAKVPool):
    """A static SWA pool whose full -> SWA table the gather does not take (the update translates)."""

    def __init__(self, seed):  # noqa: super().__init__ would allocate a real pool
        self.table = SwaPool(seed)

    def translate_loc_from_full_to_swa(self, loc):
        return self.table.translate_loc_from_full_to_swa(loc)


StaticSwaPool.__abstractmethods__ = frozenset()  # only the translation is used here


class UntranslatedReads(Translator):
    def pack_read_stream(self, *args, **kwargs):
        super().pack_read_stream(*args, **kwargs)
        return False  # full-pool ids, for the caller to translate


@pytest.mark.parametrize("bs, seed", [(1, 3), (4, 4), (6, 5)])
def test_static_pool_translation_without_host_lengths(bs, seed):
    req_to_token, seq_lens_cpu, req_pool_indices = batch(bs, seed)
    pool, seq_lens = StaticSwaPool(seed), seq_lens_cpu.to(DEVICE)
    assert POOL >= req_to_token.numel()
    indices = torch.full((REQS * WINDOW + 5,), STALE, dtype=torch.int64, device=DEVICE)
    window_update(req_to_token, seq_lens, req_pool_indices, bs, pool, UntranslatedReads(req_to_token),
                  window_kv_indices=indices)
    expected = reference(req_to_token, seq_lens_cpu, req_pool_indices, pool)
    assert torch.equal(indices[:len(expected)], expected)
    assert (indices[len(expected):bs * WINDOW] == pool.table.full_to_swa[0]).all()  # dead rows: slot 0
    assert (indices[bs * WINDOW:] == STALE).all()


def test_window_update_reads_no_device_value():
    req_to_token, seq_lens, req_pool_indices = meta_batch(3)
    _, indices, _, _ = window_update(req_to_token, seq_lens, req_pool_indices, 3)
    assert indices.shape == (3 * WINDOW,)
    window_update(req_to_token, seq_lens, req_pool_indices, 3,
                  window_kv_indices=torch.zeros(REQS * WINDOW, dtype=torch.int64, device="meta"))


def test_eager_target_verify_reads_no_device_value():
    _, seq_lens, req_pool_indices = meta_batch(3)
    backend = object.__new__(triton_backend.TritonAttnBackend)
    backend.__dict__.update(
        dllm_attention=None, device="meta", dcp_size=1, max_context_len=MAX_LEN, sliding_window_size=WINDOW,
        target_verify_num_tokens_per_req=DRAFT, enable_deterministic=False, use_sliding_window_kv_pool=False,
        window_kv_indptr=torch.zeros(REQS + 1, dtype=torch.int32, device="meta"),
        mask_indptr=torch.zeros(REQS + 1, dtype=torch.int64, device="meta"),
        kv_index_translator=Translator(None), token_to_kv_pool=IDENTITY)
    backend._fill_kv_indptr_and_indices = lambda *args: torch.zeros(4, dtype=torch.int32, device="meta")
    verify_batch = SimpleNamespace(
        batch_size=3, forward_mode=ForwardMode.TARGET_VERIFY, req_pool_indices=req_pool_indices, seq_lens=seq_lens,
        seq_lens_sum=None, seq_lens_cpu=None, out_cache_loc=None, kv_loc_plan=None, extend_seq_lens_cpu=None,
        spec_info=SimpleNamespace(num_tokens_per_req=DRAFT, draft_token_num=DRAFT,
                                  custom_mask=torch.ones(8, dtype=torch.bool, device="meta")))
    backend.init_forward_metadata(verify_batch)
    assert backend.forward_metadata.window_kv_indices.shape == (3 * WINDOW,)


@pytest.mark.gpu
def test_updates_without_host_lengths_do_not_wait_for_the_gpu():
    req_to_token, seq_lens_cpu, req_pool_indices = batch(4, 9)
    seq_lens = seq_lens_cpu.to(DEVICE)
    graph_indices = torch.zeros(REQS * WINDOW, dtype=torch.int64, device=DEVICE)

    def updates():
        window_update(req_to_token, seq_lens, req_pool_indices, 4, translator=NoGather(req_to_token),
                      window_kv_indices=graph_indices)
        return window_update(req_to_token, seq_lens, req_pool_indices, 4, translator=NoGather(req_to_token))[1]

    updates()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        indices = updates()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert len(indices) == 4 * WINDOW
