"""0224: the scheduler checks every request's stop conditions (stop strings, stop regexes, grammar,
decoded with the tokenizer) each step. An exception in one request's check left the scheduler's
loop, taking every request in flight down; now that request alone is aborted with a 500 naming the
failure, as 0014 does for a request the scheduler cannot turn into a Req, and the others go on.
Run through the decode step's result processing with its collaborators stubbed."""

from dataclasses import fields
from http import HTTPStatus
from types import SimpleNamespace

import pytest
import torch

from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.managers.schedule_batch import FINISH_ABORT, FINISH_LENGTH
from sglang.srt.managers.scheduler_components import batch_result_processor as brp
from sglang.srt.managers.utils import GenerationBatchResult


class Streamer:
    def __init__(self):
        self.streamed = []

    def stream_output(self, reqs, return_logprob):
        self.streamed.append([r.rid for r in reqs])


class FakeReq:
    def __init__(self, rid, failure=None):
        self.rid, self.failure = rid, failure
        self.output_ids, self.to_finish, self.finished_reason = [], None, None
        self.return_logprob = self.return_sampling_mask = self.return_hidden_states = False
        self.grammar = None
        self.time_stats = SimpleNamespace(set_last_decode_finish_time=lambda: None)

    def finished(self):
        return self.finished_reason is not None

    def update_finish_state(self, new_accepted_len=1):
        if self.failure:
            raise self.failure
        self.finished_reason = FINISH_LENGTH(length=1)


@pytest.fixture
def processor(monkeypatch):
    cls = brp.SchedulerBatchResultProcessor
    monkeypatch.setattr(brp, "get_observability", lambda: SimpleNamespace(enable_metrics=False))
    monkeypatch.setattr(cls, "_maybe_update_reasoning_tokens", lambda self, req, tok: None)
    monkeypatch.setattr(cls, "_handle_finish_state_updated_req", lambda self, *a: None)
    parts = {f.name: None for f in fields(cls)}
    parts.update(
        enable_overlap=False, enable_overlap_mlx=False, output_streamer=Streamer(),
        metrics_reporter=SimpleNamespace(num_generated_tokens=0, forward_ct_decode=0,
                                         report_decode_stats=lambda *a, **k: None),
        token_to_kv_pool_allocator=SimpleNamespace(free_group_begin=lambda: None,
                                                   free_group_end=lambda: None))
    return cls(**parts)


@pytest.mark.parametrize("failure", [UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
                                     RecursionError("maximum recursion depth exceeded"),
                                     TypeError("decode() argument 'ids' must be a list")])
def test_a_failing_stop_check_aborts_that_request_alone(processor, failure):
    reqs = [FakeReq("before"), FakeReq("broken", failure), FakeReq("after")]
    batch = SimpleNamespace(reqs=reqs, spec_algorithm=SimpleNamespace(is_none=lambda: True),
                            return_logprob=False, batch_size=lambda: 3)
    result = GenerationBatchResult(logits_output=LogitsProcessorOutput(next_token_logits=None),
                                   next_token_ids=torch.tensor([7, 8, 9]))
    processor.process_batch_result_decode(batch, result)

    assert isinstance(reqs[0].finished_reason, FINISH_LENGTH)
    assert isinstance(reqs[2].finished_reason, FINISH_LENGTH)
    broken = reqs[1].finished_reason
    assert isinstance(broken, FINISH_ABORT) and broken.status_code == HTTPStatus.INTERNAL_SERVER_ERROR
    assert type(failure).__name__ in broken.message and "stop conditions" in broken.message
    assert processor.output_streamer.streamed == [["before", "broken", "after"]]
