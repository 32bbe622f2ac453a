"""0016: with SGLANG_OPT_SWA_RELEASE_PASSED_PREFIX=1 a decoding request keeps the SWA KV of its
cached prompt locked only while its sliding window still reads it.  sglang's own allocator, pools,
radix cache and scheduler batch on CPU (swa_serving), page size 1 and 4, a window of 8 tokens, the
SWA maintenance at every decode step (SGLANG_SWA_EVICTION_INTERVAL=1):

- a prompt token's SWA slot stops being protected at the step its position falls below the
  request's window start, and not before (pool accounting step by step);
- after evicting everything evictable, every token inside any running request's window still has
  its SWA slot and every token below its window has none (prompt and decode tokens alike), also
  when two requests share a prefix, for a chunked prompt and around a retraction;
- a second request sharing the prompt is matched with the first one's full-attention indices;
- the part of the prompt released at each maintenance is joined back into the released node above
  it, so the request's path stays a few tree nodes however many maintenances ran (also when the
  released SWA KV is evicted between them), and a node another request's prefix ends at is kept;
- when every request has finished or been retracted, both pools return to their size (no slot
  leaked or freed twice) and the radix tree passes its own sanity check.

Off (the default), the prompt's last window stays locked until the request ends, as upstream."""

import pytest
import torch
from swa_serving import Serving, maintained_every_step, request  # noqa: F401 (a fixture)

from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

WINDOW = 8


pytestmark = pytest.mark.usefixtures("maintained_every_step")


@pytest.fixture(autouse=True)
def switch_on_by_default(monkeypatch):
    monkeypatch.delenv("SGLANG_OPT_SWA_RELEASE_PASSED_PREFIX", raising=False)


