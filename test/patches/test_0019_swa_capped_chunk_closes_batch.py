"""0019: a prefill batch ends at its chunked request also when the SWA pool, not the chunk size, caps
the chunk.  sglang's own PrefillAdder, allocator, pools, unified radix cache (Full + SWA) and
scheduler batch on CPU (swa_serving), no model forward:

- the admission the scheduler runs on its waiting queue, with an SWA pool too full for two long
  prompts: the first is cut to what the SWA pool can take (PrefillAdder._swa_chunk_cap), and no
  second request is cut in the same batch (upstream cuts the next one too, when its smaller decode
  budget leaves it a cap above zero, and the scheduler then treats the first as fully prefilled);
- the overlap scheduler's loop (admission and chunked prefill, merge into the running batch, decode
  with the SWA maintenance, retraction when the pool is full, finish) serving sixteen requests with
  the served crash's proportions (window above every request's decode budget, SWA pool a few
  windows, every request the same max_new_tokens, so only a retracted request's smaller budget
  lets a second chunk in): every request finishes with no out-of-memory in prefill, and at idle
  each pool's free and evictable slots add up to its size, as the scheduler's idle leak check
  requires (upstream leaks SWA slots or raises "Out of memory" with enough SWA available).

Both fail on pristine sglang 0.5.17 (crash_repro/swa-capped-chunk-pool-leak)."""

import random

import pytest
from swa_serving import MODEL_CONFIG, NEXT_TOKEN, Serving, publish_server_args, request, reset_context

from sglang.srt.managers.schedule_batch import FINISH_LENGTH, ScheduleBatch
from sglang.srt.managers.schedule_policy import AddReqResult, PrefillAdder
from sglang.srt.mem_cache.common import maybe_cache_unfinished_req, release_kv_cache
from sglang.srt.runtime_context import get_server_args
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm


@pytest.fixture(autouse=True)
def scheduler(monkeypatch):
    monkeypatch.setenv("SGLANG_SWA_EVICTION_INTERVAL", "1")
    publish_server_args()
    yield
    reset_context()


def stops_mid_prompt(req) -> bool:
    return req.extend_range.end < len(req.full_untruncated_fill_ids)


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

    def batch(self, reqs, chunked_req=None) -> ScheduleBatch:
        s = self.s
        return ScheduleBatch.init_new(reqs, s.req_to_token_pool, s.allocator, s.cache, MODEL_CONFIG, True,
                                      SpeculativeAlgorithm.NONE, chunked_req=chunked_req)

    def prefill_batch(self):
        if not self.waiting and self.chunked_req is None:
            return None
        adder = PrefillAdder(self.s.page_size, self.s.cache, self.s.allocator, self.running,
                             self.new_token_ratio, 4096, self.chunk)
        if self.chunked_req is not None:
            self.chunked_req.init_next_round_input()
            self.chunked_req = adder.add_chunked_req(self.chunked_req)
        for req in self.waiting:
            if len(adder.can_run_list) >= self.s.req_to_token_pool.available_size():
                break
            req.init_next_round_input(self.s.cache)
            if adder.add_one_req(req, has_chunked_req=self.chunked_req is not None,
                                 truncation_align_size=None) != AddReqResult.CONTINUE:
                break
        if not adder.can_run_list:
            return None
        self.waiting = [r for r in self.waiting if r not in adder.can_run_list]
        if adder.new_chunked_req is not None:
            assert self.chunked_req is None
            self.chunked_req = adder.new_chunked_req
        if self.chunked_req is not None:
            self.chunked_req.inflight_middle_chunks += 1
        batch = self.batch(adder.can_run_list, chunked_req=self.chunked_req)
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
        in_order = batch is not None and last is not None and batch.forward_mode.is_extend() \
            and last.forward_mode.is_extend()
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
        return (not self.waiting and self.chunked_req is None and not self.results
                and all(r.finished() for r in self.running.reqs))


@pytest.mark.parametrize("page", [1, 4])
def test_an_swa_capped_chunk_is_the_last_request_of_its_batch(page):
    serving = Serving(page, window=16, size=512, size_swa=64)
    # two long prompts, the second with a smaller decode budget (in the served run: a retracted
    # request that had generated tokens already)
    first = request("first", [1] + list(range(100, 199)), max_new_tokens=16)
    second = request("second", [1] + list(range(300, 399)), max_new_tokens=4)
    adder = PrefillAdder(page, serving.cache, serving.allocator, serving.running, 0.5, 4096, 256)
    for req in (first, second):
        req.init_next_round_input(serving.cache)
        if adder.add_one_req(req, has_chunked_req=False, truncation_align_size=None) != AddReqResult.CONTINUE:
            break
    assert adder.can_run_list[0] is first and stops_mid_prompt(first), "the SWA pool no longer caps the chunk"
    cut = [req.rid for req in adder.can_run_list if stops_mid_prompt(req)]
    assert cut == ["first"] and adder.new_chunked_req is first, (
        f"{cut} stop mid-prompt; the scheduler tracks only {adder.new_chunked_req.rid}")
    for req in adder.can_run_list:
        serving.cache.dec_lock_ref(req.last_node)


@pytest.mark.parametrize("seed", range(4))
def test_served_requests_give_every_slot_back(seed):
    rng = random.Random(seed)
    serving = Serving(1, window=32, size=512, size_swa=160)
    scheduler = OverlapScheduler(serving, chunk=64)
    arriving = [request(f"r{i}", [1] + [rng.randrange(100, 900) for _ in range(rng.randint(20, 120))],
                        max_new_tokens=12) for i in range(16)]
    for _ in range(2000):
        while arriving and rng.random() < 0.5:
            scheduler.waiting.append(arriving.pop(0))
        scheduler.step()
        if not arriving and scheduler.idle():
            break
    assert not arriving and scheduler.idle(), "the requests did not finish"
    assert scheduler.retracted > 0, "no retraction: the pools were never full"
    cache, allocator = serving.cache, serving.allocator
    assert cache.swa_protected_size() == 0 and cache.full_protected_size() == 0
    assert allocator.swa_available_size() + cache.swa_evictable_size() == serving.size_swa, "SWA slots leaked"
    assert allocator.full_available_size() + cache.full_evictable_size() == serving.size
    cache.sanity_check()
