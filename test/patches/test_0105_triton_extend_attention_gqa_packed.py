"""0105: on Hopper, extend_attention_fwd runs plain causal attention of head dim 512 with two or
more query heads per KV head through a packed kernel: one program per (request, KV head, block of
tokens) whose rows are the tokens times the query heads of that KV head, so each K/V tile is read
once for the group.  On CPU (Triton's interpreter, float32, the device reported as Hopper where
dispatch is checked): the kernel's output vs a float32 torch reference for requests with different
prefix and extend lengths (one with nothing cached, lengths off the tile), GQA groups 1/2/4/8, head
dims 512 and 32, logit cap on and off, k/v scales, every tile of its table, the unified pool's
strided KV buffers; which calls extend_attention_fwd hands to it (and that
SGLANG_OPT_EXTEND_ATTENTION_GQA_PACK=0 gives them back to the old kernel, same output).  On a GPU:
Gemma-4 full-layer shapes in bf16 and with an fp8 KV cache vs the old kernel and float32."""

import pytest
import torch
from extend_requests import (
    extend_requests,
    reference,
    through_extend_attention_fwd,
    unified_pool_views,
)
from kernel_inputs import DEVICE, relative_difference, spy_on_hopper

from sglang.kernels.ops.attention import extend_attention as ea

SWITCH = "SGLANG_OPT_EXTEND_ATTENTION_GQA_PACK"
TILE = "SGLANG_EXTEND_ATTENTION_GQA_PACK_TILE"
# Triton's interpreter computes the extend kernel wrong in bfloat16 (0100's test); float32 on CPU
DTYPE, TOLERANCE = (torch.float32, 1e-4) if DEVICE == "cpu" else (torch.bfloat16, 2e-2)
# (prefix, new tokens) per request: nothing cached, and lengths off every tile
LENGTHS = [(0, 5), (11, 3), (37, 9)]


def make_inputs(lengths, q_heads, kv_heads, dim, dtype=DTYPE, buffer_dtype=None, seed=0):
    return extend_requests(lengths, q_heads, kv_heads, dim, dtype, buffer_dtype, seed)


def packed(data, sm_scale, logit_cap=0.0, k_scale=1.0, v_scale=1.0, tile=None):
    out = torch.empty(data["q"].shape, dtype=data["q"].dtype, device=DEVICE)
    ea.extend_attention_gqa_packed_fwd(
        data["q"],
        data["k_extend"],
        data["v_extend"],
        out,
        data["k_buffer"],
        data["v_buffer"],
        data["qo_indptr"],
        data["kv_indptr"],
        data["kv_indices"],
        data["max_new"],
        k_scale,
        v_scale,
        sm_scale,
        logit_cap,
        tile=tile,
    )
    return out


@pytest.mark.parametrize("dim", [32, 512])
@pytest.mark.parametrize("group", [1, 2, 4, 8])
@pytest.mark.parametrize("logit_cap", [0.0, 2.0])
def test_packed_kernel_matches_float32(dim, group, logit_cap):
    kv_heads = 2 if group < 8 else 1
    data = make_inputs(LENGTHS, kv_heads * group, kv_heads, dim, seed=dim + group)
    sm_scale = dim**-0.5 * (
        4.0 if logit_cap else 1.0
    )  # large enough logits for the cap to bend them
    ref = reference(data, sm_scale, logit_cap)
    if logit_cap:
        assert (
            ref - reference(data, sm_scale)
        ).abs().max() > 1e-2  # the cap changes the output here
    torch.testing.assert_close(
        packed(data, sm_scale, logit_cap), ref, rtol=TOLERANCE, atol=TOLERANCE
    )


@pytest.mark.parametrize("tile", sorted(ea._GQA_PACK_TILES))
def test_every_tile_of_the_table_matches_float32(monkeypatch, tile):
    # 8 heads of a group pad nothing, 3 pad to 4: both row layouts, chosen through the variable
    for group, seed in ((8, 1), (3, 2)):
        data = make_inputs([(70, 12), (0, 17)], group, 1, 64, seed=seed)
        monkeypatch.setenv(TILE, tile)
        torch.testing.assert_close(
            packed(data, 0.125), reference(data, 0.125), rtol=TOLERANCE, atol=TOLERANCE
        )


def test_unknown_tile_name_is_refused(monkeypatch):
    monkeypatch.setenv(TILE, "m999")
    with pytest.raises(ValueError, match="m64n32w8s2"):
        packed(make_inputs([(3, 2)], 2, 1, 32), 0.1)


