"""0019: a prefill batch ends at its chunked request also when the SWA pool, not the chunk size,
caps the chunk.  sglang's own PrefillAdder, allocator, pools, unified radix cache (Full + SWA) and
scheduler batch on CPU (swa_serving), no model forward:

- the admission the scheduler runs on its waiting queue, with an SWA pool too full for two long
  prompts: the first is cut to what the SWA pool can take (PrefillAdder._swa_chunk_cap), and no
  second request is cut in the same batch (upstream cuts the next one too, when its smaller decode
  budget leaves it a cap above zero, and the scheduler then treats the first as fully prefilled);
- the overlap scheduler's loop (admission and chunked prefill, merge into the running batch, decode
  with the SWA maintenance, retraction when the pool is full, finish) serving 48 requests with
  the served crash's proportions (window above every request's decode budget, SWA pool a few
  windows, every request the same max_new_tokens, so only a retracted request's smaller budget
  lets a second chunk in): every request finishes with no out-of-memory in prefill, and at idle
  each pool's free and evictable slots add up to its size, as the scheduler's idle leak check
  requires (upstream leaks SWA slots or raises "Out of memory" with enough SWA available).

Both fail on pristine sglang 0.5.17 (crash_repro/swa-capped-chunk-pool-leak)."""

import random

import pytest
from overlap_scheduler import OverlapScheduler
from swa_serving import Serving, maintained_every_step, request  # noqa: F401 (a fixture)

from sglang.srt.managers.schedule_policy import AddReqResult, PrefillAdder

pytestmark = pytest.mark.usefixtures("maintained_every_step")


def stops_mid_prompt(req) -> bool:
    return req.extend_range.end < len(req.full_untruncated_fill_ids)


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
        if (
            adder.add_one_req(req, has_chunked_req=False, truncation_align_size=None)
            != AddReqResult.CONTINUE
        ):
            break
    assert adder.can_run_list[0] is first and stops_mid_prompt(first), (
        "the SWA pool no longer caps the chunk"
    )
    cut = [req.rid for req in adder.can_run_list if stops_mid_prompt(req)]
    assert cut == ["first"] and adder.new_chunked_req is first, (
        f"{cut} stop mid-prompt; the scheduler tracks only {adder.new_chunked_req.rid}"
    )
    for req in adder.can_run_list:
        serving.cache.dec_lock_ref(req.last_node)


@pytest.mark.parametrize("seed", range(4))
def test_served_requests_give_every_slot_back(seed):
    rng = random.Random(seed)
    serving = Serving(1, window=32, size=512, size_swa=160)
    scheduler = OverlapScheduler(serving, chunk=64)
    arriving = [
        request(
            f"r{i}",
            [1] + [rng.randrange(100, 900) for _ in range(rng.randint(20, 120))],
            max_new_tokens=12,
        )
        for i in range(48)
    ]
    for _ in range(4000):
        while arriving and rng.random() < 0.5:
            scheduler.waiting.append(arriving.pop(0))
        scheduler.step()
        if not arriving and scheduler.idle():
            break
    assert not arriving and scheduler.idle(), "the requests did not finish"
    assert scheduler.retracted > 0, "no retraction: the pools were never full"
    cache, allocator = serving.cache, serving.allocator
    assert cache.swa_protected_size() == 0 and cache.full_protected_size() == 0
    assert allocator.swa_available_size() + cache.swa_evictable_size() == serving.size_swa, (
        "SWA slots leaked"
    )
    assert allocator.full_available_size() + cache.full_evictable_size() == serving.size
    cache.sanity_check()
