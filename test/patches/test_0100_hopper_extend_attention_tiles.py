"""0100: on Hopper, the Triton extend-attention kernel takes its tile for head dims 256 and 512 from
the new-token count.  The launch is checked on CPU with the device reported as Hopper (the kernel
runs in Triton's interpreter on small float32 shapes): which tile and num_stages reach the kernel,
and that its output matches a float32 torch reference and the generic tile's output.  On a GPU:
issue #8's six shapes, chosen tile vs the generic one (max relative difference < 2e-3) and vs
float32."""

import pytest
import torch
from kernel_inputs import DEVICE, relative_difference, spy_on_hopper

from sglang.kernels.ops.attention import extend_attention as ea

HEADS = 4
# head dim: (kv heads, sliding window); Gemma 4's sliding layers are 256 wide, its full layers 512
LAYERS = {256: (2, 16), 512: (1, -1)}
# Triton's interpreter computes this kernel wrong in bfloat16 (pristine tiles too), right in float32
DTYPE, TOLERANCE = (torch.float32, 1e-4) if DEVICE == "cpu" else (torch.bfloat16, 2e-2)


def make_inputs(batch, new, prefix, dim, kv_heads, heads=HEADS, seed=0, dtype=DTYPE):
    g = torch.Generator().manual_seed(seed)
    rows = batch * (prefix + new)

    def randn(*shape):
        return torch.randn(*shape, generator=g).to(dtype).to(DEVICE)

    k_buffer, v_buffer = randn(rows, kv_heads, dim), randn(rows, kv_heads, dim)
    # each request's rows: its prefix, then its new tokens (the cache after this step's write),
    # placed in shuffled order in the buffer so the kernel must follow kv_indices
    slots = torch.randperm(rows, generator=g).view(batch, prefix + new).to(DEVICE)
    new_slots = slots[:, prefix:].reshape(-1)
    return dict(
        q=randn(batch * new, heads, dim),
        k_extend=k_buffer[new_slots],
        v_extend=v_buffer[new_slots],
        k_buffer=k_buffer,
        v_buffer=v_buffer,
        qo_indptr=torch.arange(batch + 1, device=DEVICE, dtype=torch.int32) * new,
        kv_indptr=torch.arange(batch + 1, device=DEVICE, dtype=torch.int32) * prefix,
        kv_indices=slots[:, :prefix].reshape(-1).to(torch.int64),
        new=new,
        prefix=prefix,
        batch=batch,
    )


def kernel_output(data, window):
    out = torch.empty_like(data["q"])
    ea.extend_attention_fwd(
        data["q"],
        data["k_extend"],
        data["v_extend"],
        out,
        data["k_buffer"],
        data["v_buffer"],
        data["qo_indptr"],
        data["kv_indptr"],
        data["kv_indices"],
        None,
        True,
        None,
        data["new"],
        1.0,
        1.0,
        sliding_window_size=window,
    )
    return out


def reference(data, window):
    """float32 causal attention of each request's new tokens over its prefix and new tokens."""
    q, out = data["q"].float(), []
    group = q.shape[1] // data["k_buffer"].shape[1]
    scale = q.shape[-1] ** -0.5
    new, prefix = data["new"], data["prefix"]
    for b in range(data["batch"]):
        cached = data["kv_indices"][b * prefix : (b + 1) * prefix]
        k = torch.cat([data["k_buffer"][cached], data["k_extend"][b * new : (b + 1) * new]]).float()
        v = torch.cat([data["v_buffer"][cached], data["v_extend"][b * new : (b + 1) * new]]).float()
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        q_pos = prefix + torch.arange(new, device=DEVICE)[:, None]
        k_pos = torch.arange(prefix + new, device=DEVICE)[None, :]
        visible = k_pos <= q_pos
        if window > 0:
            visible &= q_pos - k_pos <= window
        scores = torch.einsum("qhd,khd->hqk", q[b * new : (b + 1) * new], k) * scale
        scores = scores.masked_fill(~visible, float("-inf"))
        out.append(torch.einsum("hqk,khd->qhd", scores.softmax(-1), v))
    return torch.cat(out)


