"""0006: a request asking for more top logprobs than the vocabulary has is rejected (HTTP 400)
instead of failing torch.topk inside the sampler, which kills the scheduler."""

from types import SimpleNamespace

import pytest

from sglang.srt.managers.io_struct import GenerateReqInput
from sglang.srt.managers.tokenizer_manager import TokenizerManager

VOCAB = 262144


def manager() -> TokenizerManager:
    """Just enough of a TokenizerManager for _validate_one_request (no model, no processes)."""
    tm = object.__new__(TokenizerManager)
    tm.model_config = SimpleNamespace(vocab_size=VOCAB)
    tm.context_len = 32768
    tm.num_reserved_tokens = 0
    tm.validate_total_tokens = True
    tm.server_args = SimpleNamespace(allow_auto_truncate=False, enable_return_hidden_states=False,
                                     enable_custom_logit_processor=False)
    tm.is_generation = True
    return tm


def request(top: int, return_logprob: bool = True) -> GenerateReqInput:
    req = GenerateReqInput(text="hi", return_logprob=return_logprob, top_logprobs_num=top,
                           sampling_params={"max_new_tokens": 4})
    req.normalize_batch_and_arguments()
    return req


@pytest.mark.parametrize("top", [VOCAB + 1, 10**6, -1])
def test_out_of_range_top_logprobs_is_rejected(top):
    with pytest.raises(ValueError, match=rf"top_logprobs_num must be in \[0, {VOCAB}\], got {top}"):
        manager()._validate_one_request(request(top), [2, 10, 11])


@pytest.mark.parametrize("top", [0, 1, 20, VOCAB])
def test_top_logprobs_within_the_vocabulary_pass(top):
    manager()._validate_one_request(request(top), [2, 10, 11])


def test_ignored_when_no_logprobs_are_asked_for():
    manager()._validate_one_request(request(10**6, return_logprob=False), [2, 10, 11])
