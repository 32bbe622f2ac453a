"""0220: a row of a sampling batch whose logits leave no finite probability (a -inf bias on every
token, a bias that the temperature scales past float32, a NaN) no longer reaches torch.multinomial,
whose check (a device-side assert on a GPU) fails the whole batch: the sampler neutralizes that row
and flags it, the other rows sample normally, and the scheduler aborts the flagged request with a
400 naming the cause while the others go on. On CPU: torch.multinomial raises where CUDA asserts."""

from http import HTTPStatus
from types import SimpleNamespace

import pytest
import torch

from sglang.srt.layers import sampler as sampler_module
from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.layers.sampler import Sampler
from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo

VOCAB = 64


def make_sampler() -> Sampler:
    sampler = object.__new__(Sampler)
    torch.nn.Module.__init__(sampler)
    sampler.rl_on_policy_target = None
    sampler.enable_deterministic = False
    sampler.use_log_softmax_logprob = False
    sampler.use_ascend_backend = False
    return sampler


def batch_info(temperatures, top_k=None, top_p=None) -> SamplingBatchInfo:
    n = len(temperatures)
    top_ks = torch.tensor(top_k or [VOCAB] * n, dtype=torch.int32)
    top_ps = torch.tensor(top_p or [1.0] * n)
    return SamplingBatchInfo(
        temperatures=torch.tensor(temperatures).view(-1, 1),
        top_ps=top_ps,
        top_ks=top_ks,
        min_ps=torch.zeros(n),
        is_all_greedy=False,
        is_any_greedy=False,
        need_top_p_sampling=top_p is not None,
        need_top_k_sampling=top_k is not None,
        need_min_p_sampling=False,
        vocab_size=VOCAB,
        device="cpu",
    )


def mixed_logits() -> torch.Tensor:
    torch.manual_seed(0)
    logits = torch.randn(4, VOCAB)
    logits[0, 7] = 50.0  # a good row with a clear favourite
    logits[1] = float("-inf")  # -inf bias on every token
    logits[2, 3] = 3e38  # a float32-sized bias that a temperature below 1 scales to +inf
    logits[3, 5] = float("nan")
    return logits


@pytest.fixture(autouse=True)
def pytorch_backend(monkeypatch):
    exec_args = SimpleNamespace(kernel=SimpleNamespace(sampling_backend="pytorch"))
    monkeypatch.setattr(sampler_module, "get_exec", lambda: exec_args)


def sample(logits, info):
    out = LogitsProcessorOutput(next_token_logits=logits)
    ids = make_sampler()(out, info, False, [], [], torch.zeros(len(logits), dtype=torch.int64))
    return out, ids


@pytest.mark.parametrize("filtered", [False, True], ids=["multinomial", "top-k-top-p"])
def test_bad_rows_are_flagged_and_good_rows_sample(filtered):
    info = batch_info(
        [0.5] * 4, top_k=[5] * 4 if filtered else None, top_p=[0.9] * 4 if filtered else None
    )
    out, ids = sample(mixed_logits(), info)
    assert out.next_token_unsampleable.tolist() == [False, True, True, True]
    assert ids[0].item() == 7
    assert ((0 <= ids) & (ids < VOCAB)).all()


def test_greedy_rows_are_flagged_too():
    info = batch_info([1.0] * 4)
    info.is_all_greedy = True
    out, ids = sample(mixed_logits(), info)
    # no temperature divides a greedy row: 3e38 stays finite and is its argmax
    assert out.next_token_unsampleable.tolist() == [False, True, False, True]
    assert ids[0].item() == 7 and ids[2].item() == 3


def test_good_batch_flags_nothing():
    out, ids = sample(torch.randn(3, VOCAB), batch_info([0.7, 1.0, 1.3]))
    assert out.next_token_unsampleable.tolist() == [False, False, False]


def test_scheduler_aborts_only_the_flagged_request(decoding_req, decode_step):
    from sglang.srt.managers.schedule_batch import FINISH_ABORT

    reqs = [decoding_req("good"), decoding_req("bad")]
    logits = LogitsProcessorOutput(next_token_logits=None)
    logits.next_token_unsampleable = torch.tensor([False, True])
    decode_step(reqs, logits, torch.tensor([7, 0]))

    assert reqs[0].finished_reason is None and reqs[0].output_ids == [7]
    bad = reqs[1].finished_reason
    assert isinstance(bad, FINISH_ABORT) and bad.status_code == HTTPStatus.BAD_REQUEST
    assert "finite probability" in bad.message


def test_speculative_verify_neutralizes_and_flags_per_request(monkeypatch):
    """The MTP/EAGLE verify step samples its draft positions outside Sampler: the same guard runs
    there, one flag per request over its draft_token_num rows."""
    from sglang.srt.speculative import eagle_utils

    seen = {}

    def greedy(**kwargs):
        seen["target_predict"] = kwargs["target_predict"].clone()
        return kwargs["predicts"], kwargs["accept_index"], kwargs["accept_token_num"]

    monkeypatch.setattr(eagle_utils, "verify_tree_greedy_func", greedy)
    bs, drafts = 3, 2
    logits = torch.randn(bs * drafts, VOCAB)
    logits[2] = float("-inf")  # request 1's first draft position: every token banned
    logits[5, 4] = float("nan")  # request 2's second position
    info = batch_info([1.0] * bs)
    info.is_all_greedy = True
    info.acc_additive_penalties = info.acc_scaling_penalties = None
    batch = SimpleNamespace(
        device="cpu",
        forward_mode=SimpleNamespace(is_idle=lambda: False),
        seq_lens=torch.ones(bs, dtype=torch.int64),
        sampling_info=info,
    )
    verify_input = SimpleNamespace(
        draft_token_num=drafts,
        draft_token=torch.zeros(bs * drafts, dtype=torch.int64),
        max_tree_depth=drafts,
        retrieve_index=None,
        retrieve_next_token=None,
        retrieve_next_sibling=None,
        tree_topk=1,
    )
    out = LogitsProcessorOutput(next_token_logits=logits)
    eagle_utils.eagle_sample(verify_input, batch, out, None)
    assert out.next_token_unsampleable.tolist() == [False, True, True]
    assert torch.isfinite(logits).all()
    predict = seen["target_predict"]
    assert ((0 <= predict) & (predict < VOCAB)).all()
