"""verify-tests on a synthetic series: a patch whose tests fail without it and pass with it is ok,
one whose tests pass either way (or only skip) is a FAIL, and the runs go several at once, each in
its own git worktree, none left behind."""

import json
import sys

from stack_helpers import make_patch, replace_line
from test_rebase_steps import with_tests, write_test

from sglang_gemma4.stack.maintainer import verify

MARK = "# first patch was here"


def series(checkout, log_dir) -> None:
    """0010's test detects it; 0020's passes without it. Each test records when it ran."""
    a, b = "python/sglang/srt/server_args.py", "python/sglang/version.py"
    old_a, old_b = checkout.upstream_file(a), checkout.upstream_file(b)
    # a run waits (up to 30 s) until another has started: runs side by side then overlap whatever
    # the machine's load, runs one after another do not
    timing = (
        "def record(name):\n"
        "    import time\n"
        f"    runs = Path({str(log_dir)!r})\n"
        "    me = f'{name}-{os.getpid()}'\n"
        "    start = time.time()\n"
        "    (runs / f'{me}.start').touch()\n"
        "    while time.time() < start + 30 and not [\n"
        "        p for p in runs.glob('*.start') if p.stem != me\n"
        "    ]:\n"
        "        time.sleep(0.05)\n"
        "    time.sleep(0.2)\n"
        "    (runs / f'{me}.json').write_text(__import__('json').dumps([start, time.time()]))\n\n\n"
    )
    detecting = write_test(
        checkout,
        "test_first.py",
        timing + "def test_first():\n    record('first')\n"
        f"    assert {MARK!r} in (TREE / {a!r}).read_text()\n",
    )
    blind = write_test(
        checkout, "test_second.py", timing + "def test_second():\n    record('second')\n"
    )
    checkout.write_series(
        {
            "0010-first.patch": with_tests(
                make_patch("first", a, old_a, replace_line(old_a, 20, MARK)), detecting
            ),
            "0020-second.patch": with_tests(
                make_patch("second", b, old_b, old_b + "# second\n"), blind
            ),
        }
    )


def test_detection_verdicts_and_runs_side_by_side(checkout, tmp_path):
    log_dir = tmp_path / "runs"
    log_dir.mkdir()
    series(checkout, log_dir)
    assert checkout.tool("apply").returncode == 0
    stack = checkout.stack()
    lines = []
    ok = verify.verify_tests(
        checkout.root, stack.work, stack.series.patches(), sys.executable, jobs=2, log=lines.append
    )
    assert not ok
    table = {line.split(" | ")[0].strip("| "): line for line in lines if line.startswith("| 00")}
    assert table["0010-first.patch"].endswith("| ok |")
    assert "0 passed, 1 failed" in table["0010-first.patch"]
    assert table["0020-second.patch"].endswith("| FAIL |")
    spans = sorted(json.loads(p.read_text()) for p in log_dir.glob("*.json"))
    assert len(spans) == 4
    assert any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:]))  # overlapped
    worktrees = checkout.git("worktree", "list").splitlines()
    assert len(worktrees) == 1  # only the work tree itself


def test_a_run_that_cannot_collect_counts_as_detection_and_skips_do_not():
    from sglang_gemma4.stack.maintainer.patchtests import COULD_NOT_RUN, TestRun

    assert verify.detects(TestRun(COULD_NOT_RUN, first_error="ImportError: no module"))
    assert not verify.detects(TestRun(COULD_NOT_RUN, skipped=3, first_error="every test skipped"))
    assert verify.detects(TestRun("failed", passed=2, failed=1))
