"""0225: a batch in which some requests ask for the logprobs of chosen tokens (token_ids_logprob)
and others return logprobs without them. The sampled token's logprobs stay on the GPU until the
scheduler copies them over with .tolist() per request; a request without chosen tokens got a Python
list there, so the copy raised AttributeError and the scheduler died with every request in flight
(found by the route fuzzer on a live server). Now its entry is an empty tensor, as the batched path
already gives."""

from types import SimpleNamespace

import pytest
import torch

from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.layers.logprob_processor import get_token_ids_logprobs
from sglang.srt.managers.scheduler_components.batch_result_processor import (
    SchedulerBatchResultProcessor,
)


@pytest.mark.parametrize("asked", [[None, [3, 5]], [[1], None, None, [0, 2, 4]], [None, None]])
def test_a_batch_mixing_chosen_token_logprobs_copies_to_cpu(asked):
    logprobs = torch.randn(len(asked), 8).log_softmax(-1)
    vals, idxs = get_token_ids_logprobs(logprobs, asked, no_copy_to_cpu=True)
    out = LogitsProcessorOutput(
        next_token_logits=None,
        next_token_logprobs=logprobs[:, 0],
        next_token_token_ids_logprobs_val=vals,
        next_token_token_ids_logprobs_idx=idxs,
    )

    SchedulerBatchResultProcessor.move_logprobs_to_cpu(
        None, batch=SimpleNamespace(return_logprob=True), logits_output=out
    )

    for row, ids, got, got_ids in zip(
        logprobs,
        asked,
        out.next_token_token_ids_logprobs_val,
        out.next_token_token_ids_logprobs_idx,
    ):
        assert isinstance(got, list)
        assert got == (row[ids].tolist() if ids else []) and got_ids == (ids or [])


def test_copied_on_the_spot_a_request_without_chosen_tokens_still_gets_an_empty_list():
    logprobs = torch.randn(2, 8).log_softmax(-1)
    vals, _ = get_token_ids_logprobs(logprobs, [None, [7]])
    assert vals == [[], logprobs[1, [7]].tolist()]
