"""0175 on 0.5.23: the triton backend runs a top-k 1 target verify (a causal chain of draft tokens a
request) through a grouped split-KV kernel on NVIDIA: one program per request, KV head and slice of
the cached prefix, its rows the chain's tokens times the query heads sharing that KV head.  On CPU
(the kernels in Triton's interpreter, float32, head dims 64/128): the output vs a float32 torch
reference for GQA groups 2-16, chains of 1-4 tokens, ragged prefixes (one empty), full attention and
sliding windows smaller than, equal to and larger than the context and cutting inside the chain; vs
extend_attention_fwd; the split count and grid from shapes only.  Through 0.5.23's forward_extend,
with target-verify metadata set as a CUDA-graph replay has it (padding rows of length 1, no mask)
and as an eager step has it (with the tree mask): target verify reaches the new kernel by default,
extend_attention_fwd with SGLANG_OPT_GROUPED_VERIFY_ATTENTION=0 or outside the kernel's cases, same
output.  On a GPU: 31B's and 26B-A4B's sliding (256) and full (512) layer shapes in bfloat16 vs
float32 and vs the extend kernel."""

from types import SimpleNamespace

import pytest
import torch

from kernel_inputs import DEVICE, relative_difference, spy_on_hopper
from sglang.kernels.ops.attention import verify_grouped_attention as vg
from sglang.kernels.ops.attention.extend_attention import extend_attention_fwd
from sglang.srt.layers.attention import triton_backend
from sglang.srt.layers.radix_attention import AttentionType
from sglang.srt.model_executor.forward_batch_info import ForwardMode

SWITCH = "SGLANG_OPT_GROUPED_VERIFY_ATTENTION"
# Triton's interpreter computes the extend kernel wrong in bfloat16 (0100's test); float32 on CPU
DTYPE, TOLERANCE = (torch.float32, 1e-4) if DEVICE == "cpu" else (torch.bfloat16, 2e-2)
PREFIXES = (0, 24, 61)  # ragged, one request with nothing cached
WINDOWS = (-1, 2, 24, 100)  # full; inside the chain; the 24-token prefix exactly; past every context


@pytest.fixture(autouse=True)
def short_splits(monkeypatch):
    """Splits of 16 cached tokens, so that the interpreter's short prefixes span several; the switch at its
    default (on), so that a case outside the kernel's reach keeps the extend kernel by its own check."""
    monkeypatch.setattr(vg, "_MIN_SPLIT_TOKENS", 16)
    monkeypatch.delenv(SWITCH, raising=False)


def randn(g, *shape, dtype=DTYPE):
    return torch.randn(*shape, generator=g).to(dtype).to(DEVICE)


def make_inputs(prefixes, chain, q_heads, kv_heads, dim, window, seed=0, dtype=DTYPE):
    """A verify step: each request's cached prefix at shuffled rows of the KV buffer, listed as the
    backend lists it (a sliding layer: the window's last min(prefix, window) rows), then its chain,
    whose K/V the step has just computed (and written to the buffer)."""
    g = torch.Generator().manual_seed(seed)
    rows = sum(prefixes) + len(prefixes) * chain + 7
    k_buffer, v_buffer = randn(g, rows, kv_heads, dim, dtype=dtype), randn(g, rows, kv_heads, dim, dtype=dtype)
    perm, start, listed, prefix_rows, chain_rows = torch.randperm(rows, generator=g).to(DEVICE), 0, [], [], []
    for p in prefixes:
        prefix_rows.append(perm[start:start + p])
        chain_rows.append(perm[start + p:start + p + chain])
        listed.append(prefix_rows[-1][max(0, p - window):] if window > 0 else prefix_rows[-1])
        start += p + chain
    lens = torch.tensor([0] + [len(x) for x in listed])
    chain_rows = torch.cat(chain_rows)
    return dict(q=randn(g, len(prefixes) * chain, q_heads, dim, dtype=dtype), k_extend=k_buffer[chain_rows],
                v_extend=v_buffer[chain_rows], k_buffer=k_buffer, v_buffer=v_buffer,
                qo_indptr=torch.arange(len(prefixes) + 1, dtype=torch.int32, device=DEVICE) * chain,
                kv_indptr=lens.cumsum(0).to(torch.int32).to(DEVICE), kv_indices=torch.cat(listed).to(torch.int64),
                prefix_rows=prefix_rows, chain=chain, window=window)


