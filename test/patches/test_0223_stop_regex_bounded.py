"""0223: a stop_regex is searched over the output every decode step, by the scheduler. A pattern
that backtracks catastrophically ((a+)+$ over a run of a's) stalled the scheduler, and every request
with it, for minutes; a pattern of unbounded length was searched over the whole output, decoded
again each step. Now a request's patterns share a time budget per step
(SGLANG_STOP_REGEX_TIMEOUT_MS, the `regex` module's timeout): past it the request is aborted with a
400 naming the pattern, and an unbounded pattern is searched over the last
SGLANG_STOP_REGEX_MAX_WINDOW tokens. The check of one request runs as the scheduler runs it, under
an alarm, since re.search without the patch would not return."""

import signal
import time
from contextlib import contextmanager

import pytest

from sglang.srt.managers.schedule_batch import Req
from sglang.srt.sampling.sampling_params import SamplingParams


class StepTooSlow(Exception):
    pass


@contextmanager
def alarm(seconds: float):
    def fire(signum, frame):
        raise StepTooSlow(f"one stop check ran past {seconds} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class CharTokenizer:
    def __init__(self):
        self.decoded = []

    def decode(self, ids):
        self.decoded.append(len(ids))
        return "".join(map(chr, ids))


def req(pattern: str, text: str) -> Req:
    params = SamplingParams(max_new_tokens=100000, stop_regex=pattern)
    params.normalize(CharTokenizer())
    r = object.__new__(Req)
    r.rid, r.sampling_params, r.tokenizer = "r", params, CharTokenizer()
    r.output_ids, r.finished_reason, r.finished_len = list(map(ord, text)), None, None
    r.decoded_text = ""
    return r


def one_step(pattern: str, text: str):
    r = req(pattern, text)
    start = time.perf_counter()
    with alarm(5):
        r._check_str_based_finish()
    return time.perf_counter() - start, r


@pytest.mark.parametrize("pattern", [r"(a+)+$", r"(a|aa)+$", r"(\w+\s?)+$"])
def test_catastrophic_backtracking_aborts_the_request_within_its_budget(pattern):
    elapsed, r = one_step(pattern, "a" * 3000 + "!")
    assert elapsed < 0.5
    reason = r.finished_reason.to_json()
    assert reason["type"] == "abort" and reason["status_code"] == 400
    assert repr(pattern) in reason["message"] and "ms to search" in reason["message"]


def test_an_unbounded_pattern_is_searched_over_a_window_of_the_output():
    _, r = one_step(r"x.*y", "b" * 20000 + "x" + "b" * 10 + "y")
    assert r.finished_reason.to_json()["matched"] == "x.*y"
    assert max(r.tokenizer.decoded) <= 1025


def test_a_bounded_pattern_still_stops_the_request():
    _, r = one_step(r"END\d{2}", "some text END42")
    assert r.finished_reason.to_json()["matched"] == r"END\d{2}"
    assert r.finished_len == len("some text END42")


def test_no_match_leaves_the_request_running():
    _, r = one_step(r"END\d{2}", "some text END4")
    assert r.finished_reason is None
