"""0160 on 0.5.23: an eager decode step sizes its sliding-window KV indices from the host's sequence
lengths instead of reading their total from the GPU (0.5.23's CUDA-graph replay reads no total: its
buffer is preallocated and the translation fused into the gather).  On CPU: the eager window update
gives the same rails and indices with the host's lengths as without, exactly as many as a Python
reference, and with the batch on PyTorch's meta device (where reading any device value raises) reads
none; the eager decode metadata hands the host's lengths down when the batch mirrors them."""

from types import SimpleNamespace

import pytest
import torch

from kernel_inputs import DEVICE
from swa_windows import batch, reference
from swa_windows_0523 import IDENTITY, REQS, WINDOW, NoGather, Translator, meta_batch
from sglang.srt.layers.attention import triton_backend
from sglang.srt.layers.attention.triton_backend import host_seq_lens, update_sliding_window_buffer
from sglang.srt.model_executor.forward_batch_info import ForwardMode


def window_update(req_to_token, seq_lens, req_pool_indices, bs, **kw):
    indptr = torch.zeros(REQS + 1, dtype=torch.int32, device=seq_lens.device)
    return update_sliding_window_buffer(indptr, Translator(req_to_token), None, req_pool_indices, WINDOW, seq_lens,
                                        bs, seq_lens.device, IDENTITY, **kw)


@pytest.mark.parametrize("bs, seed", [(1, 0), (3, 1), (6, 2)])
def test_eager_update_same_with_host_lengths(bs, seed):
    req_to_token, seq_lens_cpu, req_pool_indices = batch(bs, seed)
    seq_lens = seq_lens_cpu.to(DEVICE)
    device_total = window_update(req_to_token, seq_lens, req_pool_indices, bs)
    host_total = window_update(req_to_token, seq_lens, req_pool_indices, bs, seq_lens_cpu=seq_lens_cpu)
    expected = reference(req_to_token, seq_lens_cpu, req_pool_indices, IDENTITY)
    assert torch.equal(host_total[1], expected) and len(host_total[1]) == len(expected)
    for ours, theirs in zip(host_total, device_total):
        assert torch.equal(ours[:len(expected)], theirs[:len(expected)])


def test_eager_update_with_host_lengths_reads_no_device_value():
    req_to_token, seq_lens, req_pool_indices = meta_batch(3)
    _, indices, _, _ = window_update(req_to_token, seq_lens, req_pool_indices, 3,
                                     seq_lens_cpu=torch.tensor([1, 30, 5]))
    assert indices.shape == (1 + WINDOW + 5,)


def test_host_lengths_only_when_the_batch_mirrors_them():
    lens = torch.tensor([3, 4])
    assert host_seq_lens(SimpleNamespace(seq_lens_sum=7, seq_lens_cpu=lens)) is lens
    # a gpu-only batch (seq_lens_sum None) keeps a stale slice in seq_lens_cpu
    assert host_seq_lens(SimpleNamespace(seq_lens_sum=None, seq_lens_cpu=lens)) is None


class Stop(Exception):
    pass


@pytest.mark.parametrize("seq_lens_sum", [7, None])
def test_eager_decode_hands_the_host_lengths_to_the_window_update(monkeypatch, seq_lens_sum):
    seen = []

    def recorded(*args, seq_lens_cpu=None, **kwargs):
        seen.append(seq_lens_cpu)
        raise Stop  # what follows the window update is not this patch's

    monkeypatch.setattr(triton_backend, "update_sliding_window_buffer", recorded)
    backend = object.__new__(triton_backend.TritonAttnBackend)
    backend.__dict__.update(
        dllm_attention=None, device=DEVICE, dcp_size=1, max_context_len=64, sliding_window_size=WINDOW,
        window_kv_indptr=torch.zeros(REQS + 1, dtype=torch.int32, device=DEVICE), kv_index_translator=None,
        token_to_kv_pool=IDENTITY)
    backend._fill_kv_indptr_and_indices = lambda *args: None
    lens = torch.tensor([3, 4])
    decode = SimpleNamespace(batch_size=2, forward_mode=ForwardMode.DECODE, spec_info=None, kv_loc_plan=None,
                             seq_lens=lens.to(DEVICE), seq_lens_sum=seq_lens_sum, seq_lens_cpu=lens,
                             req_pool_indices=torch.tensor([0, 1], device=DEVICE))
    with pytest.raises(Stop):
        backend.init_forward_metadata(decode)
    assert seen == [lens if seq_lens_sum is not None else None]


@pytest.mark.gpu
def test_eager_update_with_host_lengths_does_not_wait_for_the_gpu():
    req_to_token, seq_lens_cpu, req_pool_indices = batch(4, 9)
    seq_lens = seq_lens_cpu.to(DEVICE)
    indptr = torch.zeros(REQS + 1, dtype=torch.int32, device=DEVICE)

    def update():
        return update_sliding_window_buffer(indptr, NoGather(req_to_token), None, req_pool_indices, WINDOW, seq_lens,
                                            4, DEVICE, IDENTITY, seq_lens_cpu=seq_lens_cpu)[1]

    update()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        indices = update()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert len(indices) == len(reference(req_to_token, seq_lens_cpu, req_pool_indices, IDENTITY))
