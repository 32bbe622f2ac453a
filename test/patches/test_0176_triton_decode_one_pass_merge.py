"""0176: the Triton decode backend merges a step's KV splits (stage 2) in one pass over all of them
instead of a loop, and its split cap rises to 32 where that merge holds them
(SGLANG_OPT_TRITON_DECODE_ONE_PASS_MERGE, on by default).  Kernels run in Triton's interpreter on
CPU (float32) and for real on a GPU:

- the merge matches a float32 torch reference of the split-softmax merge on fresh random split
  outputs, for 1-32 splits, head dims 64-512, requests whose splits are partly empty (short
  sequences), uneven split counts per request, and attention sinks; and it matches the loop;
- a whole grouped decode step with the switch on matches float32 attention;
- on by default; off, or with more split outputs than one program holds (64 x 512), the loop runs;
- the split cap: the flag's value raised to 32 for value heads up to 512 wide, kept when larger,
when
  the merge could not hold 32 splits (1024-wide heads) or when the switch is off;
- on a GPU, 26B-A4B's head count at 1 and 64 requests of up to 8000 tokens, 8 or 32 splits."""

import pytest
import torch
from kernel_inputs import DEVICE, randn

from sglang.kernels.ops.attention import decode_attention as da

TOLERANCE = 1e-4 if DEVICE == "cpu" else 2e-3  # float32 split outputs either way


