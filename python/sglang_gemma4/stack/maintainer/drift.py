"""Drift early-warning: how the series would fare on a newer release, without stopping or touching
anything (`make rebase-check TO=X`), and a check that the kept report describes today's series.

Per patch, on the release plus the patches before it that would be taken: does it apply (clean,
at offsets, by a 3-way merge), does it look upstream (it reverse-applies; its own tests pass
without it), or which hunks fail and why (upstream changed the code, or they need an earlier
patch that would not be taken).  A patch that conflicts or looks upstream is left out, as a
rebase would leave it out, and the next ones go on without it.
"""

import json
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sglang_gemma4.stack.errors import StackError
from sglang_gemma4.stack.gitrepo import Git
from sglang_gemma4.stack.layout import Layout
from sglang_gemma4.stack.maintainer.hunks import UPSTREAM_CONFLICT, check_hunks
from sglang_gemma4.stack.maintainer.rebase import tests_pass_without, upstream_by_tests
from sglang_gemma4.stack.patchfile import PatchFile
from sglang_gemma4.stack.pin import Pin
from sglang_gemma4.stack.series import Series
from sglang_gemma4.stack.stackversion import local_version
from sglang_gemma4.stack.worktree import (
    WorkTree,
    base_message,
    commit_directory,
    git_apply,
    unpack_wheel,
)

APPLIES, OFFSETS, MERGES = "applies", "applies at offsets", "applies by 3-way merge"
UPSTREAM_TEXT, UPSTREAM_TESTS = "already upstream (text)", "already upstream (tests)"
CONFLICTS, DEPENDS = "conflicts with upstream", "depends on a left-out patch"


@dataclass
class PatchDrift:
    name: str
    verdict: str
    hunks: int
    failed_hunks: int
    upstream_by_text: bool
    upstream_by_tests: str  # the evidence, or ""
    failing: list[str] = field(default_factory=list)


def report_dir(layout: Layout) -> Path:
    return layout.root / "docs" / "drift"


def check_release(
    layout: Layout, new: Pin, wheel: Path, python: str, run_tests: bool, log=print
) -> list[PatchDrift]:
    work = WorkTree(layout.work_dir).require()
    git = work.git
    patches = Series.load(layout.patches_dir).patches()
    with tempfile.TemporaryDirectory() as tmp:
        unpack_wheel(wheel, Path(tmp) / "release")
        tip = commit_directory(git, Path(tmp) / "release", base_message(new, new.wheel()))
        left_out: list[PatchFile] = []
        rows = []
        for i, patch in enumerate(patches, start=1):
            log(f"rebase-check: [{i}/{len(patches)}] {patch.name}")
            row, tip = _check_patch(layout, git, tip, patch, left_out, python, run_tests, Path(tmp))
            if row.verdict in (UPSTREAM_TEXT, UPSTREAM_TESTS, CONFLICTS, DEPENDS):
                left_out.append(patch)
            rows.append(row)
    return rows


def _check_patch(
    layout: Layout,
    git: Git,
    tip: str,
    patch: PatchFile,
    left_out: list[PatchFile],
    python: str,
    run_tests: bool,
    tmp: Path,
) -> tuple[PatchDrift, str]:
    checks = check_hunks(git, tip, patch, left_out)
    failing = [c.describe() for c in checks if not c.applies]
    index = Git(git.repo, index_file=tmp / "index")
    index.run("read-tree", tip)
    by_text = git_apply(index, patch, "--cached", "--reverse", "--check").ok
    by_tests = ""
    if run_tests:
        tree = tmp / "tree"
        git.run("worktree", "add", "-q", "--detach", str(tree), tip)
        try:
            by_tests = tests_pass_without(layout, tree, patch, python)
        finally:
            git.run("worktree", "remove", "--force", str(tree))
    row = PatchDrift(
        patch.name, "", len(checks), len(failing), by_text, by_tests, failing
    )  # "could not tell: ..." kept
    result = git_apply(index, patch, "--cached")
    merged = (
        result.ok
        or index.run(
            "apply", "--cached", "--3way", str(patch.path.resolve()), check=False
        ).returncode
        == 0
    )
    new_tree = index.out("write-tree") if merged else ""
    if by_text or (merged and new_tree == git.out("rev-parse", f"{tip}^{{tree}}")):
        row.upstream_by_text = True
        row.verdict = UPSTREAM_TEXT
    elif upstream_by_tests(by_tests):
        row.verdict = UPSTREAM_TESTS
    elif merged:
        row.verdict = (OFFSETS if result.offsets else APPLIES) if result.ok else MERGES
        return row, git.commit_tree(
            new_tree, tip, patch.commit_message(), patch.fields.get("Author")
        )
    else:
        upstream = any(
            c.reason == UPSTREAM_CONFLICT or "moved or removed" in c.reason
            for c in checks
            if not c.applies
        )
        row.verdict = CONFLICTS if upstream or not failing else DEPENDS
    return row, tip


