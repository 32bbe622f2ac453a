"""0178: on Hopper, the logits head of up to 16 tokens runs as one Triton pass over the weight
instead of torch.matmul. On CPU (Triton's interpreter, float16, small shapes with ragged edges) the
kernel against a float32 product; which calls LogitsProcessor sends to it (device reported as
Hopper: token count, dtype, GPU generation, kill switch). On a Hopper GPU Gemma 4's head (262144 x
2816, bf16) at 1-16 tokens against float32 and against torch.matmul."""

from types import SimpleNamespace

import pytest
import torch
from kernel_inputs import DEVICE, randn, relative_difference

from sglang.kernels.ops.gemm import few_token_logits as ftl
from sglang.srt.layers import logits_processor

# a 16-bit head as served: float16 in Triton's interpreter (numpy has no bfloat16), bfloat16 on a
# GPU
DTYPE = torch.float16 if DEVICE == "cpu" else torch.bfloat16
TOLERANCE = 1e-2  # the output's 16-bit rounding


def check_against_float32(tokens: int, vocab: int, hidden: int, seed: int):
    x = randn(tokens, hidden, dtype=DTYPE, seed=seed)
    weight = randn(vocab, hidden, dtype=DTYPE, seed=seed + 1, scale=hidden**-0.5)
    out = ftl.few_token_logits(x, weight)
    ref = x.float() @ weight.float().T
    assert out.shape == (tokens, vocab) and out.dtype == weight.dtype
    assert relative_difference(out, ref, ref) < TOLERANCE
    return out, x, weight


@pytest.mark.parametrize("tokens", [1, 3, 16])
def test_matches_float32_on_ragged_shapes(tokens):
    # neither the vocabulary (300) nor the hidden size (320) fills whole tiles
    check_against_float32(tokens, vocab=300, hidden=320, seed=tokens)


@pytest.fixture
def hopper(monkeypatch):
    """The device reported as Hopper with the switch on; each kernel launch recorded."""
    monkeypatch.setattr(ftl, "_is_cuda", True)
    monkeypatch.setattr(ftl, "CUDA_CAPABILITY", (9, 0))
    monkeypatch.setenv("SGLANG_OPT_FEW_TOKEN_LOGITS_HEAD", "1")
    calls = []
    real = ftl.few_token_logits
    monkeypatch.setattr(
        logits_processor, "few_token_logits", lambda x, w: calls.append(x.shape[0]) or real(x, w)
    )
    return calls


def lm_head_logits(tokens: int, dtype=DTYPE, hidden: int = 64, vocab: int = 96):
    """LogitsProcessor's head product for `tokens` rows of a plain (unquantized) head."""
    processor = SimpleNamespace(use_fp32_lm_head=False, rl_on_policy_target=None)
    head = SimpleNamespace(weight=randn(vocab, hidden, dtype=dtype, seed=2), quant_method=None)
    x = randn(tokens, hidden, dtype=dtype, seed=3)
    logits = logits_processor.LogitsProcessor._compute_lm_head(processor, x, head)
    ref = x.float() @ head.weight.float().T
    assert relative_difference(logits, ref, ref) < TOLERANCE
    return logits


def test_up_to_16_tokens_of_a_16_bit_head_take_the_kernel(hopper):
    for tokens in (1, 16, 17):
        lm_head_logits(tokens)
    assert hopper == [1, 16]


@pytest.mark.kill_switch
def test_dtype_rule_and_generation_and_kill_switch(hopper, monkeypatch):
    x16, w16 = torch.zeros(4, 8, dtype=torch.bfloat16), torch.zeros(32, 8, dtype=torch.bfloat16)
    assert ftl.few_token_logits_applies(x16, w16)
    assert not ftl.few_token_logits_applies(
        x16.float(), w16.float()
    )  # a float32 head stays on matmul
    assert not ftl.few_token_logits_applies(x16, w16.half())  # mixed dtypes
    assert not ftl.few_token_logits_applies(x16[:, ::2], w16[:, ::2])  # strided rows
    monkeypatch.setattr(ftl, "CUDA_CAPABILITY", (10, 0))
    assert not ftl.few_token_logits_applies(x16, w16)
    monkeypatch.setattr(ftl, "CUDA_CAPABILITY", (9, 0))
    monkeypatch.setenv("SGLANG_OPT_FEW_TOKEN_LOGITS_HEAD", "0")
    assert not ftl.few_token_logits_applies(x16, w16)


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [1, 4, 16])
def test_gemma4_head_matches_float32_and_matmul(tokens):
    out, x, weight = check_against_float32(tokens, vocab=262144, hidden=2816, seed=tokens)
    assert relative_difference(out, x @ weight.T, out) < TOLERANCE
