"""sglang's unified hybrid-SWA KV pool (one byte buffer for the full-attention and SWA layers) built
on CPU with a Gemma-4 variant's layer shapes, and the walk of one long prompt through it: every
chunk allocates both kinds of slot, then the SWA slots the window has passed are freed, as SWA
maintenance does while a long prompt is prefilled."""

import torch

from sglang.srt.mem_cache.unified_memory_pool import init_unified_swa_pools

# variant: (layers, full-attention KV heads x head dim, SWA KV heads x head dim); the full layers
# are every sixth (5 sliding : 1 full), as in the published configs
SHAPES = {"26b-a4b": (30, (2, 512), (8, 256)), "31b": (60, (4, 512), (16, 256))}


def build_pool(variant: str, full_tokens: int, swa_tokens: int, **kwargs):
    layers, (full_heads, full_dim), (swa_heads, swa_dim) = SHAPES[variant]
    full_ids = [i for i in range(layers) if (i + 1) % 6 == 0]
    return init_unified_swa_pools(
        device="cpu",
        kv_cache_dtype=torch.bfloat16,
        head_num=full_heads,
        head_dim=full_dim,
        v_head_dim=full_dim,
        swa_head_num=swa_heads,
        swa_head_dim=swa_dim,
        swa_v_head_dim=swa_dim,
        page_size=1,
        start_layer=0,
        end_layer=layers,
        swa_attention_layer_ids=[i for i in range(layers) if i not in full_ids],
        full_attention_layer_ids=full_ids,
        full_max_total_num_tokens=full_tokens,
        swa_max_total_num_tokens=swa_tokens,
        enable_memory_saver=False,
        need_sort=False,
        **kwargs,
    )


def prefill_long_prompt(allocator, tokens: int, chunk: int, window: int) -> torch.Tensor:
    """Allocate `tokens` slots a chunk at a time, freeing the SWA side of every slot more than
    `window` behind the newest; the slots of the whole prompt (its full-attention side still
    held)."""
    slots = torch.empty(0, dtype=torch.int64)
    freed = 0
    for start in range(0, tokens, chunk):
        new = allocator.alloc(min(chunk, tokens - start))
        assert new is not None, f"no room for the chunk at token {start}"
        slots = torch.cat([slots, new.to(torch.int64)])
        if slots.numel() - window > freed:
            allocator.free_swa(slots[freed : slots.numel() - window])
            freed = slots.numel() - window
    return slots