def window_start(serving: Serving, req) -> int:
    """The first position the request's last prepared decode step may read in its sliding-window
    layers, page-floored: the position it attends from (its last KV slot's) less the window, at
    least one page back."""
    page = serving.page_size
    return max(0, (req.kv.kv_allocated_len - 1 - max(WINDOW, page)) // page * page)


def maintained(req) -> bool:
    """Whether this decode step ran the request's SWA maintenance: not in its first decode step,
    which the overlap scheduler prepares while the prefill still runs."""
    return req.decode_batch_idx >= 2


def private_swa(serving: Serving, req) -> int:
    """SWA slots the request holds outside the tree: its uncached tail not yet freed, whole
    pages."""
    page = serving.page_size
    allocated = -(-req.kv.kv_allocated_len // page) * page
    return allocated - max(req.cache_protected_len, req.kv.swa_evicted_seqlen)


def assert_pools_add_up(serving: Serving):
    """Every SWA slot is free, in the tree (evictable or protected) or held by a running request."""
    held = sum(private_swa(serving, r) for r in serving.running.reqs)
    assert (
        serving.allocator.swa_available_size()
        + serving.cache.swa_evictable_size()
        + serving.cache.swa_protected_size()
        + held
    ) == serving.size_swa


def assert_windows_resident(serving: Serving, exact: bool = True):
    """Evict all that may go; then each running request has SWA KV from its window start on, and
    (`exact`, once every request has had its maintenance) none below it but what another reads."""
    serving.evict_all()
    windows = {
        req.rid: serving.kv_indices(req)[window_start(serving, req) :]
        for req in serving.running.reqs
    }
    for req in serving.running.reqs:
        assert serving.has_swa(windows[req.rid]).all(), (
            f"{req.rid}: a slot inside its window was freed"
        )
    if exact and all(maintained(req) for req in serving.running.reqs):
        read = torch.cat(list(windows.values()))
        for req in serving.running.reqs:
            below = serving.kv_indices(req)[: window_start(serving, req)]
            below = below[~torch.isin(below, read)]
            assert not serving.has_swa(below).any(), f"{req.rid}: a slot below its window kept SWA"
    assert_pools_add_up(serving)


def path_nodes(serving: Serving, req) -> list:
    """The tree nodes from the request's last node up to the root (excluded), bottom-up."""
    core = serving.cache.tree_core
    node, nodes = core.node_by_id(req.last_node), []
    while node is not core.root_node:
        nodes.append(node)
        node = node.parent
    return nodes


def assert_all_returned(serving: Serving):
    serving.evict_all()
    assert serving.allocator.full_available_size() == serving.size
    assert serving.allocator.swa_available_size() == serving.size_swa
    assert serving.cache.swa_protected_size() == 0 and serving.cache.full_protected_size() == 0
    serving.cache.sanity_check()


@pytest.mark.parametrize("page", [1, 4])
def test_prompt_swa_turns_evictable_exactly_as_the_window_passes(page):
    serving = Serving(page, WINDOW)
    req = request("a", list(range(100, 132)))
    serving.admit(req)
    cached = req.cache_protected_len
    locked_at_prefill = serving.cache.swa_protected_size()
    assert 0 < locked_at_prefill <= cached

    def check():
        # the prompt's locked tail ends at `cached`; what lies below the window start is released
        expected = max(0, min(locked_at_prefill, cached - window_start(serving, req)))
        assert serving.cache.swa_protected_size() == expected
        assert_pools_add_up(serving)

    serving.decode(24, check)
    assert serving.cache.swa_protected_size() == 0 and req.swa_prefix_lock_released
    assert_windows_resident(serving)
    serving.decode(4, lambda: assert_windows_resident(serving))
    serving.finish(req)
    assert_all_returned(serving)


@pytest.mark.parametrize("page", [1, 4])
@pytest.mark.parametrize("leaf_lock_release", ["0", "1"])
def test_a_shared_prefix_stays_for_the_request_whose_window_still_reads_it(
    monkeypatch, page, leaf_lock_release
):
    # upstream's all-at-once release after a window of decode steps may release what is left
    monkeypatch.setenv("SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW", leaf_lock_release)
    serving = Serving(page, WINDOW)
    first = request("a", list(range(100, 132)))
    serving.admit(first)
    serving.decode(12)
    # the first request has released its prompt's window; its SWA KV is still resident
    second = request("b", list(range(100, 132)) + list(range(500, 508)))
    assert torch.equal(serving.admit(second), serving.kv_indices(first)[:32])
    serving.decode(14, lambda: assert_windows_resident(serving))
    serving.finish(first)
    serving.decode(2, lambda: assert_windows_resident(serving))
    serving.finish(second)
    assert_all_returned(serving)


@pytest.mark.parametrize("page", [1, 4])
def test_retraction_gives_back_what_the_request_still_held(page):
    serving = Serving(page, WINDOW)
    first, second = (
        request("a", list(range(100, 132))),
        request("b", list(range(100, 124)) + [9] * 8),
    )
    serving.admit(first)
    serving.decode(6)
    serving.admit(second)
    serving.decode(5, lambda: assert_windows_resident(serving))
    assert serving.retract_one() is second and second.kv is None
    assert_windows_resident(serving)
    serving.decode(3, lambda: assert_windows_resident(serving))
    serving.admit(second)  # re-prefilled from what the tree still holds
    serving.decode(3, lambda: assert_windows_resident(serving))
    for req in (first, second):
        serving.finish(req)
    assert_all_returned(serving)


@pytest.mark.parametrize("page", [1, 4])
@pytest.mark.parametrize("leaf_lock_release", ["0", "1"])
def test_maintenance_every_few_steps(monkeypatch, page, leaf_lock_release):
    """SWA maintenance every 4th batch; a second request whose short suffix locks a shared node
    longer than its window; upstream's all-at-once release (on a step between maintenances)
    releases what is left of a partly released lock."""
    monkeypatch.setenv("SGLANG_SWA_EVICTION_INTERVAL", "4")
    monkeypatch.setenv("SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW", leaf_lock_release)
    leaf_releases = []
    release = UnifiedRadixCache.dec_swa_lock_only
    monkeypatch.setattr(
        UnifiedRadixCache,
        "dec_swa_lock_only",
        lambda self, *a, **k: leaf_releases.append(a) or release(self, *a, **k),
    )
    serving = Serving(page, WINDOW)
    first, second = (
        request("a", list(range(100, 140))),
        request("b", list(range(100, 128)) + [9] * 4),
    )
    serving.admit(first)
    serving.decode(5)
    serving.admit(second)
    serving.decode(24, lambda: assert_windows_resident(serving, exact=False))
    assert bool(leaf_releases) == (leaf_lock_release == "1")
    for req in (first, second):
        serving.finish(req)
    assert_all_returned(serving)


@pytest.mark.parametrize("page", [1, 4])
def test_a_chunked_prompt(page):
    serving = Serving(page, WINDOW)
    req = request("a", list(range(100, 148)))
    serving.admit(req, chunk=16)
    assert serving.cache.swa_protected_size() > 0
    serving.decode(20, lambda: assert_windows_resident(serving))
    assert serving.cache.swa_protected_size() == 0
    serving.finish(req)
    assert_all_returned(serving)


def test_a_finished_context_is_matched_with_its_full_attention_indices():
    serving = Serving(1, WINDOW)
    first = request("a", list(range(100, 124)))
    serving.admit(first)
    serving.decode(20)
    context = list(first.origin_input_ids) + list(first.output_ids[:-1])  # the tokens with KV
    indices = serving.kv_indices(first)[: len(context)].clone()
    serving.finish(first)
    second = request("b", context + [5, 6, 7])
    assert torch.equal(serving.admit(second), indices)
    serving.finish(second)
    assert_all_returned(serving)


@pytest.mark.parametrize("page", [1, 4])
@pytest.mark.parametrize("pressure", [False, True], ids=["kept", "evicted"])
def test_the_released_prompt_stays_a_few_tree_nodes(page, pressure):
    """A maintenance at every step splits the locked prompt node at every step; without the join
    the prompt would end as ~one node per step. Under pressure the released SWA KV is evicted
    after every step: then a tombstone joins the tombstone above it."""
    serving = Serving(page, WINDOW)
    req = request("a", list(range(100, 164)))
    serving.admit(req)
    prompt_nodes = len(path_nodes(serving, req))

    def check():
        if pressure:
            serving.evict_all()
        nodes = path_nodes(serving, req)
        # at most: a released tombstone, a released node with SWA KV, the locked rest
        assert len(nodes) <= max(prompt_nodes, 3)
        assert sum(len(n.key) for n in nodes) == req.cache_protected_len
        assert_pools_add_up(serving)

    serving.decode(60, check)
    assert req.swa_prefix_lock_released
    serving.cache.sanity_check()
    serving.finish(req)
    assert_all_returned(serving)


@pytest.mark.parametrize("page", [1, 4])
def test_a_node_another_request_ends_at_is_not_joined(page):
    """The second request's prompt ends inside the first one's, and its window has passed its
    prompt (SWA unlocked there) before the first one's releases reach that node."""
    serving = Serving(page, WINDOW)
    second = request("b", list(range(100, 124)))
    serving.admit(second)
    serving.decode(12)
    assert second.swa_prefix_lock_released
    first = request("a", list(range(100, 164)))
    serving.admit(first)
    last_node, prefix_len = second.last_node, sum(len(n.key) for n in path_nodes(serving, second))

    def check():
        # the first request's releases split the shared node; the second's last node stays
        assert second.last_node == last_node and last_node in serving.cache.tree_core._node_arena
        assert sum(len(n.key) for n in path_nodes(serving, second)) == prefix_len
        assert_windows_resident(serving, exact=False)

    serving.decode(30, check)
    assert len(path_nodes(serving, first)) < 8
    for req in (first, second):
        serving.finish(req)
    assert_all_returned(serving)


@pytest.mark.kill_switch
def test_off_keeps_the_prompt_window_locked_until_the_request_ends(monkeypatch):
    monkeypatch.setenv("SGLANG_OPT_SWA_RELEASE_PASSED_PREFIX", "0")
    serving = Serving(1, WINDOW)
    req = request("a", list(range(100, 132)))
    serving.admit(req)
    locked = serving.cache.swa_protected_size()

    def check():
        assert serving.cache.swa_protected_size() == locked

    serving.decode(24, check)
    serving.finish(req)
    assert_all_returned(serving)
