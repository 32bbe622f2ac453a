"""The decode profiler's arithmetic: kernel times per step from a torch profiler trace, kernel
groups, the bytes a step must read (checked against sums made here from the published shapes), and
the markdown it writes; the bench_one_batch command it runs."""

import gzip
import json

import pytest

from sglang_gemma4.gpu.serve.variants import text_config
from sglang_gemma4.gpu.studies import profile
from sglang_gemma4.gpu.studies.profile import (
    active_bytes,
    kernel_group,
    kernel_times,
    skipped_batches,
    summarize,
    weight_bytes,
    write_report,
)


def write_text_config(directory, variant):
    directory.mkdir()
    (directory / "config.json").write_text(
        json.dumps({**text_config(variant), "architectures": ["Gemma4ForCausalLM"]})
    )
    return directory


def test_kernel_times_are_per_step_and_skip_cpu_events(tmp_path):
    events = [
        {"ph": "X", "cat": "kernel", "name": "fused_moe_kernel", "dur": 30.0},
        {"ph": "X", "cat": "kernel", "name": "fused_moe_kernel", "dur": 60.0},
        {"ph": "X", "cat": "kernel", "name": "_gemma4_routing_kernel", "dur": 9.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "dur": 500.0},
        {"ph": "i", "cat": "kernel", "name": "marker"},
    ]
    trace = tmp_path / "t.trace.json.gz"
    with gzip.open(trace, "wt") as f:
        json.dump({"traceEvents": events}, f)
    assert kernel_times(trace, steps=3) == {"fused_moe_kernel": 30.0, "_gemma4_routing_kernel": 3.0}


@pytest.mark.parametrize(
    "name, group",
    [
        ("fused_moe_kernel", "moe experts"),
        ("_gemma4_routing_kernel", "routing"),
        ("void at::native::sbtopk::gatherTopK<float>", "routing"),
        ("_fwd_grouped_kernel_stage1", "attention"),
        ("_fwd_kernel_stage2", "attention"),
        (
            "void (anonymous namespace)::store_kvcache<4096l, 4, true, int>(StoreKVCacheParams)",
            "rope + kv store",
        ),
        (
            "void (anonymous namespace)::fused_rope_kernel<true, 256l, true, __nv_bfloat16>",
            "rope + kv store",
        ),
        ("nvjet_tst_128x64_64x8_1x1_v_bz_TNT", "gemm"),
        ("gemma_rmsnorm_residual_scalar_kernel", "norm"),
        ("_gemma_gelu_tanh_mul_kernel", "elementwise"),
        ("sm90_xmma_gemm_bf16bf16", "gemm"),
        ("void at::native::vectorized_elementwise_kernel<4>", "elementwise"),
        ("something_new", "other"),
    ],
)
def test_kernel_groups(name, group):
    assert kernel_group(name) == group


def test_moe_weight_bytes_match_the_published_shapes(tmp_path):
    sizes = weight_bytes(write_text_config(tmp_path / "m", "26b-a4b"))
    layers, experts, hidden, moe_width = 30, 128, 2816, 704
    assert sizes["experts"] == layers * experts * 3 * hidden * moe_width * 2  # gate, up, down; bf16
    assert sizes["lookup_tables"] == 0 and (sizes["num_experts"], sizes["top_k"]) == (128, 8)
    # one token reads the dense weights and 8 of 128 experts; many tokens approach all of them
    assert active_bytes(sizes, 1) == pytest.approx(sizes["dense"] + sizes["experts"] * 8 / 128)
    assert active_bytes(sizes, 64) == pytest.approx(
        sizes["dense"] + sizes["experts"] * (1 - (120 / 128) ** 64)
    )


def test_ple_table_is_a_lookup_not_streamed(tmp_path):
    sizes = weight_bytes(write_text_config(tmp_path / "m", "e2b"))
    assert sizes["lookup_tables"] == 262144 * 35 * 256 * 2  # vocab x layers x PLE width, bf16
    assert sizes["experts"] == 0 and active_bytes(sizes, 16) == sizes["dense"]