def attend(q, k, v, prefix, window):
    """float32 attention of a chain's queries (positions prefix, prefix + 1, ...) over keys at
    positions 0.. (its prefix, then the chain): causal, and on a sliding layer a query at position i
    sees positions i - window .. i, as extend_attention_fwd's window mask does."""
    group = q.shape[1] // k.shape[1]
    k, v = k.float().repeat_interleave(group, 1), v.float().repeat_interleave(group, 1)
    q_pos = prefix + torch.arange(q.shape[0], device=q.device)[:, None]
    k_pos = torch.arange(k.shape[0], device=q.device)[None, :]
    visible = (k_pos <= q_pos) & ((q_pos - k_pos <= window) if window > 0 else True)
    scores = torch.einsum("qhd,khd->hqk", q.float(), k) * q.shape[-1] ** -0.5
    return torch.einsum("hqk,khd->qhd", scores.masked_fill(~visible, float("-inf")).softmax(-1), v)


def reference(data):
    out, chain = [], data["chain"]
    for b, rows in enumerate(data["prefix_rows"]):
        chunk = slice(b * chain, (b + 1) * chain)
        k = torch.cat([data["k_buffer"][rows], data["k_extend"][chunk]])
        v = torch.cat([data["v_buffer"][rows], data["v_extend"][chunk]])
        out.append(attend(data["q"][chunk], k, v, len(rows), data["window"]))
    return torch.cat(out)


def grouped(data, splits=4):
    """The new kernel, its SM count chosen to give each (request, KV head) `splits` splits."""
    out = torch.empty_like(data["q"])
    kv_heads = data["k_extend"].shape[1]
    vg.verify_grouped_attention_fwd(
        data["q"], data["k_extend"], data["v_extend"], out, data["k_buffer"], data["v_buffer"], data["qo_indptr"],
        data["kv_indptr"], data["kv_indices"], data["chain"], data["q"].shape[-1] ** -0.5, data["window"],
        sm_count=splits * (len(data["kv_indptr"]) - 1) * kv_heads)
    return out


def extended(data):
    out = torch.empty_like(data["q"])
    extend_attention_fwd(data["q"], data["k_extend"], data["v_extend"], out, data["k_buffer"], data["v_buffer"],
                         data["qo_indptr"], data["kv_indptr"], data["kv_indices"], None, True, None, data["chain"],
                         1.0, 1.0, data["q"].shape[-1] ** -0.5, sliding_window_size=data["window"])
    return out


@pytest.mark.parametrize("group, chain", [(2, 1), (2, 4), (4, 2), (4, 3), (8, 1), (8, 4), (16, 4)])
@pytest.mark.parametrize("window", WINDOWS)
def test_matches_reference(group, chain, window):
    """Group 16 with 4 tokens is 64 rows: two programs per KV head, each over half its heads."""
    data = make_inputs(PREFIXES, chain, 2 * group, 2, 64, window, seed=group * 10 + chain)
    torch.testing.assert_close(grouped(data).float(), reference(data), rtol=TOLERANCE, atol=TOLERANCE)


@pytest.mark.parametrize("prefixes, window", [((5, 0, 70), 16), ((40,), -1), ((3, 33), 3)])
def test_matches_extend_kernel(prefixes, window):
    data = make_inputs(prefixes, 4, 8, 2, 128, window, seed=len(prefixes) + window)
    ours, theirs = grouped(data, splits=3), extended(data)
    torch.testing.assert_close(ours.float(), theirs.float(), rtol=TOLERANCE, atol=TOLERANCE)
    torch.testing.assert_close(ours.float(), reference(data), rtol=TOLERANCE, atol=TOLERANCE)


