"""0179: the Triton attention kernels that serve Gemma-4 read an FP8 (e4m3) KV cache by widening
each K/V tile to the query's dtype before tl.dot (upstream narrowed the query, and the softmax
probabilities, to FP8), and sglang's unified hybrid-SWA pool stores and hands out an FP8 cache as
FP8 (upstream took its uint8 storage type for the cache's dtype: writes cast values to uint8 and the
kernels got uint8 buffers, which tl.dot refuses with "only int8 supported!").

On CPU (Triton's interpreter, float32 queries: the interpreter computes bfloat16 attention wrong,
0100's test), fresh random inputs with K/V in torch.float8_e4m3fn, against float32 attention over
the dequantised cache (the stored values times k_scale/v_scale): the grouped decode step (stage 1
and the one-pass merge), the extend kernel and 0105's GQA-packed one (the device reported as
Hopper), 0175's grouped verify kernel, head dims 256 and 512, GQA groups 2-8; the backend sends an
FP8-cache verify to 0175's kernel; the unified pool round-trips FP8 values.  Compiled for an H100 on
CPU (Triton's front end, hopper_ttir.py, bfloat16 queries, head dim 512, 16 query heads on 2 KV
heads): every kernel's tl.dot takes bfloat16 operands with a bfloat16 and an FP8 cache, and the
grouped decode kernel compiles on the unified pool's FP8 cache (without the patch: "only int8
supported!", as on the H100). On a GPU: the same kernels with bfloat16 queries at Gemma-4's
shapes. The backend's stand-ins also carry what newer releases read (the 0.5.23 port runs this
file), and the unified pool's views are read as each release shapes them."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from kernel_inputs import (
    DEVICE,
    attention_layer,
    kv_shared_layer_extend,
    relative_difference,
    spy_on_hopper,
)

from sglang.kernels.ops.attention import decode_attention as da
from sglang.kernels.ops.attention import extend_attention as ea
from sglang.kernels.ops.attention import verify_grouped_attention as vg

FP8 = torch.float8_e4m3fn
# float32 queries on CPU: exact but for summation order; bfloat16 on a GPU
DTYPE, TOLERANCE = (torch.float32, 1e-4) if DEVICE == "cpu" else (torch.bfloat16, 2e-2)
# (query heads, KV heads, head dim): Gemma-4's sliding (256) and full (512) widths, groups 2-8
SHAPES = [(4, 2, 256), (8, 1, 512), (4, 2, 512)]
GPU = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")]


def gen(seed):
    return torch.Generator().manual_seed(seed)


def cache(g, rows, kv_heads, dim):
    """A K or V cache as the pool stores FP8: bfloat16 activations cast to e4m3 (the values a
    Gemma-4 layer writes after its K/V norms are well inside e4m3's range)."""
    return torch.randn(rows, kv_heads, dim, generator=g).to(torch.bfloat16).to(FP8).to(DEVICE)


def attention(q, k, v, visible, sm_scale):
    """float32 attention of q [tokens, heads, dim] over k/v [keys, kv heads, dim]."""
    group = q.shape[1] // k.shape[1]
    k, v = k.float().repeat_interleave(group, 1), v.float().repeat_interleave(group, 1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), k) * sm_scale
    return torch.einsum("hqk,khd->qhd", scores.masked_fill(~visible, float("-inf")).softmax(-1), v)


# -- decode (grouped stage 1, then 0176's one-pass merge)
# ---------------------------------------------


