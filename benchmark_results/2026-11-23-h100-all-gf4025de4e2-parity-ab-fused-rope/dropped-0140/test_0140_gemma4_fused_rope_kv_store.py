"""0140: in a decode step a Gemma-4 layer's RoPE kernel stores the new K/V in the KV cache as it
rotates K, and the attention backend is told not to store them again. On CPU: which steps and pools
get the slots (sliding layers' int32 slots in the positions' type), and that a layer hands the
slots to RoPE and turns the backend's store off. On a GPU: a sliding and a full-attention layer of
the 26B-A4B shape, run once fused and once as before, leave the same q, K and V (K and V read back
from the cache at the slots the unfused run stored them at)."""

from types import SimpleNamespace

import pytest
import torch
from torch import nn
from transformers.models.gemma4.configuration_gemma4 import Gemma4TextConfig

from kernel_inputs import randn
from sglang.srt.layers.rotary_embedding import base as rope_base
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
from sglang.srt.models import gemma4_causal as gemma4
from sglang.srt.models.gemma4_causal import KVStoreLocs, decode_kv_store_locs
from sglang_gemma4.variants import text_config

SERVER_ARGS = SimpleNamespace(rl_on_policy_target=None)


@pytest.fixture(autouse=True)
def server_args(monkeypatch):
    for module in (gemma4, rope_base):
        monkeypatch.setattr(module, "get_global_server_args", lambda: SERVER_ARGS)


def fake_tensor(dtype):
    """What decode_kv_store_locs reads of the positions: the device and the index type."""
    return SimpleNamespace(is_cuda=True, dtype=dtype)


def bare(cls, **attrs):
    pool = object.__new__(cls)
    pool.__dict__.update(attrs)
    return pool


def swa_pool(swa_loc=None, dtype=torch.bfloat16):
    mapping = torch.arange(100, dtype=torch.int64) * 10  # full slot i -> sliding slot 10 i
    return bare(SWAKVPool, dtype=dtype, swa_loc=swa_loc, full_to_swa_index_mapping=mapping,
                full_kv_pool=bare(MHATokenToKVPool), swa_kv_pool=bare(MHATokenToKVPool))


def batch(pool, out_cache_loc, decode=True):
    return SimpleNamespace(token_to_kv_pool=pool, out_cache_loc=out_cache_loc,
                           forward_mode=SimpleNamespace(is_decode=lambda: decode))


FULL = torch.tensor([5, 9, 2], dtype=torch.int64)


def test_sliding_slots_from_the_pool_in_the_positions_type():
    locs = decode_kv_store_locs(batch(swa_pool(torch.tensor([7, 1, 4], dtype=torch.int32)), FULL),
                                fake_tensor(torch.int64))
    assert locs.full is FULL
    assert locs.swa.dtype == torch.int64 and locs.swa.tolist() == [7, 1, 4]


def test_sliding_slots_translated_when_the_pool_has_none_set():
    locs = decode_kv_store_locs(batch(swa_pool(), FULL), fake_tensor(torch.int64))
    assert locs.swa.dtype == torch.int64 and locs.swa.tolist() == [50, 90, 20]


def test_one_pool_for_all_layers_gives_the_same_slots():
    locs = decode_kv_store_locs(batch(bare(MHATokenToKVPool, dtype=torch.bfloat16), FULL),
                                fake_tensor(torch.int64))
    assert locs.full is FULL and locs.swa is FULL


class OtherPool(MHATokenToKVPool):
    """Stands for any pool subclass, which may store its own way."""


@pytest.mark.parametrize("case", ["prefill", "switch off", "cpu", "fp8 cache", "int32 positions",
                                  "pool subclass", "sub-pool subclass", "rl on-policy"])
