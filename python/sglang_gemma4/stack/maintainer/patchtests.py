"""Run one patch's own tests (its `Tests:` files) against a tree and name the outcome:

    passed         every test that ran passed
    failed         a test ran and failed
    could not run  nothing could be judged: an import or collection error, a fixture error, every
                   test skipped or deselected, a missing test file; the first error is kept
    no tests       the patch lists no test file
    no CPU tests   every test it lists is deselected here (marked gpu; or kill_switch, for the
                   upstream check)

The rebase runs them after each patch goes in; the already-upstream check runs them on the tree
without the patch, leaving out the tests marked `kill_switch` (they exercise the patch's own
switch, which upstream code never has).
"""

import os
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from sglang_gemma4.stack.maintainer.lint import listed_paths
from sglang_gemma4.stack.patchfile import PatchFile

TREE_ENV = "SGLANG_GEMMA4_TREE"  # test/conftest.py imports sglang from $SGLANG_GEMMA4_TREE/python

PASSED, FAILED, COULD_NOT_RUN, NO_TESTS, NOT_RUN = (
    "passed",
    "failed",
    "could not run",
    "no tests",
    "not run",
)
NO_CPU_TESTS = "no CPU tests"
NO_TESTS_COLLECTED = 5  # pytest's exit status when the marker expression deselects every test
STEP_MARKERS = "not gpu"
UPSTREAM_MARKERS = "not gpu and not kill_switch"


@dataclass(frozen=True)
class TestRun:
    verdict: str
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    first_error: str = ""

    @property
    def ok(self) -> bool:
        return self.verdict in (PASSED, NO_TESTS, NO_CPU_TESTS, NOT_RUN)

    def summary(self) -> str:
        if self.verdict in (NO_TESTS, NO_CPU_TESTS, NOT_RUN):
            return self.verdict
        counts = (
            f"{self.passed} passed, {self.failed} failed, {self.errors} errors, "
            f"{self.skipped} skipped"
        )
        first = f"; first error: {self.first_error}" if self.first_error else ""
        return f"{self.verdict} ({counts}{first})"


def test_files(patch: PatchFile) -> list[str]:
    return [p for p in listed_paths(patch.fields.get("Tests", "")) if p.startswith("test/")]


def _first_error(element: ET.Element) -> str:
    """The exception line pytest prints (`E   ImportError: ...`), else the element's message."""
    for line in (element.text or "").splitlines():
        if line.startswith("E "):
            return line[1:].strip()[:300]
    return (
        (element.get("message") or "").strip().splitlines()[0][:300]
        if element.get("message")
        else ""
    )


def parse_junit(junit: Path) -> TestRun:
    passed = failed = errors = skipped = 0
    first = ""
    for case in ET.parse(junit).getroot().iter("testcase"):
        failure, error, skip = case.find("failure"), case.find("error"), case.find("skipped")
        if failure is not None:
            failed += 1
            first = first or _first_error(failure)
        elif error is not None:
            errors += 1
            first = first or _first_error(error)
        elif skip is not None:
            skipped += 1
        else:
            passed += 1
    if failed:
        verdict = FAILED
    elif errors or not passed:
        verdict = COULD_NOT_RUN
        first = first or ("every test was skipped" if skipped else "no test was collected")
    else:
        verdict = PASSED
    return TestRun(verdict, passed, failed, errors, skipped, first)


def run_patch_tests(
    root: Path,
    tree: Path,
    patch: PatchFile,
    python: str,
    markers: str = STEP_MARKERS,
    tests: list[str] | None = None,
) -> TestRun:
    """`tests`: the files to run instead of the patch's `Tests:` ones (paths under root)."""
    tests = test_files(patch) if tests is None else tests
    if not tests:
        return TestRun(NO_TESTS)
    missing = [t for t in tests if not (root / t).is_file()]
    if missing:
        return TestRun(COULD_NOT_RUN, first_error=f"{missing[0]} does not exist")
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        # the checkout's own tools first: the environment's editable install names the checkout that
        # built it
        path = os.pathsep.join(
            p for p in (str(root / "python"), os.environ.get("PYTHONPATH", "")) if p
        )
        env = dict(
            os.environ, **{TREE_ENV: str(tree), "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": path}
        )
        try:
            proc = subprocess.run(
                [
                    python,
                    "-m",
                    "pytest",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    "-m",
                    markers,
                    f"--junitxml={junit}",
                    *tests,
                ],
                cwd=root,
                env=env,
                capture_output=True,
                text=True,
            )
        except OSError as e:
            return TestRun(COULD_NOT_RUN, first_error=f"{python}: {e.strerror}")
        if not junit.is_file():
            lines = [line for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
            return TestRun(
                COULD_NOT_RUN,
                first_error=(lines[-1] if lines else f"pytest exited {proc.returncode}")[:300],
            )
        run = parse_junit(junit)
        if proc.returncode == NO_TESTS_COLLECTED and not (
            run.passed or run.failed or run.errors or run.skipped
        ):
            return TestRun(NO_CPU_TESTS)
        return run


def in_parallel(work: Callable, items: list, jobs: int | None = None) -> list:
    """work(item) for each item, `jobs` at once (default: one per core: test runs are processes of
    their own), the results in the items' order; the first exception is raised."""
    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
        return list(pool.map(work, items))