def decode(q_heads, kv_heads, dim, contexts, k_scale, v_scale, dtype, seed):
    g = gen(seed)
    rows = sum(contexts) + 5
    k_buffer, v_buffer = cache(g, rows, kv_heads, dim), cache(g, rows, kv_heads, dim)
    q = torch.randn(len(contexts), q_heads, dim, generator=g).to(dtype).to(DEVICE)
    indices = torch.randperm(rows, generator=g)[: sum(contexts)].to(DEVICE)
    indptr = torch.tensor([0, *contexts]).cumsum(0).to(torch.int32).to(DEVICE)
    splits = 4
    out = torch.empty_like(q)
    logits = torch.empty(len(contexts), q_heads, splits, dim, device=DEVICE)
    lse = torch.empty(len(contexts), q_heads, splits, device=DEVICE)
    num_splits = torch.full((len(contexts),), splits, dtype=torch.int32, device=DEVICE)
    sm_scale = dim**-0.5
    da.decode_attention_fwd(
        q,
        k_buffer,
        v_buffer,
        out,
        indptr,
        indices,
        logits,
        lse,
        num_splits,
        splits,
        sm_scale,
        k_scale,
        v_scale,
    )
    ref = torch.cat(
        [
            attention(
                q[b : b + 1],
                k_buffer[indices[indptr[b] : indptr[b + 1]]].float() * k_scale,
                v_buffer[indices[indptr[b] : indptr[b + 1]]].float() * v_scale,
                torch.ones(1, contexts[b], dtype=torch.bool, device=DEVICE),
                sm_scale,
            )
            for b in range(len(contexts))
        ]
    )
    return out, ref


@pytest.mark.parametrize("q_heads, kv_heads, dim", SHAPES)
@pytest.mark.parametrize("k_scale, v_scale", [(1.0, 1.0), (0.5, 2.0)])
def test_decode_reads_fp8_kv(monkeypatch, q_heads, kv_heads, dim, k_scale, v_scale):
    monkeypatch.setenv("SGLANG_OPT_TRITON_DECODE_ONE_PASS_MERGE", "1")
    out, ref = decode(q_heads, kv_heads, dim, [37, 70], k_scale, v_scale, DTYPE, seed=dim + q_heads)
    assert relative_difference(out, ref, ref) < TOLERANCE


@pytest.mark.parametrize("q_heads, kv_heads", [(16, 2), (32, 4), (8, 1)])
@pytest.mark.parametrize("dim", [256, 512])
@pytest.mark.parametrize("contexts", [[2000], [8000, 31, 4000]])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_decode_bf16_queries(q_heads, kv_heads, dim, contexts):
    out, ref = decode(
        q_heads, kv_heads, dim, contexts, 1.0, 1.0, torch.bfloat16, seed=dim + len(contexts)
    )
    assert relative_difference(out, ref, ref) < 2e-2


# -- extend (the old kernel, and 0105's GQA-packed one on Hopper)
# -------------------------------------


def extend_inputs(lengths, q_heads, kv_heads, dim, dtype, seed):
    """Each request's prefix in the FP8 cache, its new tokens' K/V in the query's dtype (the layer's
    own output, as forward_extend hands it to the kernel); slots shuffled."""
    g = gen(seed)
    rows = sum(p + n for p, n in lengths)
    k_buffer, v_buffer = cache(g, rows, kv_heads, dim), cache(g, rows, kv_heads, dim)
    k_new = torch.randn(rows, kv_heads, dim, generator=g).to(dtype).to(DEVICE)
    v_new = torch.randn(rows, kv_heads, dim, generator=g).to(dtype).to(DEVICE)
    slots = torch.randperm(rows, generator=g).to(DEVICE)
    prefix_slots, new_slots, at = [], [], 0
    for prefix, new in lengths:
        prefix_slots.append(slots[at : at + prefix])
        new_slots.append(slots[at + prefix : at + prefix + new])
        at += prefix + new
    new_slots = torch.cat(new_slots)

    def indptr(sizes):
        return torch.tensor([0, *sizes]).cumsum(0).to(torch.int32).to(DEVICE)

    return dict(
        q=torch.randn(new_slots.numel(), q_heads, dim, generator=g).to(dtype).to(DEVICE),
        k_extend=k_new[new_slots],
        v_extend=v_new[new_slots],
        k_buffer=k_buffer,
        v_buffer=v_buffer,
        lengths=lengths,
        qo_indptr=indptr([n for _, n in lengths]),
        kv_indptr=indptr([p for p, _ in lengths]),
        kv_indices=torch.cat(prefix_slots).to(torch.int64),
        max_new=max(n for _, n in lengths),
    )


