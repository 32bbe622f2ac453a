"""0160: the triton backend sizes a decode step's sliding-window KV indices from the host's sequence
lengths, so preparing a step no longer waits for the GPU. On CPU (Triton's interpreter): the same
indices and index pointer as before on random batches (eager, and into the CUDA-graph buffer),
against a Python reference too, and the decode graph buffers, refilled before each graph replay, get
the host's lengths when the batch mirrors them. On a GPU: with CUDA's sync debug mode set to error,
the graph buffer's window update with the host's lengths runs without a device sync."""

from types import SimpleNamespace

import pytest
import torch
from kernel_inputs import DEVICE
from swa_windows import REQS, WINDOW, SwaPool, batch, reference

from sglang.srt.layers.attention import triton_backend
from sglang.srt.layers.attention.triton_backend import host_seq_lens, update_sliding_window_buffer
from sglang.srt.model_executor.forward_batch_info import ForwardMode


@pytest.mark.parametrize("bs, seed", [(1, 0), (3, 1), (6, 2)])
def test_eager_update_same_with_host_lengths(bs, seed):
    req_to_token, seq_lens_cpu, req_pool_indices = batch(bs, seed)
    allocator, seq_lens = SwaPool(seed), seq_lens_cpu.to(DEVICE)
    results = [
        update_sliding_window_buffer(
            torch.zeros(REQS + 1, dtype=torch.int32, device=DEVICE),
            req_to_token,
            WINDOW,
            seq_lens,
            req_pool_indices,
            bs,
            DEVICE,
            allocator,
            **kw,
        )
        for kw in ({}, {"seq_lens_cpu": seq_lens_cpu})
    ]
    (indptr, indices, lens, start), (indptr2, indices2, lens2, start2) = results
    assert torch.equal(indptr, indptr2) and torch.equal(indices[: len(indices2)], indices2)
    assert torch.equal(lens, lens2) and torch.equal(start, start2)
    assert torch.equal(indices2, reference(req_to_token, seq_lens_cpu, req_pool_indices, allocator))


def graph_update(indices, req_to_token, seq_lens, req_pool_indices, bs, allocator, **kw):
    """The decode CUDA graph's window update: into the preallocated indices buffer."""
    return update_sliding_window_buffer(
        torch.zeros(REQS + 1, dtype=torch.int32, device=DEVICE),
        req_to_token,
        WINDOW,
        seq_lens,
        req_pool_indices,
        bs,
        token_to_kv_pool=allocator,
        window_kv_indices=indices,
        **kw,
    )


@pytest.mark.parametrize("bs, seed", [(1, 3), (4, 4), (6, 5)])
def test_graph_update_same_with_host_lengths(bs, seed):
    req_to_token, seq_lens_cpu, req_pool_indices = batch(bs, seed)
    allocator, seq_lens = SwaPool(seed), seq_lens_cpu.to(DEVICE)
    buffers = []
    for kw in ({}, {"seq_lens_cpu": seq_lens_cpu}):
        indices = torch.full(
            (REQS * WINDOW,), -7, dtype=torch.int64, device=DEVICE
        )  # stale rows stay as they are
        graph_update(indices, req_to_token, seq_lens, req_pool_indices, bs, allocator, **kw)
        buffers.append(indices)
    expected = reference(req_to_token, seq_lens_cpu, req_pool_indices, allocator)
    assert torch.equal(buffers[0][: len(expected)], expected) and torch.equal(
        buffers[1][: len(expected)], expected
    )
    assert (buffers[1][len(expected) :] == -7).all()  # the host's total: nothing past the live rows


def test_host_lengths_only_when_the_batch_mirrors_them():
    class Batch:
        seq_lens_cpu = torch.tensor([5, 9])
        seq_lens_sum = 14

    assert host_seq_lens(Batch) is Batch.seq_lens_cpu
    Batch.seq_lens_sum = None  # a gpu-only batch: seq_lens_cpu is a stale slice
    assert host_seq_lens(Batch) is None


