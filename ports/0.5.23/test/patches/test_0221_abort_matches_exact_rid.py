"""0221: an abort names one request: the scheduler matched the rid of an AbortReq as a prefix, so a
client that sent rid "0" and hung up aborted every queued, grammar-waiting or running request whose
rid starts with "0" (any of sixteen auto rids, which are hex uuids). Now only the exact rid is
aborted; n > 1 children are still aborted one by one by the tokenizer manager, and abort_all still
aborts everything. A client rid already in flight is refused by the tokenizer manager (400).

sglang 0.5.23's version of test/patches/test_0221_*: its abort_request also asks the encoder
receiver (none here), answers through the embedded Rust server when there is one (none here), releases and retires what it pops (stood in), answers with the weight version of the published
serving config (stood in), and finds the running
requests through collect_inflight_reqs."""

from types import SimpleNamespace

import pytest

from sglang.srt.constrained.grammar_manager import GrammarManager
from sglang.srt.disaggregation.utils import DisaggregationMode
from sglang.srt.managers.io_struct import AbortReq
from sglang.srt.managers.schedule_batch import FINISH_ABORT
from sglang.srt.managers import scheduler as scheduler_module
from sglang.srt.managers.scheduler import Scheduler

RIDS = ["0", "0abc", "0" + "f" * 31, "1"]


class Outbox:
    def __init__(self):
        self.sent = []

    def send_output(self, output, recv_obj=None):
        self.sent.append(output)


class FakeReq:
    def __init__(self, rid):
        self.rid, self.to_finish, self.finished_reason = rid, None, None
        self.mamba_pool_idx = None
        self.grammar = None
        self.weight_version_events, self.output_ids = [], []
        self.kv = SimpleNamespace(holds_mamba=False)

    def finished(self):
        return self.finished_reason is not None

    def set_finish_with_abort(self, error_msg):
        self.to_finish = FINISH_ABORT(error_msg)


@pytest.fixture(autouse=True)
def serving_config(monkeypatch):
    """The published serving config the abort answer reads its weight version from."""
    monkeypatch.setattr(scheduler_module, "get_serving", lambda: SimpleNamespace(weight_version=None))


def make_scheduler(waiting=(), running=(), grammar_waiting=()):
    s = object.__new__(Scheduler)
    s.chunked_req = None
    s.waiting_queue = [FakeReq(r) for r in waiting]
    s.enable_hicache_storage = False
    s.ipc_channels = SimpleNamespace(send_to_tokenizer=Outbox())
    s.disaggregation_mode = DisaggregationMode.NULL
    s.dllm_config = None
    grammar = object.__new__(GrammarManager)
    grammar.grammar_queue = [FakeReq(r) for r in grammar_waiting]
    s.grammar_manager = grammar
    s.ps = SimpleNamespace(pp_size=1)
    s.running_batch = SimpleNamespace(reqs=[FakeReq(r) for r in running])
    s.last_batch = None
    s.mm_receiver = s.rust_server = None
    s._release_aborted_request = lambda req: None
    s.beam_coordinator = SimpleNamespace(retire_group=lambda req: None)
    s.collect_inflight_reqs = lambda: set(s.running_batch.reqs)
    return s


def test_abort_of_a_queued_request_leaves_rids_it_prefixes_queued():
    s = make_scheduler(waiting=RIDS)
    s.abort_request(AbortReq(rid="0"))
    assert [r.rid for r in s.waiting_queue] == RIDS[1:]
    assert [o.rid for o in s.ipc_channels.send_to_tokenizer.sent] == ["0"]


def test_abort_of_a_running_request_leaves_rids_it_prefixes_running():
    s = make_scheduler(running=RIDS)
    s.abort_request(AbortReq(rid="0"))
    aborted = [r.rid for r in s.running_batch.reqs if r.to_finish is not None]
    assert aborted == ["0"]


def test_abort_of_a_grammar_waiting_request_leaves_rids_it_prefixes():
    s = make_scheduler(grammar_waiting=RIDS)
    s.abort_request(AbortReq(rid="0"))
    assert [r.rid for r in s.grammar_manager.grammar_queue if r.to_finish is not None] == ["0"]


def test_abort_all_still_aborts_everything():
    s = make_scheduler(waiting=RIDS[:2], running=RIDS[2:])
    s.abort_request(AbortReq(rid="", abort_all=True))
    assert s.waiting_queue == []
    assert all(r.to_finish is not None for r in s.running_batch.reqs)


def test_a_client_rid_already_in_flight_is_refused():
    from sglang.srt.managers.io_struct import GenerateReqInput
    from sglang.srt.managers.tokenizer_manager import TokenizerManager

    tm = object.__new__(TokenizerManager)
    tm.rid_to_state, tm.logical_rid_to_child_rids, tm.child_rid_to_logical_rid = {}, {}, {}
    tm.enable_trace = False
    tm.disaggregation_mode = DisaggregationMode.NULL
    first = GenerateReqInput(text="a", rid="0")
    first.normalize_batch_and_arguments()
    first.received_time = 0.0
    tm._init_req_state(first)
    again = GenerateReqInput(text="b", rid="0")
    again.normalize_batch_and_arguments()
    again.received_time = 0.0
    with pytest.raises(ValueError, match="Duplicate request ID"):
        tm._init_req_state(again)