def test_summary_reports_shares_and_the_hbm_floor():
    record = {
        "batch": 1,
        "graph_step_ms": 5.0,
        "active_weight_bytes": 7.5e9,
        "weights": {"num_experts": 128},
        "kernels_us": {
            "fused_moe_kernel": 2000.0,
            "nvjet_gemm": 1000.0,
            "_gemma4_routing_kernel": 100.0,
            "_fwd_kernel_stage1": 900.0,
        },
    }
    text = "\n".join(summarize(record, bandwidth=3.0e12))
    assert "| moe experts | 2000.0 | 50.0% |" in text and "| routing | 100.0 | 2.5% |" in text
    # 7.5 GB in 3 ms of streaming kernels = 2.5 TB/s; the floor at 3 TB/s is 2.5 ms, half the step
    assert "= 2.50 TB/s" in text and "floor at 3.00 TB/s: 2.500 ms (50% of the graph step)" in text
    assert "upper bound" not in text  # batch 1: top_k of E experts is exact
    text = "\n".join(summarize({**record, "batch": 4}, bandwidth=3.0e12))
    assert "upper bound" in text


@pytest.mark.parametrize("variant, fused_sum", [("26b-a4b", True), ("31b", False)])
def test_bench_one_batch_runs_the_preset_options(tmp_path, monkeypatch, variant, fused_sum):
    commands = []
    monkeypatch.setattr(profile.subprocess, "run", lambda argv, **kw: commands.append(argv))
    profile.bench_one_batch(
        "patched", variant, tmp_path / "ckpt", tmp_path, [1, 4], {}, False, "run"
    )
    (argv,) = commands
    assert argv[:3] == ["bash", "-c", '. "$0" && exec "$@"'] and argv[3].endswith("/env-patched.sh")
    command = " ".join(argv[4:])  # the arguments as they reach bench_one_batch, one word each
    assert "-m sglang.bench_one_batch " in command and "--batch-size 1 4 " in command
    assert ("--enable-fused-moe-sum-all-reduce" in command) is fused_sum


def test_batches_bench_one_batch_skipped_are_read_from_its_log():
    log = (
        "Decode.  median latency: 0.02815 s, median throughput:    568.35 token/s\n"
        "skipping (64, 256, 32) due to max batch size limit\n"
        "skipping (128, 256, 32) due to max batch size limit\n"
    )
    assert skipped_batches(log) == [64, 128]
    assert skipped_batches("Decode.  median latency: 0.02815 s\n") == []


def test_report_is_rewritten_from_the_records(tmp_path, monkeypatch):
    sizes = {"dense": 60e9, "experts": 0, "lookup_tables": 0, "num_experts": 0, "top_k": 0}
    records = [
        {
            "variant": "31b",
            "label": "patched",
            "gpu": "NVIDIA H100 80GB HBM3",
            "batch": batch,
            "graph_step_ms": step,
            "not_measured": [64],
            "active_weight_bytes": 60e9,
            "weights": sizes,
            "kernels_us": {"nvjet_gemm": 20000.0, "_fwd_grouped_kernel_stage1": 500.0},
        }
        for batch, step in ((1, 25.0), (32, 30.0))
    ]
    jsonl = tmp_path / "31b-patched-profile.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in records))
    monkeypatch.setattr("sys.argv", ["profile", "--report", str(jsonl)])
    assert profile.main() == 0
    text = (tmp_path / "31b-patched-profile.md").read_text()
    assert text.startswith("# 31b (patched) on NVIDIA H100 80GB HBM3: one decode step")
    assert "Not measured: batch 64" in text
    assert (
        "### batch 1: graph step 25.000 ms" in text and "### batch 32: graph step 30.000 ms" in text
    )
    # 60 GB at the H100's nominal 3.35 TB/s: 17.910 ms, 72% of the 25 ms step
    assert "floor at 3.35 TB/s: 17.910 ms (72% of the graph step)" in text
    assert text == write_report(records, tmp_path / "again.md")
