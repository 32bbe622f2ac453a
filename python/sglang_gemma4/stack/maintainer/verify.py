"""Prove each patch's tests detect its absence: they fail on the tree without the patch (the series
up to, not including, it) and pass with it."""

import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from sglang_gemma4.stack.maintainer.lint import listed_paths
from sglang_gemma4.stack.patchfile import PatchFile
from sglang_gemma4.stack.worktree import WorkTree

TREE_ENV = "SGLANG_GEMMA4_TREE"  # test/conftest.py imports sglang from $SGLANG_GEMMA4_TREE/python


@dataclass
class Outcome:
    passed: int
    failed: int  # failures + errors (a missing symbol fails at import: an error)
    skipped: int

    def __str__(self) -> str:
        return f"{self.passed} passed, {self.failed} failed, {self.skipped} skipped"


def run_tests(root: Path, tree: Path, tests: list[str], python: str) -> Outcome:
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        env = dict(os.environ, **{TREE_ENV: str(tree), "PYTHONDONTWRITEBYTECODE": "1"})
        subprocess.run(
            [
                python,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-m",
                "not gpu",
                f"--junitxml={junit}",
                *tests,
            ],
            cwd=root,
            env=env,
            capture_output=True,
        )
        if not junit.is_file():
            return Outcome(0, 1, 0)
        suites = ET.parse(junit).getroot()
        total = failed = skipped = 0
        for suite in suites.iter("testsuite"):
            total += int(suite.get("tests", 0))
            failed += int(suite.get("failures", 0)) + int(suite.get("errors", 0))
            skipped += int(suite.get("skipped", 0))
        return Outcome(total - failed - skipped, failed, skipped)


def verify_tests(
    root: Path, work: WorkTree, patches: list[PatchFile], python: str = sys.executable, log=print
) -> bool:
    state = work.require_synced(patches)
    commits = state.commits
    rows, all_ok = [], True
    for i, patch in enumerate(patches):
        tests = [p for p in listed_paths(patch.fields.get("Tests", "")) if p.startswith("test/")]
        results = {}
        for label, commit in (("without", commits[i]), ("with", commits[i + 1])):
            with tempfile.TemporaryDirectory() as tmp:
                tree = Path(tmp) / "tree"
                work.git.run("worktree", "add", "-q", "--detach", str(tree), commit)
                try:
                    results[label] = run_tests(root, tree, tests, python)
                finally:
                    work.git.run("worktree", "remove", "--force", str(tree))
            log(f"verify-tests: {patch.name} {label} the patch: {results[label]}")
        without, with_ = results["without"], results["with"]
        detects = without.failed > 0
        passes = with_.passed > 0 and with_.failed == 0
        ok = detects and passes
        all_ok &= ok
        rows.append(f"| {patch.name} | {without} | {with_} | {'ok' if ok else 'FAIL'} |")
    log("\n| patch | tests without it | tests with it | verdict |\n|---|---|---|---|")
    for row in rows:
        log(row)
    return all_ok
