"""0017: with SGLANG_OPT_SWA_POOL_FROM_RUNNING_WINDOWS=1 (and patch 0016's release on) a radix-cache
server sizes its SWA pool for the windows of the running-request bound (--max-running-requests,
else the decode CUDA-graph batch size) and the prefill chunks in flight, the same cap sglang uses
for its chunk cache, and gives the rest of the KV budget to the full-attention pool — unless
swa_full_tokens_ratio already makes the SWA pool smaller.  sglang's own pool configurator on CPU,
the Gemma-4 shapes from their config.json, ServerArgs from the real CLI parser.

Budgets are those of H100 servers: 26B-A4B at --mem-fraction-static 0.85, the bytes whose 0.8 split
is the 109,913 full-attention + 87,930 SWA tokens that server logs; 31B with its 0.88, whose split
gave the full pool 15,427 tokens.  Chunked prefill at 8192 tokens, as sglang picks on an H100."""

import logging
import pathlib
from types import SimpleNamespace

import pytest
import torch
from gemma4_config import server_args
from swa_serving import Serving, publish_server_args, request, reset_context

from sglang_gemma4.gpu.serve import presets
from sglang_gemma4.gpu.serve.variants import write_config

import sglang.srt.model_executor.pool_configurator as pool_configurator
from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.pool_configurator import (
    HybridSWAPoolConfigurator,
    SWAChunkCapPoolConfigurator,
    SWAWindowPoolConfigurator,
    create_memory_pool_configurator,
)
from sglang.srt.runtime_context import publish
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

PAGE = 1
EVICTION_INTERVAL = (
    16  # the SWA maintenance interval with the switch on and SGLANG_SWA_EVICTION_INTERVAL unset
)
VLLM_H100_26B_TOKENS = 148_709  # vLLM 0.26.0's KV cache for the 26B-A4B shape at 0.85 on an H100
# KV bytes per token (K and V, bf16, all layers of each kind) of the published shapes
SHAPES = {  # variant: (full-attention bytes, SWA bytes, sglang's window: the config's less one)
    "26b-a4b": (5 * 2 * 2 * 512 * 2, 25 * 2 * 8 * 256 * 2, 1023),
    "31b": (10 * 2 * 4 * 512 * 2, 50 * 2 * 16 * 256 * 2, 1023),
}
H100_26B_BUDGET = 109_913 * (SHAPES["26b-a4b"][0] + 0.8 * SHAPES["26b-a4b"][1])
H100_31B_BUDGET = 15_427 * (SHAPES["31b"][0] + 0.8 * SHAPES["31b"][1])


@pytest.fixture(autouse=True)
def switches(monkeypatch):
    # both on by default
    monkeypatch.delenv("SGLANG_OPT_SWA_RELEASE_PASSED_PREFIX", raising=False)
    monkeypatch.delenv("SGLANG_OPT_SWA_POOL_FROM_RUNNING_WINDOWS", raising=False)
    # the configurator reads the attention TP size from the process's parallel state
    monkeypatch.setattr(pool_configurator, "get_parallel", lambda: SimpleNamespace(attn_tp_size=1))
    yield
    reset_context()  # the server args a test published (kv_cache_configurator)


def kv_cache_configurator(tmp_path: pathlib.Path, variant: str, *flags: str):
    """What the model runner hands the pool configurator, for a `variant` server with `flags`
    (the multimodal checkpoint form: its config names the full-attention layers' own KV shape)."""
    args = server_args(
        write_config(tmp_path / variant, variant, "conditional"),
        "--chunked-prefill-size",
        "8192",
        *flags,
    )
    model_config = ModelConfig.from_server_args(args)
    publish(
        args, role="test"
    )  # the configurator reads its settings from the published args (sglang 0.5.18+)
    return SimpleNamespace(
        server_args=args,
        model_config=model_config,
        kv_cache_dtype=torch.bfloat16,
        kv_cache_dtype_str="auto",
        page_size=PAGE,
        sliding_window_size=SHAPES[variant][2],
        spec_algorithm=SpeculativeAlgorithm.NONE,
        is_draft_worker=False,
        is_hybrid_swa=True,
        ps=SimpleNamespace(attn_dp_size=1),
    )


