"""0080: YOCO fast prefill for Gemma-4's KV-shared layers — which prefills it applies to, the rows
it keeps, the decode-step attention view and its exact restoration (also on errors), and a text
model whose tail layers see only the last tokens yet whose output rows the LM head reads equal the
full run's.  On CPU with stand-in layers and attention backend; the GPU parity is a separate run."""

from types import SimpleNamespace

import pytest
import torch
from torch import nn
from transformers.models.gemma4.configuration_gemma4 import Gemma4TextConfig

from sglang_gemma4.gpu.serve.variants import text_config

from sglang.srt.layers.attention.triton_backend import TritonAttnBackend
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.models import gemma4_causal, gemma4_fast_prefill
from sglang.srt.models.gemma4_fast_prefill import (
    fast_prefill_applies,
    last_token_decode_view,
    last_token_rows,
)


class FakeBackend(TritonAttnBackend):
    """The attributes the view touches; init_forward_metadata scribbles like the real one does."""

    def __init__(self, max_bs=8, window=True):
        self.kv_indptr = torch.arange(max_bs + 1, dtype=torch.int32) * 10
        self.window_kv_indptr = torch.arange(max_bs + 1, dtype=torch.int32) * 3 if window else None
        self.forward_metadata = object()
        self.calls = []

    def init_forward_metadata(self, forward_batch):
        self.calls.append((forward_batch.forward_mode, forward_batch.batch_size))
        self.seq_lens_attended = getattr(forward_batch, "seq_lens", None)
        self.kv_indptr.fill_(-1)
        if self.window_kv_indptr is not None:
            self.window_kv_indptr.fill_(-2)
        self.forward_metadata = "decode metadata"


LAST_BATCH = []  # the forward context's attention backend is the last batch's


def batch(
    extend_lens=(5, 1, 3), mode=ForwardMode.EXTEND, backend=None, return_logprob=False, starts=None
):
    b = SimpleNamespace(
        forward_mode=mode,
        attn_backend=backend or FakeBackend(),
        batch_size=len(extend_lens),
        extend_seq_lens_cpu=list(extend_lens),
        extend_seq_lens=torch.tensor(extend_lens),
        return_logprob=return_logprob,
        extend_logprob_start_lens_cpu=starts,
    )
    LAST_BATCH[:] = [b]
    return b


@pytest.fixture(autouse=True)
def eager(monkeypatch):
    monkeypatch.setattr(gemma4_fast_prefill, "get_attn_backend", lambda: LAST_BATCH[0].attn_backend)
    for graph in ("is_in_breakable_cuda_graph", "is_in_tc_piecewise_cuda_graph"):
        monkeypatch.setattr(gemma4_fast_prefill, graph, lambda: False)


def test_a_plain_prefill_applies():
    assert fast_prefill_applies(batch(), first_kv_shared_layer=4, layers_to_capture=[])


@pytest.mark.parametrize(
    "mode",
    [
        ForwardMode.DECODE,
        ForwardMode.MIXED,
        ForwardMode.TARGET_VERIFY,
        ForwardMode.DRAFT_EXTEND_V2,
        ForwardMode.IDLE,
    ],
)
def test_other_forward_modes_do_not(mode):
    assert not fast_prefill_applies(batch(mode=mode), 4, [])


def test_other_attention_backends_do_not():
    assert not fast_prefill_applies(batch(backend=SimpleNamespace()), 4, [])


@pytest.mark.parametrize("graph", ["is_in_breakable_cuda_graph", "is_in_tc_piecewise_cuda_graph"])
def test_inside_a_prefill_cuda_graph_it_does_not(monkeypatch, graph):
    monkeypatch.setattr(gemma4_fast_prefill, graph, lambda: True)
    assert not fast_prefill_applies(batch(), 4, [])


def test_one_token_per_request_has_nothing_to_drop():
    assert not fast_prefill_applies(batch(extend_lens=(1, 1)), 4, [])


def test_prompt_logprobs_need_every_row_but_output_logprobs_do_not():
    assert not fast_prefill_applies(batch(return_logprob=True, starts=[0, 0, 2]), 4, [])
    assert fast_prefill_applies(
        batch(return_logprob=True, starts=[4, 0, 2]), 4, []
    )  # last token only
    assert fast_prefill_applies(batch(return_logprob=True, starts=[5, 1, 3]), 4, [])


def test_hidden_state_capture_after_the_first_shared_layer_does_not():
    assert fast_prefill_applies(batch(), 4, [1, 4])  # captured before truncation
    assert not fast_prefill_applies(batch(), 4, [5])
    assert not fast_prefill_applies(batch(), 4, [6])


def test_rows_are_each_requests_last_new_token():
    assert last_token_rows(batch(extend_lens=(5, 1, 3))).tolist() == [4, 5, 8]


@pytest.mark.parametrize("window", [True, False])
def test_decode_view_is_built_as_decode_and_restored_exactly(window):
    b = batch(backend=FakeBackend(window=window))
    backend = b.attn_backend
    metadata, indptr = backend.forward_metadata, backend.kv_indptr.clone()
    window_indptr = None if backend.window_kv_indptr is None else backend.window_kv_indptr.clone()
    with last_token_decode_view(b):
        assert (
            b.forward_mode == ForwardMode.DECODE and backend.forward_metadata == "decode metadata"
        )
    assert backend.calls == [(ForwardMode.DECODE, 3)]
    assert b.forward_mode == ForwardMode.EXTEND and backend.forward_metadata is metadata
    assert torch.equal(backend.kv_indptr[:4], indptr[:4])
    if window:
        assert torch.equal(backend.window_kv_indptr[:4], window_indptr[:4])


