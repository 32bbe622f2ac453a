"""KV capacity and memory accounting read from server start-up logs: sglang 0.5.12 (a real log of
this repository's results), sglang 0.5.17 (lines in the wording of its log statements) and vLLM's
v1 engine; logs named by pattern, and the GPU's memory from nvidia-smi's line."""

import json
from pathlib import Path

import pytest

from sglang_gemma4.gpu.studies import kv_capacity
from sglang_gemma4.gpu.studies.kv_capacity import (
    main,
    markdown,
    parse_sglang,
    parse_vllm,
    report,
    served_variant,
    sglang_window,
)
from sglang_gemma4.results import read_archive

REPO = Path(__file__).resolve().parents[3]
# benchmark_results/sglang-0.5.12/2026-11-22-h100-26b-a4b-g253f045b9c-swa-study/raw.tar.xz:
# 26b-a4b-r0.8.server.log
RUN_0512 = REPO / "benchmark_results/sglang-0.5.12/2026-11-22-h100-26b-a4b-g253f045b9c-swa-study"
LOG_0512 = read_archive(RUN_0512, {"26b-a4b-r0.8.server.log"})["26b-a4b-r0.8.server.log"].decode(
    errors="replace"
)

# sglang 0.5.17: model_runner.load_model, pool_configurator, memory_pool._finalize_allocation_log,
# swa_memory_pool, kv_cache_configurator.configure, cuda_graph_setup, scheduler (TP-tagged lines)
LOG_0517 = """\
[2026-11-24 10:00:00] server_args=ServerArgs(model_path='m', mem_fraction_static=0.85, page_size=1, swa_full_tokens_ratio=0.8)
[2026-11-24 10:00:05 TP0] Load weight begin. avail mem=78.50 GB
[2026-11-24 10:00:06 TP0] Load weight end. elapsed=0.20 s, type=Gemma4ForCausalLM, avail mem=30.65 GB, mem usage=47.85 GB.
[2026-11-24 10:00:06 TP0] Use sliding window memory pool sized for the running requests' windows. full_layer_tokens=456407, swa_layer_tokens=53281 (ratio 0.117; swa_full_tokens_ratio=0.8 would give the full pool 109913 tokens)
[2026-11-24 10:00:06 TP0] SWA KV Cache is allocated. dtype: torch.bfloat16, #tokens: 53281, K size: 5.08 GB, V size: 5.08 GB
[2026-11-24 10:00:06 TP0] Full KV Cache is allocated. dtype: torch.bfloat16, #tokens: 456407, K size: 4.35 GB, V size: 4.35 GB
[2026-11-24 10:00:06 TP0] SWAKVPool mem usage: 18.86 GB, swa size: 53281, full size: 456407
[2026-11-24 10:00:06 TP0] Memory pool end. avail mem=11.50 GB
[2026-11-24 10:00:07 TP0] Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, bs=[1, 2, 4], avail mem=11.40 GB
[2026-11-24 10:01:40 TP0] Capture target decode CUDA graph end. elapsed=93.10 s, mem usage=0.13 GB, avail mem=11.27 GB.
[2026-11-24 10:01:41 TP0] Capture target prefill CUDA graph end. elapsed=40.00 s, mem usage=1.50 GB, avail mem=9.77 GB.
[2026-11-24 10:02:00 TP0] max_total_num_tokens=456407, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=32, context_len=32768, available_gpu_mem=9.77 GB
"""  # noqa: E501 (verbatim log lines)