def window_cap(variant: str, running: int, chunk: int) -> int:
    """One window per running request (plus what it decodes between two SWA maintenances and its
    next page), two prefill chunks in flight (overlap scheduling), one page."""
    per_request = SHAPES[variant][2] + EVICTION_INTERVAL + PAGE + PAGE
    return running * per_request + 2 * chunk + PAGE


@pytest.mark.parametrize("running", [16, 32])
@pytest.mark.parametrize("chunk", [4096, 8192])
def test_the_swa_pool_holds_the_running_windows_and_the_full_pool_the_rest(
    tmp_path, caplog, running, chunk
):
    kvc = kv_cache_configurator(
        tmp_path,
        "26b-a4b",
        "--max-running-requests",
        str(running),
        "--chunked-prefill-size",
        str(chunk),
    )
    configurator = create_memory_pool_configurator(kvc)
    assert isinstance(configurator, SWAWindowPoolConfigurator)
    full_bytes, swa_bytes, _ = SHAPES["26b-a4b"]
    with caplog.at_level(logging.INFO):
        config = configurator.calculate_pool_sizes(int(H100_26B_BUDGET), PAGE)
    cap = window_cap("26b-a4b", running, chunk)
    assert config.swa_max_total_num_tokens == cap
    assert (
        config.full_max_total_num_tokens
        == int(H100_26B_BUDGET - cap * swa_bytes) // full_bytes
        > 109_913
    )
    assert any(
        f"full_layer_tokens={config.full_max_total_num_tokens}, swa_layer_tokens={cap}" in m
        and "would give the full pool 109913 tokens" in m
        for m in caplog.messages
    )


def test_26b_at_32_running_requests_holds_more_full_attention_tokens_than_the_ratio(tmp_path):
    kvc = kv_cache_configurator(tmp_path, "26b-a4b", "--max-running-requests", "32")
    config = create_memory_pool_configurator(kvc).calculate_pool_sizes(int(H100_26B_BUDGET), PAGE)
    ratio = HybridSWAPoolConfigurator(kvc).calculate_pool_sizes(int(H100_26B_BUDGET), PAGE)
    assert (ratio.full_max_total_num_tokens, ratio.swa_max_total_num_tokens) == (109_913, 87_930)
    # the server's own 8192-token chunks: 32 windows + 2 chunks in flight
    assert config.swa_max_total_num_tokens == window_cap("26b-a4b", 32, 8192) == 49_697
    assert config.full_max_total_num_tokens == 492_247


def test_26b_at_the_presets_64_decode_graphs_holds_more_tokens_than_vllm(tmp_path):
    """The launch preset captures decode graphs to 64 and sets no --max-running-requests."""
    kvc = kv_cache_configurator(tmp_path, "26b-a4b")
    kvc.server_args.cuda_graph_config.decode.max_bs = 64
    config = create_memory_pool_configurator(kvc).calculate_pool_sizes(int(H100_26B_BUDGET), PAGE)
    assert config.swa_max_total_num_tokens == window_cap("26b-a4b", 64, 8192) == 83_009
    assert config.full_max_total_num_tokens == 159_127 > VLLM_H100_26B_TOKENS


def test_an_eviction_interval_the_user_set_wins(tmp_path, monkeypatch):
    """At sglang's default of 128 steps 64 windows need more SWA tokens than the ratio gives."""
    monkeypatch.setenv("SGLANG_SWA_EVICTION_INTERVAL", "128")
    kvc = kv_cache_configurator(tmp_path, "26b-a4b", "--max-running-requests", "64")
    config = create_memory_pool_configurator(kvc).calculate_pool_sizes(int(H100_26B_BUDGET), PAGE)
    assert (config.full_max_total_num_tokens, config.swa_max_total_num_tokens) == (109_913, 87_930)


@pytest.mark.parametrize("interval", [None, "128"])
def test_a_decoding_request_holds_at_most_its_window_and_one_interval(monkeypatch, interval):
    """The scheduler's SWA maintenance runs at the interval the pool was sized with: sglang's own
    allocator, radix cache and ScheduleBatch on CPU (swa_serving), a window of 8 tokens."""
    if interval:
        monkeypatch.setenv("SGLANG_SWA_EVICTION_INTERVAL", interval)
    publish_server_args()
    try:
        serving = Serving(PAGE, 8, size=512, size_swa=256)
        serving.admit(request("a", list(range(100, 120)), max_new_tokens=200))
        held = []
        serving.decode(
            100,
            lambda: held.append(serving.swa_slots_in_use() - serving.cache.swa_evictable_size()),
        )
    finally:
        reset_context()
    bound = (
        8 + EVICTION_INTERVAL + 2 * PAGE
    )  # the window, one interval's decode tokens, the pages in flight
    assert (max(held) <= bound) == (interval is None), max(held)


