"""Does the frozen-KV MTP draft's trtllm_mha backend see the target's SWA pool? (issue #6)

    python crash_repro/frozen-kv-mtp-swa-pages/draft_backend_swa_state.py [--tree DIR]

Wires a TRTLLMHAAttnBackend the way sglang's FrozenKVMTPWorker wires the draft's: the draft model
runner owns a small non-SWA KV pool and shares the target's SWA allocator.  Then, inside
`frozen_kv_target_view` (the swap the draft forward runs under), compares the backend's cached SWA
state (`use_sliding_window_kv_pool`, `_swa_kv_pool`) with the pool the forward batch now reads.
The seed fork's B200 crash came from a backend that cached that state from the draft's own pool:
the line `draft_own_pool_is_swa` shows what such a backend would have cached.

Runs on CPU: FlashInfer's parent backend needs a GPU, so its __init__ is skipped; only the
trtllm_mha constructor's own state is built.  Prints one JSON line; exits 1 if the backend's state
disagrees with the swapped pool (the stale state issue #6 describes), 0 if it agrees.
"""

import argparse
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("SGLANG_FLASHINFER_WORKSPACE_SIZE", "1024")  # the backend allocates this on the device


def pools():
    """The target's SWA pool and allocator, and the draft's own (non-SWA) pool."""
    import torch

    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
    from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool, SWATokenToKVPoolAllocator

    target_pool = SWAKVPool(size=256, size_swa=64, page_size=1, dtype=torch.bfloat16, head_num=1,
                            head_dim=8, swa_attention_layer_ids=[0, 1], full_attention_layer_ids=[2],
                            enable_kvcache_transpose=False, device="cpu")
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
    import torch

    from sglang.srt.layers.attention import trtllm_mha_backend
    from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
    from sglang.srt.speculative.frozen_kv_mtp_info import FrozenKVMTPContext
    from sglang.srt.speculative.frozen_kv_mtp_utils import frozen_kv_target_view

    target_pool, allocator, draft_pool = pools()
    draft_runner = SimpleNamespace(
        token_to_kv_pool=draft_pool, token_to_kv_pool_allocator=allocator,  # as FrozenKVMTPWorker sets them
        model_config=SimpleNamespace(context_len=256, hidden_size=8), kv_cache_dtype=torch.bfloat16,
        dtype=torch.bfloat16, page_size=1, req_to_token_pool=SimpleNamespace(req_to_token=None), device="cpu",
        server_args=SimpleNamespace(speculative_eagle_topk=1, speculative_num_draft_tokens=4))
    parent_init = trtllm_mha_backend.FlashInferAttnBackend.__init__
    trtllm_mha_backend.FlashInferAttnBackend.__init__ = lambda self, *a, **k: None
    try:
        backend = trtllm_mha_backend.TRTLLMHAAttnBackend(draft_runner)
    finally:
        trtllm_mha_backend.FlashInferAttnBackend.__init__ = parent_init

    forward_batch = SimpleNamespace(spec_info=None, token_to_kv_pool=draft_pool)
    with frozen_kv_target_view(forward_batch, FrozenKVMTPContext(target_pool, {0: 0})):
        swapped = forward_batch.token_to_kv_pool
        result = {
            "swapped_pool_is_target_swa_pool": swapped is target_pool,
            "backend_use_sliding_window_kv_pool": backend.use_sliding_window_kv_pool,
            "backend_swa_pool_is_swapped_pool": backend._swa_kv_pool is swapped,
            "draft_own_pool_is_swa": isinstance(draft_pool, SWAKVPool),
        }
    result["agrees"] = (result["swapped_pool_is_target_swa_pool"] and result["backend_use_sliding_window_kv_pool"]
                        and result["backend_swa_pool_is_swapped_pool"])
    print(json.dumps(result))
    return 0 if result["agrees"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
