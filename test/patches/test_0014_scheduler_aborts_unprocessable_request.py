"""0014: an exception while the scheduler turns one tokenized request into a Req aborts that request
with an error answer (HTTP 500 naming the failure) instead of leaving the scheduler's loop, which
would take the scheduler and every request in flight down. The failure is injected into the steps
of Scheduler.handle_generate_request; its collaborators that need a GPU server are stubbed."""

from array import array
from http import HTTPStatus
from types import SimpleNamespace

import pytest

from sglang.srt.disaggregation.utils import DisaggregationMode
from sglang.srt.managers import scheduler as scheduler_module
from sglang.srt.managers.io_struct import AbortReq, TokenizedGenerateReqInput
from sglang.srt.managers.scheduler import Scheduler
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.utils import TypeBasedDispatcher


class Outbox:
    """The scheduler's channel to the tokenizer manager."""

    def __init__(self):
        self.sent = []

    def send_output(self, output, recv_obj=None):
        self.sent.append(output)


def tokenized(rid: str, **sampling) -> TokenizedGenerateReqInput:
    params = SamplingParams(**{"max_new_tokens": 4, **sampling})
    params.normalize(None)
    return TokenizedGenerateReqInput(
        rid=rid,
        input_text="hi",
        input_ids=array("q", [2, 10, 11]),
        input_embeds=None,
        mm_inputs=None,
        token_type_ids=None,
        sampling_params=params,
        return_logprob=False,
        logprob_start_len=-1,
        top_logprobs_num=0,
        token_ids_logprob=None,
        stream=False,
        bootstrap_port=0,
    )


def fake_req(rid, input_text, input_ids, sampling_params, **kwargs):
    """What the rest of handle_generate_request reads of a Req."""
    return SimpleNamespace(
        rid=rid,
        origin_input_ids=input_ids,
        sampling_params=sampling_params,
        return_sampling_mask=False,
        return_logprob=False,
        is_prefill_only=False,
        logprob_start_len=-1,
    )


@pytest.fixture
def scheduler(monkeypatch):
    monkeypatch.setattr(scheduler_module, "Req", fake_req)
    monkeypatch.setattr(
        scheduler_module, "get_serving", lambda: SimpleNamespace(allow_auto_truncate=False)
    )
    # sglang 0.5.18+ reads these config namespaces here (absent before: nothing to stub)
    monkeypatch.setattr(
        scheduler_module,
        "get_mm",
        lambda: SimpleNamespace(mm_feature_transport="default"),
        raising=False,
    )
    monkeypatch.setattr(
        scheduler_module,
        "get_device",
        lambda: SimpleNamespace(mlx_enable_sampling=False),
        raising=False,
    )
    s = object.__new__(Scheduler)
    s.ipc_channels = SimpleNamespace(send_to_tokenizer=Outbox())
    s.waiting_queue = []
    s._request_dispatcher = TypeBasedDispatcher(
        [(TokenizedGenerateReqInput, s.handle_generate_request)]
    )
    s.session_controller = SimpleNamespace(maybe_reap=lambda now: None)
    s.flush_wrapper = SimpleNamespace(check_pending=lambda: None)
    s.external_corpus_manager = s.rust_server = s.tokenizer = s.dllm_config = (
        s.metrics_collector
    ) = None
    s.enable_session_radix_cache = False
    s.disaggregation_mode = DisaggregationMode.NULL
    s.model_config = SimpleNamespace(hf_eos_token_id=None, vocab_size=262144)
    s.metrics_reporter = SimpleNamespace(enable_metrics=False)
    s.spec_algorithm = SimpleNamespace(is_dflash_family=lambda: False, is_none=lambda: True)
    s.max_req_input_len = 1000
    s._maybe_namespace_elastic_radix_cache = lambda req: None
    s.init_req_max_new_tokens = lambda req: None
    s.grammar_manager = SimpleNamespace(process_req_with_grammar=lambda req: False)
    s._add_request_to_queue = s.waiting_queue.append
    return s


def failing_for(rid: str, original, error: Exception):
    def step(*args, **kwargs):
        if rid in (getattr(a, "rid", a) for a in args):
            raise error
        return original(*args, **kwargs)

    return step


def assert_aborted(scheduler, rid: str, error: str):
    aborts = [o for o in scheduler.ipc_channels.send_to_tokenizer.sent if isinstance(o, AbortReq)]
    assert [a.rid for a in aborts] == [rid]
    reason = aborts[0].finished_reason
    assert reason["type"] == "abort" and reason["status_code"] == HTTPStatus.INTERNAL_SERVER_ERROR
    assert reason["message"] == f"Failed to process the request's parameters: {error}"


def test_a_request_that_fails_to_become_a_req_is_aborted_and_the_next_one_is_served(
    scheduler, monkeypatch
):
    error = TypeError("'>' not supported between instances of 'str' and 'int'")
    monkeypatch.setattr(scheduler_module, "Req", failing_for("bad", fake_req, error))
    scheduler.process_input_requests([tokenized("bad"), tokenized("good")])
    assert_aborted(scheduler, "bad", f"TypeError: {error}")
    assert [req.rid for req in scheduler.waiting_queue] == ["good"]


def test_a_failure_after_the_req_is_built_aborts_that_request_alone(scheduler):
    error = OverflowError("Python int too large to convert to C long")
    scheduler.init_req_max_new_tokens = failing_for("bad", lambda req: None, error)
    scheduler.process_input_requests([tokenized("first"), tokenized("bad"), tokenized("last")])
    assert_aborted(scheduler, "bad", f"OverflowError: {error}")
    assert [req.rid for req in scheduler.waiting_queue] == ["first", "last"]


def test_requests_that_are_processed_as_before_send_no_abort(scheduler):
    scheduler.process_input_requests([tokenized("a"), tokenized("b", temperature=0.5)])
    assert scheduler.ipc_channels.send_to_tokenizer.sent == []
    assert [req.rid for req in scheduler.waiting_queue] == ["a", "b"]