# vLLM v1: gpu_model_runner (weights, graph estimate), gpu_worker (KV memory, the fraction),
# kv_cache_utils
LOG_VLLM = """\
(APIServer pid=1) INFO 11-23 09:00:00 [utils.py:253] non-default args: {'model': 'm', 'max_model_len': 32768, 'gpu_memory_utilization': 0.85, 'load_format': 'dummy'}
(EngineCore pid=2) INFO 11-23 09:00:30 [gpu_model_runner.py:4879] Model loading took 48.08 GiB memory and 20.5 seconds
(EngineCore pid=2) INFO 11-23 09:01:10 [gpu_model_runner.py:6365] Estimated CUDA graph memory: 0.61 GiB total
(EngineCore pid=2) INFO 11-23 09:01:10 [gpu_worker.py:466] Available KV cache memory: 16.20 GiB
(EngineCore pid=2) INFO 11-23 09:01:10 [kv_cache_utils.py:1286] GPU KV cache size: 148,709 tokens
(EngineCore pid=2) INFO 11-23 09:01:10 [kv_cache_utils.py:1291] Maximum concurrency for 32,768 tokens per request: 13.42x
(EngineCore pid=2) INFO 11-23 09:01:20 [gpu_model_runner.py:5000] Graph capturing finished in 9 secs, took 0.55 GiB
"""  # noqa: E501 (verbatim log lines)


def rows(text: str, **kwargs) -> dict:
    if kv_capacity.is_vllm(text):
        return kv_capacity.vllm_rows(
            parse_vllm(text), kwargs.get("context", 32768), kwargs.get("gpu_total_gib")
        )
    return kv_capacity.sglang_rows(
        parse_sglang(text), kwargs.get("context", 32768), sglang_window("26b-a4b")
    )


def test_sglang_0512_log_of_this_repository():
    r = rows(LOG_0512)
    assert r["memory granted by the fraction (GiB)"] == pytest.approx(0.85 * 78.50)
    assert r["weights (GiB)"] == 47.85
    assert (r["full-attention pool (tokens)"], r["SWA pool (tokens)"]) == (109_913, 87_930)
    assert r["full-attention pool (GiB)"] == pytest.approx(2.10) and r[
        "SWA pool (GiB)"
    ] == pytest.approx(16.78)
    # 2 x 2 x 512 x 2 bytes in each of 5 full layers, 2 x 8 x 256 x 2 in each of 25 sliding ones (as
    # logged: 2 decimals)
    assert r["full-attention bytes per token"] == pytest.approx(20_480, rel=0.005)
    assert r["SWA bytes per token"] == pytest.approx(204_800, rel=0.001)
    assert r["KV cache (GiB)"] == 18.87
    assert r["other static buffers (GiB)"] == pytest.approx(78.50 - 11.49 - 47.85 - 18.87)
    assert r["CUDA graphs (GiB)"] == 0.13 and r["left for activations (GiB)"] == 11.27
    assert r["gap: granted less held (GiB)"] == pytest.approx(0.85 * 78.50 - (78.50 - 11.49))
    # a 32k request fills the full-attention pool long before the SWA pool: 109,913 / 32,768 of them
    assert r["32768-token requests at once"] == pytest.approx(109_913 / 32_768)
    assert r["full-attention tokens they hold"] == pytest.approx(109_913)


def test_sglang_0517_log_wording():
    r = rows(LOG_0517)
    assert (r["full-attention pool (tokens)"], r["SWA pool (tokens)"]) == (456_407, 53_281)
    assert r["full-attention pool (GiB)"] == pytest.approx(8.70) and r[
        "SWA pool (GiB)"
    ] == pytest.approx(10.16)
    assert r["CUDA graphs (GiB)"] == pytest.approx(0.13 + 1.50)  # decode and prefill captures
    assert r["left for activations (GiB)"] == 9.77
    # the SWA pool now binds 32k requests: 53,281 / (1023 + 1) windows
    assert r["32768-token requests at once"] == pytest.approx(min(456_407 / 32_768, 53_281 / 1024))
    assert r["full-attention tokens they hold"] == pytest.approx(456_407)


def test_a_swa_pool_of_few_windows_binds_long_requests():
    small_swa = LOG_0517.replace("swa_layer_tokens=53281", "swa_layer_tokens=4096")
    r = rows(small_swa)
    assert r["32768-token requests at once"] == pytest.approx(4096 / 1024)
    assert r["full-attention tokens they hold"] == pytest.approx(4 * 32_768)


