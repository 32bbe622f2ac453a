"""Work tree commits back to patch files (`refresh`), and new patches from uncommitted edits
(`new`), in the manner of `gbp pq export`: the header in patches/ stays the source of truth, the
diff is taken from the commit."""

import re

from sglang_gemma4.stack.errors import StackError
from sglang_gemma4.stack.patchfile import SERIES_NAME, PatchFile
from sglang_gemma4.stack.series import Series
from sglang_gemma4.stack.worktree import AppliedPatch, WorkTree

TRAILER = re.compile(r"^Patch-File: (\S+)$", re.M)

NEW_HEADER = """\
From: {author}
Subject: {subject}
Author: {author}
Upstream-Status: Not yet, TODO reason
Origin: TODO where the change comes from (vendor, or the upstream/vLLM PR it follows)
Tests: TODO test/patches/test_{stem}.py
Bench: TODO scripts/... or none
Kill-Switch: TODO SGLANG_... or none

Why: TODO what breaks or is slow without it, with the measurement.

How: TODO what the change does.

Drop when: TODO the upstream release or condition that makes it unnecessary.

---
"""


def _write(path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def refresh(work: WorkTree, series: Series, log=print) -> list[str]:
    """Rewrite the diff of every patch file from its commit; return the names that changed."""
    state = work.require().load_state()
    dirty = work.local_changes()
    if dirty:
        raise StackError(
            f"{work.path} has uncommitted changes ({len(dirty)} paths): commit them "
            "(e.g. `git commit --fixup`, then rebase) or use `make new` first"
        )
    commits = work.git.out("rev-list", "--reverse", f"{state.base}..HEAD").split()
    names = []
    for commit in commits:
        match = TRAILER.search(work.git.out("log", "-1", "--format=%B", commit))
        if not match:
            subject = work.git.out("log", "-1", "--format=%s", commit)
            raise StackError(
                f"commit {commit[:12]} ({subject}) has no Patch-File: trailer; "
                "squash it into the patch it belongs to, or make it a patch with `make new`"
            )
        names.append(match.group(1))
    if names != list(series.names):
        raise StackError(
            "the work tree's commits are not the series in order:\n"
            f"  commits: {', '.join(names) or '(none)'}\n  series:  {', '.join(series.names)}"
        )
    changed, applied = [], []
    for commit, name in zip(commits, names):
        patch = PatchFile.read(series.patches_dir / name)
        text = patch.with_diff(work.git.diff(f"{commit}^", commit))
        if text != patch.text:
            _write(patch.path, text)
            changed.append(name)
            log(f"refresh: {name} rewritten from {commit[:12]}")
        applied.append(AppliedPatch(name, PatchFile.read(patch.path).sha256, commit))
    state.applied = applied
    work.save_state(state)
    if not changed:
        log(f"refresh: all {len(names)} patches already match their commits")
    return changed


def new_patch(
    work: WorkTree, series: Series, slug: str, subject: str, author: str, log=print
) -> PatchFile:
    """Turn the work tree's uncommitted edits into a new patch at the end of the series."""
    patches = series.patches()
    state = work.require().load_state()
    if work.head() != state.head or [a.name for a in state.applied] != list(series.names):
        raise StackError(
            "`new` needs the whole series applied and nothing else committed: "
            "run `make apply` (your edits are kept) or `make refresh` first"
        )
    if not work.local_changes():
        raise StackError(f"no uncommitted edits in {work.path} to make a patch from")
    number = max((p.number for p in patches), default=0) + 10
    name = f"{number:04d}-{slug}.patch"
    if not SERIES_NAME.match(name):
        raise StackError(
            f"{slug!r} makes the file name {name!r}: use lower-case words joined by '-'"
        )
    work.git.run("add", "-A")
    tree = work.git.out("write-tree")
    header = NEW_HEADER.format(
        subject=subject, author=author, stem=name[: -len(".patch")].replace("-", "_")
    )
    path = series.patches_dir / name
    diff = work.git.diff("--cached", state.head)
    _write(path, header + diff)
    series.append(name)
    patch = PatchFile.read(path)
    commit = work.git.commit_tree(tree, state.head, patch.commit_message(), author)
    work.git.run("update-ref", "HEAD", commit)
    state.applied.append(AppliedPatch(name, patch.sha256, commit))
    work.save_state(state)
    log(
        f"new: wrote patches/{name} and appended it to patches/series; fill in the TODOs of its "
        "header (`make lint` lists them), then `make apply`"
    )
    return patch