def extend_reference(data, sm_scale, k_scale, v_scale):
    out, q_at, kv_at = [], 0, 0
    for prefix, new in data["lengths"]:
        cached = data["kv_indices"][kv_at : kv_at + prefix]
        k = torch.cat(
            [
                data["k_buffer"][cached].float() * k_scale,
                data["k_extend"][q_at : q_at + new].float(),
            ]
        )
        v = torch.cat(
            [
                data["v_buffer"][cached].float() * v_scale,
                data["v_extend"][q_at : q_at + new].float(),
            ]
        )
        visible = (
            torch.arange(prefix + new, device=DEVICE)[None, :]
            <= prefix + torch.arange(new, device=DEVICE)[:, None]
        )
        out.append(attention(data["q"][q_at : q_at + new], k, v, visible, sm_scale))
        q_at, kv_at = q_at + new, kv_at + prefix
    return torch.cat(out)


def extend(data, sm_scale, k_scale, v_scale):
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
        data["max_new"],
        k_scale,
        v_scale,
        sm_scale,
    )
    return out


LENGTHS = [(0, 5), (11, 3), (37, 9)]  # nothing cached, and lengths off every tile


@pytest.mark.parametrize("q_heads, kv_heads, dim", SHAPES)
@pytest.mark.parametrize("k_scale, v_scale", [(1.0, 1.0), (0.5, 2.0)])
def test_extend_reads_an_fp8_prefix(monkeypatch, q_heads, kv_heads, dim, k_scale, v_scale):
    monkeypatch.setenv("SGLANG_OPT_EXTEND_ATTENTION_GQA_PACK", "0")
    data = extend_inputs(LENGTHS, q_heads, kv_heads, dim, DTYPE, seed=dim + q_heads)
    ref = extend_reference(data, dim**-0.5, k_scale, v_scale)
    assert relative_difference(extend(data, dim**-0.5, k_scale, v_scale), ref, ref) < TOLERANCE


@pytest.mark.parametrize("q_heads, kv_heads", [(8, 1), (4, 2)])
@pytest.mark.parametrize("k_scale, v_scale", [(1.0, 1.0), (0.5, 2.0)])
def test_gqa_packed_extend_reads_an_fp8_prefix(monkeypatch, q_heads, kv_heads, k_scale, v_scale):
    monkeypatch.delenv("SGLANG_OPT_EXTEND_ATTENTION_GQA_PACK", raising=False)
    spy = spy_on_hopper(monkeypatch, ea, "_fwd_kernel_gqa_packed", ("BLOCK_M",))
    data = extend_inputs(LENGTHS, q_heads, kv_heads, 512, DTYPE, seed=q_heads)
    ref = extend_reference(data, 512**-0.5, k_scale, v_scale)
    out = extend(data, 512**-0.5, k_scale, v_scale)
    assert spy.launches, "0105's packed kernel did not run"
    assert relative_difference(out, ref, ref) < TOLERANCE


@pytest.mark.parametrize("q_heads, kv_heads", [(16, 2), (32, 4)])
@pytest.mark.parametrize("dim", [256, 512])
@pytest.mark.parametrize("pack", ["0", "1"])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_extend_bf16_queries(monkeypatch, q_heads, kv_heads, dim, pack):
    monkeypatch.setenv("SGLANG_OPT_EXTEND_ATTENTION_GQA_PACK", pack)
    data = extend_inputs(
        [(3000, 1000), (0, 77), (555, 1)], q_heads, kv_heads, dim, torch.bfloat16, seed=dim
    )
    ref = extend_reference(data, dim**-0.5, 1.0, 1.0)
    assert relative_difference(extend(data, dim**-0.5, 1.0, 1.0), ref, ref) < 2e-2


# -- 0175's grouped verify
# ----------------------------------------------------------------------------


def verify(data, chain, dim, window=-1):
    out = torch.empty_like(data["q"])
    vg.verify_grouped_attention_fwd(
        data["q"],
        data["k_extend"],
        data["v_extend"],
        out,
        data["k_buffer"],
        data["v_buffer"],
        data["qo_indptr"],
        data["kv_indptr"],
        data["kv_indices"],
        chain,
        dim**-0.5,
        sliding_window_size=window,
    )
    return out


