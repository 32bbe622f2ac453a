"""CPU fuzzer used in the triage: the overlap scheduler's KV bookkeeping (admission, chunked prefill,
merge, decode with SWA maintenance, retraction, finish) on sglang's own classes, random workloads,
and after every step an exact owner count of every SWA slot (free list, radix-tree SWA values,
running requests' private tails). Usage, from the repository root:

  SGLANG_SWA_EVICTION_INTERVAL=1 SGLANG_GEMMA4_TREE=<tree> .venv-test/bin/python \
      crash_repro/swa-capped-chunk-pool-leak/cpu_fuzz.py 20

prints LEAK (a slot with no owner or two) / EXC (Out of memory in prefill) per seed and `bad N`.
Pristine 0.5.17: bad 11 of 20; with patch 0019: bad 0."""
import os
import random
import sys

from pathlib import Path

TEST = Path(__file__).resolve().parents[2] / "test"
sys.path[:0] = [str(TEST), str(TEST / "patches")]
os.environ.setdefault("TRITON_INTERPRET", "1")
import patched_tree  # noqa

import torch
from swa_serving import Serving, publish_server_args, request, reset_context, MODEL_CONFIG

from sglang.srt.managers.schedule_batch import FINISH_LENGTH, ScheduleBatch
from sglang.srt.managers.schedule_policy import AddReqResult, PrefillAdder
from sglang.srt.mem_cache.common import maybe_cache_unfinished_req, release_kv_cache
from sglang.srt.runtime_context import get_server_args
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm


class Sched:
    def __init__(self, serving: Serving, chunk: int, overlap: bool = True, verbose=False):
        self.s = serving
        self.chunk = chunk
        self.overlap = overlap
        self.waiting = []
        self.chunked_req = None
        self.last_batch = None
        self.result_queue = []
        self.running = serving.batch([])
        self.forward_ct = 0
        self.retractions = 0
        self.verbose = verbose
        self.ratio = 0.5

    def batch(self, reqs, chunked_req=None):
        return ScheduleBatch.init_new(reqs, self.s.req_to_token_pool, self.s.allocator, self.s.cache,
                                      MODEL_CONFIG, self.overlap, SpeculativeAlgorithm.NONE,
                                      chunked_req=chunked_req)

    def new_prefill(self):
        if not self.waiting and self.chunked_req is None:
            return None
        adder = PrefillAdder(self.s.page_size, self.s.cache, self.s.allocator, self.running, self.ratio,
                             4096, self.chunk)
        if self.chunked_req is not None:
            self.chunked_req.init_next_round_input()
            self.chunked_req = adder.add_chunked_req(self.chunked_req)
        for req in self.waiting:
            if len(adder.can_run_list) >= self.s.req_to_token_pool.available_size():
                break
            req.init_next_round_input(self.s.cache)
            res = adder.add_one_req(req, has_chunked_req=self.chunked_req is not None,
                                    truncation_align_size=None)
            if res != AddReqResult.CONTINUE:
                break
        can_run = adder.can_run_list
        if not can_run:
            return None
        self.waiting = [r for r in self.waiting if r not in set(can_run)]
        if adder.new_chunked_req is not None:
            assert self.chunked_req is None
            self.chunked_req = adder.new_chunked_req
        if self.chunked_req is not None:
            self.chunked_req.inflight_middle_chunks += 1
        b = self.batch(can_run, chunked_req=self.chunked_req)
        b.prepare_for_extend()
        return b

    def update_running(self):
        b = self.running
        b.filter_batch()
        if b.is_empty():
            return b
        if not b.check_decode_mem():
            retracted, ratio, aborted = b.retract_decode(get_server_args())
            assert not aborted
            self.retractions += len(retracted)
            if self.verbose:
                print("retract", [r.rid for r in retracted])
            self.waiting.extend(retracted)
            self.ratio = ratio
        if b.is_empty():
            return b
        b.prepare_for_decode()
        return b

    def process(self):
        batch, = self.result_queue.pop(0)
        if batch.forward_mode.is_extend():
            for req in batch.reqs:
                if (req.finished() and req.inflight_middle_chunks <= 0) or req.is_retracted:
                    continue
                if req.inflight_middle_chunks <= 0:
                    req.output_ids.append(7)
                    self.finish_check(req)
                    if req.finished():
                        release_kv_cache(req, self.s.cache)
                    else:
                        maybe_cache_unfinished_req(req, self.s.cache)
                else:
                    req.inflight_middle_chunks -= 1
        else:
            self.s.allocator.free_group_begin()
            for req in batch.reqs:
                if self.overlap and (req.finished() or req.is_retracted):
                    continue
                req.output_ids.append(7)
                self.finish_check(req)
                if req.finished():
                    release_kv_cache(req, self.s.cache)
            self.s.allocator.free_group_end()

    @staticmethod
    def finish_check(req):
        if len(req.output_ids) >= req.sampling_params.max_new_tokens:
            req.finished_reason = FINISH_LENGTH(length=req.sampling_params.max_new_tokens)

    def step(self):
        exclude = set()
        if self.chunked_req is not None:
            exclude.add(self.chunked_req)
            if self.chunked_req.extend_range.end > len(self.chunked_req.prefix_indices):
                maybe_cache_unfinished_req(self.chunked_req, self.s.cache, chunked=True)
        lb = self.last_batch
        if lb is not None and lb.forward_mode.is_extend():
            if lb.chunked_req is not None:
                exclude.add(lb.chunked_req)
            lb.filter_batch(chunked_req_to_exclude=list(exclude))
            if not lb.is_empty():
                if self.running.is_empty():
                    self.running = lb
                else:
                    self.running.merge_batch(lb)
        batch = self.new_prefill()
        if batch is None:
            if not self.running.is_empty():
                self.running = self.update_running()
                batch = self.running if not self.running.is_empty() else None
        disable_overlap = (not self.overlap) or (batch is not None and lb is not None
                                                 and batch.forward_mode.is_extend()
                                                 and lb.forward_mode.is_extend())
        if disable_overlap and self.result_queue:
            self.process()
        if batch is not None:
            self.forward_ct += 1
            batch.forward_iter = self.forward_ct
            self.result_queue.append((batch.copy(),))
        if self.result_queue and not disable_overlap:
            self.process()
        self.last_batch = batch
        return batch is not None or bool(self.result_queue)