def test_kv_scales_apply_to_the_cached_prefix_only():
    data = make_inputs(LENGTHS, 8, 2, 64, seed=5)
    ref = reference(data, 0.125, k_scale=0.5, v_scale=1.5)
    assert (ref - reference(data, 0.125)).abs().max() > 1e-2
    torch.testing.assert_close(
        packed(data, 0.125, k_scale=0.5, v_scale=1.5), ref, rtol=TOLERANCE, atol=TOLERANCE
    )


def test_the_unified_pools_buffers_match_float32():
    data = make_inputs(LENGTHS, 8, 2, 64, seed=6)
    torch.testing.assert_close(
        packed(unified_pool_views(data), 0.125),
        reference(data, 0.125),
        rtol=TOLERANCE,
        atol=TOLERANCE,
    )


@pytest.fixture
def hopper(monkeypatch):
    """The device reported as Hopper; launches of the packed and the old kernel recorded."""
    spy = spy_on_hopper(
        monkeypatch,
        ea,
        "_fwd_kernel_gqa_packed",
        ("BLOCK_M", "BLOCK_T", "BLOCK_N", "num_warps", "num_stages"),
    )
    old = spy_on_hopper(monkeypatch, ea, "_fwd_kernel", ("BLOCK_M",))
    return spy, old


def test_gemma4_full_layer_takes_the_packed_kernel_and_the_switch_restores_the_old_one(
    hopper, monkeypatch
):
    spy, old = hopper
    data = make_inputs(LENGTHS, 8, 1, 512, seed=7)  # E2B's full layers: 8 query heads on 1 KV head
    ref = reference(data, 0.1, logit_cap=3.0)
    new_out = through_extend_attention_fwd(data, 0.1, logit_cap=3.0)
    assert spy.launches == [(32, 4, 64, 8, 2)] and old.launches == []
    monkeypatch.setenv(SWITCH, "0")
    old_out = through_extend_attention_fwd(data, 0.1, logit_cap=3.0)
    assert spy.launches == [(32, 4, 64, 8, 2)] and len(old.launches) == 1
    for out in (new_out, old_out):
        torch.testing.assert_close(out, ref, rtol=TOLERANCE, atol=TOLERANCE)
    assert relative_difference(new_out, old_out, ref) < (1e-4 if DEVICE == "cpu" else 2e-2)


def test_group_of_four_packs_eight_tokens_a_program_with_the_default_tile(hopper):
    spy, old = hopper
    data = make_inputs(LENGTHS, 8, 2, 512, seed=8)  # E4B's full layers: 8 query heads on 2 KV heads
    out = through_extend_attention_fwd(data)
    assert spy.launches == [(32, 8, 64, 8, 2)] and old.launches == []
    torch.testing.assert_close(out, reference(data, 512**-0.5), rtol=TOLERANCE, atol=TOLERANCE)


def small(q_heads=8, kv_heads=1, dim=512):
    return make_inputs([(4, 3), (0, 2)], q_heads, kv_heads, dim, seed=9)


@pytest.mark.parametrize(
    "case, kwargs",
    [
        ("sliding window", dict(sliding_window_size=2)),
        ("not causal", dict(is_causal=False)),
        ("sinks", dict(sinks=torch.zeros(8))),
        ("lse", dict(lse_extend=torch.zeros(5, 8))),
        ("xai temperature", dict(xai_temperature_len=2)),
        ("page size 2", dict(page_size=2)),
    ],
)
def test_calls_outside_the_packed_kernel_keep_the_old_one(hopper, case, kwargs):
    spy, old = hopper
    data = small()
    args = (
        data["q"],
        data["k_extend"],
        data["v_extend"],
        None,
        kwargs.get("is_causal", True),
        kwargs.get("sliding_window_size", -1),
        kwargs.get("sinks"),
        kwargs.get("xai_temperature_len", -1),
        kwargs.get("lse_extend"),
        False,
        False,
        kwargs.get("page_size", 1),
        None,
    )
    assert not ea._use_gqa_packed_extend(*args)
    plain = (
        data["q"],
        data["k_extend"],
        data["v_extend"],
        None,
        True,
        -1,
        None,
        -1,
        None,
        False,
        False,
        1,
        None,
    )
    assert ea._use_gqa_packed_extend(*plain)
    if case in (
        "sliding window",
        "not causal",
        "xai temperature",
    ):  # these run on CPU through the old kernel
        through_extend_attention_fwd(data, **kwargs)
        assert spy.launches == [] and len(old.launches) == 1


