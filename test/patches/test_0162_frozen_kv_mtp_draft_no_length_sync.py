"""0162: the frozen-KV MTP draft no longer sums the batch's sequence lengths on the GPU and reads
the sum back (a wait for the previous verify on every step under the overlap scheduler, whose
lengths live on the GPU). On CPU with the batch on PyTorch's meta device, where reading any device
value raises: a draft step (graph path and eager path) runs, returns a frozen-KV MTP verify input
and writes its tree mask into the target backend's verify-mask buffer, or sizes a fresh one by a
host bound when the batch outgrows that buffer; the draft graph replay and the eager draft metadata
pass the host's sum when there is one and None otherwise (before the patch each read the GPU). On a
GPU: a draft step under CUDA's sync debug mode "error"."""

from types import SimpleNamespace

import pytest
import torch

from sglang.srt.layers.attention.verify_mask import VerifyMask
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode
from sglang.srt.speculative import eagle_worker_common
from sglang.srt.speculative import frozen_kv_mtp_worker_v2 as frozen
from sglang.srt.speculative.eagle_utils import TreeMaskMode
from sglang.srt.speculative.frozen_kv_mtp_cuda_graph_runner import FrozenKVMTPCudaGraphRunner
from sglang.srt.speculative.frozen_kv_mtp_info import FrozenKVMTPDraftInput, FrozenKVMTPVerifyInput

STEPS, DRAFT, MASK_BS, CONTEXT, HIDDEN = 3, 4, 4, 64, 8


class DraftBatch:
    """The slice of ForwardBatch.init_new the draft step reads: the scheduler's lengths, as they
    are."""

    @staticmethod
    def init_new(batch, model_runner, return_hidden_states_before_norm):
        return SimpleNamespace(
            batch_size=len(batch.seq_lens),
            seq_lens=batch.seq_lens,
            seq_lens_cpu=batch.seq_lens_cpu,
            seq_lens_sum=batch.seq_lens_sum,
            positions=None,
            spec_info=batch.spec_info,
            capture_hidden_mode=CaptureHiddenMode.LAST,
            forward_mode=ForwardMode.DECODE,
        )


class DraftGraph:
    """The draft loop's CUDA graph: proposes STEPS tokens per request."""

    def can_run_graph(self, forward_batch):
        return True

    def execute(self, forward_batch):
        bs, device = forward_batch.batch_size, forward_batch.seq_lens.device
        return (
            torch.zeros(bs, 0, dtype=torch.int64, device=device),
            torch.zeros(bs, STEPS, dtype=torch.int64, device=device),
            torch.zeros(bs, STEPS, dtype=torch.int64, device=device),
        )


def draft_worker(device):
    worker = object.__new__(frozen.FrozenKVMTPDraftWorker)
    mask = VerifyMask(
        buffer=torch.zeros(MASK_BS * DRAFT * (CONTEXT + DRAFT), dtype=torch.uint8, device=device),
        mode=TreeMaskMode.FULL_MASK,
        max_bs=MASK_BS,
    )
    worker.__dict__.update(
        topk=1,
        speculative_num_steps=STEPS,
        speculative_num_draft_tokens=DRAFT,
        device=device,
        _model_runner=None,
        cuda_graph_runner=DraftGraph(),
        target_worker=SimpleNamespace(
            model_runner=SimpleNamespace(
                attn_backend=SimpleNamespace(verify_mask=mask, max_context_len=CONTEXT)
            )
        ),
    )
    return worker


def decode_batch(bs, device):
    return SimpleNamespace(
        forward_mode=ForwardMode.DECODE,
        seq_lens=torch.full((bs,), 9, dtype=torch.int64, device=device),
        seq_lens_cpu=None,
        seq_lens_sum=None,
        return_hidden_states=True,
        spec_info=FrozenKVMTPDraftInput(
            bonus_tokens=torch.zeros(bs, dtype=torch.int64, device=device),
            hidden_states=torch.zeros(bs, HIDDEN, device=device),
        ),
    )


@pytest.fixture
def tree_kernel(monkeypatch):
    """Stands in for the tree kernel (a CUDA op): records the mask it was handed and the sum that
    would size a fresh one."""
    calls = []

    def build(
        bonus_tokens,
        parent_list,
        top_scores_index,
        draft_tokens,
        seq_lens,
        seq_lens_sum,
        topk,
        steps,
        num_verify,
        mode,
        tree_mask_buf,
        fill_prefix_mask,
    ):
        calls.append(SimpleNamespace(seq_lens_sum=seq_lens_sum, tree_mask_buf=tree_mask_buf))
        bs, device = seq_lens.numel(), seq_lens.device
        retrieve = torch.full((bs, num_verify), -1, dtype=torch.int64, device=device)
        mask = (
            tree_mask_buf
            if tree_mask_buf is not None
            else torch.ones(
                seq_lens_sum * num_verify + num_verify * num_verify * bs,
                dtype=torch.bool,
                device=device,
            )
        )
        return (
            mask,
            torch.zeros(bs * num_verify, dtype=torch.int64, device=device),
            retrieve,
            retrieve,
            retrieve,
            torch.zeros(bs * num_verify, dtype=torch.int64, device=device),
        )

    monkeypatch.setattr(eagle_worker_common, "build_tree_kernel_efficient", build)
    monkeypatch.setattr(frozen, "ForwardBatch", DraftBatch)
    return calls


