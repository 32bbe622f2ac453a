"""0110: dense GEMMs of at most 16 tokens through a Triton weight-streaming kernel on Hopper (opt-in).
The kernel against a float32 torch product on fresh random inputs (on CPU in Triton's interpreter,
float16: the interpreter's bfloat16 dot is wrong; bfloat16 on a GPU), which inputs take it, and that
the unquantized linear method routes them there with the device reported as Hopper; and the decode
GEMM shapes its benchmark (scripts/bench_skinny_gemm.py) times."""

import importlib.util
from pathlib import Path

import pytest
import torch

from kernel_inputs import randn
from sglang.srt.layers import skinny_gemm as sg
from sglang.srt.layers.quantization import unquant

CPU_DTYPE = torch.float16
DTYPES = [CPU_DTYPE, pytest.param(torch.bfloat16, marks=pytest.mark.gpu)]


def one_rounding(dtype):
    # the float32 sum rounded once to the output type, relative to values of order one
    return {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]


@pytest.mark.parametrize("tokens, n, k, tile", [
    (1, 48, 96, (16, 32, 4, 2)),     # N and K multiples of the tile
    (3, 40, 100, (16, 64, 4, 3)),    # ragged N and K: masked loads and stores
    (16, 24, 64, (32, 64, 8, 2)),    # a full tile of tokens, N below BLOCK_N
    (5, 64, 600, None),              # the shipped tile choice (BLOCK_K 256: three K steps, the last ragged)
])
@pytest.mark.parametrize("dtype", DTYPES)
def test_kernel_matches_float32(tokens, n, k, tile, dtype):
    x = randn(tokens, k, dtype=dtype, seed=tokens)
    w = randn(n, k, dtype=dtype, seed=n, scale=k ** -0.5)
    expected = x.float() @ w.float().T
    got = sg.skinny_gemm(x, w, tile)
    assert got.dtype == dtype and got.shape == (tokens, n)
    torch.testing.assert_close(got.float(), expected, rtol=one_rounding(dtype), atol=one_rounding(dtype))


@pytest.fixture
def hopper(monkeypatch):
    monkeypatch.setattr(sg, "_is_cuda", True)
    monkeypatch.setattr(sg, "CUDA_CAPABILITY", (9, 0), raising=False)
    monkeypatch.setenv("SGLANG_OPT_SKINNY_GEMM", "1")


@pytest.mark.parametrize("case, enabled", [("hopper", True), ("switch off", False), ("ampere", False),
                                           ("blackwell", False), ("not cuda", False)])
def test_enabled_on_hopper_when_opted_in(hopper, monkeypatch, case, enabled):
    if case == "switch off":
        monkeypatch.setenv("SGLANG_OPT_SKINNY_GEMM", "0")
    elif case in ("ampere", "blackwell"):
        monkeypatch.setattr(sg, "CUDA_CAPABILITY", (8, 0) if case == "ampere" else (10, 0))
    elif case == "not cuda":
        monkeypatch.setattr(sg, "_is_cuda", False)
    assert sg.skinny_gemm_enabled() == enabled


def test_weights_it_takes():
    rows = sg.SKINNY_GEMM_MIN_ROWS
    assert sg.skinny_gemm_weight_fits(randn(rows, 64, dtype=torch.bfloat16))
    assert sg.skinny_gemm_weight_fits(randn(rows, 64, dtype=CPU_DTYPE))
    assert not sg.skinny_gemm_weight_fits(randn(rows - 16, 64, dtype=CPU_DTYPE))  # a router's few rows
    assert not sg.skinny_gemm_weight_fits(randn(rows, 64))  # float32
    assert not sg.skinny_gemm_weight_fits(randn(64, rows, dtype=CPU_DTYPE).T)  # columns not contiguous
    assert not sg.skinny_gemm_weight_fits(randn(2, rows, 64, dtype=CPU_DTYPE))


