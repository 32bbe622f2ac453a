"""The scheduler's KV bookkeeping for a hybrid sliding-window model, without a model: sglang's own
SWA allocator and pools, unified radix cache (Full + SWA components), PrefillAdder and
ScheduleBatch, driven through the calls the scheduler makes (admission and prefill, decode steps,
finish, retraction), with no model forward. The patches' tests use it to check what stays
allocated."""

import pathlib
import tempfile
from array import array
from types import SimpleNamespace

import pytest
import torch
from gemma4_config import server_args, write_config

from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
from sglang.srt.managers.schedule_policy import PrefillAdder
from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
from sglang.srt.mem_cache.base_prefix_cache import EvictParams
from sglang.srt.mem_cache.cache_init_params import CacheInitParams

try:
    from sglang.srt.mem_cache.common import maybe_cache_unfinished_req, release_kv_cache
except (
    ImportError
):  # sglang 0.5.23+: checkpoint_kv_cache, and release_kv_cache says whether to checkpoint
    from sglang.srt.mem_cache.common import checkpoint_kv_cache
    from sglang.srt.mem_cache.common import release_kv_cache as _release_kv_cache

    def maybe_cache_unfinished_req(req, tree_cache, chunked=False):
        checkpoint_kv_cache(req, tree_cache)

    def release_kv_cache(req, tree_cache):
        _release_kv_cache(req, tree_cache, checkpoint=True)


from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
from sglang.srt.mem_cache.unified_cache.components import ComponentType
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
from sglang.srt.runtime_context import get_server_args, publish, reset_context
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

# bench_one_batch-style stand-in: the batch reads only these of the model config
MODEL_CONFIG = SimpleNamespace(
    is_encoder_decoder=False,
    vocab_size=1000,
    hf_config=SimpleNamespace(architectures=["Gemma4ForCausalLM"]),
)
NEXT_TOKEN = 7  # what every "forward" samples
# The allocator's paged kernels are Triton: interpreted on CPU, compiled where a GPU is
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def publish_server_args():
    """The scheduler publishes its ServerArgs before it builds a batch: a 26B-A4B server's, here."""
    publish(
        server_args(write_config(pathlib.Path(tempfile.mkdtemp()) / "m", "26b-a4b", "causal")),
        role="test",
    )


@pytest.fixture
def maintained_every_step(monkeypatch):
    """A 26B-A4B server's args published, as the scheduler's, and SWA maintenance at every decode
    step (SGLANG_SWA_EVICTION_INTERVAL=1), so that a test sees each step's frees."""
    monkeypatch.setenv("SGLANG_SWA_EVICTION_INTERVAL", "1")
    publish_server_args()
    yield
    reset_context()


def request(rid: str, prompt: list[int], max_new_tokens: int = 64) -> Req:
    return Req(rid, "", array("q", prompt), SamplingParams(max_new_tokens=max_new_tokens))


def static_swa_allocator(size: int, size_swa: int, page_size: int, device: str = DEVICE):
    """sglang's SWA allocator on static pools of `size` full-attention and `size_swa` SWA slots:
    one layer of each kind, one KV head of width 8."""
    pool = SWAKVPool(
        size=size,
        size_swa=size_swa,
        page_size=page_size,
        dtype=torch.bfloat16,
        head_num=1,
        head_dim=8,
        swa_attention_layer_ids=[0],
        full_attention_layer_ids=[1],
        device=device,
    )
    return SWATokenToKVPoolAllocator(
        size, size_swa, page_size, torch.bfloat16, device, pool, need_sort=False
    )