@pytest.mark.parametrize("q_heads, kv_heads, dim", SHAPES)
def test_grouped_verify_reads_an_fp8_prefix(monkeypatch, q_heads, kv_heads, dim):
    monkeypatch.setattr(
        vg, "_MIN_SPLIT_TOKENS", 16
    )  # several splits over the interpreter's short prefixes
    chain = 4
    data = extend_inputs(
        [(24, chain), (61, chain), (0, chain)], q_heads, kv_heads, dim, DTYPE, seed=dim
    )
    ref = extend_reference(data, dim**-0.5, 1.0, 1.0)
    assert relative_difference(verify(data, chain, dim), ref, ref) < TOLERANCE


@pytest.mark.parametrize("q_heads, kv_heads, dim", [(16, 2, 512), (8, 2, 256), (32, 4, 512)])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_grouped_verify_bf16_queries(q_heads, kv_heads, dim):
    data = extend_inputs(
        [(8000, 4), (300, 4), (0, 4)], q_heads, kv_heads, dim, torch.bfloat16, seed=dim
    )
    ref = extend_reference(data, dim**-0.5, 1.0, 1.0)
    assert relative_difference(verify(data, 4, dim), ref, ref) < 2e-2


def test_the_backend_sends_an_fp8_cache_verify_to_the_grouped_kernel(monkeypatch):
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

    monkeypatch.delenv("SGLANG_OPT_GROUPED_VERIFY_ATTENTION", raising=False)
    q = torch.empty(4, 8 * 512, dtype=torch.bfloat16)
    layer = SimpleNamespace(
        layer_id=0, k_scale=None, xai_temperature_len=-1, qk_head_dim=512, v_head_dim=512
    )
    batch = SimpleNamespace(forward_mode=SimpleNamespace(is_target_verify=lambda: True))

    def applies(cache_dtype):
        buffer = torch.empty(1, 1, 512, dtype=cache_dtype)
        backend = SimpleNamespace(
            use_grouped_verify=True,
            token_to_kv_pool=SimpleNamespace(get_key_buffer=lambda layer_id: buffer),
            dllm_attention=None,  # newer releases: diffusion LM attention keeps its own kernel
        )
        return TritonAttnBackend._grouped_verify_applies(
            backend, q, layer, batch, True, 0.0, None, None
        )

    assert applies(torch.bfloat16) and applies(FP8)
    assert not applies(torch.float16)  # a cache of another 16-bit type stays on the extend kernel


@pytest.mark.parametrize("scales", [None, (0.5, 2.0)])
def test_a_kv_shared_layer_extends_over_its_fp8_rows_dequantised(monkeypatch, scales):
    """E2B/E4B's KV-shared layers store no K/V: their extend reads this chunk's rows back from the
    cache, which the extend kernel's own-token stage takes in q's dtype (on an H100, FP8 rows there
    failed to compile: "Unsupported rhs dtype fp8e4nv")."""
    g = gen(7)
    heads, dim, rows = 4, 64, 10
    k_cache, v_cache = cache(g, rows, 1, dim), cache(g, rows, 1, dim)
    chunk = torch.tensor([7, 2, 9], device=DEVICE)
    k_scale, v_scale = scales or (None, None)
    layer = attention_layer(
        heads,
        dim,
        k_scale=None if scales is None else torch.tensor(k_scale),
        v_scale=None if scales is None else torch.tensor(v_scale),
        k_scale_float=k_scale,
        v_scale_float=v_scale,
    )
    q = torch.zeros(3, heads * dim, dtype=torch.bfloat16, device=DEVICE)
    seen = kv_shared_layer_extend(k_cache, v_cache, chunk, layer, q)

    assert seen["k"].dtype == seen["v"].dtype == torch.bfloat16
    stored_k, stored_v = k_cache[chunk].float(), v_cache[chunk].float()
    if scales:
        stored_k, stored_v = stored_k * k_scale, stored_v * v_scale
    torch.testing.assert_close(seen["k"].float(), stored_k, rtol=0, atol=0)
    torch.testing.assert_close(seen["v"].float(), stored_v, rtol=0, atol=0)


