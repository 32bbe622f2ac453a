"""0130: unless SGLANG_OPT_GEMMA4_MOE_DUAL_STREAM=0, a Gemma-4 MoE layer captured in a CUDA graph
runs its dense MLP on a side stream beside the experts, the experts' branch captured first. On CPU:
when the model makes the side stream; the capture order (the experts, then the dense MLP on the side
stream forked from before the experts, then the join). On a
GPU: the two branches captured in a graph and replayed give what running them one after the other
gives, with the side branch much slower than the other and fresh inputs before the replay."""

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from sglang.srt.models import gemma4_causal
from sglang.srt.models.gemma4_causal import Gemma4DecoderLayer, moe_side_stream

MOE = SimpleNamespace(enable_moe_block=True)


@pytest.fixture
def cuda_streams(monkeypatch):
    """A machine with CUDA as far as the stream choice can tell, one GPU, switch on."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "Stream", lambda: "side stream")
    monkeypatch.setattr(gemma4_causal, "get_tensor_model_parallel_world_size", lambda: 1)
    monkeypatch.setenv("SGLANG_OPT_GEMMA4_MOE_DUAL_STREAM", "1")


@pytest.mark.kill_switch
def test_side_stream_only_for_moe_models_on_one_gpu_when_switched_on(cuda_streams, monkeypatch):
    assert moe_side_stream(MOE) == "side stream"
    assert moe_side_stream(SimpleNamespace(enable_moe_block=False)) is None  # 31B, E2B, E4B
    assert moe_side_stream(SimpleNamespace()) is None
    monkeypatch.setenv("SGLANG_OPT_GEMMA4_MOE_DUAL_STREAM", "0")
    assert moe_side_stream(MOE) is None
    monkeypatch.setenv("SGLANG_OPT_GEMMA4_MOE_DUAL_STREAM", "1")
    monkeypatch.setattr(gemma4_causal, "get_tensor_model_parallel_world_size", lambda: 2)
    assert moe_side_stream(MOE) is None


def test_on_by_default(cuda_streams, monkeypatch):
    monkeypatch.delenv("SGLANG_OPT_GEMMA4_MOE_DUAL_STREAM")
    assert moe_side_stream(MOE) == "side stream"


class SlowMLP(nn.Module):
    """Many dependent matmuls: far longer than the other branch."""

    def __init__(self, hidden: int):
        super().__init__()
        self.weight = nn.Parameter(
            torch.randn(hidden, hidden, generator=torch.Generator().manual_seed(1)) / hidden**0.5
        )

    def forward(self, x):
        for _ in range(50):
            x = torch.tanh(x @ self.weight)
        return x


class StandInMoE(nn.Module):
    def forward(self, moe_input, router_logits):
        return moe_input * router_logits.softmax(-1).sum(-1, keepdim=True) + 1


@pytest.mark.gpu
def test_branches_captured_on_two_streams_match_one_after_the_other():
    hidden = 1024
    layer = Gemma4DecoderLayer.__new__(Gemma4DecoderLayer)
    nn.Module.__init__(layer)
    layer.mlp, layer.moe = SlowMLP(hidden).cuda(), StandInMoE()
    layer.alt_stream = torch.cuda.Stream()
    g = torch.Generator().manual_seed(2)
    mlp_input, moe_input = (torch.randn(4, hidden, generator=g).cuda() for _ in range(2))
    router_logits = torch.randn(4, 8, generator=g).cuda()
    with torch.no_grad():
        warmup = (
            torch.cuda.Stream()
        )  # as sglang's graph runner: run once off the default stream, then capture
        warmup.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(warmup):
            layer.mlp_beside_moe(mlp_input, moe_input, router_logits)
        torch.cuda.current_stream().wait_stream(warmup)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            mlp_output, moe_output = layer.mlp_beside_moe(mlp_input, moe_input, router_logits)
            combined = mlp_output + moe_output  # reads the side branch on the capturing stream
        # new inputs: a replay must recompute both branches (a side branch left out of the graph
        # would not)
        for static in (mlp_input, moe_input, router_logits):
            static.copy_(torch.randn(static.shape, generator=g))
        expected = (layer.mlp(mlp_input), layer.moe(moe_input, router_logits))
        graph.replay()
        torch.cuda.synchronize()
    torch.testing.assert_close(mlp_output, expected[0])
    torch.testing.assert_close(moe_output, expected[1])
    torch.testing.assert_close(combined, expected[0] + expected[1])


def test_only_a_decode_graph_capture_takes_the_side_stream(monkeypatch):
    """Breakable prefill graphs (0.5.17) end a segment at every attention call: the layer keeps
    its one-stream path there, as in eager mode."""
    from sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph import context
    from sglang.srt.model_executor.runner_utils import capture_mode

    monkeypatch.setattr(context, "_in_breakable_cuda_graph", True)
    monkeypatch.setattr(capture_mode, "is_capture_mode", False)
    assert not gemma4_causal.in_decode_graph_capture()
    monkeypatch.setattr(capture_mode, "is_capture_mode", True)
    assert gemma4_causal.in_decode_graph_capture()


class RecordedStream:
    def __init__(self, name: str, events: list):
        self.name, self.events = name, events

    def record_event(self):
        self.events.append(f"{self.name} records event {len(self.events)}")
        return len(self.events) - 1  # the event: where it was recorded

    def wait_event(self, event):
        self.events.append(f"{self.name} waits for event {event}")

    def wait_stream(self, other):
        self.events.append(f"{self.name} waits for {other.name}")


def test_experts_captured_first_and_the_dense_mlp_forked_from_before_them(monkeypatch):
    events = []
    current, side = RecordedStream("current", events), RecordedStream("side", events)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: current)
    monkeypatch.setattr(
        torch.cuda, "stream", lambda s: events.append(f"on {s.name}") or torch.no_grad()
    )
    layer = Gemma4DecoderLayer.__new__(Gemma4DecoderLayer)
    nn.Module.__init__(layer)
    layer.alt_stream = side
    layer.mlp = lambda x: events.append("dense MLP") or x + 1
    layer.moe = lambda x, logits: events.append("experts: routing, alignment, GEMMs") or x * logits
    mlp_input, moe_input, router_logits = (
        torch.ones(2, 8),
        torch.full((2, 8), 2.0),
        torch.full((2, 8), 3.0),
    )
    mlp_output, moe_output = layer.mlp_beside_moe(mlp_input, moe_input, router_logits)
    assert events == [
        "current records event 0",
        "experts: routing, alignment, GEMMs",
        "side waits for event 0",
        "on side",
        "dense MLP",
        "current waits for side",
    ]
    assert torch.equal(mlp_output, mlp_input + 1) and torch.equal(
        moe_output, moe_input * router_logits
    )