class Serving:
    def __init__(
        self,
        page_size: int,
        window: int,
        size: int = 512,
        size_swa: int = 256,
        max_requests: int = 8,
        max_context_len: int = 512,
        allocator=None,
    ):
        """`allocator`: serve from it (e.g. the unified pool's) instead of static SWA pools of
        `size` and `size_swa` slots."""
        self.page_size, self.window = page_size, window
        self.size, self.size_swa = size, size_swa
        self.allocator = allocator or static_swa_allocator(size, size_swa, page_size)
        self.req_to_token_pool = ReqToTokenPool(
            size=max_requests,
            max_context_len=max_context_len,
            device=DEVICE,
            enable_memory_saver=False,
        )
        self.cache = UnifiedRadixCache(
            CacheInitParams(
                disable=False,
                req_to_token_pool=self.req_to_token_pool,
                token_to_kv_pool_allocator=self.allocator,
                page_size=page_size,
                sliding_window_size=window,
                tree_components=(ComponentType.FULL, ComponentType.SWA),
            )
        )
        self.running = self.batch([])
        self.forward_ct = 0  # the scheduler's count of batches run; SWA maintenance keys off it

    def batch(
        self, reqs: list[Req], overlap: bool = False, chunked_req: Req | None = None
    ) -> ScheduleBatch:
        return ScheduleBatch.init_new(
            reqs,
            self.req_to_token_pool,
            self.allocator,
            self.cache,
            MODEL_CONFIG,
            overlap,
            SpeculativeAlgorithm.NONE,
            chunked_req=chunked_req,
        )

    def adder(self, chunk: int | None) -> PrefillAdder:
        return PrefillAdder(
            self.page_size, self.cache, self.allocator, self.running, 0.5, 4096, chunk
        )

    def admit(self, req: Req, chunk: int | None = None) -> torch.Tensor:
        """Match, admit and prefill `req` (in chunks of `chunk` tokens when given), sample its first
        token and let it join the running batch; return the full-attention indices its prefix
        matched in the radix cache."""
        req.init_next_round_input(self.cache)
        matched = req.prefix_indices.to(torch.int64)
        adder = self.adder(chunk)
        adder.add_one_req(req, has_chunked_req=False, truncation_align_size=None)
        assert adder.can_run_list == [req], "the pools refused the request"
        chunked = adder.new_chunked_req
        while chunked is not None:  # the scheduler's next rounds: stash the chunk, admit the next
            self.batch([req]).prepare_for_extend()
            maybe_cache_unfinished_req(req, self.cache, chunked=True)
            req.init_next_round_input()
            chunked = self.adder(chunk).add_chunked_req(req)
        prefill = self.batch([req])
        prefill.prepare_for_extend()
        self.run(prefill)
        req.output_ids.append(NEXT_TOKEN)
        maybe_cache_unfinished_req(req, self.cache)
        if self.running.is_empty():
            self.running = prefill
        else:
            self.running.merge_batch(prefill)
        return matched

    def decode(self, steps: int = 1, check=None) -> None:
        """Decode steps of the running batch: allocate (where the SWA maintenance runs), then
        `check()` (the step's forward would run here), then sample."""
        for _ in range(steps):
            self.running.prepare_for_decode()
            self.run(self.running)
            if check is not None:
                check()
            for req in self.running.reqs:
                req.output_ids.append(NEXT_TOKEN)

    def run(self, batch: ScheduleBatch) -> None:
        """Where the scheduler launches the forward: it numbers the batch."""
        self.forward_ct += 1
        batch.forward_iter = self.forward_ct

    def finish(self, req: Req) -> None:
        release_kv_cache(req, self.cache)
        self.running.filter_batch(
            keep_indices=[i for i, r in enumerate(self.running.reqs) if r is not req]
        )

    def retract_one(self) -> Req:
        retracted, _, aborted = self.running.retract_decode(get_server_args())
        assert len(retracted) == 1 and not aborted
        return retracted[0]

    def evict_all(self) -> None:
        """Free every evictable slot of both pools, as a scheduler under pressure would."""
        self.cache.evict(EvictParams(num_tokens=self.size, swa_num_tokens=self.size_swa))

    def kv_indices(self, req: Req) -> torch.Tensor:
        return self.req_to_token_pool.req_to_token[req.req_pool_idx, : req.kv.kv_allocated_len].to(
            torch.int64
        )

    def has_swa(self, full_indices: torch.Tensor) -> torch.Tensor:
        """Per full-pool slot: does it still hold SWA KV (a non-zero SWA slot)?"""
        return self.allocator.full_to_swa_index_mapping[full_indices] > 0

    def swa_slots_in_use(self) -> int:
        return self.size_swa - self.allocator.swa_available_size()


__all__ = [
    "Serving",
    "maintained_every_step",
    "publish_server_args",
    "request",
    "reset_context",
    "static_swa_allocator",
]
