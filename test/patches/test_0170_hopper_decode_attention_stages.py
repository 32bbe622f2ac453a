"""0170: on Hopper, the grouped decode-attention stage-1 kernel runs with three pipeline stages for
head dim 512 (Gemma 4's full-attention layers) instead of two.  On CPU, with the device reported
as Hopper (the kernels run in Triton's interpreter on small float32 shapes): which num_stages
reaches the kernel per head dim, GPU generation and kill switch, and that the output matches a
float32 torch reference and the two-stage launch's output.  On a Hopper GPU: 26B-A4B's full-layer
shape (16 query heads, 2 KV heads x 512) at 1-64 requests of 2000-8000 cached tokens, three stages
vs two (max relative difference < 2e-3) and vs float32."""

import pytest
import torch
from kernel_inputs import DEVICE, relative_difference, spy_on_hopper

from sglang.kernels.ops.attention import decode_attention as da

MAX_SPLITS = 4
# Triton's interpreter runs in float32 here (as 0100's test does); bf16 on the GPU
DTYPE, TOLERANCE = (torch.float32, 1e-4) if DEVICE == "cpu" else (torch.bfloat16, 2e-2)


def make_inputs(batch, context, dim, kv_heads, heads, seed=0, dtype=DTYPE, splits=MAX_SPLITS):
    """One decode step: each request's query over its `context` cached tokens, which sit at
    shuffled rows of the KV buffer (the kernel must follow kv_indices)."""
    g = torch.Generator().manual_seed(seed)
    rows = batch * context + 7  # rows no request reads

    def randn(*shape):
        return torch.randn(*shape, generator=g).to(dtype).to(DEVICE)

    return dict(
        q=randn(batch, heads, dim),
        k_buffer=randn(rows, kv_heads, dim),
        v_buffer=randn(rows, kv_heads, dim),
        kv_indptr=torch.arange(batch + 1, device=DEVICE, dtype=torch.int32) * context,
        kv_indices=torch.randperm(rows, generator=g)[: batch * context].to(torch.int64).to(DEVICE),
        num_kv_splits=torch.full((batch,), splits, device=DEVICE, dtype=torch.int32),
        batch=batch,
        context=context,
        splits=splits,
    )


def kernel_output(data):
    q = data["q"]
    batch, heads, dim = q.shape
    out = torch.empty_like(q)
    logits = torch.empty(batch, heads, data["splits"], dim, device=DEVICE, dtype=torch.float32)
    lse = torch.empty(batch, heads, data["splits"], device=DEVICE, dtype=torch.float32)
    da.decode_attention_fwd_grouped(
        q,
        data["k_buffer"],
        data["v_buffer"],
        out,
        data["kv_indptr"],
        data["kv_indices"],
        logits,
        lse,
        data["num_kv_splits"],
        data["splits"],
        dim**-0.5,
        1.0,
    )
    return out


def reference(data):
    """float32 attention of each request's query over its cached tokens."""
    q, context, out = data["q"].float(), data["context"], []
    group = q.shape[1] // data["k_buffer"].shape[1]
    for b in range(data["batch"]):
        rows = data["kv_indices"][b * context : (b + 1) * context]
        k = data["k_buffer"][rows].float().repeat_interleave(group, dim=1)
        v = data["v_buffer"][rows].float().repeat_interleave(group, dim=1)
        scores = torch.einsum("hd,khd->hk", q[b], k) * q.shape[-1] ** -0.5
        out.append(torch.einsum("hk,khd->hd", scores.softmax(-1), v))
    return torch.stack(out)


@pytest.fixture
def hopper(monkeypatch):
    """The device reported as Hopper; each stage-1 launch's num_stages recorded."""
    return spy_on_hopper(monkeypatch, da, "_fwd_grouped_kernel_stage1", ("num_stages",))


@pytest.mark.parametrize("batch, context, kv_heads", [(1, 37, 1), (2, 40, 2), (3, 9, 1)])
def test_head_dim_512_takes_three_stages_and_matches_reference(
    hopper, monkeypatch, batch, context, kv_heads
):
    data = make_inputs(batch, context, 512, kv_heads, heads=4, seed=batch * 100 + context)
    three = kernel_output(data)
    monkeypatch.setenv("SGLANG_OPT_HOPPER_DECODE_ATTENTION_STAGES", "0")
    two = kernel_output(data)
    assert hopper.launches == [(3,), (2,)]
    ref = reference(data)
    for out in (three, two):
        torch.testing.assert_close(out.float(), ref, rtol=TOLERANCE, atol=TOLERANCE)
    assert relative_difference(three, two, ref) < 2e-3


@pytest.mark.parametrize(
    "capability, dim", [((9, 0), 256), ((9, 0), 128), ((8, 0), 512), ((10, 0), 512)]
)
def test_other_head_dims_and_gpus_keep_two_stages(hopper, monkeypatch, capability, dim):
    monkeypatch.setattr(da, "CUDA_CAPABILITY", capability, raising=False)
    assert da._get_hopper_grouped_decode_num_stages(dim, dim) is None
    data = make_inputs(2, 11, dim, 2, heads=4, seed=dim)
    torch.testing.assert_close(
        kernel_output(data).float(), reference(data), rtol=TOLERANCE, atol=TOLERANCE
    )
    assert hopper.launches == [(2,)]


def test_mla_and_non_cuda_keep_the_default(hopper, monkeypatch):
    assert da._get_hopper_grouped_decode_num_stages(576, 512) is None  # MLA: 512 + 64 rope dims
    assert da._get_hopper_grouped_decode_num_stages(512, 512) == 3
    monkeypatch.setattr(da, "_is_cuda", False)
    assert da._get_hopper_grouped_decode_num_stages(512, 512) is None


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9,
    reason="needs a Hopper GPU",
)
@pytest.mark.parametrize("batch, context", [(1, 2000), (1, 8000), (4, 8000), (64, 2000)])
def test_hopper_full_layer_shape_matches_two_stages(hopper, monkeypatch, batch, context):
    data = make_inputs(
        batch, context, 512, 2, heads=16, seed=batch + context, dtype=torch.bfloat16, splits=8
    )
    three = kernel_output(data)
    monkeypatch.setenv("SGLANG_OPT_HOPPER_DECODE_ATTENTION_STAGES", "0")
    two = kernel_output(data)
    assert hopper.launches == [(3,), (2,)]
    ref = reference(data)
    assert relative_difference(three, two, ref) < 2e-3
    # no further from float32 than the two-stage launch's own bf16 rounding
    assert relative_difference(three, ref, ref) <= 1.5 * relative_difference(two, ref, ref) + 1e-3