@pytest.fixture(autouse=True)
def per_head_kernel(monkeypatch):
    """Keep head dim 512 with a GQA group on the per-head kernel whose tile is checked here (0105's
    packed kernel takes it by default)."""
    monkeypatch.setenv("SGLANG_OPT_EXTEND_ATTENTION_GQA_PACK", "0")


@pytest.fixture
def hopper(monkeypatch):
    """The device reported as Hopper; each launch's tile recorded."""
    return spy_on_hopper(
        monkeypatch, ea, "_fwd_kernel", ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")
    )


def generic_tile(dim):
    *_, block_m, block_n, warps = ea._get_block_sizes_for_extend_attention(dim, dim)
    return block_m, block_n, warps, 1


@pytest.mark.parametrize("dim", sorted(LAYERS))
@pytest.mark.parametrize("batch, new, prefix", [(3, 4, 37), (2, 16, 9), (1, 40, 0), (2, 17, 25)])
def test_tile_follows_new_tokens_and_matches_reference(
    hopper, monkeypatch, dim, batch, new, prefix
):
    kv_heads, window = LAYERS[dim]
    data = make_inputs(batch, new, prefix, dim, kv_heads, seed=dim + new)
    expected_tile = {
        (256, True): (16, 64, 4, 2),
        (256, False): (64, 64, 8, 2),
        (512, True): (16, 64, 4, 1),
        (512, False): (32, 64, 8, 2),
    }[dim, new <= 16]
    chosen = kernel_output(data, window)
    monkeypatch.setenv("SGLANG_OPT_HOPPER_EXTEND_ATTENTION_TILES", "0")
    generic = kernel_output(data, window)
    assert hopper.launches == [expected_tile, generic_tile(dim)]
    ref = reference(data, window)
    for out in (chosen, generic):
        torch.testing.assert_close(out.float(), ref, rtol=TOLERANCE, atol=TOLERANCE)
    assert relative_difference(chosen, generic, ref) < 2e-3


@pytest.mark.parametrize(
    "capability, dim", [((8, 0), 256), ((10, 0), 512), ((12, 0), 256), ((9, 0), 128)]
)
def test_other_gpus_and_head_dims_keep_the_generic_tile(hopper, monkeypatch, capability, dim):
    monkeypatch.setattr(ea, "CUDA_CAPABILITY", capability, raising=False)
    assert ea._get_hopper_extend_tile(dim, dim, 4) is None
    data = make_inputs(2, 4, 5, dim, 2, seed=3)
    kernel_output(data, -1)
    assert hopper.launches == [generic_tile(dim)]


def test_non_cuda_and_unequal_value_dim_keep_the_generic_tile(hopper, monkeypatch):
    assert ea._get_hopper_extend_tile(256, 128, 4) is None  # e.g. MLA-style K/V widths
    monkeypatch.setattr(ea, "_is_cuda", False)
    assert ea._get_hopper_extend_tile(256, 256, 4) is None


# issue #8's shapes: Gemma 4's 16 query heads; prefills, and MTP verify steps of 4 tokens
GPU_CASES = [(1, 8192, 0), (1, 1000, 0), (4, 1000, 0), (32, 4, 64), (32, 4, 1000), (32, 4, 8000)]
GPU_LAYERS = {256: (8, 1024), 512: (2, -1)}


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9,
    reason="needs a Hopper GPU",
)
@pytest.mark.parametrize("dim", sorted(GPU_LAYERS))
@pytest.mark.parametrize("batch, new, prefix", GPU_CASES)
def test_hopper_shapes_match_the_generic_tile(monkeypatch, dim, batch, new, prefix):
    kv_heads, window = GPU_LAYERS[dim]
    data = make_inputs(
        batch, new, prefix, dim, kv_heads, heads=16, seed=batch + new + prefix, dtype=torch.bfloat16
    )
    chosen = kernel_output(data, window)
    monkeypatch.setenv("SGLANG_OPT_HOPPER_EXTEND_ATTENTION_TILES", "0")
    generic = kernel_output(data, window)
    ref = reference(data, window)
    assert relative_difference(chosen, generic, ref) < 2e-3
    # no further from float32 than the generic tile's own bf16 rounding
    assert (
        relative_difference(chosen, ref, ref) <= 1.5 * relative_difference(generic, ref, ref) + 1e-3
    )