def test_post_capture_kv_sizing_is_what_the_server_holds():
    resized = LOG_0517.replace(
        "[2026-11-24 10:02:00 TP0] max_total",
        "[2026-11-24 10:01:50 TP0] Post-capture KV sizing: full_layer_tokens=470000, "
        "swa_layer_tokens=54000\n"
        "[2026-11-24 10:01:50 TP0] Post-capture KV sizing: KV cache allocated. dtype: "
        "torch.bfloat16, "
        "#tokens: 470000, KV size: 19.40 GB, avail mem=8.90 GB\n[2026-11-24 10:02:00 "
        "TP0] max_total",
    )
    found = parse_sglang(resized)
    assert (found["full_tokens"], found["swa_tokens"], found["kv_total_gib"]) == (
        470_000,
        54_000,
        19.40,
    )
    assert found["full_gib"] is None and found["swa_gib"] is None  # the resize logs only a total
    assert found["free_after_start_gib"] == 8.90


def test_the_unified_pool_is_one_buffer_with_each_sides_cap():
    """--enable-unified-memory logs the static split (0017's line) before its own summary: the
    summary's caps and bytes are what the server holds."""
    unified = LOG_0517.replace(
        "[2026-11-24 10:02:00 TP0] max_total",
        "[2026-11-24 10:01:50 TP0] [unified-memory-pool]   total_bytes=75583610880 (=70.39 GB), "
        "full_max_total_num_tokens=3598426, swa_max_total_num_tokens=83009, joint_available="
        "335508 slots\n[2026-11-24 10:02:00 TP0] max_total",
    )
    found = parse_sglang(unified)
    assert (found["full_tokens"], found["swa_tokens"]) == (3_598_426, 83_009)
    assert found["kv_total_gib"] == pytest.approx(70.39, abs=0.005)
    assert found["full_gib"] is None and found["swa_gib"] is None


def test_vllm_log():
    r = rows(LOG_VLLM, gpu_total_gib=79.19)
    assert r["memory granted by the fraction (GiB)"] == pytest.approx(0.85 * 79.19)
    assert r["weights (GiB)"] == 48.08 and r["KV cache (GiB)"] == 16.20
    assert r["KV cache (tokens, vLLM's count)"] == 148_709
    assert r["CUDA graphs (GiB)"] == 0.55  # the capture's own figure over the profiler's estimate
    assert r["left for activations (GiB)"] == pytest.approx(0.85 * 79.19 - 48.08 - 16.20 - 0.55)
    assert r["32768-token requests at once"] == 13.42
    assert r["full-attention tokens they hold"] == pytest.approx(13.42 * 32_768)


def test_vllm_without_the_gpu_size_or_at_another_length():
    r = rows(LOG_VLLM, context=65536)
    assert (
        r["memory granted by the fraction (GiB)"] is None
        and r["left for activations (GiB)"] is None
    )
    assert r["65536-token requests at once"] is None  # vLLM logged its concurrency at 32,768 only
    estimate_only = rows(LOG_VLLM.replace("Graph capturing finished in 9 secs, took 0.55 GiB", ""))
    assert estimate_only["CUDA graphs (GiB)"] == 0.61


def test_a_log_that_stopped_early_leaves_blanks():
    r = rows(LOG_0517.split("[2026-11-24 10:00:06 TP0] Use")[0])
    assert r["weights (GiB)"] == 47.85
    assert r["full-attention pool (tokens)"] is None and r["32768-token requests at once"] is None
    assert "| full-attention pool (tokens) |  |" in markdown({"early.log": r})


