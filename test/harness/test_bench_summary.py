"""The A/B runner's pieces: medians per setup side by side, ratio of two, a plot file, named setups
parsed from the command line, and the patched servers' environment."""

import argparse

import pytest

from sglang_gemma4.gpu.bench import (Setup, add_setup_arguments, chosen_setups, dataset_args, parse_setup, plot,
                                     summarize, write_summary)
from sglang_gemma4.gpu.pool_usage import pool_sizes
from sglang_gemma4.gpu.server import patched_env


def record(setup, throughput, tpot, workload="chat"):
    return {"variant": "26b-a4b", "workload": workload, "setup": setup, "build": "patched", "output_throughput": throughput,
            "median_tpot_ms": tpot, "median_ttft_ms": 100.0, "median_itl_ms": tpot, "duration": 30.0}


def test_summary_has_both_builds_and_their_ratio(tmp_path):
    records = [record("pristine", 2000.0, 10.0), record("patched", 2500.0, 8.0)]
    table = summarize(records, ["pristine", "patched"])
    rows = {line.split("|")[2].strip(): line for line in table.splitlines()[2:]}
    assert "| 2000.00 | 2500.00 | 1.250 |" in rows["output_throughput"]
    assert "| 10.00 | 8.00 | 0.800 |" in rows["median_tpot_ms"]
    plot(records, ["pristine", "patched"], tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_summary_of_several_setups_keeps_their_order_and_marks_missing_runs(tmp_path):
    records = [record("r0.8", 2000.0, 10.0), record("r0.15", 1900.0, 11.0),
               record("r0.15", 700.0, 30.0, workload="summarization-80"), record("noradix", 2100.0, 9.5)]
    table = write_summary(records, tmp_path)
    assert table.splitlines()[0] == "| workload | metric | r0.8 | r0.15 | noradix |"
    assert "| chat | output_throughput | 2000.00 | 1900.00 | 2100.00 |" in table
    assert "| summarization-80 | output_throughput | - | 700.00 | - |" in table
    assert (tmp_path / "summary.md").read_text().startswith("# 26b-a4b: r0.8 vs r0.15 vs noradix")


def test_setups_parse_name_build_environment_and_flags():
    setup = parse_setup("r0.15-leaf=patched SGLANG_OPT_X=1 A_B=x=y --swa-full-tokens-ratio 0.15 --disable-radix-cache")
    assert setup == Setup("r0.15-leaf", "patched", {"SGLANG_OPT_X": "1", "A_B": "x=y"},
                          ("--swa-full-tokens-ratio", "0.15", "--disable-radix-cache"))
    assert parse_setup("base=pristine") == Setup("base", "pristine")
    for bad in ("", "r0.8", "r0.8=other", "=patched", "a b=patched"):
        with pytest.raises(SystemExit, match="--config"):
            parse_setup(bad)


def test_chosen_setups_plain_builds_by_default_then_named_ones():
    parser = argparse.ArgumentParser()
    add_setup_arguments(parser)
    env = {"SGLANG_X": "0"}
    assert chosen_setups(parser.parse_args([]), env) == [Setup("pristine", "pristine"), Setup("patched", "patched", env)]
    named = parser.parse_args(["--config", "off=patched SGLANG_X=0"])
    assert chosen_setups(named) == [Setup("off", "patched", {"SGLANG_X": "0"})]  # a --config alone: no plain builds
    both = parser.parse_args(["--builds", "patched", "--config", "p=pristine --flag"])
    assert chosen_setups(both) == [Setup("patched", "patched"), Setup("p", "pristine", {}, ("--flag",))]


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


def test_image_workloads_use_the_image_dataset_without_pre_tokenized_prompts():
    # bench_serving refuses --tokenize-prompt with its image dataset; random-ids prompts need it
    images = dataset_args("images-6")
    assert images[images.index("--dataset-name") + 1] == "image" and "--tokenize-prompt" not in images
    assert images[images.index("--image-count") + 1] == "6"
    text = dataset_args("chat")
    assert text[text.index("--dataset-name") + 1] == "random-ids" and "--tokenize-prompt" in text
    assert "--image-count" not in text
