"""0019 on sglang 0.5.23: a prefill batch ends at its chunked request also when the SWA pool, not the
chunk size, caps the chunk.  sglang's own PrefillAdder, allocator, pools, unified radix cache (Full +
SWA) and scheduler batch on CPU (swa_serving), no model forward: the admission the scheduler runs on
its waiting queue, with an SWA pool too full for two long prompts: the first is cut to what the SWA
pool can take (PrefillAdder._swa_chunk_cap), and no second request is cut in the same batch
(upstream 0.5.23 still cuts the next one too, when its smaller decode budget leaves it a cap above
zero).  0.5.23 names a request's extend end req.extend_end and releases a tree lock with
cache.unlock(req.lock).  The main series' served-loop test (test_served_requests_give_every_slot_back,
on test/patches/overlap_scheduler.py, a model of 0.5.17's event_loop_overlap) is not carried: the same
scenario on a model of 0.5.23's event loop (checkpoint_kv_cache, reqs_to_exclude, a filter of the
running batch every step) gave every slot back with or without the patch."""

import pytest
from swa_serving import Serving, maintained_every_step, request  # noqa: F401 (a fixture)

from sglang.srt.managers.schedule_policy import AddReqResult, PrefillAdder


pytestmark = pytest.mark.usefixtures("maintained_every_step")


def stops_mid_prompt(req) -> bool:
    return req.extend_end < len(req.full_untruncated_fill_ids)


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
        serving.cache.unlock(req.lock)