def test_split_count_fills_one_wave_from_shapes(monkeypatch):
    monkeypatch.setattr(vg, "_MIN_SPLIT_TOKENS", 64)
    # batch 1 on 132 SMs: 31B full (4 KV heads), 26B-A4B full (2), sliding (16, 8); a window caps them
    assert vg.num_kv_splits(4, -1, 132) == 33 and vg.num_kv_splits(2, -1, 132) == 64
    assert vg.num_kv_splits(16, 1023, 132) == 8 and vg.num_kv_splits(8, 1023, 132) == 16
    assert vg.num_kv_splits(1, 1023, 132) == 16 and vg.num_kv_splits(1, -1, 132) == 64
    assert vg.num_kv_splits(32 * 16, 1023, 132) == 1 and vg.num_kv_splits(16 * 4, -1, 132) == 2
    assert vg.num_kv_splits(4, -1, 0) == vg.num_kv_splits(4, -1, 132)  # device count unknown


class GridSpy:
    def __init__(self, kernel):
        self.kernel, self.grids = kernel, []

    def __getitem__(self, grid):
        self.grids.append(grid)
        return self.kernel[grid]


def test_grid_does_not_depend_on_lengths(monkeypatch):
    """A CUDA graph replays its launches: the grid must follow from shapes, never lengths."""
    spy = GridSpy(vg._verify_grouped_split)
    monkeypatch.setattr(vg, "_verify_grouped_split", spy)
    short, long = make_inputs((1, 2), 4, 4, 2, 64, -1, seed=1), make_inputs((50, 61), 4, 4, 2, 64, -1, seed=2)
    for data in (short, long):
        torch.testing.assert_close(grouped(data).float(), reference(data), rtol=TOLERANCE, atol=TOLERANCE)
    assert spy.grids[0] == spy.grids[1] == (2, 2, 4)


@pytest.mark.parametrize("dim, tile", [(256, (64, 4, 2)), (512, (32, 8, 2))])
def test_hopper_tile_per_head_dim(monkeypatch, dim, tile):
    hopper = spy_on_hopper(monkeypatch, vg, "_verify_grouped_split", ("BLOCK_N", "num_warps", "num_stages"))
    data = make_inputs((9,), 2, 4, 1, dim, -1, seed=dim)
    torch.testing.assert_close(grouped(data, splits=1).float(), reference(data), rtol=TOLERANCE, atol=TOLERANCE)
    assert hopper.launches == [tile]


# --- through the backend -------------------------------------------------------------------------

DRAFT, WINDOW, REQS, MAX_LEN, HEADS, KV_HEADS, DIM = 4, 24, 6, 80, 8, 2, 64


class Spy:
    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.fn(*args, **kwargs)


def served(seq_lens, seed):
    """A target verify as the server runs it: requests 1.. in pool rows 1.. with `seq_lens` cached
    tokens; a CUDA graph's padding rows (seq_len 1, the fill value) read a stale pool row 0."""
    g = torch.Generator().manual_seed(seed)
    slots = REQS * MAX_LEN
    req_to_token = torch.randperm(slots, generator=g).view(REQS, MAX_LEN).to(torch.int32).to(DEVICE)
    k_buffer, v_buffer = randn(g, slots, KV_HEADS, DIM), randn(g, slots, KV_HEADS, DIM)
    bs = len(seq_lens)
    real = [i for i, n in enumerate(seq_lens) if n != "pad"]
    pool_rows = torch.tensor([i + 1 if i in real else 0 for i in range(bs)], device=DEVICE)
    lens = torch.tensor([1 if n == "pad" else n for n in seq_lens], device=DEVICE)
    return SimpleNamespace(req_to_token=req_to_token, k_buffer=k_buffer, v_buffer=v_buffer, pool_rows=pool_rows,
                           seq_lens=lens, real=real, q=randn(g, bs * DRAFT, HEADS * DIM),
                           k=randn(g, bs * DRAFT, KV_HEADS, DIM), v=randn(g, bs * DRAFT, KV_HEADS, DIM))


def backend_for(step, splits=3):
    """A triton backend holding what forward_extend reads on 0.5.23's paths up to the two kernels."""
    backend = object.__new__(triton_backend.TritonAttnBackend)
    pool = SimpleNamespace(get_key_buffer=lambda layer_id: step.k_buffer,
                           get_value_buffer=lambda layer_id: step.v_buffer)
    backend.__dict__.update(
        device=DEVICE, dcp_size=1, enable_deterministic=False, page_size=1, use_verify_splitkv=False,
        use_verify_shared_kv=False, use_grouped_verify=True, dllm_attention=None,
        device_core_count=splits * len(step.seq_lens) * KV_HEADS, sliding_window_size=WINDOW,
        token_to_kv_pool=pool, allow_bidirectional_attention_in_extend=False,
        extend_attention_fwd=Spy(extend_attention_fwd),
        verify_grouped_attention_fwd=Spy(vg.verify_grouped_attention_fwd))
    backend._can_run_dense_fp8_chunked_mha = lambda *args: False
    return backend