def graph_backend(monkeypatch, seen):
    """A triton backend holding just the decode CUDA-graph buffers, its window update recording what
    it was handed."""

    def window_update(*args, **kwargs):
        seen.update(kwargs)
        return None, None, args[3], None

    monkeypatch.setattr(triton_backend, "update_sliding_window_buffer", window_update)
    monkeypatch.setattr(
        triton_backend, "create_flashinfer_kv_indices_triton", {(2,): lambda *a: None}
    )
    backend = object.__new__(triton_backend.TritonAttnBackend)
    backend.__dict__.update(
        dcp_size=1,
        kv_indptr=torch.zeros(5, dtype=torch.int32),
        cuda_graph_kv_indices=torch.zeros(64, dtype=torch.int64),
        cuda_graph_num_kv_splits=torch.zeros(4, dtype=torch.int32),
        sliding_window_size=WINDOW,
        cuda_graph_window_num_kv_splits=torch.zeros(4, dtype=torch.int32),
        cuda_graph_window_kv_indices=torch.zeros(64, dtype=torch.int64),
        window_kv_indptr=torch.zeros(5, dtype=torch.int32),
        req_to_token=torch.zeros(4, 8, dtype=torch.int32),
        token_to_kv_pool=SwaPool(0),
        _translate_kv_loc=None,
        use_sliding_window_kv_pool=False,
        get_num_kv_splits=lambda *a: None,
    )
    return backend


def test_decode_graph_buffers_hand_the_host_lengths_to_the_window_update(monkeypatch):
    seen = {}
    seq_lens_cpu = torch.tensor([5, 9])
    graph_backend(monkeypatch, seen)._apply_cuda_graph_metadata(
        2,
        torch.arange(2),
        seq_lens_cpu.clone(),
        ForwardMode.DECODE,
        None,
        seq_lens_cpu=seq_lens_cpu,
    )
    assert seen["seq_lens_cpu"] is seq_lens_cpu


def test_decode_replay_hands_the_host_lengths_to_the_window_update(monkeypatch):
    """The per-step entry a decode graph replay calls (the runner's padded view of the batch)."""
    seen = {}
    seq_lens_cpu = torch.tensor([5, 9])
    replay_view = SimpleNamespace(
        batch_size=2,
        req_pool_indices=torch.arange(2),
        seq_lens=seq_lens_cpu.clone(),
        seq_lens_cpu=seq_lens_cpu,
        seq_lens_sum=14,
        forward_mode=ForwardMode.DECODE,
        spec_info=None,
        out_cache_loc=torch.zeros(2, dtype=torch.int64),
    )
    graph_backend(monkeypatch, seen).init_forward_metadata_out_graph(replay_view)
    assert seen["seq_lens_cpu"] is seq_lens_cpu


@pytest.mark.gpu
def test_graph_update_does_not_wait_for_the_gpu():
    req_to_token, seq_lens_cpu, req_pool_indices = batch(4, 9)
    allocator, seq_lens = SwaPool(9), seq_lens_cpu.to(DEVICE)

    def update(**kw):
        indptr = torch.zeros(REQS + 1, dtype=torch.int32, device=DEVICE)
        indices = torch.zeros(REQS * WINDOW, dtype=torch.int64, device=DEVICE)
        update_sliding_window_buffer(
            indptr,
            req_to_token,
            WINDOW,
            seq_lens,
            req_pool_indices,
            4,
            token_to_kv_pool=allocator,
            window_kv_indices=indices,
            **kw,
        )
        return indices

    update(seq_lens_cpu=seq_lens_cpu)  # compile outside the check
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        indices = update(seq_lens_cpu=seq_lens_cpu)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    assert torch.equal(
        indices[: int(torch.clamp(seq_lens_cpu, max=WINDOW).sum())],
        reference(req_to_token, seq_lens_cpu, req_pool_indices, allocator),
    )