def render(
    new: Pin, series_version: str, rows: list[PatchDrift], tested: bool, env_note: str = ""
) -> str:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.verdict] = counts.get(row.verdict, 0) + 1
    summary = ", ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items()))
    lines = [
        f"# Drift of the series against {new.requirement}",
        "",
        f"Generated by `make rebase-check TO={new.version}` on {time.strftime('%Y-%m-%d')}; "
        "regenerate it "
        "whenever the series changes (`make drift-check` fails until then).",
        "",
        f"- release: {new.requirement}, "
        + ", ".join(f"`{w.file}` sha256 `{w.sha256}`" for w in new.wheels),
        f"- series: `{series_version}`",
        "- already-upstream test check: "
        + (
            "each patch’s own tests but its kill_switch ones, run without it"
            if tested
            else "not run"
        )
        + (f" ({env_note})" if tested and env_note else ""),
        f"- summary: {summary}",
        "",
        "| # | patch | verdict | hunks | failing | upstream by text | upstream by tests |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, row in enumerate(rows, start=1):
        lines.append(
            f"| {i} | {row.name} | {row.verdict} | {row.hunks} | {row.failed_hunks} | "
            f"{'yes' if row.upstream_by_text else 'no'} | {row.upstream_by_tests or 'no'} |"
        )
    failing = [(row.name, hunk) for row in rows for hunk in row.failing]
    if failing:
        lines += ["", "## Failing hunks", ""]
        lines += [f"- {name}: {hunk}" for name, hunk in failing]
    return "\n".join(lines) + "\n"


def write_report(
    layout: Layout,
    current: Pin,
    new: Pin,
    rows: list[PatchDrift],
    tested: bool,
    out: Path | None = None,
    env_note: str = "",
) -> Path:
    series_version = local_version(current, Series.load(layout.patches_dir).patches())
    out = out or report_dir(layout) / f"{new.name}-{new.version}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(new, series_version, rows, tested, env_note))
    out.with_suffix(".json").write_text(
        json.dumps(
            {
                "release": new.version,
                "series_version": series_version,
                "tests_checked": tested,
                "wheels": {w.file: w.sha256 for w in new.wheels},
                "patches": [asdict(r) for r in rows],
            },
            indent=1,
        )
        + "\n"
    )
    return out


def stale_reports(layout: Layout, current: Pin) -> list[str]:
    """Every kept report that describes another series than today's (empty: all current)."""
    series_version = local_version(current, Series.load(layout.patches_dir).patches())
    reports = sorted(report_dir(layout).glob("*.json"))
    if not reports:
        raise StackError(
            f"no drift report in {report_dir(layout)}: run `make rebase-check TO=<newest release>`"
        )
    stale = []
    for path in reports:
        recorded = json.loads(path.read_text())["series_version"]
        if recorded != series_version:
            stale.append(
                f"{path.relative_to(layout.root)}: made for series {recorded}, the series is now "
                f"{series_version}: run `make rebase-check "
                f"TO={json.loads(path.read_text())['release']}`"
            )
    return stale
