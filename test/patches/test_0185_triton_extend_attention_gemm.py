"""0185: the Triton backend computes long prompts' prefill chunks on full-attention layers as tiled
GEMMs (extend_attention_gemm_fwd): fp32 scores of many query rows against a block of keys, a Triton
online-softmax step, then the values' GEMM. On CPU (Triton's interpreter, float32): the output vs
a float32 torch reference for requests with and without a cached prefix, GQA groups 1/2/4, key
blocks and query tiles smaller than the request (so blocks split the prefix, the chunk's own
tokens and the causal diagonal), an FP8 KV cache with k/v scales, the unified pool's strided
buffers; which requests the backend sends
there (long ones; the others of the same batch through extend_attention_fwd as a batch of their
own), and what keeps the old kernel: the kill switch, a sliding window, a logit cap, a target
verify, a CUDA graph capture. On a GPU: Gemma-4 full-layer shapes in bf16 and fp8 at 8K-token
chunks after a long prefix, vs the packed extend kernel."""

from types import SimpleNamespace

import pytest
import torch
from extend_requests import (
    extend_requests,
    reference,
    through_extend_attention_fwd,
    unified_pool_views,
)
from kernel_inputs import DEVICE, EXTEND_BACKEND_SWITCHES, attention_layer, extend_forward_batch

from sglang.kernels.ops.attention import extend_attention_gemm as eg
from sglang.kernels.ops.attention.extend_attention import extend_attention_fwd
from sglang.srt.layers.attention import triton_backend
from sglang.srt.model_executor.forward_batch_info import ForwardMode

SWITCH = "SGLANG_OPT_EXTEND_ATTENTION_GEMM"
DTYPE, TOLERANCE = (torch.float32, 1e-4) if DEVICE == "cpu" else (torch.bfloat16, 2e-2)
LENGTHS = [(0, 9), (13, 5), (30, 11), (21, 1)]  # (cached prefix, new tokens) per request


def through_gemm(data, sm_scale, k_scale=1.0, v_scale=1.0, **sizes):
    """Each request through extend_attention_gemm_fwd, as the backend calls it."""
    out = torch.full(data["q"].shape, float("nan"), dtype=data["q"].dtype, device=DEVICE)
    q_at = kv_at = 0
    for prefix, new in data["lengths"]:
        eg.extend_attention_gemm_fwd(
            data["q"],
            data["k_extend"],
            data["v_extend"],
            out,
            data["k_buffer"],
            data["v_buffer"],
            data["kv_indices"],
            q_at,
            kv_at,
            new,
            prefix,
            sm_scale,
            k_scale,
            v_scale,
            **sizes,
        )
        q_at, kv_at = q_at + new, kv_at + prefix
    return out


@pytest.mark.parametrize("group", [1, 2, 4])
@pytest.mark.parametrize("key_block, tile_tokens", [(8, 3), (5, 4), (64, 64)])
def test_matches_float32(group, key_block, tile_tokens):
    kv_heads, dim = 2, 32
    data = extend_requests(LENGTHS, kv_heads * group, kv_heads, dim, DTYPE, seed=group + key_block)
    sizes = dict(key_block=key_block, score_elements=kv_heads * group * key_block * tile_tokens)
    torch.testing.assert_close(
        through_gemm(data, 0.3, **sizes).float(),
        reference(data, 0.3),
        rtol=TOLERANCE,
        atol=TOLERANCE,
    )


def test_fp8_cache_read_back_with_scales():
    data = extend_requests(LENGTHS, 8, 2, 32, DTYPE, buffer_dtype=torch.float8_e4m3fn, seed=3)
    ref = reference(data, 0.2, k_scale=0.5, v_scale=1.5)
    assert (ref - reference(data, 0.2)).abs().max() > 1e-2  # the scales matter here
    out = through_gemm(data, 0.2, 0.5, 1.5, key_block=8, score_elements=8 * 8 * 4)
    torch.testing.assert_close(out.float(), ref, rtol=TOLERANCE, atol=TOLERANCE)


def test_head_dim_512_one_kv_head():
    """E2B's full layers: 8 query heads on one KV head, head dim 512."""
    data = extend_requests([(6, 3), (0, 4)], 8, 1, 512, DTYPE, seed=11)
    out = through_gemm(data, 512**-0.5, key_block=4, score_elements=8 * 4 * 2)
    torch.testing.assert_close(
        out.float(), reference(data, 512**-0.5), rtol=TOLERANCE, atol=TOLERANCE
    )


def test_the_unified_pools_buffers():
    """--enable-unified-memory hands the backend strided K/V views (on 0.5.17 4-D page-major ones,
    which a 3-D gather fails on)."""
    data = extend_requests(LENGTHS, 8, 2, 32, DTYPE, seed=7)
    out = through_gemm(unified_pool_views(data), 0.3, key_block=8, score_elements=8 * 8 * 4)
    torch.testing.assert_close(out.float(), reference(data, 0.3), rtol=TOLERANCE, atol=TOLERANCE)