def test_graph_draft_step_reads_no_device_value(tree_kernel):
    worker = draft_worker("meta")
    verify_input = worker.draft(decode_batch(3, "meta"))
    assert isinstance(verify_input, FrozenKVMTPVerifyInput)
    assert verify_input.draft_token_num == DRAFT and verify_input.spec_steps == STEPS
    mask = worker.target_worker.model_runner.attn_backend.verify_mask.buffer
    assert tree_kernel[0].tree_mask_buf is mask and verify_input.custom_mask is mask


def test_batch_past_the_mask_buffer_sizes_a_fresh_mask_by_a_host_bound(tree_kernel):
    verify_input = draft_worker("meta").draft(decode_batch(MASK_BS + 2, "meta"))
    assert (
        tree_kernel[0].tree_mask_buf is None
        and tree_kernel[0].seq_lens_sum == (MASK_BS + 2) * CONTEXT
    )
    assert verify_input.custom_mask.numel() == (MASK_BS + 2) * CONTEXT * DRAFT + DRAFT * DRAFT * (
        MASK_BS + 2
    )


def test_eager_draft_metadata_keeps_the_host_sum_or_none():
    seen = []
    worker = object.__new__(frozen.FrozenKVMTPDraftWorker)
    worker.__dict__.update(
        kv_context=SimpleNamespace(target_token_to_kv_pool="target pool"),
        draft_attn_backend=SimpleNamespace(
            token_to_kv_pool="draft pool",
            init_forward_metadata=lambda fb: seen.append(fb.seq_lens_sum),
        ),
    )
    for seq_lens_cpu, seq_lens_sum in ((None, None), (torch.tensor([4, 5]), 9)):
        forward_batch = SimpleNamespace(
            forward_mode=ForwardMode.DECODE,
            seq_lens=torch.tensor([4, 5], device="meta"),
            seq_lens_cpu=seq_lens_cpu,
            seq_lens_sum=seq_lens_sum,
            spec_info=None,
            mark_forward_metadata_ready=lambda: None,
        )
        worker._init_frozen_kv_metadata(forward_batch)
    assert seen == [None, 9]


def draft_graph_runner(seen):
    runner = object.__new__(FrozenKVMTPCudaGraphRunner)
    runner.__dict__.update(
        deepep_adapter=SimpleNamespace(replay=lambda: None),
        captured_req_width=1,
        topk=1,
        capture_bs=[1, 2, 4],
        seq_len_fill_value=1,
        require_mlp_tp_gather=False,
        require_gathered_buffer=False,
        model_runner=SimpleNamespace(device_timer=None),
        frozen_kv_mtp_worker=SimpleNamespace(
            _init_frozen_kv_metadata_replay_cuda_graph=lambda fb, bs, seq_lens_sum: seen.append(
                (bs, seq_lens_sum)
            )
        ),
        buffers=SimpleNamespace(
            seq_lens=torch.ones(4, dtype=torch.int64),
            seq_lens_cpu=torch.ones(4, dtype=torch.int64),
            positions=torch.zeros(4, dtype=torch.int64),
            req_pool_indices=torch.zeros(4, dtype=torch.int64),
            bonus_tokens=torch.zeros(4, dtype=torch.int64),
            hidden_states=torch.zeros(4, HIDDEN),
        ),
    )
    runner._replay_graph = lambda key, fb: tuple(torch.zeros(4, STEPS) for _ in range(3))
    return runner


@pytest.mark.parametrize("host", [False, True])
def test_draft_graph_replay_passes_the_padded_host_sum_or_none(host):
    seen = []
    forward_batch = SimpleNamespace(
        batch_size=3,
        seq_lens=torch.tensor([4, 5, 6]),
        seq_lens_cpu=torch.tensor([4, 5, 6]) if host else None,
        seq_lens_sum=15 if host else None,
        positions=torch.tensor([3, 4, 5]),
        mrope_positions=None,
        req_pool_indices=torch.tensor([1, 2, 3]),
        spec_info=SimpleNamespace(
            bonus_tokens=torch.zeros(3, dtype=torch.int64), hidden_states=torch.zeros(3, HIDDEN)
        ),
    )
    draft_graph_runner(seen).execute(forward_batch)
    assert seen == [
        (4, 15 + 1 if host else None)
    ]  # padded to the 4-request graph, its row at length 1


@pytest.mark.gpu
def test_draft_step_does_not_wait_for_the_gpu(tree_kernel):
    worker, batch = draft_worker("cuda"), decode_batch(3, "cuda")
    worker.draft(decode_batch(3, "cuda"))  # first calls outside the check
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        verify_input = worker.draft(batch)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert isinstance(verify_input, FrozenKVMTPVerifyInput)
