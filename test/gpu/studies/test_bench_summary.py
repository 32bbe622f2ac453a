"""The A/B runner's pieces: medians per setup side by side, ratio of two, a plot file, named setups
parsed from the command line, the patched servers' environment, and a workload's record read back
from bench_serving's output and the server's log (refused where its numbers would mislead)."""

import argparse
import json

import pytest

from sglang_gemma4.gpu.serve.pool_usage import pool_sizes
from sglang_gemma4.gpu.serve.server import Server, patched_env
from sglang_gemma4.gpu.studies import bench
from sglang_gemma4.gpu.studies.bench import (
    WORKLOADS,
    Setup,
    add_setup_arguments,
    chosen_setups,
    dataset_args,
    parse_setup,
    plot,
    run_workload,
    summarize,
    write_summary,
)


def record(setup, throughput, tpot, workload="chat"):
    return {
        "variant": "26b-a4b",
        "workload": workload,
        "setup": setup,
        "build": "patched",
        "output_throughput": throughput,
        "median_tpot_ms": tpot,
        "median_ttft_ms": 100.0,
        "median_itl_ms": tpot,
        "duration": 30.0,
    }


def test_summary_has_both_builds_and_their_ratio(tmp_path):
    records = [record("pristine", 2000.0, 10.0), record("patched", 2500.0, 8.0)]
    table = summarize(records, ["pristine", "patched"])
    rows = {line.split("|")[2].strip(): line for line in table.splitlines()[2:]}
    assert "| 2000.00 | 2500.00 | 1.250 |" in rows["output_throughput"]
    assert "| 10.00 | 8.00 | 0.800 |" in rows["median_tpot_ms"]
    assert "median_accept_len" not in rows  # a metric no setup has (no MTP) gets no row
    plot(records, ["pristine", "patched"], tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_summary_of_several_setups_keeps_their_order_and_marks_missing_runs(tmp_path):
    records = [
        record("r0.8", 2000.0, 10.0),
        record("r0.15", 1900.0, 11.0),
        record("r0.15", 700.0, 30.0, workload="summarization-80"),
        record("noradix", 2100.0, 9.5),
    ]
    table = write_summary(records, tmp_path)
    assert table.splitlines()[0] == "| workload | metric | r0.8 | r0.15 | noradix |"
    assert "| chat | output_throughput | 2000.00 | 1900.00 | 2100.00 |" in table
    assert "| summarization-80 | output_throughput | - | 700.00 | - |" in table
    assert (tmp_path / "summary.md").read_text().startswith("# 26b-a4b: r0.8 vs r0.15 vs noradix")


def test_setups_parse_name_build_environment_and_flags():
    setup = parse_setup(
        (
            "r0.15-leaf=patched SGLANG_OPT_X=1 A_B=x=y --swa-full-tokens-ratio 0.15 "
            "--disable-radix-cache"
        )
    )
    assert setup == Setup(
        "r0.15-leaf",
        "patched",
        {"SGLANG_OPT_X": "1", "A_B": "x=y"},
        ("--swa-full-tokens-ratio", "0.15", "--disable-radix-cache"),
    )
    assert parse_setup("base=pristine") == Setup("base", "pristine")
    # the launcher's own options stay among the flags: the server hands them to the launcher
    static = parse_setup("static=patched --max-running-requests 8 --static-kv --tp 2")
    assert static.flags == ("--max-running-requests", "8", "--static-kv", "--tp", "2")
    for bad in ("", "r0.8", "r0.8=other", "=patched", "a b=patched"):
        with pytest.raises(SystemExit, match="--config"):
            parse_setup(bad)


def test_chosen_setups_plain_builds_by_default_then_named_ones():
    parser = argparse.ArgumentParser()
    add_setup_arguments(parser)
    env = {"SGLANG_X": "0"}
    assert chosen_setups(parser.parse_args([]), env) == [
        Setup("pristine", "pristine"),
        Setup("patched", "patched", env),
    ]
    named = parser.parse_args(["--config", "off=patched SGLANG_X=0"])
    assert chosen_setups(named) == [
        Setup("off", "patched", {"SGLANG_X": "0"})
    ]  # a --config alone: no plain builds
    both = parser.parse_args(["--builds", "patched", "--config", "p=pristine --flag"])
    assert chosen_setups(both) == [
        Setup("patched", "patched"),
        Setup("p", "pristine", {}, ("--flag",)),
    ]


def test_pool_sizes_are_read_from_the_server_log():
    log = (
        "x\n[..] KV pool: full_layer_tokens=395689, swa_layer_tokens=59353 "
        "...\nmax_total_num_tokens=395689\n"
    )
    assert pool_sizes(log) == {
        "full_layer_tokens": 395689,
        "swa_layer_tokens": 59353,
        "max_total_num_tokens": 395689,
    }
    # on the unified pool: each side's cap, logged after the static split's sizes
    unified = log.replace(
        "\nmax_total",
        "\n[..] total_bytes=1 (=0.00 GB), full_max_total_num_tokens=500000, "
        "swa_max_total_num_tokens=60000, joint_available=7 slots\nmax_total",
    )
    assert pool_sizes(unified) == {
        "full_layer_tokens": 500000,
        "swa_layer_tokens": 60000,
        "max_total_num_tokens": 395689,
    }


def test_patched_env_pairs():
    assert patched_env(["A=1", "B=x=y"]) == {"A": "1", "B": "x=y"}
    assert patched_env([]) == {}
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        patched_env(["A"])
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        patched_env(["=1"])


def test_image_workloads_use_the_image_dataset_without_pre_tokenized_prompts():
    # bench_serving refuses --tokenize-prompt with its image dataset; random-ids prompts need it
    images = dataset_args("images-6")
    assert (
        images[images.index("--dataset-name") + 1] == "image" and "--tokenize-prompt" not in images
    )
    assert images[images.index("--image-count") + 1] == "6"
    text = dataset_args("chat")
    assert text[text.index("--dataset-name") + 1] == "random-ids" and "--tokenize-prompt" in text
    assert "--image-count" not in text


def test_each_workload_draws_its_own_prompts():
    # chat-at-64 after chat-at-32 on one server: with one seed its first 64 prompts were
    # chat-at-32's, served from the radix cache of a setup that kept their KV
    seeds = {name: (args := dataset_args(name))[args.index("--seed") + 1] for name in WORKLOADS}
    assert len(set(seeds.values())) == len(WORKLOADS)
    assert seeds["chat-at-32"] == "3448979065"  # and the same prompts in every process and run


def served(
    tmp_path,
    monkeypatch,
    accept_lens: list[float],
    retokenized: int = 64000,
    workload: str = "chat",
    itls: list[list[float]] | None = None,
    returncode: int = 0,
    server_line: str = "",
) -> dict:
    """run_workload on an MTP server whose bench_serving run (faked) wrote its record (with every
    request's token gaps when asked for details) and whose scheduler logged a decode line per accept
    length."""
    server = Server("26b-a4b", "patched", tmp_path / "26b-a4b-on.server.log", mtp=True)
    server.log_path.write_text(
        "[2026-11-24 10:00:00] max_total_num_tokens=456407 full_layer_tokens=456407\n"
    )

    def bench_serving(argv, **kwargs):
        raw = argv[argv.index("--output-file") + 1]
        details = {"itls": itls, "ttfts": [0.05] * len(itls)} if "--output-details" in argv else {}
        with open(raw, "w") as f:
            f.write(
                json.dumps(
                    {
                        "output_throughput": 2500.0,
                        "total_output_tokens_retokenized": retokenized,
                        **details,
                    }
                )
                + "\n"
            )
        with server.log_path.open("a") as log:
            log.writelines(
                f"[2026-11-24 10:01:{i:02d}] Decode batch, #running-req: 32, accept len: {a:.2f}, "
                f"accept rate: {(a - 1) / 3:.2f}, cuda graph: True, gen throughput "
                "(token/s): 2500.00\n"
                for i, a in enumerate(accept_lens)
            )
            log.write(server_line)
        done = bench.subprocess.CompletedProcess(argv, returncode)
        if kwargs.get("check"):
            done.check_returncode()
        return done

    monkeypatch.setattr(bench.subprocess, "run", bench_serving)
    return run_workload(server, "on", workload, "/tok", tmp_path)


TOO_LONG = (
    "[2026-11-28 21:38:21] [http_server] Error: The input (131072 tokens) is longer than the "
    "model's context length (131072 tokens).\n"
)


def test_a_long_prompt_the_server_refuses_is_recorded_though_the_client_failed(
    tmp_path, monkeypatch
):
    """bench_serving exits 1 when its only request was refused: the refusal is the record."""
    record = served(
        tmp_path, monkeypatch, [], workload="long-128k", returncode=1, server_line=TOO_LONG
    )
    assert record["refused"].startswith("The input (131072 tokens) is longer")
    assert "median_ttft_ms" not in record


def test_a_failed_client_without_a_refusal_fails_the_workload(tmp_path, monkeypatch):
    for workload in ("long-128k", "chat"):
        with pytest.raises(bench.subprocess.CalledProcessError):
            served(tmp_path, monkeypatch, [2.8], workload=workload, returncode=1)


def test_batch1_records_where_its_long_token_gaps_fall(tmp_path, monkeypatch):
    """A request's TPOT is its mean gap: a stall every 16th step, or a slow first step, lifts it
    above the median ITL; the record says how many such gaps, what they add per token, and after
    which tokens."""
    step = 0.004
    periodic = [
        0.012 if token % 16 == 0 else step for token in range(1, 65)
    ]  # 8 ms extra before 16, 32, 48, 64
    slow_start = [0.010] + [step] * 63  # 6 ms extra before the second token
    record = served(tmp_path, monkeypatch, [2.8], workload="batch1", itls=[periodic, slow_start])
    assert record["long_gaps_per_req"] == 2.5
    assert record["long_gap_ms_per_token"] == pytest.approx((4 * 8 + 6) / 128)
    assert record["long_gap_tokens"] == [1, 16, 32, 48, 64]
    assert "itls" not in record and "ttfts" not in record  # the lists stay in the raw file
    assert "long_gaps_per_req" not in served(
        tmp_path, monkeypatch, [2.8], workload="chat", itls=[[step]]
    )


def test_a_workload_records_the_accept_length_its_server_logged(tmp_path, monkeypatch):
    record = served(tmp_path, monkeypatch, [2.75, 2.8, 2.9])
    assert record["median_accept_len"] == 2.8 and record["output_throughput"] == 2500.0
    assert record["full_layer_tokens"] == 456407 and record["peak_running_req"] == 32
    assert "| chat | median_accept_len | 2.80 |" in summarize([{**record, "setup": "on"}], ["on"])


def test_a_dummy_weight_mtp_run_that_accepted_every_draft_is_refused(tmp_path, monkeypatch):
    with pytest.raises(
        RuntimeError, match="chat: the server logged accept length 4.00 .*did not apply"
    ):
        served(tmp_path, monkeypatch, [4.0, 4.0])


def test_a_run_whose_stream_decoded_to_no_text_is_refused(tmp_path, monkeypatch):
    with pytest.raises(RuntimeError, match="decoded to no text"):
        served(tmp_path, monkeypatch, [2.8], retokenized=0)


def test_a_server_that_dies_once_idle_fails_the_bench(tmp_path, monkeypatch, capsys):
    """sglang's idle leak check kills a server after its last answer: the run's records stay, its
    exit status is 1 and it says which setup died of what."""
    import subprocess
    import sys

    from sglang_gemma4.gpu.serve import server as server_module

    def start(self, timeout=540):
        self.log_path.write_text(
            "ValueError: pool memory leak detected! [swa] total=8192, available=602\n"
        )
        self.process = subprocess.Popen([sys.executable, "-c", "pass"])
        self.process.wait()
        self.ready_s = 1.0
        return self

    monkeypatch.setattr(Server, "start", start)
    monkeypatch.setattr(server_module, "IDLE_CHECK_S", 0)
    monkeypatch.setattr(
        bench,
        "run_workload",
        lambda server, name, workload, tokenizer, out: {
            "variant": "e2b",
            "setup": name,
            "workload": workload,
            "output_throughput": 1.0,
        },
    )
    monkeypatch.setattr(bench.pool_usage, "plot", lambda *a: None)
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "bench",
            "--variant",
            "e2b",
            "--out",
            str(tmp_path),
            "--builds",
            "patched",
            "--workloads",
            "chat",
        ],
    )
    assert bench.main() == 1
    assert (
        "e2b patched: the server died once idle: ValueError: pool memory leak detected!"
        in capsys.readouterr().out
    )
    assert json.loads((tmp_path / "bench.jsonl").read_text())["output_throughput"] == 1.0
