"""0161: without the host's sequence lengths (a speculative step under the overlap scheduler, whose
lengths only the GPU knows), the triton backend builds the sliding-window KV indices without reading
their total from the GPU: it sizes them by a bound (a window per request) and translates the rows
past the GPU's total to slot 0. On CPU (Triton's interpreter): the live rows equal a Python
reference and the host-lengths path, eager and into a CUDA-graph buffer, and nothing past the bound
is written. On CPU with the batch on PyTorch's meta device, where any read of a device value raises:
the window update, the target-verify graph buffers, a graph replay's decode buffers without host
lengths (the frozen-KV MTP draft's) and the eager target-verify metadata never read one (before the
patch each raised). On a GPU: the same updates under CUDA's sync debug mode "error"."""

from types import SimpleNamespace

import pytest
import torch
from kernel_inputs import DEVICE
from swa_windows import MAX_LEN, REQS, WINDOW, SwaPool, batch, reference

from sglang.srt.layers.attention import triton_backend
from sglang.srt.layers.attention.triton_backend import update_sliding_window_buffer
from sglang.srt.model_executor.forward_batch_info import ForwardMode

DRAFT = 4
STALE = -7


def window_update(req_to_token, seq_lens, req_pool_indices, bs, pool, **kw):
    indptr = torch.zeros(REQS + 1, dtype=torch.int32, device=seq_lens.device)
    return update_sliding_window_buffer(
        indptr, req_to_token, WINDOW, seq_lens, req_pool_indices, bs, seq_lens.device, pool, **kw
    )


@pytest.mark.parametrize("bs, seed", [(1, 0), (3, 1), (6, 2)])
def test_eager_update_without_host_lengths(bs, seed):
    req_to_token, seq_lens_cpu, req_pool_indices = batch(bs, seed)
    pool, seq_lens = SwaPool(seed), seq_lens_cpu.to(DEVICE)
    indptr, indices, lens, start = window_update(req_to_token, seq_lens, req_pool_indices, bs, pool)
    indptr2, indices2, lens2, start2 = window_update(
        req_to_token, seq_lens, req_pool_indices, bs, pool, seq_lens_cpu=seq_lens_cpu
    )
    expected = reference(req_to_token, seq_lens_cpu, req_pool_indices, pool)
    assert len(indices) == bs * WINDOW  # the bound, not the GPU's total
    assert torch.equal(indices[: len(expected)], expected) and torch.equal(indices2, expected)
    assert torch.equal(indptr, indptr2) and torch.equal(lens, lens2) and torch.equal(start, start2)


@pytest.mark.parametrize("bs, seed", [(1, 3), (4, 4), (6, 5)])
def test_graph_update_without_host_lengths(bs, seed):
    req_to_token, seq_lens_cpu, req_pool_indices = batch(bs, seed)
    pool, seq_lens = SwaPool(seed), seq_lens_cpu.to(DEVICE)
    indices = torch.full((REQS * WINDOW + 5,), STALE, dtype=torch.int64, device=DEVICE)
    window_update(req_to_token, seq_lens, req_pool_indices, bs, pool, window_kv_indices=indices)
    expected = reference(req_to_token, seq_lens_cpu, req_pool_indices, pool)
    assert torch.equal(indices[: len(expected)], expected)
    assert (
        indices[len(expected) : bs * WINDOW] == pool.full_to_swa[0]
    ).all()  # dead rows: slot 0, translated
    assert (indices[bs * WINDOW :] == STALE).all()


def meta_batch(bs: int):
    """A batch whose device tensors live on the meta device: reading any of their values raises."""
    return (
        torch.zeros(REQS, MAX_LEN, dtype=torch.int32, device="meta"),
        torch.ones(bs, dtype=torch.int64, device="meta"),
        torch.zeros(bs, dtype=torch.int64, device="meta"),
    )


@pytest.fixture
def kernels_stubbed(monkeypatch):
    """The index kernel cannot launch on meta tensors; what it writes is tested above."""
    monkeypatch.setattr(
        triton_backend,
        "create_flashinfer_kv_indices_triton",
        {(bs,): lambda *a: None for bs in (1, 2, 3)},
    )


