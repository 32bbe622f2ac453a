"""Scheduler.event_loop_overlap's KV bookkeeping without a model, on swa_serving's pools and radix
cache: the order in which the overlap scheduler admits, merges, decodes, retracts and processes
results. Patch 0019's test and crash_repro/swa-capped-chunk-pool-leak/cpu_fuzz.py drive it."""

from swa_serving import NEXT_TOKEN, Serving

from sglang.srt.managers.schedule_batch import FINISH_LENGTH
from sglang.srt.managers.schedule_policy import AddReqResult, PrefillAdder
from sglang.srt.mem_cache.common import maybe_cache_unfinished_req, release_kv_cache
from sglang.srt.runtime_context import get_server_args


class OverlapScheduler:
    """Scheduler.event_loop_overlap's KV bookkeeping: get_next_batch_to_run (stash the chunked
    request, merge the last prefill batch, admit a prefill batch, else update the running batch:
    check_decode_mem, retract_decode, prepare_for_decode), launch, then process the previous
    batch's result (a prefill's first token, a decode token, finish)."""

    def __init__(self, serving: Serving, chunk: int):
        self.s, self.chunk = serving, chunk
        self.waiting, self.chunked_req, self.last_batch, self.results = [], None, None, []
        self.running = serving.batch([])
        self.forward_ct, self.retracted, self.new_token_ratio = 0, 0, 0.5

    def prefill_batch(self):
        if not self.waiting and self.chunked_req is None:
            return None
        adder = PrefillAdder(
            self.s.page_size,
            self.s.cache,
            self.s.allocator,
            self.running,
            self.new_token_ratio,
            4096,
            self.chunk,
        )
        if self.chunked_req is not None:
            self.chunked_req.init_next_round_input()
            self.chunked_req = adder.add_chunked_req(self.chunked_req)
        for req in self.waiting:
            if len(adder.can_run_list) >= self.s.req_to_token_pool.available_size():
                break
            req.init_next_round_input(self.s.cache)
            if (
                adder.add_one_req(
                    req, has_chunked_req=self.chunked_req is not None, truncation_align_size=None
                )
                != AddReqResult.CONTINUE
            ):
                break
        if not adder.can_run_list:
            return None
        self.waiting = [r for r in self.waiting if r not in adder.can_run_list]
        if adder.new_chunked_req is not None:
            assert self.chunked_req is None
            self.chunked_req = adder.new_chunked_req
        if self.chunked_req is not None:
            self.chunked_req.inflight_middle_chunks += 1
        batch = self.s.batch(adder.can_run_list, overlap=True, chunked_req=self.chunked_req)
        batch.prepare_for_extend()
        return batch

    def decode_batch(self):
        batch = self.running
        batch.filter_batch()
        if batch.is_empty():
            return None
        if not batch.check_decode_mem():
            retracted, self.new_token_ratio, aborted = batch.retract_decode(get_server_args())
            assert not aborted
            self.retracted += len(retracted)
            self.waiting.extend(retracted)
        batch.prepare_for_decode()
        return batch

    @staticmethod
    def sample(req) -> None:
        req.output_ids.append(NEXT_TOKEN)
        if len(req.output_ids) >= req.sampling_params.max_new_tokens:
            req.finished_reason = FINISH_LENGTH(length=req.sampling_params.max_new_tokens)

    def process_result(self) -> None:
        batch = self.results.pop(0)
        if batch.forward_mode.is_extend():
            for req in batch.reqs:
                if (req.finished() and req.inflight_middle_chunks <= 0) or req.is_retracted:
                    continue
                if req.inflight_middle_chunks > 0:
                    req.inflight_middle_chunks -= 1
                    continue
                self.sample(req)
                if req.finished():
                    release_kv_cache(req, self.s.cache)
                else:
                    maybe_cache_unfinished_req(req, self.s.cache)
            return
        self.s.allocator.free_group_begin()
        for req in batch.reqs:
            if req.finished() or req.is_retracted:
                continue
            self.sample(req)
            if req.finished():
                release_kv_cache(req, self.s.cache)
        self.s.allocator.free_group_end()

    def step(self) -> None:
        exclude = []
        if self.chunked_req is not None:
            exclude.append(self.chunked_req)
            if self.chunked_req.extend_range.end > len(self.chunked_req.prefix_indices):
                maybe_cache_unfinished_req(self.chunked_req, self.s.cache, chunked=True)
        last = self.last_batch
        if last is not None and last.forward_mode.is_extend():
            if last.chunked_req is not None:
                exclude.append(last.chunked_req)
            last.filter_batch(chunked_req_to_exclude=exclude)
            if not last.is_empty():
                if self.running.is_empty():
                    self.running = last
                else:
                    self.running.merge_batch(last)
        batch = self.prefill_batch() or self.decode_batch()
        # two prefill batches in a row run one after the other, the rest overlapped
        in_order = (
            batch is not None
            and last is not None
            and batch.forward_mode.is_extend()
            and last.forward_mode.is_extend()
        )
        if in_order and self.results:
            self.process_result()
        if batch is not None:
            self.forward_ct += 1
            batch.forward_iter = self.forward_ct
            self.results.append(batch.copy())
        if self.results and not in_order:
            self.process_result()
        self.last_batch = batch

    def idle(self) -> bool:
        return (
            not self.waiting
            and self.chunked_req is None
            and not self.results
            and all(r.finished() for r in self.running.reqs)
        )


__all__ = ["OverlapScheduler"]