def test_table_and_json(tmp_path, capsys):
    sglang_log, vllm_log = tmp_path / "sglang.log", tmp_path / "vllm.log"
    sglang_log.write_text(LOG_0517)
    vllm_log.write_text(LOG_VLLM)
    assert main([str(sglang_log), str(vllm_log), "--gpu-total-gib", "79.19"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0] == "| | `sglang.log` | `vllm.log` |"
    assert "| full-attention tokens they hold | 456,407 | 439,746.56 |" in table
    assert "| KV cache (tokens, vLLM's count) |  | 148,709 |" in table
    assert main([str(sglang_log), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sglang.log"]["SWA pool (tokens)"] == 53_281
    assert report([sglang_log], 32768, "26b-a4b", None)["sglang.log"]["weights (GiB)"] == 47.85


def test_logs_of_the_same_name_are_told_apart_by_their_folder(tmp_path):
    for side in ("memory-off", "memory-on"):
        (tmp_path / side).mkdir()
        (tmp_path / side / "31b-patched.log").write_text(LOG_0517)
    logs = [tmp_path / "memory-off" / "31b-patched.log", tmp_path / "memory-on" / "31b-patched.log"]
    assert list(report(logs, 32768, "26b-a4b", None)) == [
        "memory-off/31b-patched.log",
        "memory-on/31b-patched.log",
    ]


def test_the_window_comes_from_the_checkpoint_the_log_served(tmp_path):
    assert (
        sglang_window("26b-a4b") == 1023 and sglang_window("e4b") == 511
    )  # the config's less the current token
    assert served_variant(LOG_0512, "e2b") == "26b-a4b"
    e4b = LOG_0517.replace("model_path='m'", "model_path='/repo/checkpoints/e4b-conditional'")
    assert served_variant(e4b, "26b-a4b") == "e4b"
    assert served_variant(LOG_0517, "31b") == "31b"  # a path naming no variant: the default
    log = tmp_path / "e4b.log"
    log.write_text(e4b.replace("swa_layer_tokens=53281", "swa_layer_tokens=2560"))
    # five E4B windows (511 + one page) fit its SWA pool: five 32k requests at once
    assert report([log], 32768, "26b-a4b", None)["e4b.log"]["32768-token requests at once"] == 5


def test_a_missing_log_is_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main([str(tmp_path / "nope.log")])
    assert "no such log: " + str(tmp_path / "nope.log") in capsys.readouterr().err


def test_log_patterns_expand_when_the_report_runs(tmp_path, capsys):
    (tmp_path / "memory-off").mkdir()
    (tmp_path / "memory-off" / "31b-patched.log").write_text(LOG_0517)
    (tmp_path / "26b-a4b-on.server.log").write_text(LOG_0517)
    patterns = [
        f"{tmp_path}/*.server.log",
        f"{tmp_path}/canary/*.server.log",
        f"{tmp_path}/memory-*/*.log",
    ]
    assert main([*patterns, "--json"]) == 0
    assert list(json.loads(capsys.readouterr().out)) == ["26b-a4b-on.server.log", "31b-patched.log"]
    assert main([f"{tmp_path}/none-*.log"]) == 0  # nothing logged yet: no table, no failure
    assert "no server log matches" in capsys.readouterr().out


def test_the_gpu_memory_comes_from_nvidia_smis_line(tmp_path, capsys):
    log, gpu = tmp_path / "vllm.log", tmp_path / "gpu.txt"
    log.write_text(LOG_VLLM)
    gpu.write_text("NVIDIA H100 80GB HBM3, 81559 MiB, 570.86.15\n")
    assert main([str(log), "--gpu-txt", str(gpu), "--json"]) == 0
    granted = json.loads(capsys.readouterr().out)["vllm.log"][
        "memory granted by the fraction (GiB)"
    ]
    assert granted == pytest.approx(0.85 * 81559 / 1024)
    assert (
        main([str(log), "--gpu-txt", str(tmp_path / "none.txt"), "--json"]) == 0
    )  # left blank, not guessed
    captured = capsys.readouterr()
    assert json.loads(captured.out)["vllm.log"]["memory granted by the fraction (GiB)"] is None
    assert "none.txt" in captured.err
    gpu.write_text("NVIDIA H100 80GB HBM3\n")
    with pytest.raises(SystemExit, match="memory.total"):
        main([str(log), "--gpu-txt", str(gpu)])
