"""Rebase the series onto a newer upstream release, with a per-patch verdict:

clean            applies exactly
refreshed        applies with offsets or by a 3-way merge; its file is rewritten
already upstream the release holds the change (the patch reverse-applies); it leaves the series
conflict         none of the above; the hunks are named

Nothing in patches/ or upstream.toml changes unless every patch is clean, refreshed or already
upstream.  The new base and the rebased commits are made in the work tree's repository without
touching its checkout, so `git range-diff` can compare the two stacks.
"""

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sglang_gemma4.errors import StackError
from sglang_gemma4.fetch import sha256_of
from sglang_gemma4.gitrepo import Git
from sglang_gemma4.layout import Layout
from sglang_gemma4.patchfile import PatchFile
from sglang_gemma4.pin import Pin, PinnedWheel
from sglang_gemma4.series import Series
from sglang_gemma4.worktree import BRANCH, AppliedPatch, State, WorkTree, base_message, commit_directory, git_apply, unpack_wheel

CLEAN, REFRESHED, UPSTREAM, CONFLICT = "clean", "refreshed", "already upstream", "conflict"


@dataclass
class Verdict:
    patch: PatchFile
    outcome: str
    detail: str = ""
    commit: str = ""


def pin_from_wheels(name: str, wheel_paths: list[Path]) -> Pin:
    """A pin for local wheel files: version and Python from their names, sha256 from their bytes."""
    wheels, versions = [], set()
    for path in wheel_paths:
        dist, version, python_tag = path.name.split("-")[:3]
        if dist != name:
            raise StackError(f"{path.name} is not a {name} wheel")
        versions.add(version)
        digits = python_tag[2:]
        wheels.append(PinnedWheel(python=f"{digits[0]}.{digits[1:]}", file=path.name, sha256=sha256_of(path)))
    if len(versions) != 1:
        raise StackError(f"the wheels name different versions: {', '.join(sorted(versions))}")
    return Pin(name=name, version=versions.pop(), wheels=tuple(wheels))


def classify(work: WorkTree, base: str, patches: list[PatchFile]) -> list[Verdict]:
    """Apply the series onto `base` in a scratch index, committing each patch that goes in."""
    verdicts = []
    parent = base
    with tempfile.TemporaryDirectory() as tmp:
        index = Git(work.path, index_file=Path(tmp) / "index")
        index.run("read-tree", base)
        for patch in patches:
            result = git_apply(index, patch, "--cached")
            if result.ok:
                outcome, detail = (REFRESHED, "; ".join(result.offsets)) if result.offsets else (CLEAN, "")
            elif git_apply(index, patch, "--cached", "--reverse", "--check").ok:
                verdicts.append(Verdict(patch, UPSTREAM, "reverse-applies"))
                continue
            elif index.run("apply", "--cached", "--3way", str(patch.path.resolve()), check=False).returncode == 0:
                outcome, detail = REFRESHED, "3-way merge"
            else:
                index.run("read-tree", parent)  # drop the conflict stages
                verdicts.append(Verdict(patch, CONFLICT, result.error))
                continue
            tree = index.out("write-tree")
            if tree == index.out("rev-parse", f"{parent}^{{tree}}"):
                verdicts.append(Verdict(patch, UPSTREAM, "3-way merge left nothing to change"))
                continue
            parent = work.git.commit_tree(tree, parent, patch.commit_message(), patch.fields.get("Author"))
            verdicts.append(Verdict(patch, outcome, detail, parent))
    return verdicts


def report(old: Pin, new: Pin, verdicts: list[Verdict]) -> str:
    lines = [f"rebase {old.requirement} -> {new.requirement}", "",
             "| # | patch | verdict | detail |", "|---|---|---|---|"]
    for i, v in enumerate(verdicts, start=1):
        detail = " ".join(v.detail.split())
        lines.append(f"| {i} | {v.patch.name} | {v.outcome} | {detail} |")
    return "\n".join(lines)


def rebase(layout: Layout, old: Pin, new: Pin, new_wheels: list[Path], log=print) -> list[Verdict]:
    work = WorkTree(layout.work_dir)
    series = Series.load(layout.patches_dir)
    patches = series.patches()
    old_state = work.require_synced(patches)

    seed = next(p for p in new_wheels if p.name == new.wheel().file)
    with tempfile.TemporaryDirectory() as tmp:
        unpack_wheel(seed, Path(tmp))
        base = commit_directory(work.git, Path(tmp), base_message(new, new.wheel()))
    work.git.run("tag", "-f", f"upstream/{new.version}", base)
    verdicts = classify(work, base, patches)
    tip = next((v.commit for v in reversed(verdicts) if v.commit), base)
    work.git.run("branch", "-f", f"rebase/{new.version}", tip)
    log(report(old, new, verdicts))
    conflicts = [v for v in verdicts if v.outcome == CONFLICT]
    if conflicts:
        details = "\n".join(f"{v.patch.name}:\n{v.detail}" for v in conflicts)
        raise StackError(f"{len(conflicts)} patches conflict with {new.requirement}; nothing in patches/ or "
                         f"upstream.toml changed. Branch rebase/{new.version} holds the rest.\n{details}")

    for path in new_wheels:  # the wheels now pinned go to the cache, verified by construction
        shutil.copy2(path, layout.cache_dir / path.name)
    kept = []
    for v in verdicts:
        if v.outcome == UPSTREAM:
            v.patch.path.unlink()
            log(f"rebase: removed patches/{v.patch.name} (in {new.requirement})")
            continue
        text = v.patch.with_diff(work.git.diff(f"{v.commit}^", v.commit))
        if text != v.patch.text:
            v.patch.path.write_text(text)
        kept.append(AppliedPatch(v.patch.name, PatchFile.read(v.patch.path).sha256, v.commit))
    dropped = {v.patch.name for v in verdicts if v.outcome == UPSTREAM}
    series_lines = []
    for line in layout.series_file.read_text().splitlines():
        entry = line.split("#", 1)[0].strip()
        series_lines.append(f"# {entry}: dropped, applied upstream in {new.version}" if entry in dropped else line)
    layout.series_file.write_text("\n".join(series_lines) + "\n")
    layout.pin_file.write_text(new.render())

    work.git.run("branch", "-f", f"{BRANCH}-{old.version}", old_state.head)
    work.git.run("checkout", "-q", "-B", BRANCH, tip)
    new_wheel = new.wheel()
    work.save_state(State(version=new.version, wheel_file=new_wheel.file, wheel_sha256=new_wheel.sha256,
                          base=base, applied=kept))
    log(f"rebase: done. Review with: git -C {work.path} range-diff "
        f"upstream/{old.version}..{BRANCH}-{old.version} upstream/{new.version}..{BRANCH}")
    return verdicts