def split_outputs(batch, heads, max_splits, dim, seq_lens, splits, seed):
    """Stage 1's outputs for one step: each split's normalised output and its log-sum-exp."""
    return dict(
        logits=randn(batch, heads, max_splits, dim, seed=seed),
        lse=randn(batch, heads, max_splits, seed=seed + 1, scale=3.0),
        kv_indptr=torch.tensor(
            [0, *torch.tensor(seq_lens).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE
        ),
        num_kv_splits=torch.tensor(splits, dtype=torch.int32, device=DEVICE),
        max_splits=max_splits,
        seq_lens=seq_lens,
        splits=splits,
    )


def merge(data, sinks=None):
    batch, heads, _, dim = data["logits"].shape
    out = torch.empty(batch, heads, dim, device=DEVICE, dtype=torch.float32)
    v_buffer = torch.empty(1, 1, dim, device=DEVICE)  # only its width is read
    da._decode_softmax_reducev_fwd(
        data["logits"],
        data["lse"],
        out,
        out,
        1.0,
        v_buffer,
        data["kv_indptr"],
        data["num_kv_splits"],
        data["max_splits"],
        sinks=sinks,
    )
    return out


def reference_merge(data, sinks=None):
    """float32: the splits that hold KV (those starting before the sequence ends, each split
    rounded up to the kernel's minimum block), weighted by exp(lse), plus the sink's mass."""
    out = torch.empty(data["logits"].shape[:2] + data["logits"].shape[3:])
    logits, lse = data["logits"].float().cpu(), data["lse"].float().cpu()
    for b, (seq_len, splits) in enumerate(zip(data["seq_lens"], data["splits"])):
        per_split = -(-seq_len // splits)  # ceil divisions
        per_split = -(-per_split // da._MIN_BLOCK_KV) * da._MIN_BLOCK_KV
        used = [s for s in range(data["max_splits"]) if s * per_split < seq_len]
        weights = lse[b][:, used]
        top = weights.max(-1, keepdim=True).values
        mass = (weights - top).exp()
        total = mass.sum(-1)
        if sinks is not None:
            total = total + (sinks.float().cpu() - top[:, 0]).exp()
        out[b] = (mass.unsqueeze(-1) * logits[b][:, used]).sum(1) / total.unsqueeze(-1)
    return out


class Recorded:
    """Stands in for a stage-2 kernel: notes its name at each launch, then launches it."""

    def __init__(self, name: str, launched: list):
        self.kernel, self.name, self.launched = getattr(da, name), name, launched

    def __getitem__(self, grid):
        self.launched.append(self.name)
        return self.kernel[grid]


@pytest.fixture
def stage2(monkeypatch):
    """Which stage-2 kernel each merge launched."""
    launched = []
    for name in ("_fwd_kernel_stage2", "_fwd_kernel_stage2_one_pass"):
        monkeypatch.setattr(da, name, Recorded(name, launched))
    return launched


def assert_one_pass_matches_the_reference_and_the_loop(monkeypatch, stage2, data):
    monkeypatch.setenv("SGLANG_OPT_TRITON_DECODE_ONE_PASS_MERGE", "1")
    one_pass = merge(data)
    monkeypatch.setenv("SGLANG_OPT_TRITON_DECODE_ONE_PASS_MERGE", "0")
    loop = merge(data)
    assert stage2 == ["_fwd_kernel_stage2_one_pass", "_fwd_kernel_stage2"]
    torch.testing.assert_close(
        one_pass.cpu(), reference_merge(data), rtol=TOLERANCE, atol=TOLERANCE
    )
    torch.testing.assert_close(one_pass, loop, rtol=TOLERANCE, atol=TOLERANCE)


@pytest.mark.parametrize(
    "max_splits, dim, seq_lens, splits",
    [
        (1, 64, [5, 40], [1, 1]),
        (4, 128, [3, 200, 64], [4, 2, 4]),  # the first request's splits are mostly empty
        (8, 256, [1, 9, 300], [8, 8, 5]),
        (32, 512, [40, 1000], [32, 17]),
        (5, 96, [70, 33], [5, 3]),  # neither a power of two
    ],
)
def test_one_pass_merge_matches_the_reference_and_the_loop(
    monkeypatch, stage2, max_splits, dim, seq_lens, splits
):
    data = split_outputs(
        len(seq_lens), 2, max_splits, dim, seq_lens, splits, seed=max_splits * 10 + dim
    )
    assert_one_pass_matches_the_reference_and_the_loop(monkeypatch, stage2, data)


def test_attention_sinks(monkeypatch, stage2):
    monkeypatch.setenv("SGLANG_OPT_TRITON_DECODE_ONE_PASS_MERGE", "1")
    data = split_outputs(2, 4, 8, 64, [100, 17], [8, 8], seed=7)
    sinks = randn(4, seed=9)
    torch.testing.assert_close(
        merge(data, sinks).cpu(), reference_merge(data, sinks), rtol=TOLERANCE, atol=TOLERANCE
    )
    assert stage2 == ["_fwd_kernel_stage2_one_pass"]


@pytest.mark.kill_switch
def test_on_by_default_and_off_or_too_wide_keeps_the_loop(monkeypatch, stage2):
    small = split_outputs(1, 1, 8, 64, [30], [8], seed=4)
    monkeypatch.delenv("SGLANG_OPT_TRITON_DECODE_ONE_PASS_MERGE", raising=False)
    merge(small)  # on by default
    merge(
        split_outputs(1, 1, 64, 512, [3000], [64], seed=3)
    )  # 64 splits x 512: more than one program holds
    monkeypatch.setenv("SGLANG_OPT_TRITON_DECODE_ONE_PASS_MERGE", "0")
    merge(small)
    assert stage2 == ["_fwd_kernel_stage2_one_pass", "_fwd_kernel_stage2", "_fwd_kernel_stage2"]


@pytest.mark.parametrize(
    "switch, flag, v_head_dim, cap",
    [
        (None, 8, 512, 32),  # Gemma-4's widest value head (full layers), switch on by default
        ("1", 8, 256, 32),
        ("1", 64, 512, 64),  # a larger flag stays
        (
            "1",
            8,
            1024,
            8,
        ),  # the merge could not hold 32 splits of 1024: the loop, and the flag's cap
        ("0", 8, 512, 8),
    ],
)
def test_the_kv_split_cap_rises_where_the_merge_holds_it(
    monkeypatch, switch, flag, v_head_dim, cap
):
    if switch is None:
        monkeypatch.delenv("SGLANG_OPT_TRITON_DECODE_ONE_PASS_MERGE", raising=False)
    else:
        monkeypatch.setenv("SGLANG_OPT_TRITON_DECODE_ONE_PASS_MERGE", switch)
    assert da.decode_kv_splits_cap(flag, v_head_dim) == cap


@pytest.mark.parametrize("batch, context, dim, splits", [(1, 37, 256, 16), (2, 70, 512, 32)])
def test_a_grouped_decode_step_with_the_switch_on_matches_attention(
    monkeypatch, stage2, batch, context, dim, splits
):
    """One decode step through stage 1 and the one-pass merge: 2 KV heads, 8 query heads, KV at
    shuffled rows, against float32 attention."""
    monkeypatch.setenv("SGLANG_OPT_TRITON_DECODE_ONE_PASS_MERGE", "1")
    heads, kv_heads, rows = 8, 2, batch * context + 5
    q, k, v = (
        randn(batch, heads, dim, seed=1),
        randn(rows, kv_heads, dim, seed=2),
        randn(rows, kv_heads, dim, seed=3),
    )
    indices = torch.randperm(rows, generator=torch.Generator().manual_seed(4))[
        : batch * context
    ].to(DEVICE)
    indptr = torch.arange(batch + 1, dtype=torch.int32, device=DEVICE) * context
    out = torch.empty_like(q)
    logits = torch.empty(batch, heads, splits, dim, device=DEVICE)
    lse = torch.empty(batch, heads, splits, device=DEVICE)
    num_splits = torch.full((batch,), splits, dtype=torch.int32, device=DEVICE)
    da.decode_attention_fwd_grouped(
        q, k, v, out, indptr, indices, logits, lse, num_splits, splits, dim**-0.5, 1.0
    )
    assert stage2 == ["_fwd_kernel_stage2_one_pass"]
    for b in range(batch):
        rows_b = indices[b * context : (b + 1) * context]
        kb = k[rows_b].float().repeat_interleave(heads // kv_heads, dim=1)
        vb = v[rows_b].float().repeat_interleave(heads // kv_heads, dim=1)
        scores = torch.einsum("hd,khd->hk", q[b].float(), kb) * dim**-0.5
        ref = torch.einsum("hk,khd->hd", scores.softmax(-1), vb)
        torch.testing.assert_close(out[b].float(), ref, rtol=TOLERANCE, atol=TOLERANCE)


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU (runs on the GPU machine)"
)
@pytest.mark.parametrize("batch, max_splits, dim", [(1, 32, 512), (64, 32, 256), (64, 8, 512)])
def test_served_shapes_on_the_gpu(monkeypatch, stage2, batch, max_splits, dim):
    """26B-A4B's 16 query heads, split counts and lengths as sglang's heuristic gives them."""
    seq_lens = torch.randint(
        1, 8000, (batch,), generator=torch.Generator().manual_seed(batch)
    ).tolist()
    splits = [min(max_splits, 1 + n // 256) for n in seq_lens]
    data = split_outputs(batch, 16, max_splits, dim, seq_lens, splits, seed=batch + dim)
    assert_one_pass_matches_the_reference_and_the_loop(monkeypatch, stage2, data)