def test_only_blocks_of_the_chunks_own_keys_are_masked_causally(monkeypatch):
    """Cached keys lie before every row of the chunk: their blocks skip the causal mask. Each
    softmax program spans its block's keys at a power of two of at least a quarter block, so a
    request compiles few shapes; the output still matches float32."""
    launches = []
    kernel = eg._online_softmax_block

    class Recorder:
        def __getitem__(self, grid):
            def launch(*args, **meta):
                launches.append((args[6], meta))
                return kernel[grid](*args, **meta)

            return launch

    monkeypatch.setattr(eg, "_online_softmax_block", Recorder())
    prefix, new, key_block = 40, 23, 16
    data = extend_requests([(prefix, new)], 4, 2, 32, DTYPE, seed=5)
    out = through_gemm(data, 0.3, key_block=key_block, score_elements=4 * key_block * 8)
    torch.testing.assert_close(out.float(), reference(data, 0.3), rtol=TOLERANCE, atol=TOLERANCE)
    blocks = {(meta["CAUSAL"], n_keys, meta["BLOCK_K"]) for n_keys, meta in launches}
    # the prefix's blocks of 16, 16, 8 keys; the chunk's own blocks grow with each tile of 8
    assert {b for b in blocks if not b[0]} == {(False, 16, 16), (False, 8, 8)}
    assert {b[1] for b in blocks if b[0]} == {8, 16, 7}
    assert {b[2] for b in blocks} <= {4, 8, 16}
    assert all(meta["BLOCK_K"] >= n_keys for n_keys, meta in launches)


# --- which requests the backend sends there ---------------------------------------------------


class Spy:
    def __init__(self, fn):
        self.fn, self.calls = fn, []

    def __call__(self, *args, **kwargs):
        self.calls.append(args)
        return self.fn(*args, **kwargs)


def backend_for(data):
    backend = object.__new__(triton_backend.TritonAttnBackend)
    pool = SimpleNamespace(
        get_key_buffer=lambda layer_id: data["k_buffer"],
        get_value_buffer=lambda layer_id: data["v_buffer"],
    )
    backend.__dict__.update(
        EXTEND_BACKEND_SWITCHES,
        token_to_kv_pool=pool,
        forward_metadata=SimpleNamespace(
            qo_indptr=data["qo_indptr"],
            kv_indptr=data["kv_indptr"],
            kv_indices=data["kv_indices"],
            window_kv_indptr=data["kv_indptr"],
            window_kv_indices=data["kv_indices"],
            window_kv_offsets=None,
            custom_mask=None,
            mask_indptr=None,
            max_extend_len=data["max_new"],
            gemm_extend_plan=None,
        ),
        extend_attention_fwd=Spy(extend_attention_fwd),
        extend_attention_gemm_fwd=Spy(eg.extend_attention_gemm_fwd),
    )
    return backend


def forward_batch(mode, extend_lens, prefix_lens):
    return extend_forward_batch(
        forward_mode=mode, extend_seq_lens_cpu=extend_lens, extend_prefix_lens_cpu=prefix_lens
    )


def prefill(backend, data, layer, mode=ForwardMode.EXTEND):
    batch = forward_batch(mode, [n for _, n in data["lengths"]], [p for p, _ in data["lengths"]])
    q = data["q"].flatten(1)
    return backend.forward_extend(
        q, data["k_extend"], data["v_extend"], layer, batch, save_kv_cache=False
    ).view(data["q"].shape)


HEADS, KV_HEADS, DIM = 8, 2, 32


@pytest.fixture
def long_from(monkeypatch):
    """Requests of at least this many query-key pairs count as long."""

    def at(pairs):
        monkeypatch.setenv("SGLANG_EXTEND_ATTENTION_GEMM_MIN_PAIRS", str(pairs))

    return at


def test_long_requests_take_the_gemm_path_the_rest_the_extend_kernel(long_from):
    long_from(400)  # (30, 11): 11 x 41 pairs; (0, 9) 81, (13, 5) 90, (21, 1) 22
    data = extend_requests(LENGTHS, HEADS, KV_HEADS, DIM, DTYPE, seed=5)
    backend = backend_for(data)
    out = prefill(backend, data, attention_layer(HEADS, DIM, scaling=0.25))
    assert [call[7:11] for call in backend.extend_attention_gemm_fwd.calls] == [(14, 13, 11, 30)]
    (short_batch,) = backend.extend_attention_fwd.calls
    assert short_batch[6].tolist() == [0, 9, 14, 15]  # the three others' new tokens
    assert short_batch[7].tolist() == [0, 0, 13, 34]  # and their prefixes
    torch.testing.assert_close(out.float(), reference(data, 0.25), rtol=TOLERANCE, atol=TOLERANCE)