@pytest.mark.parametrize("case", ["fits", "1 token", "16 tokens", "17 tokens", "no tokens", "bias",
                                  "other type", "strided", "3-D"])
def test_inputs_it_takes(case):
    w = randn(sg.SKINNY_GEMM_MIN_ROWS, 64, dtype=CPU_DTYPE)
    tokens = {"1 token": 1, "16 tokens": 16, "17 tokens": 17, "no tokens": 0}.get(case, 4)
    x, bias = randn(tokens, 64, dtype=CPU_DTYPE), None
    if case == "bias":
        bias = randn(w.shape[0], dtype=CPU_DTYPE)
    elif case == "other type":
        x = x.to(torch.bfloat16)
    elif case == "strided":
        x = randn(64, 4, dtype=CPU_DTYPE).T
    elif case == "3-D":
        x = x[None]
    assert sg.skinny_gemm_input_fits(x, w, bias) == (case in ("fits", "1 token", "16 tokens"))


def linear_layer(rows: int):
    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter(randn(rows, 64, dtype=CPU_DTYPE, seed=2, scale=0.125), requires_grad=False)
    method = unquant.UnquantizedLinearMethod()
    method.process_weights_after_loading(layer)
    return layer, method


def test_linear_method_routes_few_tokens_of_wide_layers_to_the_kernel(hopper, monkeypatch):
    calls = []

    def counted(x, weight):
        calls.append((weight.shape[0], x.shape[0]))
        return sg.skinny_gemm(x, weight)

    monkeypatch.setattr(unquant, "skinny_gemm", counted)
    wide, narrow = sg.SKINNY_GEMM_MIN_ROWS, sg.SKINNY_GEMM_MIN_ROWS - 16
    for rows in (wide, narrow):
        layer, method = linear_layer(rows)
        assert layer.use_skinny_gemm == (rows == wide)
        for tokens in (2, sg.SKINNY_GEMM_MAX_TOKENS + 1):
            x = randn(tokens, 64, dtype=CPU_DTYPE, seed=tokens)
            out = method.apply(layer, x)
            torch.testing.assert_close(out.float(), x.float() @ layer.weight.float().T, rtol=2e-3, atol=2e-3)
    assert calls == [(wide, 2)]  # 17 tokens and the narrow layer went to F.linear


def test_linear_method_keeps_cublas_when_not_opted_in(hopper, monkeypatch):
    monkeypatch.setenv("SGLANG_OPT_SKINNY_GEMM", "0")
    layer, _ = linear_layer(sg.SKINNY_GEMM_MIN_ROWS)
    assert layer.use_skinny_gemm is False


def bench_script():
    path = Path(__file__).resolve().parents[2] / "scripts" / "bench_skinny_gemm.py"
    spec = importlib.util.spec_from_file_location("bench_skinny_gemm", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_projections_follow_the_published_26b_a4b_shape():
    shapes = bench_script().projections("26b-a4b")
    # 16 heads x 256 + 8 KV heads x 256 for k and v; full layers: 16 x 512 + 2 x 512, k doubles as v
    assert shapes["qkv sliding"] == (8192, 2816, 25) and shapes["qkv full"] == (9216, 2816, 5)
    assert shapes["o sliding"] == (2816, 4096, 25) and shapes["o full"] == (2816, 8192, 5)
    assert shapes["gate_up"] == (4224, 2816, 30) and shapes["down"] == (2816, 2112, 30)
    assert shapes["router"] == (128, 2816, 30) and shapes["logits"] == (262144, 2816, 1)
    assert "ple gate" not in shapes


def test_bench_projections_of_a_ple_variant_include_its_per_layer_input_gemms():
    shapes = bench_script().projections("e4b")
    assert shapes["ple gate"] == (256, 2560, 42) and shapes["ple projection"] == (2560, 256, 42)
    assert shapes["qkv sliding"][0] == 8 * 256 + 2 * 2 * 256 and "router" not in shapes