def owners(s: Serving, sch):
    """Exact ownership of SWA slots: free list, tree SWA values, requests' private tails."""
    from collections import Counter
    alloc = s.allocator.swa_attn_allocator
    free = Counter(torch.cat([alloc.free_pages, alloc.release_pages]).tolist())
    tree = Counter()
    core = s.cache.tree_core
    stack = [core.root_node]
    from sglang.srt.mem_cache.unified_cache.components import ComponentType
    while stack:
        n = stack.pop()
        stack.extend(n.children.values())
        if n is core.root_node:
            continue
        v = n.component_data[ComponentType.SWA].value
        if v is not None:
            tree.update(v.tolist())
    held = Counter()
    reqs = set(sch.running.reqs) | set(sch.waiting)
    if sch.chunked_req is not None:
        reqs.add(sch.chunked_req)
    for b, in sch.result_queue:
        reqs |= set(b.reqs)
    if sch.last_batch is not None:
        reqs |= set(sch.last_batch.reqs)
    for r in reqs:
        if r.kv is None:
            continue
        lo = max(r.cache_protected_len, r.kv.swa_evicted_seqlen)
        row = s.req_to_token_pool.req_to_token[r.req_pool_idx, lo:r.kv.kv_allocated_len].long()
        m = s.allocator.full_to_swa_index_mapping[row]
        held.update(m[m > 0].tolist())
    total = free + tree + held
    problems = []
    for slot in range(1, s.size_swa + 1):
        c = total.get(slot, 0)
        if c != 1:
            problems.append((slot, free.get(slot, 0), tree.get(slot, 0), held.get(slot, 0)))
    return problems


def check(s: Serving, tag=""):
    c = s.cache
    sa, se, sp = s.allocator.swa_available_size(), c.swa_evictable_size(), c.swa_protected_size()
    fa, fe, fp = s.allocator.full_available_size(), c.full_evictable_size(), c.full_protected_size()
    ok = (sa + se + sp == s.size_swa) and (fa + fe + fp == s.size)
    return ok, f"{tag} full a={fa} e={fe} p={fp} /{s.size}; swa a={sa} e={se} p={sp} /{s.size_swa}"


def run(seed, n=12, window=8, size=512, size_swa=96, chunk=32, overlap=True, verbose=False,
        shared=True, max_new=(4, 40), plen=(4, 60), strict=True):
    rng = random.Random(seed)
    publish_server_args()
    try:
        s = Serving(1, window, size=size, size_swa=size_swa)
        sch = Sched(s, chunk, overlap=overlap, verbose=verbose)
        base = [rng.randrange(100, 900) for _ in range(80)]
        reqs = []
        for i in range(n):
            L = rng.randint(*plen)
            if shared and rng.random() < 0.7:
                k = rng.randint(1, min(L, 60))
                prompt = [1] + base[:k] + [rng.randrange(100, 900) for _ in range(L - k)]
            else:
                prompt = [1] + [rng.randrange(100, 900) for _ in range(L)]
            reqs.append(request(f"r{i}", prompt, max_new_tokens=rng.randint(*max_new)))
        pending = list(reqs)
        steps = 0
        while True:
            # arrivals
            while pending and rng.random() < 0.5:
                sch.waiting.append(pending.pop(0))
            busy = sch.step()
            if strict:
                pr = owners(s, sch)
                if pr:
                    return False, f"seed={seed} step={steps} owner problems (slot, free, tree, held): {pr[:10]} n={len(pr)}", sch.retractions
            steps += 1
            if not busy and not pending and not sch.waiting and sch.running.is_empty() and sch.chunked_req is None:
                break
            assert steps < 5000, "no progress"
        ok, msg = check(s, f"seed={seed}")
        return ok, msg, sch.retractions
    finally:
        reset_context()


if __name__ == "__main__":
    os.environ.setdefault("SGLANG_SWA_EVICTION_INTERVAL", "1")
    bad = 0
    for seed in range(int(sys.argv[1]) if len(sys.argv) > 1 else 50):
        try:
            ok, msg, r = run(seed)
        except (AssertionError, RuntimeError) as e:
            print("EXC", seed, type(e).__name__, str(e).splitlines()[:4])
            bad += 1
            continue
        if not ok:
            bad += 1
            print("LEAK", msg, "retractions", r)
    print("bad", bad)