def test_the_split_is_planned_once_per_batch_for_all_its_full_layers(long_from, monkeypatch):
    long_from(400)
    data = extend_requests(LENGTHS, HEADS, KV_HEADS, DIM, DTYPE, seed=9)
    backend = backend_for(data)
    plans = Spy(triton_backend.TritonAttnBackend._build_gemm_extend_plan)
    monkeypatch.setattr(triton_backend.TritonAttnBackend, "_build_gemm_extend_plan", plans)
    layer = attention_layer(HEADS, DIM, scaling=0.25)
    outs = [prefill(backend, data, layer) for _ in range(3)]  # three full layers of one forward
    assert len(plans.calls) == 1
    assert (
        len(backend.extend_attention_gemm_fwd.calls) == len(backend.extend_attention_fwd.calls) == 3
    )
    for out in outs:
        torch.testing.assert_close(
            out.float(), reference(data, 0.25), rtol=TOLERANCE, atol=TOLERANCE
        )
    backend.forward_metadata.gemm_extend_plan = None  # the next batch's metadata
    prefill(backend, data, layer)
    assert len(plans.calls) == 2


def test_short_requests_keep_the_extend_kernel_by_default():
    data = extend_requests(LENGTHS, HEADS, KV_HEADS, DIM, DTYPE, seed=4)
    backend = backend_for(data)
    prefill(backend, data, attention_layer(HEADS, DIM, scaling=0.25))
    assert (backend.extend_attention_gemm_fwd.calls, len(backend.extend_attention_fwd.calls)) == (
        [],
        1,
    )


def test_all_long(long_from):
    long_from(1)
    data = extend_requests(LENGTHS, HEADS, KV_HEADS, DIM, DTYPE, seed=6)
    backend = backend_for(data)
    out = prefill(backend, data, attention_layer(HEADS, DIM, scaling=0.25))
    assert (len(backend.extend_attention_gemm_fwd.calls), backend.extend_attention_fwd.calls) == (
        4,
        [],
    )
    torch.testing.assert_close(out.float(), reference(data, 0.25), rtol=TOLERANCE, atol=TOLERANCE)


@pytest.mark.kill_switch
def test_the_kill_switch_keeps_the_extend_kernel(long_from, monkeypatch):
    long_from(1)
    monkeypatch.setenv(SWITCH, "0")
    data = extend_requests(LENGTHS, HEADS, KV_HEADS, DIM, DTYPE, seed=7)
    backend = backend_for(data)
    out = prefill(backend, data, attention_layer(HEADS, DIM, scaling=0.25))
    assert (backend.extend_attention_gemm_fwd.calls, len(backend.extend_attention_fwd.calls)) == (
        [],
        1,
    )
    torch.testing.assert_close(out.float(), reference(data, 0.25), rtol=TOLERANCE, atol=TOLERANCE)


@pytest.mark.parametrize(
    "case", ["sliding window", "logit cap", "target verify", "graph capture", "no host lengths"]
)
def test_other_cases_keep_the_extend_kernel(long_from, monkeypatch, case):
    long_from(1)
    data = extend_requests([(6, 3)], HEADS, KV_HEADS, DIM, DTYPE, seed=8)
    backend = backend_for(data)
    layer = attention_layer(
        HEADS,
        DIM,
        window=4 if case == "sliding window" else -1,
        logit_cap=5.0 if case == "logit cap" else 0.0,
    )
    if case == "graph capture":
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    mode = ForwardMode.TARGET_VERIFY if case == "target verify" else ForwardMode.EXTEND
    batch = forward_batch(mode, None if case == "no host lengths" else [3], [6])
    backend.forward_extend(
        data["q"].flatten(1), data["k_extend"], data["v_extend"], layer, batch, save_kv_cache=False
    )
    assert (backend.extend_attention_gemm_fwd.calls, len(backend.extend_attention_fwd.calls)) == (
        [],
        1,
    )


# --- GPU: Gemma-4's full layers at a long prefix ------------------------------------------------

SHAPES = {"26B-A4B full": (16, 2), "31B full": (32, 4), "E4B full": (8, 2)}


@pytest.mark.gpu
@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("buffer_dtype", [None, torch.float8_e4m3fn])
def test_served_shapes_match_the_extend_kernel(shape, buffer_dtype):
    q_heads, kv_heads = SHAPES[shape]
    lengths = [(20000, 4096), (0, 3000)]
    data = extend_requests(
        lengths, q_heads, kv_heads, 512, torch.bfloat16, buffer_dtype=buffer_dtype, seed=q_heads
    )
    scales = (0.5, 1.5) if buffer_dtype else (1.0, 1.0)
    ours = through_gemm(data, 512**-0.5, *scales)
    theirs = through_extend_attention_fwd(data, 512**-0.5, 0.0, *scales)
    largest = theirs.float().abs().max()
    assert ((ours.float() - theirs.float()).abs().max() / largest).item() < 2e-2