def test_a_cached_prefix_only_lengthens_what_the_last_tokens_attend():
    # A radix-cache hit or a later chunk of a chunked prefill: the prefix's K/V is in the cache
    # already, the extend holds only the new tokens, and seq_lens counts both.
    b = batch(extend_lens=(5, 1, 3))
    b.extend_prefix_lens_cpu, b.seq_lens = [100, 0, 7], torch.tensor([105, 1, 10])
    assert fast_prefill_applies(b, first_kv_shared_layer=4, layers_to_capture=[])
    assert last_token_rows(b).tolist() == [4, 5, 8]
    with last_token_decode_view(b):
        pass
    assert b.attn_backend.seq_lens_attended.tolist() == [105, 1, 10]


def test_decode_view_restores_on_an_exception():
    b = batch()
    metadata, indptr = b.attn_backend.forward_metadata, b.attn_backend.kv_indptr.clone()
    with pytest.raises(RuntimeError):
        with last_token_decode_view(b):
            raise RuntimeError("layer failed")
    assert b.forward_mode == ForwardMode.EXTEND and b.attn_backend.forward_metadata is metadata
    assert torch.equal(b.attn_backend.kv_indptr[:4], indptr[:4])


class RowWiseLayer(nn.Module):
    """Each row's output depends on that row's inputs only, like everything but attention; records
    what it was given."""

    def __init__(self, idx):
        super().__init__()
        self.idx, self.seen = idx, []

    def forward(self, positions, hidden_states, per_layer_input, forward_batch):
        self.seen.append((hidden_states.shape[0], forward_batch.forward_mode))
        out = (
            hidden_states * (1 + 0.1 * self.idx)
            + positions[:, None]
            + per_layer_input.sum(-1, keepdim=True)
        )
        return out, None


def text_model(layers=6, first_shared=4, fast_prefill=True):
    model = gemma4_causal.Gemma4TextModel.__new__(gemma4_causal.Gemma4TextModel)
    nn.Module.__init__(model)
    model.layers = nn.ModuleList(RowWiseLayer(i) for i in range(layers))
    model.start_layer, model.end_layer = 0, layers  # one pipeline stage
    model.pp_group = SimpleNamespace(is_first_rank=True, is_last_rank=True, world_size=1)
    model.config = SimpleNamespace(num_hidden_layers=layers)
    model.layers_to_capture = []
    model.norm = lambda h: h * 2
    model.project_per_layer_inputs = lambda embeds, per_layer: per_layer
    model.first_kv_shared_layer, model.fast_prefill = first_shared, fast_prefill
    return model


def run(model, b, tokens, hidden=4, layers=6):
    g = torch.Generator().manual_seed(0)
    embeds = torch.randn(tokens, hidden, generator=g)
    per_layer = torch.randn(tokens, layers, 3, generator=g)
    positions = torch.arange(tokens, dtype=torch.float32)
    return model.forward(None, positions, b, input_embeds=embeds, per_layer_inputs=per_layer)


def test_last_rows_match_the_full_run_and_the_tail_sees_only_them():
    full = run(text_model(fast_prefill=False), batch(), tokens=9)
    model, b = text_model(), batch()
    fast = run(model, b, tokens=9)
    rows = [4, 5, 8]
    torch.testing.assert_close(fast[rows], full[rows])
    assert [layer.seen for layer in model.layers[:4]] == [[(9, ForwardMode.EXTEND)]] * 4
    assert [layer.seen for layer in model.layers[4:]] == [[(3, ForwardMode.DECODE)]] * 2
    assert b.forward_mode == ForwardMode.EXTEND and b.attn_backend.calls == [
        (ForwardMode.DECODE, 3)
    ]


def test_without_the_switch_every_layer_sees_every_token():
    model = text_model(fast_prefill=False)
    run(model, batch(), tokens=9)
    assert all(layer.seen == [(9, ForwardMode.EXTEND)] for layer in model.layers)


@pytest.mark.kill_switch
def test_model_reads_the_switch_and_the_shared_layer_count(monkeypatch):
    monkeypatch.setattr(
        gemma4_causal, "make_layers", lambda n, fn, prefix=None, **k: (nn.ModuleList(), 0, n)
    )
    monkeypatch.setattr(
        gemma4_causal,
        "get_pp_group",
        lambda: SimpleNamespace(
            is_first_rank=True, is_last_rank=True, world_size=1, rank_in_group=0
        ),
    )
    for name in ("Gemma4TextScaledWordEmbedding", "ReplicatedLinear", "RMSNorm"):
        monkeypatch.setattr(gemma4_causal, name, lambda *a, **k: nn.Identity())
    monkeypatch.setattr(gemma4_causal.Gemma4TextModel, "post_init", lambda self: None)
    e2b = Gemma4TextConfig(**text_config("e2b"))  # 35 layers, the last 20 KV-shared
    for switch, expected in [(None, True), ("1", True), ("0", False)]:  # on by default
        if switch is None:
            monkeypatch.delenv("SGLANG_GEMMA4_YOCO", raising=False)
        else:
            monkeypatch.setenv("SGLANG_GEMMA4_YOCO", switch)
        model = gemma4_causal.Gemma4TextModel(e2b)
        assert model.fast_prefill is expected and model.first_kv_shared_layer == 15
    monkeypatch.setenv("SGLANG_GEMMA4_YOCO", "1")
    assert not gemma4_causal.Gemma4TextModel(Gemma4TextConfig(**text_config("31b"))).fast_prefill
