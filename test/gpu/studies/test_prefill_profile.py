"""prefill_profile's reduction of a profiler trace to a row per prefill chunk, on a small synthetic
trace: two chunks of a three-layer model (sliding, sliding, full), a scheduler gap between them."""

import gzip
import json
import sys

import pytest

from sglang_gemma4.gpu.stages.table import expand
from sglang_gemma4.gpu.studies import prefill_profile
from sglang_gemma4.gpu.studies.prefill_profile import chunk_rows, largest_idle, report, table

LAYERS = ["sliding_attention", "sliding_attention", "full_attention"]


def gpu(start_ms, end_ms, name, cat="kernel"):
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "ts": start_ms * 1000,
        "dur": (end_ms - start_ms) * 1000,
    }


TRACE = [
    # chunk 0 (0..205)
    gpu(0, 10, "elementwise_kernel"),  # embedding: other
    gpu(10, 20, "nvjet_tst_128x256"),
    gpu(20, 30, "_fwd_kernel"),
    gpu(30, 50, "fused_moe_kernel"),  # layer 0
    gpu(55, 65, "_fwd_kernel"),
    gpu(65, 85, "fused_moe_kernel"),  # layer 1, after 5 ms idle
    gpu(85, 125, "_fwd_kernel"),
    gpu(125, 135, "nvjet_tst_64x8"),  # layer 2 (full), the logits GEMM
    gpu(
        200, 205, "Memcpy DtoH", cat="gpu_memcpy"
    ),  # the scheduler reads the result: the step ends after it
    # chunk 1 (300..410): its prefix is chunk 0
    gpu(300, 320, "_fwd_kernel"),
    gpu(320, 340, "_fwd_kernel"),
    gpu(340, 400, "_fwd_kernel"),
    gpu(400, 410, "topk_softmax_kernel"),
    {
        "ph": "X",
        "cat": "cpu_op",
        "name": "aten::mm",
        "ts": 0,
        "dur": 500_000,
    },  # host side: not GPU time
]


def test_largest_idle_stretch_between_two_kernels():
    kernels = [(0, 10, "a"), (5, 20, "b"), (30, 35, "c"), (80, 90, "d")]
    assert largest_idle(kernels, 20, 80) == (35, 80)
    assert largest_idle(kernels, 0, 35) == (20, 30)
    assert largest_idle(kernels, 90, 100) == (90, 100)


def test_chunks_split_at_the_scheduler_gap_and_attention_by_layer_kind():
    first, second = chunk_rows(TRACE, LAYERS, chunk=4096)
    assert first["prefix_tokens"] == 0 and second["prefix_tokens"] == 4096
    assert first["span_ms"] == 205 and first["gap_before_ms"] == 0
    assert first["swa_attention_ms"] == 20 and first["full_attention_ms"] == 40
    assert first["moe_ms"] == 40 and first["gemm_ms"] == 20 and first["other_ms"] == 15
    assert first["idle_in_step_ms"] == 5 + 65  # within layer 1, and the host's wait before its read
    assert second["gap_before_ms"] == 95 and second["span_ms"] == 110
    assert (
        second["swa_attention_ms"] == 40
        and second["full_attention_ms"] == 60
        and second["moe_ms"] == 10
    )
    assert second["idle_in_step_ms"] == 0


def test_packed_full_layer_kernel_counts_as_full_attention():
    """Patch 0105 runs a full layer with a query-head group through _fwd_kernel_gqa_packed."""
    packed = [
        gpu(e["ts"] / 1000, (e["ts"] + e["dur"]) / 1000, "_fwd_kernel_gqa_packed")
        if i in (6, 11)
        else e
        for i, e in enumerate(TRACE)
    ]
    assert [e["name"] for i, e in enumerate(TRACE) if i in (6, 11)] == [
        "_fwd_kernel"
    ] * 2  # the full layers'
    assert chunk_rows(packed, LAYERS, chunk=4096) == chunk_rows(TRACE, LAYERS, chunk=4096)


def test_a_trace_that_is_not_whole_chunks_is_refused():
    with pytest.raises(
        ValueError, match="5 extend-attention kernels are not whole chunks of 3 layers"
    ):
        chunk_rows(TRACE[:-3], LAYERS, chunk=4096)
    with pytest.raises(ValueError, match="0 extend-attention"):
        chunk_rows(
            [gpu(0, 1, "_fwd_kernel_stage1")], LAYERS, chunk=4096
        )  # decode attention is not a chunk's


def test_report_has_a_table_per_setup_with_totals(tmp_path):
    rows = chunk_rows(TRACE, LAYERS, chunk=4096)
    for setup in ("pristine", "patched"):
        (tmp_path / f"26b-a4b-{setup}-chunks.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows)
        )
    text = report(tmp_path)
    assert text == (tmp_path / "prefill-profile.md").read_text()
    assert text.index("## 26b-a4b-patched") < text.index("## 26b-a4b-pristine")
    assert "| 1 | 4096 | 110.0 | 60.0 | 40.0 | 10.0 | 0.0 | 0.0 | 0.0 | 95.0 |" in table(rows)
    assert (
        table(rows).splitlines()[-1]
        == "| all | | 315.0 | 100.0 | 60.0 | 50.0 | 20.0 | 15.0 | 70.0 | 95.0 |"
    )


def test_a_kept_trace_is_reduced_again_without_a_gpu(tmp_path, monkeypatch):
    trace = tmp_path / "t.trace.json.gz"
    with gzip.open(trace, "wt") as f:
        json.dump({"traceEvents": TRACE}, f)
    monkeypatch.setattr(prefill_profile, "text_config", lambda variant: {"layer_types": LAYERS})
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "prefill_profile",
            "--out",
            str(tmp_path),
            "--from-trace",
            str(trace),
            "--label",
            "patched",
            "--chunk",
            "4096",
        ],
    )
    assert prefill_profile.main() == 0
    rows = [
        json.loads(line)
        for line in (tmp_path / "26b-a4b-patched-chunks.jsonl").read_text().splitlines()
    ]
    assert [r["prefix_tokens"] for r in rows] == [0, 4096]
    assert "## 26b-a4b-patched" in (tmp_path / "prefill-profile.md").read_text()


def test_the_experiment_profiles_each_build_in_its_own_step(tmp_path):
    steps = expand("prefill-profile", tmp_path).steps
    assert [s.argv[s.argv.index("--builds") + 1] for s in steps] == ["pristine", "patched"]
    assert all(
        s.module == "sglang_gemma4.gpu.studies.prefill_profile"
        and "--cuda-graph-max-bs-decode" in s.argv
        for s in steps
    )
    with pytest.raises(SystemExit, match="unknown build unified"):
        expand("prefill-profile:unified", tmp_path)
