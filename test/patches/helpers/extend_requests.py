"""Extend-attention inputs shared by the extend kernels' tests: a batch of requests, each with a
cached prefix at shuffled KV-pool slots and a chunk of new tokens, the float32 reference, and the
batch through extend_attention_fwd."""

import importlib.util

import torch
from kernel_inputs import DEVICE

from sglang.kernels.ops.attention import extend_attention as ea


def extend_requests(lengths, q_heads, kv_heads, dim, dtype, buffer_dtype=None, seed=0) -> dict:
    """Requests of (prefix, new tokens) `lengths`, as extend_attention_fwd takes them; with
    `buffer_dtype` (e.g. fp8) the KV pool holds the values as such a cache stores them."""
    g = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g).to(dtype).to(DEVICE)

    rows = sum(p + n for p, n in lengths)
    k_buffer, v_buffer = randn(rows, kv_heads, dim), randn(rows, kv_heads, dim)
    # each request's prefix then its new tokens, at shuffled slots: kernels must follow kv_indices
    slots = torch.randperm(rows, generator=g).to(DEVICE)
    prefix_slots, new_slots, at = [], [], 0
    for prefix, new in lengths:
        prefix_slots.append(slots[at : at + prefix])
        new_slots.append(slots[at + prefix : at + prefix + new])
        at += prefix + new
    new_slots = torch.cat(new_slots)

    def indptr(sizes):
        return torch.tensor([0, *sizes], dtype=torch.int32).cumsum(0).to(torch.int32).to(DEVICE)

    data = dict(
        q=randn(new_slots.numel(), q_heads, dim),
        k_extend=k_buffer[new_slots],
        v_extend=v_buffer[new_slots],
        k_buffer=k_buffer,
        v_buffer=v_buffer,
        lengths=lengths,
        qo_indptr=indptr([n for _, n in lengths]),
        kv_indptr=indptr([p for p, _ in lengths]),
        kv_indices=torch.cat(prefix_slots).to(torch.int64),
        max_new=max(n for _, n in lengths),
    )
    if buffer_dtype is not None:
        data["k_buffer"], data["v_buffer"] = (b.to(buffer_dtype) for b in (k_buffer, v_buffer))
    return data


def unified_pool_views(data, layers_before=1) -> dict:
    """`data` with its KV buffers as the release's unified pool (--enable-unified-memory) hands them
    to the kernels: each slot's entry holds every layer's K row then V row, this layer's after
    `layers_before` others (random values, which a wrong stride reads); sglang 0.5.17 views them
    page-major, 4-D (slots, 1, heads, dim), later releases 3-D with the entry as slot stride."""
    k, v = data["k_buffer"], data["v_buffer"]
    slots, heads, dim = k.shape
    row = heads * dim
    entry = (layers_before + 1) * 2 * row
    if importlib.util.find_spec("sglang.srt.mem_cache.layout.page_major"):
        shape, stride = (slots, 1, heads, dim), (entry, row, dim, 1)
    else:
        shape, stride = (slots, heads, dim), (entry, dim, 1)
    g = torch.Generator().manual_seed(slots)
    raw = torch.randn(slots * entry, generator=g).to(k.dtype).to(DEVICE)
    k_view = torch.as_strided(raw, shape, stride, layers_before * 2 * row)
    v_view = torch.as_strided(raw, shape, stride, layers_before * 2 * row + row)
    k_view.copy_(k.view(shape))
    v_view.copy_(v.view(shape))
    return {**data, "k_buffer": k_view, "v_buffer": v_view}


def reference(data, sm_scale, logit_cap=0.0, k_scale=1.0, v_scale=1.0) -> torch.Tensor:
    """float32 causal attention of each request's new tokens over its prefix (the buffer's values
    times the scales) and its new tokens."""
    q, out = data["q"].float(), []
    group = q.shape[1] // data["k_buffer"].shape[1]
    q_at = kv_at = 0
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
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        visible = (
            torch.arange(prefix + new, device=DEVICE)[None, :]
            <= prefix + torch.arange(new, device=DEVICE)[:, None]
        )
        scores = torch.einsum("qhd,khd->hqk", q[q_at : q_at + new], k) * sm_scale
        if logit_cap > 0:
            scores = logit_cap * torch.tanh(scores / logit_cap)
        scores = scores.masked_fill(~visible, float("-inf"))
        out.append(torch.einsum("hqk,khd->qhd", scores.softmax(-1), v))
        q_at, kv_at = q_at + new, kv_at + prefix
    return torch.cat(out)


def through_extend_attention_fwd(
    data, sm_scale=None, logit_cap=0.0, k_scale=1.0, v_scale=1.0, **kwargs
) -> torch.Tensor:
    out = torch.empty(data["q"].shape, dtype=data["q"].dtype, device=DEVICE)
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
        kwargs.pop("custom_mask", None),
        kwargs.pop("is_causal", True),
        kwargs.pop("mask_indptr", None),
        data["max_new"],
        k_scale,
        v_scale,
        sm_scale,
        logit_cap=logit_cap,
        **kwargs,
    )
    return out
