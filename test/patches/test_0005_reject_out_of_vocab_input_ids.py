"""0005: input_ids outside [0, vocab) are rejected in the tokenizer manager (HTTP 400) instead of
reaching the embedding kernel, whose device-side assert takes the whole server down."""

import asyncio
from types import SimpleNamespace

import pytest

from sglang.srt.managers.io_struct import GenerateReqInput
from sglang.srt.managers.tokenizer_manager import TokenizerManager

VOCAB = 262144


def manager() -> TokenizerManager:
    """Just enough of a TokenizerManager for the raw input_ids path (no model, no processes)."""
    tm = object.__new__(TokenizerManager)
    tm.model_config = SimpleNamespace(vocab_size=VOCAB)
    return tm


@pytest.mark.parametrize("bad", [VOCAB, VOCAB + 7, -1, -(2**31)])
def test_out_of_vocab_id_is_rejected_before_the_forward_pass(bad):
    request = GenerateReqInput(input_ids=[2, 10, bad, 11], sampling_params={"max_new_tokens": 1})
    request.normalize_batch_and_arguments()
    with pytest.raises(ValueError, match=rf"input_ids\[2\] = {bad} is outside the vocabulary \[0, {VOCAB}\)"):
        asyncio.run(manager()._tokenize_one_request(request))


@pytest.mark.parametrize("ids", [[0], [2, 5, VOCAB - 1], [[1, 2], [3, VOCAB - 1]]])
def test_ids_inside_the_vocabulary_pass(ids):
    manager()._validate_input_ids_in_vocab(ids, VOCAB)


@pytest.mark.parametrize("ids, pos", [([[1, 2], [3, -4]], 1), ([[VOCAB], [1]], 0)])
def test_batches_are_checked_per_sequence(ids, pos):
    with pytest.raises(ValueError, match=rf"input_ids\[{pos}\]"):
        manager()._validate_input_ids_in_vocab(ids, VOCAB)