def test_window_update_reads_no_device_value(kernels_stubbed):
    req_to_token, seq_lens, req_pool_indices = meta_batch(3)
    pool = SwaPool(0, device="meta")
    window_update(req_to_token, seq_lens, req_pool_indices, 3, pool)
    window_update(
        req_to_token,
        seq_lens,
        req_pool_indices,
        3,
        pool,
        window_kv_indices=torch.zeros(REQS * WINDOW, dtype=torch.int64, device="meta"),
    )


def meta_backend():
    """A triton backend holding just the CUDA-graph and verify buffers, all on the meta device."""
    backend = object.__new__(triton_backend.TritonAttnBackend)
    zeros = lambda n, dtype=torch.int64: torch.zeros(n, dtype=dtype, device="meta")  # noqa: E731
    backend.__dict__.update(
        device="meta",
        dcp_size=1,
        sliding_window_size=WINDOW,
        num_draft_tokens=DRAFT,
        max_context_len=MAX_LEN,
        kv_indptr=zeros(REQS + 1, torch.int32),
        window_kv_indptr=zeros(REQS + 1, torch.int32),
        qo_indptr=zeros(REQS + 1),
        mask_indptr=zeros(REQS + 1),
        cuda_graph_kv_indices=zeros(REQS * DRAFT * MAX_LEN),
        cuda_graph_window_kv_indices=zeros(REQS * DRAFT * WINDOW),
        cuda_graph_window_kv_offsets=zeros(REQS, torch.int32),
        cuda_graph_num_kv_splits=zeros(REQS * DRAFT, torch.int32),
        cuda_graph_window_num_kv_splits=zeros(REQS * DRAFT, torch.int32),
        req_to_token=torch.zeros(REQS, MAX_LEN, dtype=torch.int32, device="meta"),
        token_to_kv_pool=SwaPool(0, "meta"),
        _translate_kv_loc=None,
        _verify_mask=None,
        use_sliding_window_kv_pool=False,
        get_num_kv_splits=lambda *a: None,
    )
    return backend


def test_target_verify_graph_buffers_read_no_device_value(kernels_stubbed):
    _, seq_lens, req_pool_indices = meta_batch(3)
    meta_backend()._apply_cuda_graph_metadata(
        3,
        req_pool_indices,
        seq_lens,
        ForwardMode.TARGET_VERIFY,
        SimpleNamespace(draft_token_num=DRAFT, custom_mask=None),
    )


def test_decode_replay_without_host_lengths_reads_no_device_value(kernels_stubbed):
    """The frozen-KV MTP draft's graph replay: a decode view with no host lengths."""
    _, seq_lens, req_pool_indices = meta_batch(3)
    meta_backend()._apply_cuda_graph_metadata(
        3, req_pool_indices, seq_lens, ForwardMode.DECODE, None
    )


def test_eager_target_verify_reads_no_device_value(kernels_stubbed):
    _, seq_lens, req_pool_indices = meta_batch(3)
    verify_batch = SimpleNamespace(
        batch_size=3,
        forward_mode=ForwardMode.TARGET_VERIFY,
        req_pool_indices=req_pool_indices,
        seq_lens=seq_lens,
        seq_lens_sum=None,
        seq_lens_cpu=None,
        out_cache_loc=None,
        spec_info=SimpleNamespace(
            draft_token_num=DRAFT, custom_mask=torch.ones(8, dtype=torch.bool, device="meta")
        ),
    )
    backend = meta_backend()
    backend.init_forward_metadata(verify_batch)
    assert backend.forward_metadata.window_kv_indices.shape == (3 * WINDOW,)


@pytest.mark.gpu
def test_updates_without_host_lengths_do_not_wait_for_the_gpu():
    req_to_token, seq_lens_cpu, req_pool_indices = batch(4, 9)
    pool, seq_lens = SwaPool(9), seq_lens_cpu.to(DEVICE)
    graph_indices = torch.zeros(REQS * WINDOW, dtype=torch.int64, device=DEVICE)

    def updates():
        window_update(
            req_to_token, seq_lens, req_pool_indices, 4, pool, window_kv_indices=graph_indices
        )
        return window_update(req_to_token, seq_lens, req_pool_indices, 4, pool)[1]

    updates()  # compile outside the check
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        eager_indices = updates()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    expected = reference(req_to_token, seq_lens_cpu, req_pool_indices, pool)
    assert torch.equal(eager_indices[: len(expected)], expected) and torch.equal(
        graph_indices[: len(expected)], expected
    )
