"""0163: with SGLANG_OPT_SWA_FREE_WINDOW_WITHOUT_SYNC=1 (the default) the SWA maintenance of a
request frees its tokens that left the sliding window without a boolean-mask select, whose size the
host must read from the device (a sync of the scheduling stream at every maintenance).  sglang's own
allocator, SWA pools, unified radix cache and scheduler batch on CPU (swa_serving), page size 1, a
window of 8 tokens, maintenance at every decode step:

- the out-of-window free runs no operation that reads a device value on the host (aten ops seen
  through a dispatch mode: a boolean-mask index, nonzero, masked_select, unique, a scalar read);
- step by step, the SWA slots in use and which full slot still holds SWA KV are the same as with the
  switch off (sglang's masked free), for requests with their own and shared prompts, a retraction
  and finished requests, and both pools return to their size at the end;
- page size 4 keeps sglang's masked free (a page can be partly freed already);
- the unified pool (--enable-unified-memory; virtual slot ids, no full-to-SWA mapping) frees a
  request's passed window through its own tombstone path, the full-attention side kept."""

from types import SimpleNamespace

import pytest
import torch
from swa_serving import Serving, maintained_every_step, request  # noqa: F401 (a fixture)
from torch.utils._python_dispatch import TorchDispatchMode
from unified_swa_pool import build_pool

from sglang.srt.managers import schedule_batch
from sglang.srt.mem_cache.common import free_swa_out_of_window_slots

WINDOW = 8
SWITCH = "SGLANG_OPT_SWA_FREE_WINDOW_WITHOUT_SYNC"
# aten ops whose output size or value the host must read from the device
HOST_READS = {
    "aten.nonzero.default",
    "aten.masked_select.default",
    "aten._local_scalar_dense.default",
    "aten._unique2.default",
    "aten.unique_dim.default",
    "aten.unique_consecutive.default",
}


class HostReads(TorchDispatchMode):
    """Records the aten ops that read a device value on the host, boolean-mask indexing included."""

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if name in HOST_READS or (
            name in ("aten.index.Tensor", "aten.index_put_.default", "aten.index_put.default")
            and any(i is not None and i.dtype in (torch.bool, torch.uint8) for i in args[1])
        ):
            self.seen.append(name)
        return func(*args, **(kwargs or {}))


pytestmark = pytest.mark.usefixtures("maintained_every_step")


@pytest.fixture
def frees(monkeypatch):
    """Each out-of-window free the batch makes, with the host reads it made; where the maintenance
    runs in a free group of the allocator (sglang 0.5.18), whose end makes the deferred frees, that
    end as one more."""
    calls = []
    free = schedule_batch.free_swa_out_of_window_slots

    def recorded(*args, **kwargs):
        with HostReads() as reads:
            free(*args, **kwargs)
        calls.append(reads.seen)

    maintain = schedule_batch.ScheduleBatch.maybe_evict_swa

    def maintained(batch):
        allocator = batch.token_to_kv_pool_allocator
        group_end = allocator.free_group_end

        def recorded_group_end():
            with HostReads() as reads:
                group_end()
            calls.append(reads.seen)

        allocator.free_group_end = recorded_group_end
        try:
            maintain(batch)
        finally:
            del allocator.free_group_end

    monkeypatch.setattr(schedule_batch, "free_swa_out_of_window_slots", recorded)
    monkeypatch.setattr(schedule_batch.ScheduleBatch, "maybe_evict_swa", maintained)
    return calls


def serve(page_size: int) -> list[tuple]:
    """Requests admitted, decoded past the window, one retracted, all finished; after each step the
    SWA slots in use and, per running request, which of its tokens still hold SWA KV."""
    serving = Serving(page_size=page_size, window=WINDOW)
    states = []

    def record():
        held = [serving.has_swa(serving.kv_indices(r)).tolist() for r in serving.running.reqs]
        states.append((serving.swa_slots_in_use(), held))

    shared = list(range(100, 120))
    first, second, third = (
        request("a", shared),
        request("b", shared + [7, 8, 9]),
        request("c", list(range(300, 311))),
    )
    serving.admit(first)
    serving.decode(6, check=record)
    serving.admit(second)
    serving.admit(third)
    serving.decode(14, check=record)
    serving.retract_one()
    serving.decode(5, check=record)
    for req in list(serving.running.reqs):
        serving.finish(req)
    serving.evict_all()
    states.append(
        (serving.swa_slots_in_use(), serving.size - serving.allocator.full_available_size())
    )
    return states


def test_window_free_reads_nothing_from_the_device(monkeypatch, frees):
    monkeypatch.delenv(SWITCH, raising=False)
    serve(page_size=1)
    assert len(frees) > 20  # a maintenance per request per step
    assert [seen for seen in frees if seen] == []


def test_same_slots_freed_as_the_masked_free(monkeypatch):
    monkeypatch.delenv(SWITCH, raising=False)
    without_sync = serve(page_size=1)
    monkeypatch.setenv(SWITCH, "0")
    masked = serve(page_size=1)
    assert without_sync == masked
    assert without_sync[-1] == (0, 0)  # nothing leaked, nothing freed twice
    # the window slid: some running request's oldest tokens gave their SWA slots back
    assert any(not all(held) for _, per_req in without_sync[:-1] for held in per_req)


def test_pages_keep_the_masked_free(monkeypatch, frees):
    monkeypatch.delenv(SWITCH, raising=False)
    assert serve(page_size=4)[-1] == (0, 0)
    assert any(frees)  # sglang's masked free, page by page


def test_the_unified_pool_frees_the_passed_window_of_a_request(monkeypatch):
    monkeypatch.delenv(SWITCH, raising=False)
    allocator = build_pool("26b-a4b", full_tokens=4_000, swa_tokens=400).token_to_kv_pool_allocator
    slots = allocator.alloc(300).to(torch.int64)
    req_to_token = torch.zeros(1, 300, dtype=torch.int64)
    req_to_token[0] = slots
    req = SimpleNamespace(
        kv=SimpleNamespace(swa_evicted_seqlen=0), cache_protected_len=0, req_pool_idx=0
    )
    free_swa_out_of_window_slots(
        req,
        300,
        sliding_window_size=WINDOW,
        page_size=1,
        req_to_token_pool=SimpleNamespace(req_to_token=req_to_token),
        token_to_kv_pool_allocator=allocator,
        is_chunk_cache=True,
    )
    passed = req.kv.swa_evicted_seqlen
    assert passed >= 300 - WINDOW - 1
    swa = allocator.swa_attn_allocator.virtual_to_physical
    assert bool((swa[slots[:passed]] == -1).all()) and bool((swa[slots[passed:]] > 0).all())
    assert bool((allocator.full_attn_allocator.virtual_to_physical[slots] > 0).all())
