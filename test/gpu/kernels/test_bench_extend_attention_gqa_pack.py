"""gpu/kernels/bench_extend_attention_gqa_pack.py without a GPU: the gqa-pack experiment's command,
the bench's defaults (26B-A4B's and 31B's full layers, an 8,192-token chunk after 0-120K cached
tokens, bf16 and fp8 KV, every tile), and one case measured end to end on CPU through Triton's
interpreter (float32 stand-in for bf16, a counting timer): one row per tile, the old and the packed
kernel agree."""

import patched_tree  # noqa: F401  (the patched sglang first on sys.path, Triton interpreted on CPU)
import pytest
import torch

from sglang_gemma4.gpu.kernels import bench_extend_attention_gqa_pack as bench
from sglang_gemma4.gpu.stages.table import expand

from sglang.kernels.ops.attention import extend_attention as ea


def test_experiment_runs_the_bench_on_the_patched_build(tmp_path):
    (step,) = expand("gqa-pack", tmp_path).steps
    assert step.build == "patched"
    assert step.argv == (
        "python3",
        "-m",
        "sglang_gemma4.gpu.kernels.bench_extend_attention_gqa_pack",
        "--out",
        str(tmp_path / "gqa-pack"),
    )
    (step,) = expand("gqa-pack:prefixes=0 4096", tmp_path).steps
    assert step.argv[-3:] == ("--prefixes", "0", "4096")
    bench.parser().parse_args(list(step.argv[3:]))
    (step,) = expand("gqa-pack:tiles=m32n64w8s2 m64n64w8s1:models=26B-A4B:kv=bf16", tmp_path).steps
    assert step.argv[5:] == (
        "--tiles",
        "m32n64w8s2",
        "m64n64w8s1",
        "--models",
        "26B-A4B",
        "--kv-dtypes",
        "bf16",
    )
    args = bench.parser().parse_args(list(step.argv[3:]))
    assert args.tiles == ["m32n64w8s2", "m64n64w8s1"] and args.kv_dtypes == ["bf16"]


def test_defaults_cover_both_models_all_prefixes_dtypes_and_tiles():
    args = bench.parser().parse_args(["--out", "x"])
    assert args.prefixes == [0, 32768, 65536, 122880] and args.chunk == 8192
    assert args.models == ["26B-A4B", "31B"] and args.kv_dtypes == ["bf16", "fp8"]
    assert args.tiles == list(ea._GQA_PACK_TILES) and len(args.tiles) >= 2
    assert bench.MODELS == {"26B-A4B": (16, 2), "31B": (32, 4)}


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="Triton's interpreter runs it on CPU hosts only"
)
def test_one_case_measured_on_cpu(monkeypatch):
    calls = []

    def timer(fn, repeats):  # old kernel first, then each tile: 10 ms, 5 ms, 5 ms, ...
        fn()
        calls.append(repeats)
        return 10.0 if len(calls) == 1 else 5.0

    tiles = list(ea._GQA_PACK_TILES)
    rows = bench.measure_case(
        "26B-A4B", "bf16", 13, 6, tiles, 2, timer=timer, device="cpu", dtype=torch.float32
    )
    assert calls == [2] * (1 + len(tiles))
    assert [r["tile"] for r in rows] == tiles
    for r in rows:
        assert (r["old_ms"], r["packed_ms"], r["speedup"]) == (10.0, 5.0, 2.0)
        assert r["max_rel_diff"] < 1e-4
        assert bench.table_row(r).startswith(f"| 26B-A4B | bf16 | 13 | {r['tile']} ")


def test_fp8_inputs_carry_the_scales():
    data = bench.inputs("31B", "fp8", 5, 3, device="cpu", dtype=torch.float32)
    assert data["k_buffer"].dtype == torch.float8_e4m3fn and data["q"].shape == (3, 32, 512)
    assert (data["k_scale"], data["v_scale"]) == bench.KV_SCALES["fp8"]
    assert data["kv_indices"].unique().numel() == 5 and int(data["kv_indices"].max()) < 8


def test_a_tile_that_fails_is_a_row_saying_why(monkeypatch):
    def timer(fn, repeats):
        fn()
        return 1.0

    def packed_kernel(data, out, tile):
        if tile == "m64n64w8s1":
            raise RuntimeError(
                "out of resource: shared memory, Required: 262144, Hardware limit: 232448"
            )
        out.zero_()

    monkeypatch.setattr(bench, "old_kernel", lambda data, out: out.zero_())
    monkeypatch.setattr(bench, "packed_kernel", packed_kernel)
    rows = bench.measure_case(
        "31B",
        "fp8",
        4,
        2,
        ["m64n32w8s2", "m64n64w8s1"],
        1,
        timer=timer,
        device="cpu",
        dtype=torch.float32,
    )
    assert rows[0]["speedup"] == 1.0 and "error" not in rows[0]
    assert rows[1]["error"].startswith("RuntimeError: out of resource: shared memory")
    assert "| failed: RuntimeError: out of resource" in bench.table_row(rows[1])


def test_long_experiment_serves_with_the_packed_kernel_off_only_when_asked(tmp_path):
    (default,) = expand("long", tmp_path).steps
    assert not any("GQA_PACK" in word for word in default.argv)
    (step,) = expand("long:patched,no-gqa-pack", tmp_path).steps
    assert "no-gqa-pack=patched SGLANG_OPT_EXTEND_ATTENTION_GQA_PACK=0" in step.argv