def test_the_bound_holds_when_prefills_take_the_maintenance_iterations():
    """Other requests' prefill batches numbered where the running batch's maintenance would fall
    (every multiple of the interval, here) do not let a request hold more than its window and one
    interval."""
    publish_server_args()
    try:
        serving = Serving(PAGE, 8, size=512, size_swa=256)
        serving.admit(request("a", list(range(100, 120)), max_new_tokens=200))
        held = []

        def step():
            held.append(serving.swa_slots_in_use() - serving.cache.swa_evictable_size())
            if (serving.forward_ct + 1) % EVICTION_INTERVAL == 0:
                serving.forward_ct += 1  # a prefill batch runs as this number

        serving.decode(100, step)
    finally:
        reset_context()
    assert max(held) <= 8 + EVICTION_INTERVAL + 2 * PAGE, max(held)


def test_each_request_is_maintained_every_interval_and_not_all_on_one_step(monkeypatch):
    """Four requests decoding together: each one's SWA maintenance comes every interval of its
    decode steps, and the four fall on different steps (by pool slot), so no step carries every
    request's frees."""
    maintained: list[list[str]] = []
    evict = ScheduleBatch._evict_swa

    def recorded(batch, req, pre_len):
        maintained[-1].append(req.rid)
        return evict(batch, req, pre_len)

    monkeypatch.setattr(ScheduleBatch, "_evict_swa", recorded)
    publish_server_args()
    try:
        serving = Serving(PAGE, 8, size=512, size_swa=256)
        rids = [f"r{i}" for i in range(4)]
        for i, rid in enumerate(rids):
            serving.admit(request(rid, list(range(100 + 10 * i, 110 + 10 * i)), max_new_tokens=100))
        for _ in range(4 * EVICTION_INTERVAL):
            maintained.append([])
            serving.decode(1)
    finally:
        reset_context()
    assert max(map(len, maintained)) == 1, maintained
    for rid in rids:
        steps = [i for i, rids_then in enumerate(maintained) if rid in rids_then]
        assert len(steps) >= 3 and {b - a for a, b in zip(steps, steps[1:])} == {
            EVICTION_INTERVAL
        }, (rid, steps)


def test_without_a_bound_the_decode_graph_batch_size_is_the_running_requests(tmp_path):
    kvc = kv_cache_configurator(tmp_path, "26b-a4b")
    # --cuda-graph-max-bs-decode 16 on a CUDA device (the CPU parser keeps its own graph settings)
    kvc.server_args.cuda_graph_config.decode.max_bs = 16
    config = create_memory_pool_configurator(kvc).calculate_pool_sizes(int(H100_26B_BUDGET), PAGE)
    assert config.swa_max_total_num_tokens == window_cap("26b-a4b", 16, 8192)


def test_31b_on_an_h100_keeps_the_ratio_even_for_8_running_requests(tmp_path):
    """Its KV budget holds about 12,000 SWA tokens: fewer than 8 windows and two prefill chunks."""
    kvc = kv_cache_configurator(tmp_path, "31b", "--max-running-requests", "8")
    config = create_memory_pool_configurator(kvc).calculate_pool_sizes(int(H100_31B_BUDGET), PAGE)
    assert (config.full_max_total_num_tokens, config.swa_max_total_num_tokens) == (15_427, 12_341)


def test_the_ratio_stays_where_the_windows_need_more(tmp_path, caplog):
    kvc = kv_cache_configurator(tmp_path, "26b-a4b", "--max-running-requests", "96")
    with caplog.at_level(logging.INFO):
        config = create_memory_pool_configurator(kvc).calculate_pool_sizes(
            int(H100_26B_BUDGET), PAGE
        )
    assert (config.full_max_total_num_tokens, config.swa_max_total_num_tokens) == (109_913, 87_930)
    assert any("keeping the ratio" in m for m in caplog.messages)