def test_left_to_the_backend(case, monkeypatch):
    pool, positions, decode = swa_pool(), fake_tensor(torch.int64), True
    if case == "prefill":
        decode = False
    elif case == "switch off":
        monkeypatch.setenv("SGLANG_OPT_GEMMA4_FUSED_ROPE_KV_STORE", "0")
    elif case == "cpu":
        positions = torch.zeros(3, dtype=torch.int64)
    elif case == "fp8 cache":
        pool = swa_pool(dtype=torch.float8_e4m3fn)
    elif case == "int32 positions":
        positions = fake_tensor(torch.int32)
    elif case == "pool subclass":
        pool = bare(OtherPool, dtype=torch.bfloat16)
    elif case == "sub-pool subclass":
        pool.swa_kv_pool = bare(OtherPool)
    elif case == "rl on-policy":  # RoPE then runs its native path, which cannot store
        monkeypatch.setattr(gemma4, "get_global_server_args", lambda: SimpleNamespace(rl_on_policy_target="fsdp"))
    assert decode_kv_store_locs(batch(pool, FULL, decode), positions) is None


class StandIn(nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()


class Projection(nn.Module):
    def __init__(self, out):
        super().__init__()
        self.out = out

    def forward(self, x, skip_all_reduce=False):
        return (self.out if self.out is not None else x), None


class RecordingAttention(nn.Module):
    """The attention call: what it was given, and the backend told whether to store K/V."""

    def __init__(self, layer_id):
        super().__init__()
        self.layer_id, self.k_scale, self.calls = layer_id, None, []

    def forward(self, q, k, v, forward_batch, save_kv_cache):
        self.calls.append(dict(q=q.clone(), k=k.clone(), v=v.clone(), save_kv_cache=save_kv_cache))
        return q


class RecordingRope(nn.Module):
    use_fallback_kernel = False

    def __init__(self):
        super().__init__()
        self.stores = []

    def forward(self, positions, q, k, fused_set_kv_buffer_arg=None):
        self.stores.append(fused_set_kv_buffer_arg)
        return q, k


def attention_layer(layer_id, monkeypatch, device="cpu", rope=None):
    """A 26B-A4B attention layer whose projections are stand-ins (qkv from the test), on `device`."""
    monkeypatch.setattr(gemma4, "get_tensor_model_parallel_world_size", lambda: 1)
    for name in ("QKVParallelLinear", "RowParallelLinear"):
        monkeypatch.setattr(gemma4, name, StandIn)
    monkeypatch.setattr(gemma4, "RadixAttention", lambda *a, layer_id, **kw: RecordingAttention(layer_id))
    if rope is not None:
        monkeypatch.setattr(gemma4, "get_rope", lambda *a, **kw: rope)
    config = Gemma4TextConfig(**text_config("26b-a4b"))
    # sglang's field names: num_key_value_heads is the full-attention layers', swa_* the sliding ones'
    config.swa_num_key_value_heads, config.num_key_value_heads = config.num_key_value_heads, config.num_global_key_value_heads
    sliding = config.layer_types[layer_id] == "sliding_attention"
    head_dim = config.head_dim if sliding else config.global_head_dim
    layer = gemma4.Gemma4Attention(layer_id, config, head_dim=head_dim, max_position_embeddings=4096).to(device)
    for norm in (layer.q_norm, layer.k_norm):
        norm.weight.data = randn(head_dim, seed=layer_id + 1).to(device).abs() + 0.5
    return layer


class Buffers:
    """KV cache buffers per layer, as the pool hands them out."""

    def __init__(self, layer, slots, device):
        shape = (slots, layer.num_kv_heads, layer.head_dim)
        self.k = torch.zeros(shape, dtype=torch.bfloat16, device=device)
        self.v = torch.zeros(shape, dtype=torch.bfloat16, device=device)

    def get_key_buffer(self, layer_id):
        return self.k

    def get_value_buffer(self, layer_id):
        return self.v


def run(layer, qkv, positions, pool, locs):
    layer.qkv_proj, layer.o_proj = Projection(qkv.clone()), Projection(None)
    layer.forward(positions, qkv, SimpleNamespace(token_to_kv_pool=pool), kv_store_locs=locs)
    return layer.attn.calls[-1]


@pytest.mark.parametrize("layer_id", [0, 5])  # sliding, full attention
def test_layer_hands_its_slots_to_rope_and_turns_the_backend_store_off(layer_id, monkeypatch):
    layer = attention_layer(layer_id, monkeypatch, rope=RecordingRope())
    buffers = Buffers(layer, 16, "cpu")
    width = layer.q_size + 2 * layer.kv_size
    locs = KVStoreLocs(full=torch.tensor([3, 8]), swa=torch.tensor([11, 12]))
    qkv = randn(2, width, seed=3)

    call = run(layer, qkv, torch.tensor([4, 9]), buffers, locs)
    store = layer.rotary_emb.stores[-1]
    assert call["save_kv_cache"] is False
    assert store.cache_loc is (locs.swa if layer.sliding_window else locs.full)
    assert store.k_buffer.shape == (16, layer.kv_size) and store.k_buffer.data_ptr() == buffers.k.data_ptr()
    assert store.v_buffer.data_ptr() == buffers.v.data_ptr()
    torch.testing.assert_close(store.value, call["v"], rtol=0, atol=0)

    call = run(layer, qkv, torch.tensor([4, 9]), buffers, None)
    assert call["save_kv_cache"] is True and layer.rotary_emb.stores[-1] is None


def test_backend_stores_when_the_layer_quantizes_its_cache(monkeypatch):
    layer = attention_layer(0, monkeypatch, rope=RecordingRope())
    layer.attn.k_scale = torch.tensor(1.0)
    locs = KVStoreLocs(full=torch.tensor([3]), swa=torch.tensor([11]))
    call = run(layer, randn(1, layer.q_size + 2 * layer.kv_size, seed=4), torch.tensor([4]), Buffers(layer, 16, "cpu"), locs)
    assert call["save_kv_cache"] is True and layer.rotary_emb.stores[-1] is None


@pytest.mark.gpu
@pytest.mark.parametrize("layer_id", [0, 5])  # sliding (head dim 256), full attention (512)
@pytest.mark.parametrize("tokens", [1, 7, 64])
def test_fused_store_leaves_what_the_unfused_path_does(layer_id, tokens, monkeypatch):
    layer = attention_layer(layer_id, monkeypatch, device="cuda")
    width = layer.q_size + 2 * layer.kv_size
    qkv = randn(tokens, width, seed=tokens + layer_id).to("cuda", torch.bfloat16)
    positions = torch.randint(0, 4000, (tokens,), generator=torch.Generator().manual_seed(tokens)).to("cuda")
    slots = torch.randperm(200, generator=torch.Generator().manual_seed(layer_id))[:tokens].to("cuda")
    other = torch.randperm(200, generator=torch.Generator().manual_seed(99))[:tokens].to("cuda")
    locs = KVStoreLocs(full=slots, swa=slots) if layer.sliding_window is None else KVStoreLocs(full=other, swa=slots)

    unfused = run(layer, qkv, positions, Buffers(layer, 200, "cuda"), None)
    buffers = Buffers(layer, 200, "cuda")
    fused = run(layer, qkv, positions, buffers, locs)

    assert unfused["save_kv_cache"] is True and fused["save_kv_cache"] is False
    torch.testing.assert_close(fused["q"], unfused["q"], rtol=0, atol=0)
    torch.testing.assert_close(buffers.k[slots], unfused["k"], rtol=0, atol=0)
    torch.testing.assert_close(buffers.v[slots], unfused["v"], rtol=0, atol=0)
    untouched = torch.ones(200, dtype=torch.bool, device="cuda")
    untouched[slots] = False
    assert not buffers.k[untouched].any() and not buffers.v[untouched].any()
