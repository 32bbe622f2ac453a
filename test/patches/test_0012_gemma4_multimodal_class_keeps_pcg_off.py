"""0012: Gemma4ForConditionalGeneration keeps piecewise CUDA graphs off even when it no longer
counts as multimodal (served text-only), unless SGLANG_ENABLE_PIECEWISE_CUDA_GRAPH_FOR_MM=1;
Gemma4ForCausalLM keeps them.  The rule is run on CPU with the hardware checks that would turn
piecewise graphs off on this machine answered as on a CUDA host."""

import pytest
from gemma4_config import server_args, write_config

import sglang.srt.server_args as server_args_module


def piecewise_graphs_off(model_dir, monkeypatch, multimodal: bool) -> bool:
    args = server_args(model_dir)
    for check in ("is_hip", "is_npu", "is_cpu", "is_mps", "is_xpu"):
        monkeypatch.setattr(server_args_module, check, lambda: False)
    # multimodal=False is what serving the class text-only makes of it.
    monkeypatch.setattr(args.get_model_config(), "is_multimodal", multimodal)
    args.disable_piecewise_cuda_graph = False
    args._handle_piecewise_cuda_graph()
    return args.disable_piecewise_cuda_graph


@pytest.mark.parametrize("variant", ["31b", "26b-a4b", "e4b"])
@pytest.mark.parametrize("multimodal", [True, False])
def test_multimodal_class_keeps_them_off(tmp_path, monkeypatch, variant, multimodal):
    monkeypatch.delenv("SGLANG_ENABLE_PIECEWISE_CUDA_GRAPH_FOR_MM", raising=False)
    assert piecewise_graphs_off(write_config(tmp_path / "m", variant, "conditional"), monkeypatch, multimodal)


@pytest.mark.parametrize("variant", ["31b", "26b-a4b", "e4b"])
def test_causal_class_keeps_them_on(tmp_path, monkeypatch, variant):
    monkeypatch.delenv("SGLANG_ENABLE_PIECEWISE_CUDA_GRAPH_FOR_MM", raising=False)
    assert not piecewise_graphs_off(write_config(tmp_path / "m", variant, "causal"), monkeypatch, False)


def test_opt_in_turns_them_on_for_text_only_serving(tmp_path, monkeypatch):
    model = write_config(tmp_path / "m", "31b", "conditional")
    monkeypatch.setenv("SGLANG_ENABLE_PIECEWISE_CUDA_GRAPH_FOR_MM", "1")
    assert not piecewise_graphs_off(model, monkeypatch, False)
    # with images and audio on, the multimodal rule still applies
    assert piecewise_graphs_off(model, monkeypatch, True)
