"""Pool usage read back from scheduler log lines: fields, peaks, re-prefill, the timeline plot."""

import pytest

from sglang_gemma4.gpu.serve.pool_usage import (
    decode_rates,
    decode_stall_ms_per_step,
    parse,
    plot,
    summary,
)

LOG = """\
[2026-11-22 06:57:14] Prefill batch, #new-seq: 2, #new-token: 2000, #cached-token: 0, full token usage: 0.02, swa token usage: 0.03, #running-req: 0, #queue-req: 5, #pending-token: 0, cuda graph: True, input throughput (token/s): 57.73
[2026-11-22 06:57:14] INFO:     127.0.0.1:1 - "POST /generate HTTP/1.1" 200 OK
[2026-11-22 06:57:17] Decode batch, #running-req: 2, #full token: 2100, full token usage: 0.40, #swa token: 2100, swa token usage: 0.97, cuda graph: True, gen throughput (token/s): 421.50, #queue-req: 7
[2026-11-22 06:57:19] KV cache pool is full. Retract requests. #retracted_reqs: 2, #new_tokens_gained: 611, #new_token_ratio: 0.0980 -> 0.6343
[2026-11-22 06:57:20] Prefill batch, #new-seq: 1, #new-token: 300, #cached-token: 700, full token usage: 0.45, swa token usage: 0.99, #running-req: 2, #queue-req: 6, #pending-token: 0, cuda graph: False, input throughput (token/s): 100.00
"""  # noqa: E501 (verbatim log lines)


def test_parses_both_kinds_of_batch_line():
    samples = parse(LOG)
    assert [s["kind"] for s in samples] == ["prefill", "decode", "retract", "prefill"]
    assert [s["t"] for s in samples] == [0.0, 3.0, 5.0, 6.0]
    assert samples[0]["new_token"] == 2000 and samples[0]["queue_req"] == 5
    assert samples[1]["swa_token"] == 2100 and samples[1]["swa_token_usage"] == 0.97


def test_reads_tensor_parallel_rank_tags():
    tagged = LOG.replace("06:57:17]", "06:57:17 TP0]").replace("06:57:20]", "06:57:20 DP0 TP0]")
    assert parse(tagged) == parse(LOG)


def test_summary_takes_peaks_and_counts_cached_prefill():
    result = summary(parse(LOG))
    assert result["peak_queue_req"] == 7 and result["peak_running_req"] == 2
    assert result["peak_swa_token_usage"] == 0.99 and result["peak_full_token_usage"] == 0.45
    assert (result["prefill_new_tokens"], result["prefill_cached_tokens"]) == (2300, 700)
    assert result["retracted_reqs"] == 2
    assert result["median_decode_tok_s_at_peak"] == 421.5
    assert (
        summary([])["peak_swa_token_usage"] == 0.0
        and summary([])["median_decode_tok_s_at_peak"] == 0.0
    )


def test_decode_rate_is_the_median_while_the_batch_is_full():
    lines = [
        f"[2026-11-22 07:00:{i:02d}] Decode batch, #running-req: {running}, cuda graph: True, "
        f"gen throughput (token/s): {rate}, #queue-req: 0"
        for i, (running, rate) in enumerate(
            [(3, 90.0), (4, 130.0), (4, 110.0), (4, 120.0), (2, 70.0)]
        )
    ]
    assert summary(parse("\n".join(lines)))["median_decode_tok_s_at_peak"] == 120.0


def test_decode_rate_is_read_at_the_largest_decode_batch_when_the_peak_is_prefill_only():
    lines = [
        f"[2026-11-22 07:00:{i:02d}] Decode batch, #running-req: 30, cuda graph: True, "
        f"gen throughput (token/s): {rate}, #queue-req: 2"
        for i, rate in enumerate([1500.0, 1560.0, 1550.0])
    ]
    lines.append(
        "[2026-11-22 07:00:09] Prefill batch, #new-seq: 16, #new-token: 4096, #cached-token: 0, "
        "full token usage: 1.00, swa token usage: 0.58, #running-req: 46, #queue-req: 29"
    )
    result = summary(parse("\n".join(lines)))
    assert result["peak_running_req"] == 46 and result["median_decode_tok_s_at_peak"] == 1550.0


def test_a_stall_now_and_then_is_what_the_slow_decode_lines_add_to_the_mean_step():
    """One request at a time: each prefill line is followed by a decode line whose window holds that
    prefill (left out); of the other lines, one ran at 190 tok/s against a median of 234."""
    prefill = (
        "Prefill batch, #new-seq: 1, #new-token: 128, #cached-token: 0, full token usage: 0.00, "
        "swa token usage: 0.00, #running-req: 0, #queue-req: 0"
    )
    kinds = [prefill, 31.0] + [234.0] * 4 + [190.0, 235.0, 233.0] + [prefill, 150.0] + [234.0] * 3
    lines = [
        f"[2026-11-27 04:05:{i:02d}] "
        + (
            k
            if isinstance(k, str)
            else (
                "Decode batch, #running-req: 1, cuda graph: True, gen throughput (token/s): "
                f"{k}, #queue-req: 0"
            )
        )
        for i, k in enumerate(kinds)
    ]
    samples = parse("\n".join(lines))
    assert decode_stall_ms_per_step(samples, 1) == pytest.approx(1000 * (1 / 190 - 1 / 234) / 10)
    assert summary(samples)["decode_stall_ms_per_step"] == pytest.approx(
        1000 * (1 / 190 - 1 / 234) / 10
    )
    assert decode_stall_ms_per_step(samples, 2) == 0.0  # no line at that batch size


def test_decode_rates_per_batch_size_skip_sizes_seen_too_rarely():
    pairs = [(4, 100.0)] * 2 + [(4, 140.0)] * 3 + [(8, 300.0)] * 4
    lines = [
        f"[2026-11-22 07:00:{i:02d}] Decode batch, #running-req: {running}, cuda graph: True, "
        f"gen throughput (token/s): {rate}, #queue-req: 0"
        for i, (running, rate) in enumerate(pairs)
    ]
    assert decode_rates(parse("\n".join(lines))) == {4: {"lines": 5, "median_tok_s": 140.0}}
    assert decode_rates(parse("\n".join(lines)), min_lines=4)[8] == {
        "lines": 4,
        "median_tok_s": 300.0,
    }


def test_speculative_decode_lines_give_the_median_accept_length():
    # 0.5.17's decode line with speculative decoding on (scheduler metrics_reporter)
    lines = [
        f"[2026-11-22 07:00:{i:02d}] Decode batch, #running-req: 32, #full token: 9000, "
        "full token usage: 0.10, "
        f"#swa token: 9000, swa token usage: 0.30, accept len: {accept:.2f}, accept rate: "
        f"{(accept - 1) / 3:.2f}, "
        f"cuda graph: True, gen throughput (token/s): 2500.00, #queue-req: 0"
        for i, accept in enumerate([2.7, 2.8, 2.95])
    ]
    samples = parse("\n".join(lines))
    assert samples[0]["accept_len"] == 2.7 and samples[0]["accept_rate"] == 0.57
    assert summary(samples)["median_accept_len"] == 2.8
    assert "median_accept_len" not in summary(
        parse(LOG)
    )  # no speculative decoding, no accept length


def test_timeline_plot(tmp_path):
    plot(parse(LOG), tmp_path / "pools.png", "test")
    assert (tmp_path / "pools.png").stat().st_size > 1000
