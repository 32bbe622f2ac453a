"""0155: sglang finds fused-MoE configs of its own for 26B-A4B's experts (E=128, N=704) on an H100
under triton 3.6.0, for both GEMMs: a separate tile for the down GEMM at decode batch sizes, where
it used to fall back to triton 3.5.1's file and reuse the gate_up tile. Checked on CPU through
sglang's own lookup (device name and triton version stood in), the files against the H100's shared
memory and against the 3.5.1 entries they keep; on an H100 the experts with these tiles against a
float32 reference."""

import importlib
import json
import logging
from pathlib import Path

import pytest
import torch
from swa_serving import publish_server_args, reset_context

config_module = importlib.import_module(
    "sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe_triton_config"
)

H100 = "NVIDIA H100 80GB HBM3"
EXPERTS, N, HIDDEN, TOP_K = 128, 704, 2816, 8  # 26B-A4B: N is the expert's intermediate size
W1_SHAPE, W2_SHAPE = (EXPERTS, 2 * N, HIDDEN), (EXPERTS, HIDDEN, N)
TUNED_BATCHES = (1, 2, 4, 8)  # decode sizes tuned on an H100; every other entry is 3.5.1's
CONFIGS = Path(config_module.__file__).parent / "configs"
FILE = f"E={EXPERTS},N={N},device_name={H100.replace(' ', '_')}"
SHARED_MEMORY_PER_BLOCK = 227 * 1024  # an H100's opt-in maximum


def entries(version: str, suffix: str = "") -> dict[str, dict]:
    return json.loads((CONFIGS / f"triton_{version}" / f"{FILE}{suffix}.json").read_text())


@pytest.fixture
def on_h100_triton_3_6(monkeypatch):
    """sglang's lookup as on an H100 with triton 3.6.0 (the GPU image's), server args published."""
    monkeypatch.setattr(config_module, "get_device_name", lambda: H100)
    monkeypatch.setattr(config_module.triton, "__version__", "3.6.0")
    config_module.get_moe_configs.cache_clear()
    publish_server_args()
    yield
    reset_context()
    config_module.get_moe_configs.cache_clear()


def test_both_gemms_read_triton_3_6_files_of_their_own(on_h100_triton_3_6, caplog):
    with caplog.at_level(logging.INFO, logger=config_module.__name__):
        up, (down, _) = config_module.try_get_optimal_moe_config(
            W1_SHAPE, W2_SHAPE, TOP_K, None, 1, return_down_config=True
        )
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], (
        "fell back to another file"
    )
    loaded = [r.getMessage() for r in caplog.records if "Using MoE kernel config" in r.getMessage()]
    assert any(f"triton_3_6_0/{FILE}.json" in m for m in loaded)
    assert any(f"triton_3_6_0/{FILE}_down.json" in m for m in loaded)
    assert up == entries("3_6_0")["1"] and down == entries("3_6_0", "_down")["1"]
    assert down != up  # the down GEMM (K = 704) gets its own, wider tile


@pytest.mark.parametrize("suffix", ["", "_down"])
def test_only_the_decode_entries_differ_from_triton_3_5_1(suffix):
    tuned, before = entries("3_6_0", suffix), entries("3_5_1")  # 3.5.1 has one file for both GEMMs
    assert tuned.keys() == before.keys()
    changed = {int(m) for m in tuned if tuned[m] != before[m]}
    assert changed and changed <= set(TUNED_BATCHES)


@pytest.mark.parametrize("batch", [str(b) for b in TUNED_BATCHES])
def test_tiles_fit_an_h100_and_share_the_block_rows(batch):
    up, down = entries("3_6_0")[batch], entries("3_6_0", "_down")[batch]
    # both GEMMs read one alignment of the routed rows into BLOCK_SIZE_M-row blocks
    assert up["BLOCK_SIZE_M"] == down["BLOCK_SIZE_M"]
    for tile in (up, down):
        bf16_bytes = (
            2
            * tile["num_stages"]
            * tile["BLOCK_SIZE_K"]
            * (tile["BLOCK_SIZE_M"] + tile["BLOCK_SIZE_N"])
        )
        assert bf16_bytes <= SHARED_MEMORY_PER_BLOCK


def experts_reference(x, w1, w2, weights, ids):
    """float32: each token's top-k experts, gate * up through GELU, down, weighted and summed."""
    out = torch.zeros(x.shape[0], HIDDEN, dtype=torch.float32, device=x.device)
    for t in range(x.shape[0]):
        for w, e in zip(weights[t].tolist(), ids[t].tolist()):
            gate, up = (w1[e].float() @ x[t].float()).chunk(2)
            out[t] += w * (w2[e].float() @ (torch.nn.functional.gelu(gate) * up))
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("batch", TUNED_BATCHES)
def test_experts_with_the_tuned_tiles_match_float32(batch, caplog, one_process_group):
    if not torch.cuda.is_available() or torch.cuda.get_device_name() != H100:
        pytest.skip("the files are an H100's")
    from sglang.srt.layers.moe.moe_runner.base import MoeRunnerConfig
    from sglang.srt.layers.moe.moe_runner.triton_utils import fused_experts
    from sglang.srt.layers.moe.topk import StandardTopKOutput

    g = torch.Generator(device="cuda").manual_seed(batch)

    def randn(*shape, scale):
        return (torch.randn(*shape, device="cuda", generator=g) * scale).bfloat16()

    x = randn(batch, HIDDEN, scale=1.0)
    w1, w2 = randn(*W1_SHAPE, scale=HIDDEN**-0.5), randn(*W2_SHAPE, scale=N**-0.5)
    scores = torch.rand(batch, EXPERTS, device="cuda", generator=g)
    weights, ids = torch.topk(torch.softmax(scores, -1), TOP_K, dim=-1)
    runner = MoeRunnerConfig(
        num_experts=EXPERTS,
        num_local_experts=EXPERTS,
        hidden_size=HIDDEN,
        intermediate_size_per_partition=N,
        top_k=TOP_K,
        activation="gelu",
        inplace=False,
    )
    config_module.get_moe_configs.cache_clear()
    publish_server_args()
    try:
        with caplog.at_level(logging.INFO, logger=config_module.__name__):
            out = fused_experts(
                x, w1, w2, StandardTopKOutput(weights, ids.to(torch.int32), scores), runner
            )
    finally:
        reset_context()
    assert any(f"triton_3_6_0/{FILE}_down.json" in r.getMessage() for r in caplog.records)
    ref = experts_reference(x, w1, w2, weights, ids)
    assert ((out.float() - ref).abs().max() / ref.abs().max()).item() < 2e-2
