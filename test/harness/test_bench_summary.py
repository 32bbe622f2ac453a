"""The A/B runner's pieces: medians per build side by side, ratio patched/pristine, a plot file, and
the patched servers' environment."""

import pytest

from sglang_gemma4.harness.bench import plot, summarize
from sglang_gemma4.harness.pool_usage import pool_sizes
from sglang_gemma4.harness.server import patched_env


def record(build, throughput, tpot):
    return {"variant": "26b-a4b", "workload": "chat", "build": build, "output_throughput": throughput,
            "median_tpot_ms": tpot, "median_ttft_ms": 100.0, "median_itl_ms": tpot, "duration": 30.0}


def test_summary_has_both_builds_and_their_ratio(tmp_path):
    records = [record("pristine", 2000.0, 10.0), record("patched", 2500.0, 8.0)]
    table = summarize(records, ["pristine", "patched"])
    rows = {line.split("|")[2].strip(): line for line in table.splitlines()[2:]}
    assert "| 2000.00 | 2500.00 | 1.250 |" in rows["output_throughput"]
    assert "| 10.00 | 8.00 | 0.800 |" in rows["median_tpot_ms"]
    plot(records, ["pristine", "patched"], tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_pool_sizes_are_read_from_the_server_log():
    log = "x\n[..] KV pool: full_layer_tokens=395689, swa_layer_tokens=59353 ...\nmax_total_num_tokens=395689\n"
    assert pool_sizes(log) == {"full_layer_tokens": 395689, "swa_layer_tokens": 59353, "max_total_num_tokens": 395689}


def test_patched_env_pairs():
    assert patched_env(["A=1", "B=x=y"]) == {"A": "1", "B": "x=y"}
    assert patched_env([]) == {}
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        patched_env(["A"])
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        patched_env(["=1"])