def test_a_capped_budget_keeps_the_same_choice(tmp_path):
    """A --max-total-tokens cap (or a pipeline peer's smaller pool) resizes from a token count."""
    kvc = kv_cache_configurator(tmp_path, "26b-a4b", "--max-running-requests", "32")
    configurator = create_memory_pool_configurator(kvc)
    capped = configurator.calculate_pool_sizes_from_max_tokens(200_000, PAGE)
    assert (capped.full_max_total_num_tokens, capped.swa_max_total_num_tokens) == (200_000, 49_697)
    # below 49,697 / 0.8 full tokens the ratio's SWA pool is the smaller one
    small = configurator.calculate_pool_sizes_from_max_tokens(60_000, PAGE)
    assert (small.full_max_total_num_tokens, small.swa_max_total_num_tokens) == (60_000, 48_000)


def test_a_ratio_the_user_set_wins(tmp_path):
    kvc = kv_cache_configurator(
        tmp_path, "26b-a4b", "--max-running-requests", "32", "--swa-full-tokens-ratio", "0.5"
    )
    assert type(create_memory_pool_configurator(kvc)) is HybridSWAPoolConfigurator


def test_without_chunked_prefill_the_ratio_splits(tmp_path):
    """The cap counts the prefill chunks in flight; unchunked prefills have no such bound."""
    kvc = kv_cache_configurator(
        tmp_path, "26b-a4b", "--max-running-requests", "32", "--chunked-prefill-size", "-1"
    )
    assert type(create_memory_pool_configurator(kvc)) is HybridSWAPoolConfigurator


def test_the_chunk_cache_keeps_its_own_cap(tmp_path):
    kvc = kv_cache_configurator(
        tmp_path, "26b-a4b", "--max-running-requests", "32", "--disable-radix-cache"
    )
    assert type(create_memory_pool_configurator(kvc)) is SWAChunkCapPoolConfigurator


@pytest.mark.kill_switch
@pytest.mark.parametrize(
    "switch", ["SGLANG_OPT_SWA_POOL_FROM_RUNNING_WINDOWS", "SGLANG_OPT_SWA_RELEASE_PASSED_PREFIX"]
)
def test_either_switch_off_splits_by_the_ratio(tmp_path, monkeypatch, caplog, switch):
    # without 0016's release a request keeps more than one window locked: the ratio's split stays
    monkeypatch.setenv(switch, "0")
    kvc = kv_cache_configurator(tmp_path, "26b-a4b", "--max-running-requests", "32")
    configurator = create_memory_pool_configurator(kvc)
    assert type(configurator) is HybridSWAPoolConfigurator
    config = configurator.calculate_pool_sizes(int(H100_26B_BUDGET), PAGE)
    assert (config.full_max_total_num_tokens, config.swa_max_total_num_tokens) == (109_913, 87_930)
    if switch == "SGLANG_OPT_SWA_RELEASE_PASSED_PREFIX":
        assert "SGLANG_OPT_SWA_RELEASE_PASSED_PREFIX is off" in caplog.text


def test_31b_through_its_one_gpu_preset_holds_its_whole_window_on_an_h200(tmp_path):
    """An H200 at 31B's 0.88: the budget whose 0.8 split is the 93,118 full-attention + 74,494 SWA
    tokens a server with decode graphs to 64 logs (64 windows are no smaller than the ratio's SWA
    pool). The preset's running bound on one GPU leaves the full-attention pool a 262,144-token
    request; at tensor parallel 2 the preset sets no bound."""
    full, swa, _ = SHAPES["31b"]
    budget = 93_118 * (full + 0.8 * swa)
    served = presets.server_args("31b", str(tmp_path / "m"))
    running = served[served.index("--max-running-requests") + 1]
    assert "--max-running-requests" not in presets.server_args("31b", "m", tp=2)
    sizes = {}
    for bound in (running, "64"):
        kvc = kv_cache_configurator(
            tmp_path, "31b", "--chunked-prefill-size", "4096", "--max-running-requests", bound
        )
        config = create_memory_pool_configurator(kvc).calculate_pool_sizes(int(budget), PAGE)
        sizes[bound] = config.full_max_total_num_tokens, config.swa_max_total_num_tokens
    assert sizes["64"] == (93_118, 74_494)
    assert sizes[running][1] == window_cap("31b", int(running), 4096)
    assert sizes[running][0] >= 262_144
