"""The skinny-GEMM candidate of scripts/bench_skinny_gemm.py against a float32 torch product on fresh
random inputs (on CPU through Triton's interpreter), and the decode GEMM shapes it times."""

import importlib.util
import os
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the script imports triton
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_skinny_gemm.py"
spec = importlib.util.spec_from_file_location("bench_skinny_gemm", SCRIPT)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("tokens, n, k, tile", [
    (1, 48, 96, (16, 32, 4, 2)),     # N and K multiples of the tile
    (3, 40, 100, (16, 64, 4, 3)),    # ragged N and K: masked loads and stores
    (16, 24, 64, (32, 64, 8, 2)),    # a full MMA tile of tokens; N smaller than BLOCK_N
])
# Triton's interpreter (3.8) multiplies bf16 tiles in tl.dot wrongly (a 16 x 16 probe is off by ~1e10),
# so bf16 runs on a GPU only; the kernel's indexing and masking are the same for both types.
@pytest.mark.parametrize("dtype", [pytest.param(torch.bfloat16, marks=pytest.mark.gpu), torch.float16])
def test_skinny_gemm_matches_float32(tokens, n, k, tile, dtype):
    g = torch.Generator().manual_seed(tokens * 1000 + n)
    x = torch.randn(tokens, k, generator=g).to(dtype).to(DEVICE)
    w = (torch.randn(n, k, generator=g) / k ** 0.5).to(dtype).to(DEVICE)
    expected = x.float() @ w.float().T
    got = bench.skinny_gemm(x, w, tile)
    assert got.dtype == dtype and got.shape == (tokens, n)
    # one rounding of the float32 sum to the output type
    torch.testing.assert_close(got.float(), expected, rtol=2 ** -7, atol=2 ** -7)


def test_projections_follow_the_published_26b_a4b_shape():
    shapes = bench.projections("26b-a4b")
    # 16 heads x 256 + 8 KV heads x 256 for k and v; full layers: 16 x 512 + 2 x 512, k doubles as v
    assert shapes["qkv sliding"] == (8192, 2816, 25) and shapes["qkv full"] == (9216, 2816, 5)
    assert shapes["o sliding"] == (2816, 4096, 25) and shapes["o full"] == (2816, 8192, 5)
    assert shapes["gate_up"] == (4224, 2816, 30) and shapes["down"] == (2816, 2112, 30)
    assert shapes["router"] == (128, 2816, 30) and shapes["logits"] == (262144, 2816, 1)
    assert "ple gate" not in shapes


def test_projections_of_a_ple_variant_include_its_per_layer_input_gemms():
    shapes = bench.projections("e4b")
    assert shapes["ple gate"] == (256, 2560, 42) and shapes["ple projection"] == (2560, 256, 42)
    assert shapes["qkv sliding"][0] == 8 * 256 + 2 * 2 * 256 and "router" not in shapes
