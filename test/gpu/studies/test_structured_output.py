"""The structured-output GPU experiments (stages structured-cost and structured-throughput, with
bench.py's constrained workloads): the cost of the preset's grammar backend on unconstrained
requests against
--grammar-backend none, and constrained throughput under a JSON schema that keeps every request
decoding to its full length."""

import json
from pathlib import Path

from sglang_gemma4.gpu.stages.table import expand
from sglang_gemma4.gpu.studies import bench


def value(words: list[str], flag: str) -> str:
    return words[words.index(flag) + 1]


def test_a_constrained_workload_is_its_shapes_load_with_a_schema_on_every_request():
    for name, (shape, grammar) in bench.CONSTRAINED_WORKLOADS.items():
        words, plain = bench.dataset_args(name), bench.dataset_args(shape)
        body = json.loads(value(words, "--extra-request-body"))
        # the extra body replaces bench_serving's sampling parameters: it carries the load's own
        assert body == {
            "sampling_params": {
                "temperature": 0.0,
                "max_new_tokens": bench.WORKLOADS[shape][1],
                "ignore_eos": True,
                **grammar,
            }
        }
        for flag in (
            "--random-input-len",
            "--random-output-len",
            "--num-prompts",
            "--max-concurrency",
        ):
            assert value(words, flag) == value(plain, flag)
        # its own prompts: a server that ran the unconstrained load first has not cached them
        assert value(words, "--seed") != value(plain, "--seed")


def test_the_schema_never_closes_on_its_own():
    schema = bench.OPEN_SCHEMA
    notes = schema["properties"]["notes"]
    assert (
        notes["type"] == "array"
        and "maxItems" not in notes
        and notes["items"] == {"type": "string"}
    )


def test_the_experiments_compare_none_with_the_preset_and_measure_constrained_load(tmp_path):
    (cost,) = expand("structured-cost", tmp_path).steps
    assert cost.argv[cost.argv.index("--workloads") + 1 : cost.argv.index("--")] == (
        "batch1",
        "chat",
    )
    configs = [cost.argv[i + 1] for i, word in enumerate(cost.argv) if word == "--config"]
    assert configs == ["none=patched --grammar-backend none", "xgrammar=patched"]
    (constrained,) = expand("structured-throughput:31b", tmp_path).steps
    assert constrained.argv[
        constrained.argv.index("--workloads") + 1 : constrained.argv.index("--")
    ] == ("batch1", "chat", "batch1-json", "chat-json")
    assert Path(value(list(constrained.argv), "--out")) == tmp_path / "structured-throughput-31b"
