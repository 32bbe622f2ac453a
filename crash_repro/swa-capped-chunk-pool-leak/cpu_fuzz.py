"""CPU fuzzer used in the triage: the overlap scheduler's KV bookkeeping (admission, chunked prefill,
merge, decode with SWA maintenance, retraction, finish) on sglang's own classes, random workloads,
and after every step an exact owner count of every SWA slot (free list, radix-tree SWA values,
running requests' private tails). Usage, from the repository root:

  SGLANG_SWA_EVICTION_INTERVAL=1 SGLANG_GEMMA4_TREE=<tree> .venv-test/bin/python \
      crash_repro/swa-capped-chunk-pool-leak/cpu_fuzz.py 8

prints LEAK (a slot with no owner or two) / EXC (Out of memory in prefill) per seed and `bad N`.
Pristine 0.5.17, 8 seeds: bad 4; with patch 0019: bad 0 (the scheduler loop is test/patches/overlap_scheduler.py)."""
import os
import random
import sys
from collections import Counter
from pathlib import Path

TEST = Path(__file__).resolve().parents[2] / "test"
sys.path[:0] = [str(TEST), str(TEST / "patches")]
os.environ.setdefault("TRITON_INTERPRET", "1")
import patched_tree  # noqa

import torch
from overlap_scheduler import OverlapScheduler
from swa_serving import Serving, publish_server_args, request, reset_context

from sglang.srt.mem_cache.unified_cache.components import ComponentType


def owners(s: Serving, sch: OverlapScheduler):
    """Exact ownership of SWA slots: free list, tree SWA values, requests' private tails."""
    alloc = s.allocator.swa_attn_allocator
    free = Counter(torch.cat([alloc.free_pages, alloc.release_pages]).tolist())
    tree = Counter()
    core = s.cache.tree_core
    stack = [core.root_node]
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
    for b in sch.results:
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


def run(seed, n=12, window=8, size=512, size_swa=96, chunk=32, shared=True, max_new=(4, 40), plen=(4, 60),
        strict=True):
    rng = random.Random(seed)
    publish_server_args()
    try:
        s = Serving(1, window, size=size, size_swa=size_swa)
        sch = OverlapScheduler(s, chunk)
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
            sch.step()
            if strict:
                pr = owners(s, sch)
                if pr:
                    return False, f"seed={seed} step={steps} owner problems (slot, free, tree, held): {pr[:10]} n={len(pr)}", sch.retracted
            steps += 1
            if not pending and sch.idle():
                break
            assert steps < 5000, "no progress"
        ok, msg = check(s, f"seed={seed}")
        return ok, msg, sch.retracted
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
