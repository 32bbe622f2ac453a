"""The repository's own series: lint-clean, consistent, applies exactly (no offset) to the pin,
also with quilt and git am; the README's patch table is the one `status --markdown` prints."""

import shutil
import subprocess
from pathlib import Path

import pytest

from sglang_gemma4.cli import Stack
from sglang_gemma4.stack.layout import Layout
from sglang_gemma4.stack.maintainer.lint import lint
from sglang_gemma4.stack.maintainer.readme_table import BEGIN as README_BEGIN
from sglang_gemma4.stack.maintainer.readme_table import (
    DROPPED_BEGIN,
    DROPPED_DOC,
    DROPPED_END,
    dropped_table,
    patch_table,
)
from sglang_gemma4.stack.maintainer.readme_table import END as README_END

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def stack() -> Stack:
    stack = Stack(Layout(ROOT))
    if not stack.work.exists():
        pytest.fail("no work tree: run `make apply` first")
    return stack


def test_lint_is_clean(stack):
    assert lint(stack.series, ROOT) == []


def test_series_applies_exactly_to_the_pin(stack):
    patches = stack.series.patches()
    results = stack.work.check_series(stack.work.load_state().base, patches)
    assert [(r.patch.name, r.verdict) for r in results] == [(p.name, "yes") for p in patches]


def pristine_checkout(stack, tmp_path) -> Path:
    tree = tmp_path / "upstream"
    stack.work.git.run("worktree", "add", "-q", "--detach", str(tree), stack.work.load_state().base)
    return tree


def test_quilt_push_all(stack, tmp_path):
    if shutil.which("quilt") is None:  # a prerequisite (README), not an optional check
        pytest.fail(
            "quilt is not installed (e.g. apt-get install quilt): the series must apply with quilt "
            "too"
        )
    tree = pristine_checkout(stack, tmp_path)
    try:
        env = {
            "QUILT_PATCHES": str(ROOT / "patches"),
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
        }
        proc = subprocess.run(
            ["quilt", "push", "-a", "--fuzz=0"], cwd=tree, env=env, capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        for patch in stack.series.patches():
            for file in patch.files:
                assert (tree / file).read_text() == (stack.work.path / file).read_text()
    finally:
        stack.work.git.run("worktree", "remove", "--force", str(tree))


def test_git_am(stack, tmp_path):
    tree = pristine_checkout(stack, tmp_path)
    try:
        patches = stack.series.patches()
        subprocess.run(
            [
                "git",
                "-C",
                str(tree),
                "-c",
                "user.name=CI",
                "-c",
                "user.email=ci@localhost",
                "am",
                "-q",
                *[str(p.path) for p in patches],
            ],
            check=True,
            capture_output=True,
        )
        log = subprocess.run(
            ["git", "-C", str(tree), "log", "--format=%s", f"-{len(patches)}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split("\n")
        assert log[: len(patches)] == [p.subject for p in reversed(patches)]
        diff = subprocess.run(
            ["git", "-C", str(tree), "diff", "--stat", "HEAD", stack.work.load_state().head],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert diff == ""
    finally:
        stack.work.git.run("worktree", "remove", "--force", str(tree))


def test_readme_patch_table_is_current(stack):
    readme = (ROOT / "README.md").read_text()
    assert README_BEGIN in readme and README_END in readme
    table = readme.split(README_BEGIN, 1)[1].split(README_END, 1)[0].strip()
    assert table == patch_table(stack.series), "README patch table is stale: run `make readme`"
    doc = (ROOT / DROPPED_DOC).read_text()
    dropped = doc.split(DROPPED_BEGIN, 1)[1].split(DROPPED_END, 1)[0].strip()
    assert dropped == dropped_table(stack.series), f"{DROPPED_DOC} is stale: run `make readme`"


def test_readme_is_user_documentation():
    """Short, and about the product: history lives in git and in each result's own README."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    for word in ("session", "issue #", "device call"):
        assert word not in readme.lower(), word