# -- the unified hybrid-SWA pool
# ----------------------------------------------------------------------


def test_unified_swa_pool_stores_and_hands_out_fp8():
    from sglang.srt.mem_cache.memory_pool import KVWriteLoc
    from sglang.srt.mem_cache.unified_memory_pool import init_unified_swa_pools

    layers, full_ids = (
        6,
        [5],
    )  # 26B-A4B's layer kinds: 2 KV heads x 512 on full layers, 8 x 256 sliding
    bundle = init_unified_swa_pools(
        device=DEVICE,
        kv_cache_dtype=FP8,
        head_num=2,
        head_dim=512,
        v_head_dim=512,
        swa_head_num=8,
        swa_head_dim=256,
        swa_v_head_dim=256,
        page_size=1,
        start_layer=0,
        end_layer=layers,
        swa_attention_layer_ids=[i for i in range(layers) if i not in full_ids],
        full_attention_layer_ids=full_ids,
        full_max_total_num_tokens=64,
        swa_max_total_num_tokens=64,
        enable_memory_saver=False,
        need_sort=False,
    )
    pool = bundle.token_to_kv_pool
    assert pool.dtype == FP8
    fields = {f.name for f in dataclasses.fields(KVWriteLoc)}
    physical = {"physical": True} if "physical" in fields else {}
    g = gen(3)
    loc = torch.tensor([3, 7, 9], device=DEVICE)
    for layer_id, (heads, dim) in [(5, (2, 512)), (0, (8, 256))]:
        k = torch.randn(3, heads, dim, generator=g).to(torch.bfloat16).to(DEVICE)
        v = torch.randn(3, heads, dim, generator=g).to(torch.bfloat16).to(DEVICE)
        pool.set_kv_buffer(
            SimpleNamespace(layer_id=layer_id),
            # newer releases: the locs the unified pool writes are physical ids
            KVWriteLoc(loc, swa_loc=loc, full_loc=loc, **physical),
            k.clone(),
            v.clone(),
        )
        k_buffer, v_buffer = pool.get_kv_buffer(layer_id)
        assert k_buffer.dtype == v_buffer.dtype == FP8
        # views into the shared byte buffer: [slots, page size 1, heads, dim] on 0.5.17, [slots,
        # heads, dim] on newer releases
        assert torch.equal(k_buffer[loc].view(k.shape).float(), k.to(FP8).float())
        assert torch.equal(v_buffer[loc].view(v.shape).float(), v.to(FP8).float())


# -- compiled for Hopper (Triton's front end on CPU, outside the interpreter)
# -------------------------


@pytest.fixture(scope="module")
def hopper_dots():
    """Each case's kernels' tt.dot types on sm_90, from a process without Triton's interpreter."""
    here = Path(__file__).resolve().parent
    env = dict(
        os.environ,
        TRITON_INTERPRET="0",
        PYTHONPATH=os.pathsep.join(
            [str(here / "helpers"), str(here.parent), os.environ.get("PYTHONPATH", "")]
        ),
    )
    code = "import patched_tree, hopper_ttir; hopper_ttir.main()"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("cache", ["bfloat16", "float8_e4m3fn"])
def test_every_kernel_dots_in_bf16_on_hopper(hopper_dots, cache):
    kernels = hopper_dots[cache]
    assert "error" not in kernels, kernels.get("error")
    assert set(kernels) == {"decode", "extend", "extend-gqa-packed", "verify"}
    for name, dots in kernels.items():
        assert dots, name
        for dot in dots:
            operands = dot.split(" -> ")[0]
            assert operands.count("xbf16>") == 2 and "f8" not in operands, (name, dot)


def test_decode_compiles_on_the_unified_pools_fp8_cache(hopper_dots):
    decode = hopper_dots["unified-pool-fp8"]
    assert "error" not in decode, decode.get(
        "error"
    )  # upstream: "only int8 supported!" on uint8 buffers
    assert all("f8" not in dot and "i8" not in dot for dot in decode["decode"])
