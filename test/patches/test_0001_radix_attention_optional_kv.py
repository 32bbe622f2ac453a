"""0001: the piecewise-CUDA-graph attention op accepts key=value=None (KV-shared layers, as in
Gemma-4 E2B/E4B) and still narrows the query and the cache locations to the real tokens."""

import importlib.util
from types import SimpleNamespace

import pytest
import torch

import sglang.srt.utils.custom_op as custom_op
from sglang.srt.compilation.piecewise_context_manager import set_forward_context
from sglang.srt.layers import radix_attention

HEADS, HEAD_DIM = 4, 8


def test_op_schema_declares_key_and_value_optional():
    # The dispatcher checks arguments against this schema before any kernel runs.
    schema = torch.ops.sglang.unified_attention_with_output.default._schema
    types = {a.name: a.type for a in schema.arguments}
    assert isinstance(types["key"], torch.OptionalType) and isinstance(types["value"], torch.OptionalType)
    assert not isinstance(types["query"], torch.OptionalType)


@pytest.fixture(scope="module")
def op_body():
    """The op's Python body: the registered op dispatches to CUDA only, so load the module again
    with the registration decorator made a no-op and call the plain function on CPU."""
    patch = pytest.MonkeyPatch()
    patch.setattr(custom_op, "register_custom_op", lambda *a, **k: (lambda fn: fn))
    spec = importlib.util.spec_from_file_location("radix_attention_body", radix_attention.__file__)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    finally:
        patch.undo()
    return module.unified_attention_with_output


class RecordingBackend:
    """Stands in for an attention backend: records what it was given, returns q + 1."""

    def __init__(self):
        self.calls = []

    def forward(self, q, k, v, layer, forward_batch, save_kv_cache, **kwargs):
        self.calls.append({"q": q.clone(), "k": k, "v": v, "layer": layer, "save": save_kv_cache,
                           "out_cache_loc": forward_batch.out_cache_loc.clone()})
        return q + 1


def run_op(op_body, key, value, padded: int, real: int):
    backend = RecordingBackend()
    forward_batch = SimpleNamespace(
        num_token_non_padded_cpu=real, out_cache_loc=torch.arange(padded), out_cache_loc_swa=None,
        token_to_kv_pool=SimpleNamespace(), attn_backend=backend)
    layer = SimpleNamespace(name="layer 0")
    q = torch.randn(padded, HEADS * HEAD_DIM)
    output = torch.zeros_like(q)
    with set_forward_context(forward_batch, [layer], quant_config=None, moe_layers=[], moe_fusions=[]):
        op_body(q, key, value, output, False, 0)
    return backend, forward_batch, layer, q, output


@pytest.mark.parametrize("padded, real", [(8, 8), (8, 5), (16, 1)])
def test_kv_shared_layer_passes_none_through(op_body, padded, real):
    backend, forward_batch, layer, q, output = run_op(op_body, None, None, padded, real)
    (call,) = backend.calls
    assert call["k"] is None and call["v"] is None and call["layer"] is layer and call["save"] is False
    assert torch.equal(call["q"], q[:real])
    assert torch.equal(call["out_cache_loc"], torch.arange(real))
    assert torch.equal(forward_batch.out_cache_loc, torch.arange(padded))  # restored after the call
    assert torch.equal(output[:real], q[:real] + 1) and not output[real:].any()


def test_layer_with_its_own_kv_gets_narrowed_key_and_value(op_body):
    key, value = torch.randn(8, HEAD_DIM), torch.randn(8, HEAD_DIM)
    backend, *_ = run_op(op_body, key, value, padded=8, real=3)
    (call,) = backend.calls
    assert torch.equal(call["k"], key[:3]) and torch.equal(call["v"], value[:3])
