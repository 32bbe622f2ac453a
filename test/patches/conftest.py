from dataclasses import fields
from types import SimpleNamespace

# Importing patched_tree (test/patched_tree.py) puts the patched sglang first on sys.path before any
# test imports it.
import patched_tree  # noqa: F401
import pytest


@pytest.fixture
def one_process_group():
    """Tensor parallelism of one, as a single-GPU server sets it up."""
    from sglang.srt.distributed import parallel_state

    parallel_state.init_distributed_environment(
        world_size=1,
        rank=0,
        local_rank=0,
        backend="gloo",
        distributed_init_method="tcp://127.0.0.1:29517",
    )
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=1)
    yield
    parallel_state.destroy_model_parallel()
    parallel_state.destroy_distributed_environment()


class DecodingReq:
    """What the decode step's result processing reads of a Req. Its stop check raises `failure`
    where one is given, else finishes the request with what the step set in to_finish, else with
    `finish` (None: the request goes on)."""

    def __init__(self, rid, failure=None, finish=None):
        self.rid, self.failure, self.finish = rid, failure, finish
        self.output_ids, self.to_finish, self.finished_reason = [], None, None
        self.return_logprob = self.return_sampling_mask = self.return_hidden_states = False
        self.grammar = None
        self.time_stats = SimpleNamespace(set_last_decode_finish_time=lambda: None)

    def finished(self):
        return self.finished_reason is not None

    def update_finish_state(self, new_accepted_len=1):
        if self.failure:
            raise self.failure
        if self.to_finish:
            self.finished_reason, self.to_finish = self.to_finish, None
        elif self.finish:
            self.finished_reason = self.finish


class Streamer:
    def __init__(self):
        self.streamed = []

    def stream_output(self, reqs, return_logprob):
        self.streamed.append([r.rid for r in reqs])


@pytest.fixture
def decoding_req():
    return DecodingReq


@pytest.fixture
def decode_step(monkeypatch):
    """The scheduler's result processing of one decode step over DecodingReqs, its collaborators
    stubbed: decode_step(reqs, logits_output, next_token_ids) returns the processor it ran, whose
    output_streamer.streamed lists the rids streamed."""
    from sglang.srt.managers.scheduler_components import batch_result_processor as brp
    from sglang.srt.managers.utils import GenerationBatchResult

    cls = brp.SchedulerBatchResultProcessor
    monkeypatch.setattr(brp, "get_observability", lambda: SimpleNamespace(enable_metrics=False))
    monkeypatch.setattr(cls, "_maybe_update_reasoning_tokens", lambda self, req, tok: None)
    monkeypatch.setattr(cls, "_handle_finish_state_updated_req", lambda self, *a: None)

    def run(reqs, logits_output, next_token_ids):
        parts = {f.name: None for f in fields(cls)}
        parts.update(
            enable_overlap=False,
            enable_overlap_mlx=False,
            output_streamer=Streamer(),
            metrics_reporter=SimpleNamespace(
                num_generated_tokens=0,
                forward_ct_decode=0,
                report_decode_stats=lambda *a, **k: None,
            ),
            token_to_kv_pool_allocator=SimpleNamespace(
                free_group_begin=lambda: None, free_group_end=lambda: None
            ),
        )
        processor = cls(**parts)
        batch = SimpleNamespace(
            reqs=reqs,
            spec_algorithm=SimpleNamespace(is_none=lambda: True),
            return_logprob=False,
            batch_size=lambda: len(reqs),
        )
        processor.process_batch_result_decode(
            batch, GenerationBatchResult(logits_output=logits_output, next_token_ids=next_token_ids)
        )
        return processor

    return run
