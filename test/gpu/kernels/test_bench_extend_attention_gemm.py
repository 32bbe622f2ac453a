"""gpu/kernels/bench_extend_attention_gemm.py without a GPU: the extend-gemm experiment's command,
the bench's defaults, and one case measured end to end on CPU through Triton's interpreter (float32
stand-in for bf16, a counting timer): one row per size, the GEMM path agrees with the packed
kernel."""

from pathlib import Path

import patched_tree  # noqa: F401  (the patched sglang first on sys.path, Triton interpreted on CPU)
import pytest
import torch

from sglang_gemma4.gpu.kernels import bench_extend_attention_gemm as bench
from sglang_gemma4.gpu.kernels import bench_extend_attention_gqa_pack as gqa_pack
from sglang_gemma4.gpu.stages.table import expand


def test_experiment_runs_the_bench_on_the_patched_build(tmp_path):
    (step,) = expand("extend-gemm", tmp_path).steps
    assert step.build == "patched"
    assert step.argv == (
        "python3",
        "-m",
        "sglang_gemma4.gpu.kernels.bench_extend_attention_gemm",
        "--out",
        str(tmp_path / "extend-gemm"),
    )
    (step,) = expand("extend-gemm:sizes=1024:1000 4096:2000:chunks=2048:kv=fp8", tmp_path).steps
    assert step.argv[5:] == (
        "--chunks",
        "2048",
        "--sizes",
        "1024:1000",
        "4096:2000",
        "--kv-dtypes",
        "fp8",
    )
    args = bench.parser().parse_args(list(step.argv[3:]))
    assert args.sizes == ["1024:1000", "4096:2000"] and args.chunks == [2048]
    (step,) = expand("extend-gemm:against=.call/old.py", tmp_path).steps
    assert step.argv[5:] == ("--against", ".call/old.py")


def test_defaults():
    args = bench.parser().parse_args(["--out", "x"])
    assert args.prefixes == [0, 8192, 32768, 122880] and args.chunks == [8192]
    assert args.models == ["26B-A4B", "31B"] and args.kv_dtypes == ["bf16", "fp8"]
    assert args.sizes == [bench.DEFAULT_SIZE] and args.layouts == ["split"]
    assert args.against == []
    (step,) = expand("extend-gemm:layouts=split unified", Path("/o")).steps
    assert step.argv[5:] == ("--layouts", "split", "unified")
    assert bench.parser().parse_args(list(step.argv[3:])).layouts == ["split", "unified"]


@pytest.mark.parametrize("kv_dtype", ["bf16", "fp8"])
def test_the_unified_layout_holds_the_same_rows_an_envelope_apart(kv_dtype):
    """The same cache, laid out as the unified pool lays it: each row one envelope (every full
    layer's K and V) after the last, the values unchanged."""
    split = gqa_pack.inputs("26B-A4B", kv_dtype, 9, 5, device="cpu")
    unified = gqa_pack.inputs("26B-A4B", kv_dtype, 9, 5, device="cpu", layout="unified")
    row = split["k_buffer"][0].numel()
    for name in ("k_buffer", "v_buffer"):
        assert split[name].stride(0) == row
        assert unified[name].stride(0) == 2 * gqa_pack.FULL_LAYERS["26B-A4B"] * row
        assert torch.equal(unified[name].float(), split[name].float())
    assert torch.equal(unified["q"], split["q"]) and torch.equal(
        unified["kv_indices"], split["kv_indices"]
    )


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="Triton's interpreter runs it on CPU hosts only"
)
@pytest.mark.parametrize("kv_dtype", ["bf16", "fp8"])
@pytest.mark.parametrize("layout", ["split", "unified"])
def test_one_case_measured_on_cpu(monkeypatch, kv_dtype, layout):
    calls = []

    def timer(fn, repeats):  # packed first, then each size: 10 ms, 4 ms, ...
        fn()
        calls.append(repeats)
        return 10.0 if len(calls) == 1 else 4.0

    sizes = ["4:512", "16:100000"]
    rows = bench.measure_case(
        "26B-A4B",
        kv_dtype,
        9,
        5,
        sizes,
        2,
        timer=timer,
        layout=layout,
        device="cpu",
        dtype=torch.float32,
    )
    assert calls == [2] * 3
    assert [r["size"] for r in rows] == sizes
    for r in rows:
        assert (r["packed_ms"], r["gemm_ms"], r["speedup"]) == (10.0, 4.0, 2.5)
        assert r["max_rel_diff"] < 1e-4
        assert bench.table_row(r).startswith(
            f"| 26B-A4B | {kv_dtype} | {layout} | 9 | 5 | {r['size']} |"
        )


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="Triton's interpreter runs it on CPU hosts only"
)
def test_another_revision_is_timed_beside_the_installed_one(tmp_path):
    """--against: a file of 0185's module (here the installed one's source with a slower softmax
    tile, to tell them apart) runs on the same inputs after the installed module, size by size."""
    old = tmp_path / "older.py"
    source = Path(bench.eg.__file__).read_text()
    old.write_text(source.replace("_SOFTMAX_TILE = 8192", "_SOFTMAX_TILE = 64"))
    tiles = []

    def timer(fn, repeats):
        fn()
        tiles.append(fn.__defaults__[-1]._SOFTMAX_TILE if fn.__defaults__ else None)
        return 1.0

    rows = bench.measure_case(
        "26B-A4B",
        "bf16",
        9,
        5,
        ["4:512", "16:100000"],
        1,
        timer=timer,
        against=[(str(old), bench.revision(str(old)))],
        device="cpu",
        dtype=torch.float32,
    )
    assert [(r["size"], r["revision"]) for r in rows] == [
        ("4:512", "installed"),
        ("4:512", str(old)),
        ("16:100000", "installed"),
        ("16:100000", str(old)),
    ]
    assert tiles == [None, 8192, 64, 8192, 64]
    assert all(r["max_rel_diff"] < 1e-4 for r in rows)
    assert f"| 4:512 | {old} |" in bench.table_row(rows[1])
