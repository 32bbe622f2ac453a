"""Does the frozen-KV MTP draft's trtllm_mha backend see the target's SWA pool? (issue #6)

    python crash_repro/frozen-kv-mtp-swa-pages/draft_backend_swa_state.py [--tree DIR]

Wires a draft model runner the way sglang's frozen-KV MTP worker does: it owns a small non-SWA KV
pool and shares the target's SWA allocator.  Asks TRTLLMHAAttnBackend which SWA pool it would
cache for that runner (`_resolve_swa_kv_pool`, called from its constructor), then, inside
`frozen_kv_target_view` (the swap the draft forward runs under), compares it with the pool the
backend now reads.  The seed fork's B200 crash came from a backend that cached that state from the
draft's own pool: the line `draft_own_pool_is_swa` shows what such a backend would have cached.

Runs on CPU (the backend's constructor needs FlashInfer on a GPU, so only its resolver is called).
Prints one JSON line; exits 1 if the backend's state disagrees with the swapped pool (the stale
state issue #6 describes), 0 if it agrees.
"""

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace


def pools():
    """The target's SWA pool and allocator, and the draft's own (non-SWA) pool."""
    import torch

    from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
    from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool

    target_pool = SWAKVPool(size=256, size_swa=64, page_size=1, dtype=torch.bfloat16, head_num=1,
                            head_dim=8, swa_attention_layer_ids=[0, 1], full_attention_layer_ids=[2],
                            device="cpu")
    allocator = SWATokenToKVPoolAllocator(256, 64, 1, torch.bfloat16, "cpu", target_pool, need_sort=False)
    draft_pool = MHATokenToKVPool(64, page_size=1, dtype=torch.bfloat16, head_num=1, head_dim=8, layer_num=1,
                                  device="cpu", enable_memory_saver=False)
    return target_pool, allocator, draft_pool


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", help="an sglang source tree (TREE/python/sglang); default: the installed sglang")
    args = parser.parse_args()
    if args.tree:
        sys.path.insert(0, str(Path(args.tree) / "python"))
    from sglang.srt.layers.attention.trtllm_mha_backend import TRTLLMHAAttnBackend
    from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
    from sglang.srt.speculative.frozen_kv_mtp_info import FrozenKVMTPContext
    from sglang.srt.speculative.frozen_kv_mtp_utils import frozen_kv_target_view
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    target_pool, allocator, draft_pool = pools()
    draft_runner = SimpleNamespace(  # as the frozen-KV MTP worker sets up its draft runner
        token_to_kv_pool=draft_pool, token_to_kv_pool_allocator=allocator, is_draft_worker=True,
        spec_algorithm=SpeculativeAlgorithm.FROZEN_KV_MTP)
    cached = TRTLLMHAAttnBackend._resolve_swa_kv_pool(draft_runner)
    backend = SimpleNamespace(token_to_kv_pool=draft_pool)  # what the view swaps
    forward_batch = SimpleNamespace(spec_info=None)
    with frozen_kv_target_view(forward_batch, FrozenKVMTPContext(target_pool, {0: 0}), backend):
        swapped = backend.token_to_kv_pool
        result = {
            "swapped_pool_is_target_swa_pool": swapped is target_pool,
            "backend_use_sliding_window_kv_pool": cached is not None,
            "backend_swa_pool_is_swapped_pool": cached is swapped,
            "draft_own_pool_is_swa": isinstance(draft_pool, SWAKVPool),
        }
    result["agrees"] = (result["swapped_pool_is_target_swa_pool"] and result["backend_use_sliding_window_kv_pool"]
                        and result["backend_swa_pool_is_swapped_pool"])
    print(json.dumps(result))
    return 0 if result["agrees"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
