"""The memory harness reads what the model runner reserved from its log lines."""

from sglang_gemma4.gpu.studies.memory import parse_log

LOG = """settled: chunked_prefill_size=4096 mem_fraction_static=0.88
[2026-11-22 10:00:00] Load weight begin. avail mem=78.12 GB
[2026-11-22 10:00:09] Load weight end. elapsed=9.1 s, type=Gemma4ForConditionalGeneration, dtype=torch.bfloat16, avail mem=16.40 GB, mem usage=61.72 GB.
[2026-11-22 10:00:10] Hybrid SWA pool: full_layer_tokens=21504, swa_layer_tokens=17203
max_total_num_tokens=21504
"""  # noqa: E501 (verbatim log lines)


def test_reads_weights_pool_and_settled_memory_arguments():
    assert parse_log(LOG) == {
        "weight_gb": 61.72,
        "max_total_num_tokens": 21504,
        "full_layer_tokens": 21504,
        "swa_layer_tokens": 17203,
        "chunked_prefill_size": 4096,
        "mem_fraction_static": 0.88,
    }


def test_a_run_that_died_before_the_pool_reads_none():
    found = parse_log(LOG.split("[2026-11-22 10:00:10]")[0])
    assert (
        found["weight_gb"] == 61.72
        and found["max_total_num_tokens"] is None
        and found["swa_layer_tokens"] is None
    )