def chain_mask(seq_lens):
    """The tree mask a top-k 1 draft builds: each draft token sees the prefix and the chain up to it."""
    causal = torch.ones(DRAFT, DRAFT, dtype=torch.bool, device=DEVICE).tril()
    return torch.cat([torch.cat([torch.ones(DRAFT, n, dtype=torch.bool, device=DEVICE), causal], 1).flatten()
                      for n in seq_lens.tolist()])


def verify_metadata(backend, step, with_mask):
    """The target-verify metadata 0.5.23's backend builds: full and window KV rails from the pool rows
    (the window's last min(seq_len, window) rows, its start offsets), the chain's qo_indptr, and the
    tree mask of an eager step (with_mask) or none, as a CUDA-graph replay of a chain has."""
    bs, lens = len(step.seq_lens), step.seq_lens
    window_lens = torch.clamp(lens, max=WINDOW)
    rows = [step.req_to_token[step.pool_rows[b], :lens[b]].long() for b in range(bs)]
    indptr = lambda n: torch.cat([torch.zeros(1, dtype=torch.int32, device=DEVICE),  # noqa: E731
                                  n.cumsum(0).to(torch.int32)])
    backend.forward_metadata = SimpleNamespace(
        qo_indptr=torch.arange(bs + 1, dtype=torch.int32, device=DEVICE) * DRAFT, max_extend_len=DRAFT,
        kv_indptr=indptr(lens), kv_indices=torch.cat(rows),
        window_kv_indptr=indptr(window_lens),
        window_kv_indices=torch.cat([r[len(r) - int(n):] for r, n in zip(rows, window_lens)]),
        window_kv_offsets=(lens - window_lens).to(torch.int32) if with_mask else None,
        custom_mask=chain_mask(lens) if with_mask else None,
        mask_indptr=indptr(DRAFT * (lens + DRAFT)), swa_out_cache_loc=None)


def graph_metadata(backend, step):
    verify_metadata(backend, step, with_mask=False)


def eager_metadata(backend, step):
    verify_metadata(backend, step, with_mask=True)


def layer(window, **changes):
    fields = dict(tp_q_head_num=HEADS, qk_head_dim=DIM, v_head_dim=DIM, layer_id=0, sliding_window_size=window,
                  k_scale=None, v_scale=None, logit_cap=0.0, logit_capping_method="tanh", scaling=DIM ** -0.5,
                  xai_temperature_len=-1, is_cross_attention=False, attn_type=AttentionType.DECODER)
    return SimpleNamespace(**{**fields, **changes})


def step_batch(mode):
    return SimpleNamespace(
        forward_mode=mode, mha_one_shot=False, extend_seq_lens_cpu=None, extend_prefix_lens_cpu=None
    )


def verify(backend, step, attn_layer, mode=ForwardMode.TARGET_VERIFY):
    return backend.forward_extend(step.q, step.k, step.v, attn_layer, step_batch(mode),
                                  save_kv_cache=False).view(-1, HEADS, DIM)


def served_reference(step, window):
    out = []
    for b in step.real:
        n, chunk = int(step.seq_lens[b]), slice(b * DRAFT, (b + 1) * DRAFT)
        rows = step.req_to_token[b + 1, :n].long()
        k = torch.cat([step.k_buffer[rows], step.k[chunk]])
        v = torch.cat([step.v_buffer[rows], step.v[chunk]])
        out.append(attend(step.q[chunk].view(DRAFT, HEADS, DIM), k, v, n, window))
    return torch.stack(out)


