"""Prove each patch's tests detect its absence: they fail on the tree without the patch (the series
up to, not including, it) and pass with it. Each run has its own git worktree, so `jobs` of them
go at once (default: one per core)."""

import sys
import tempfile
import threading
from pathlib import Path

from sglang_gemma4.stack.maintainer import patchtests
from sglang_gemma4.stack.patchfile import PatchFile
from sglang_gemma4.stack.worktree import WorkTree

SIDES = ("without", "with")


def counts(run: patchtests.TestRun) -> str:
    return f"{run.passed} passed, {run.failed + run.errors} failed, {run.skipped} skipped"


def detects(without: patchtests.TestRun) -> bool:
    """A test failed or errored without the patch, or none could run at all (e.g. an import the
    tree lacks broke collection); skipped tests detect nothing."""
    return without.failed + without.errors > 0 or (
        without.verdict == patchtests.COULD_NOT_RUN and not (without.passed or without.skipped)
    )


def say(line: str) -> None:
    print(line, flush=True)  # runs finish in threads: show each as it ends


def verify_tests(
    root: Path,
    work: WorkTree,
    patches: list[PatchFile],
    python: str = sys.executable,
    jobs: int | None = None,
    log=say,
) -> bool:
    commits = work.require_synced(patches).commits
    git_lock = threading.Lock()  # `git worktree add/remove` edit the repository's shared files

    def run(key: tuple[int, str]) -> patchtests.TestRun:
        index, side = key
        patch = patches[index]
        with tempfile.TemporaryDirectory() as tmp:
            tree = Path(tmp) / "tree"
            with git_lock:
                work.git.run(
                    "worktree",
                    "add",
                    "-q",
                    "--detach",
                    str(tree),
                    commits[index + (side == "with")],
                )
            try:
                outcome = patchtests.run_patch_tests(root, tree, patch, python)
            finally:
                with git_lock:
                    work.git.run("worktree", "remove", "--force", str(tree))
        log(f"verify-tests: {patch.name} {side} the patch: {counts(outcome)}")
        return outcome

    keys = [(i, side) for i in range(len(patches)) for side in SIDES]
    runs = dict(zip(keys, patchtests.in_parallel(run, keys, jobs)))

    rows, all_ok = [], True
    for i, patch in enumerate(patches):
        without, with_ = runs[i, "without"], runs[i, "with"]
        ok = detects(without) and with_.verdict == patchtests.PASSED
        all_ok &= ok
        rows.append(
            f"| {patch.name} | {counts(without)} | {counts(with_)} | {'ok' if ok else 'FAIL'} |"
        )
    log("\n| patch | tests without it | tests with it | verdict |\n|---|---|---|---|")
    for row in rows:
        log(row)
    return all_ok
