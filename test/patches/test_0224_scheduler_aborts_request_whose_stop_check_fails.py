"""0224: the scheduler checks every request's stop conditions (stop strings, stop regexes, grammar,
decoded with the tokenizer) each step. An exception in one request's check left the scheduler's
loop, taking every request in flight down; now that request alone is aborted with a 500 naming the
failure, as 0014 does for a request the scheduler cannot turn into a Req, and the others go on.
Run through the decode step's result processing with its collaborators stubbed."""

from http import HTTPStatus

import pytest
import torch

from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.managers.schedule_batch import FINISH_ABORT, FINISH_LENGTH


@pytest.mark.parametrize(
    "failure",
    [
        UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
        RecursionError("maximum recursion depth exceeded"),
        TypeError("decode() argument 'ids' must be a list"),
    ],
)
def test_a_failing_stop_check_aborts_that_request_alone(decoding_req, decode_step, failure):
    length = FINISH_LENGTH(length=1)
    reqs = [
        decoding_req("before", finish=length),
        decoding_req("broken", failure),
        decoding_req("after", finish=length),
    ]
    processor = decode_step(
        reqs, LogitsProcessorOutput(next_token_logits=None), torch.tensor([7, 8, 9])
    )

    assert isinstance(reqs[0].finished_reason, FINISH_LENGTH)
    assert isinstance(reqs[2].finished_reason, FINISH_LENGTH)
    broken = reqs[1].finished_reason
    assert (
        isinstance(broken, FINISH_ABORT) and broken.status_code == HTTPStatus.INTERNAL_SERVER_ERROR
    )
    assert type(failure).__name__ in broken.message and "stop conditions" in broken.message
    assert processor.output_streamer.streamed == [["before", "broken", "after"]]