@pytest.mark.kill_switch
@pytest.mark.parametrize("build", [graph_metadata, eager_metadata])
@pytest.mark.parametrize("seq_lens", [(30, 7, "pad", "pad"), (0, 61, 24)])
@pytest.mark.parametrize("window", [WINDOW, -1])
def test_backend_routes_verify_by_switch(monkeypatch, build, seq_lens, window):
    """The switch at its default: the grouped kernel; off: the extend kernel (with the tree mask when eager). Same
    output, padding rows included, and the real rows match float32."""
    step = served(seq_lens, seed=len(seq_lens) + window)
    backend = backend_for(step)
    build(backend, step)
    ours = verify(backend, step, layer(window))
    monkeypatch.setenv(SWITCH, "0")
    theirs = verify(backend, step, layer(window))
    assert (backend.verify_grouped_attention_fwd.calls, backend.extend_attention_fwd.calls) == (1, 1)
    torch.testing.assert_close(ours, theirs, rtol=TOLERANCE, atol=TOLERANCE)
    real = ours.view(len(seq_lens), DRAFT, HEADS, DIM)[step.real]
    torch.testing.assert_close(real.float(), served_reference(step, window), rtol=TOLERANCE, atol=TOLERANCE)


@pytest.mark.kill_switch
def test_the_kill_switch_keeps_the_extend_kernel(monkeypatch):
    monkeypatch.setenv(SWITCH, "0")
    step = served((30, 7, "pad"), seed=5)
    backend = backend_for(step)
    graph_metadata(backend, step)
    verify(backend, step, layer(WINDOW))
    assert (backend.verify_grouped_attention_fwd.calls, backend.extend_attention_fwd.calls) == (0, 1)


@pytest.mark.parametrize("change", [dict(logit_cap=30.0), dict(k_scale=torch.tensor(1.0), k_scale_float=1.0,
                                                                   v_scale=torch.tensor(1.0), v_scale_float=1.0),
                                    dict(xai_temperature_len=8), "sinks", "extend", "top-k 2"])
def test_other_cases_keep_the_extend_kernel(change):
    step = served((9, 20), seed=3)
    backend = backend_for(step)
    graph_metadata(backend, step)
    attn_layer, mode, kwargs = layer(WINDOW, **(change if isinstance(change, dict) else {})), ForwardMode.TARGET_VERIFY, {}
    if change == "sinks":
        kwargs["sinks"] = torch.zeros(HEADS, device=DEVICE)
    elif change == "extend":
        mode = ForwardMode.EXTEND  # a prefill of 4-token extends reuses the same metadata shapes
    elif change == "top-k 2":
        backend.use_grouped_verify = False  # what __init__ sets for top-k != 1 (a tree, not a chain)
    backend.forward_extend(step.q, step.k, step.v, attn_layer, step_batch(mode), save_kv_cache=False, **kwargs)
    assert (backend.verify_grouped_attention_fwd.calls, backend.extend_attention_fwd.calls) == (0, 1)


# --- GPU: the served shapes ----------------------------------------------------------------------

SHAPES = {  # q heads, kv heads, head dim, window (the backend's: config.sliding_window - 1)
    "31B sliding": (32, 16, 256, 1023), "31B full": (32, 4, 512, -1),
    "26B-A4B sliding": (16, 8, 256, 1023), "26B-A4B full": (16, 2, 512, -1),
}


@pytest.mark.gpu
@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("batch, prefix", [(1, 1500), (4, 8000), (16, 200)])
def test_served_shapes_match_float32_and_extend(monkeypatch, shape, batch, prefix):
    monkeypatch.setattr(vg, "_MIN_SPLIT_TOKENS", 64)
    q_heads, kv_heads, dim, window = SHAPES[shape]
    prefixes = [prefix + 37 * i for i in range(batch)]
    data = make_inputs(prefixes, 4, q_heads, kv_heads, dim, window, seed=batch + prefix, dtype=torch.bfloat16)
    out = torch.empty_like(data["q"])
    vg.verify_grouped_attention_fwd(
        data["q"], data["k_extend"], data["v_extend"], out, data["k_buffer"], data["v_buffer"], data["qo_indptr"],
        data["kv_indptr"], data["kv_indices"], 4, dim ** -0.5, window,
        sm_count=torch.cuda.get_device_properties(0).multi_processor_count)
    ref = reference(data)
    assert (out.float() - ref).abs().max().item() < 2e-2
    # no further from float32 than the extend kernel's own bf16 rounding
    assert relative_difference(out, ref, ref) <= 1.5 * relative_difference(extended(data), ref, ref) + 1e-3