def test_custom_mask_skip_stages_and_score_mod_keep_the_old_kernel(hopper):
    data = small()
    q, k, v = data["q"], data["k_extend"], data["v_extend"]
    base = [q, k, v, None, True, -1, None, -1, None, False, False, 1, None]
    for at, value in (
        (3, torch.ones(10, dtype=torch.bool)),
        (9, True),
        (10, True),
        (12, lambda *a: a[0]),
    ):
        args = list(base)
        args[at] = value
        assert not ea._use_gqa_packed_extend(*args), at


@pytest.mark.parametrize(
    "q_heads, kv_heads, dim", [(8, 8, 512), (16, 8, 256), (16, 2, 256), (16, 2, 128)]
)
def test_one_head_a_group_and_other_head_dims_keep_the_old_kernel(hopper, q_heads, kv_heads, dim):
    data = make_inputs([(1, 1)], q_heads, kv_heads, dim)
    assert not ea._use_gqa_packed_extend(
        data["q"],
        data["k_extend"],
        data["v_extend"],
        None,
        True,
        -1,
        None,
        -1,
        None,
        False,
        False,
        1,
        None,
    )


@pytest.mark.parametrize("capability", [(8, 0), (10, 0), (12, 0)])
def test_other_gpus_keep_the_old_kernel(hopper, monkeypatch, capability):
    data = small()
    args = (
        data["q"],
        data["k_extend"],
        data["v_extend"],
        None,
        True,
        -1,
        None,
        -1,
        None,
        False,
        False,
        1,
        None,
    )
    monkeypatch.setattr(ea, "CUDA_CAPABILITY", capability)
    assert not ea._use_gqa_packed_extend(*args)
    monkeypatch.setattr(ea, "CUDA_CAPABILITY", (9, 0))
    monkeypatch.setattr(ea, "_is_cuda", False)
    assert not ea._use_gqa_packed_extend(*args)


def fp8_marks():
    """fp8 buffers: on CPU where Triton's interpreter reads them, else on a GPU."""
    try:
        data = make_inputs([(3, 2)], 2, 1, 32, buffer_dtype=torch.float8_e4m3fn)
        packed(data, 0.1)
        return []
    except Exception:  # the interpreter's numpy has no float8
        return [pytest.mark.gpu]


@pytest.mark.parametrize("group", [pytest.param(g, marks=fp8_marks()) for g in (4, 8)])
def test_fp8_kv_buffer_read_back_with_scales(group):
    data = make_inputs(LENGTHS, 2 * group, 2, 512, buffer_dtype=torch.float8_e4m3fn, seed=group)
    k_scale, v_scale = 0.75, 1.25
    ref = reference(data, 512**-0.5, k_scale=k_scale, v_scale=v_scale)  # the fp8 values as stored
    out = packed(data, 512**-0.5, k_scale=k_scale, v_scale=v_scale)
    # the kernel multiplies q by K in K's fp8 type, like the old kernel: compared within fp8's
    # rounding
    assert relative_difference(out, ref, ref) < 0.1


# Gemma 4's full layers: 26B-A4B 16 query heads on 2 KV heads, 31B 32 on 4, E4B 8 on 2
GPU_LAYERS = [(16, 2), (32, 4), (8, 2)]
GPU_LENGTHS = [[(0, 2048)], [(3000, 1000), (0, 77), (555, 1)], [(8000, 4)] * 8]


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9,
    reason="needs a Hopper GPU",
)
@pytest.mark.parametrize("q_heads, kv_heads", GPU_LAYERS)
@pytest.mark.parametrize("lengths", GPU_LENGTHS)
@pytest.mark.parametrize("fp8", [False, True])
def test_gpu_gemma4_shapes_match_the_old_kernel(monkeypatch, q_heads, kv_heads, lengths, fp8):
    data = make_inputs(
        lengths,
        q_heads,
        kv_heads,
        512,
        dtype=torch.bfloat16,
        buffer_dtype=torch.float8_e4m3fn if fp8 else None,
        seed=q_heads + len(lengths),
    )
    scales = dict(k_scale=0.5, v_scale=2.0) if fp8 else {}
    ref = reference(data, 1.0, 30.0, **scales)
    outs = {}
    for tile in ea._GQA_PACK_TILES:
        monkeypatch.setenv(TILE, tile)
        outs[tile] = through_extend_attention_fwd(data, 1.0, 30.0, **scales)
    monkeypatch.setenv(SWITCH, "0")
    old = through_extend_attention_fwd(data, 1.0, 30.0, **scales)
    for tile, out in outs.items():
        assert relative_difference(out, old, ref) < 2e-2, tile
        assert (
            relative_difference(out, ref, ref) <= 1.5 * relative_difference(old, ref, ref) + 1e-3
        ), tile
