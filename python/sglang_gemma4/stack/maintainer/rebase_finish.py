"""The end of a rebase: every file of the repository that names the release or the series, in one
step, then a checklist of what is left to a person.

    patches/*.patch        diffs rewritten from the work tree's commits (headers kept)
    patches/series         dropped patches leave it; the header's release
    patches/dropped.toml   each dropped patch with its evidence
    upstream.toml          the new pin
    test/                  dropped patches' test files removed (when no kept patch lists them);
                           requirements-cpu.txt's pins from the release's CPU environment
    README.md              the generated tables; `sglang==X`-style mentions of the release
    docs/drift/            reports for releases up to the new one removed, newer ones regenerated
                           (text checks) when their wheels are cached
    the old state          tagged series/<old release> in the repository; branch gemma4-<old> in
                           work/sglang

Every step computes its result from the saved rebase state and the files, so a finish that was
interrupted is redone by `make rebase-continue`.
"""

import json
import re
import subprocess
from pathlib import Path

from packaging.version import Version

import sglang_gemma4.results as results
from sglang_gemma4.stack import dropped as dropped_toml
from sglang_gemma4.stack.errors import StackError
from sglang_gemma4.stack.maintainer import drift, patchtests, readme_table, testenv
from sglang_gemma4.stack.maintainer.rebase import Rebase, RebaseState, pin_from_wheels
from sglang_gemma4.stack.patchfile import PatchFile
from sglang_gemma4.stack.series import Series
from sglang_gemma4.stack.worktree import BRANCH, AppliedPatch, State

GENERATED_BLOCK = re.compile(r"^<!-- ([a-z-]+):.*?^<!-- /\1 -->$", re.M | re.S)


def mentions(old: str) -> re.Pattern:
    """The release named as the pin: sglang==X, sglang X, sglang-X+gemma4, upstream/X."""
    pattern = r"(?<=sglang==)X\b|(?<=sglang )X\b|(?<=sglang-)X(?=\+)|(?<=upstream/)X\b"
    return re.compile(pattern.replace("X", re.escape(old)))


def outside_blocks(text: str, edit) -> str:
    """`edit` applied to the text outside the README's generated blocks."""
    parts, last = [], 0
    for match in GENERATED_BLOCK.finditer(text):
        parts += [edit(text[last : match.start()]), match.group(0)]
        last = match.end()
    return "".join(parts + [edit(text[last:])])


def update_prose(path: Path, old: str, new: str) -> list[str]:
    """Rename the pinned release in `path`'s prose; the lines that still name `old` (to review)."""
    pattern = mentions(old)
    text = outside_blocks(path.read_text(), lambda part: pattern.sub(new, part))
    path.write_text(text)
    left = []
    outside_blocks(
        text, lambda part: left.extend(line for line in part.splitlines() if old in line) or part
    )
    return left


def update_series(series_file: Path, dropped: dict[str, str], old: str, new: str) -> None:
    """The dropped patches out of the series and into dropped.toml (with their evidence), the
    release renamed in the series' comments."""
    lines = []
    for line in series_file.read_text().splitlines():
        if line.split("#", 1)[0].strip() in dropped:
            continue
        if line.startswith("#"):
            line = mentions(old).sub(new, line)
        lines.append(line)
    series_file.write_text("\n".join(lines) + "\n")
    dropped_toml.add(
        series_file.parent,
        [
            dropped_toml.DroppedPatch(name, new, True, drop_kind(why), why)
            for name, why in dropped.items()
        ],
    )


def drop_kind(why: str) -> str:
    """A rebase's drop is "upstream" when it found the patch there, else a "conflict"."""
    return "upstream" if why.startswith("already upstream") else "conflict"


def update_requirements(path: Path, pins: dict[str, str], old: str, new: str) -> list[str]:
    """Pins rewritten, comments renamed to the new release; the pins that changed."""
    changed, lines = [], []
    for line in path.read_text().splitlines():
        match = testenv.PIN_LINE.match(line.strip())
        if match and pins.get(match.group(1), match.group(2)) != match.group(2):
            changed.append(f"{match.group(1)} {match.group(2)} -> {pins[match.group(1)]}")
            line = f"{match.group(1)}=={pins[match.group(1)]}"
        elif line.startswith("#"):
            line = mentions(old).sub(new, line)
        lines.append(line)
    path.write_text("\n".join(lines) + "\n")
    return changed


def remove_dropped_tests(
    root: Path, state: RebaseState, kept_patches: list[PatchFile]
) -> list[str]:
    still_used = {t for p in kept_patches for t in patchtests.test_files(p)}
    removed = []
    for dropped in state.dropped:
        for test in dropped.tests:
            if test not in still_used and (root / test).is_file():
                (root / test).unlink()
                removed.append(test)
    return removed


def git_repository(root: Path) -> bool:
    return subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--git-dir"], capture_output=True
    ).returncode == 0 and subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--show-toplevel"], capture_output=True, text=True
    ).stdout.strip() == str(root.resolve())


def tag_old_state(root: Path, state: RebaseState) -> str:
    """series/<old> on the repository's commit of the rebase's start; a line for the checklist."""
    tag = f"series/{state.old_state.version}"
    if not state.repo_head:
        return (
            f"the repository is not a git checkout: keep the old state yourself (e.g. a tag {tag})"
        )
    have = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "-q", "--verify", f"refs/tags/{tag}"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    if have and have != state.repo_head:
        return (
            f"tag {tag} already names another commit ({have[:12]}); "
            f"the old state is {state.repo_head[:12]}"
        )
    if not have:
        subprocess.run(
            ["git", "-C", str(root), "tag", tag, state.repo_head], check=True, capture_output=True
        )
    return f"publish the old state: git push origin {tag}  (tagged {state.repo_head[:12]})"


def refresh_drift(rebase: Rebase, state: RebaseState) -> list[str]:
    """Reports for the new release or older go; newer ones are regenerated when their wheels
    are cached (text checks); the checklist lines for the rest."""
    layout, new, todo = rebase.layout, state.new_pin, []
    for report in sorted(drift.report_dir(layout).glob("*.json")):
        data = json.loads(report.read_text())
        release = data["release"]
        if Version(release) <= Version(new.version):
            report.unlink()
            report.with_suffix(".md").unlink(missing_ok=True)
            continue
        wheels = [layout.cache_dir / name for name in data["wheels"]]
        if not all(w.is_file() for w in wheels):
            todo.append(
                f"make rebase-check TO={release}   (docs/drift/ describes the old series; its "
                "wheels "
                "are not cached)"
            )
            continue
        rebase.log(f"rebase: regenerating the drift report for sglang {release} (text checks)")
        pin = pin_from_wheels(new.name, wheels)
        rows = drift.check_release(layout, pin, wheels[0], "", False, log=lambda _: None)
        drift.write_report(layout, new, pin, rows, False, report.with_suffix(".md"))
        todo.append(
            f"make rebase-check TO={release}   (adds the already-upstream test column; regenerated "
            "by text)"
        )
    return todo


def finish(rebase: Rebase, state: RebaseState) -> None:
    failing = [
        t
        for t in state.taken
        if t.tests in (patchtests.FAILED, patchtests.COULD_NOT_RUN) and not t.accepted
    ]
    if failing:
        raise StackError(
            "the tests of " + ", ".join(t.name for t in failing) + " do not pass: fix them or "
            "`make rebase-continue ACCEPT_FAILING=1 WHY=...` first"
        )
    if not state.finishing:
        state.finishing = True
        rebase.save(state)
    layout, work, new = rebase.layout, rebase.work, state.new_pin
    old_version = state.old_state.version
    kept, kept_patches = [], []
    for taken in state.taken:
        patch = rebase.patch(taken.name)
        text = patch.with_diff(work.git.diff(f"{taken.commit}^", taken.commit))
        if text != patch.text:
            patch.path.write_text(text)
        kept_patches.append(PatchFile.read(patch.path))
        kept.append(AppliedPatch(taken.name, kept_patches[-1].sha256, taken.commit))
    update_series(
        layout.series_file, {d.name: d.evidence for d in state.dropped}, old_version, new.version
    )
    for dropped in state.dropped:
        (layout.patches_dir / dropped.name).unlink(missing_ok=True)
    removed_tests = remove_dropped_tests(layout.root, state, kept_patches)
    layout.pin_file.write_text(new.render())

    checklist = []
    requirements = layout.root / testenv.REQUIREMENTS
    if requirements.is_file():
        pins = (
            state.env_pins
            or testenv.plan(
                requirements.read_text(),
                testenv.wheel_pins(layout.cache_dir / new.wheel().file, new.wheel().python),
                f"sglang {new.version}",
                None,
            ).pins
        )
        changed = update_requirements(requirements, pins, old_version, new.version)
        if changed:
            checklist.append(
                f"{testenv.REQUIREMENTS}: pins changed ({', '.join(changed)}): review its "
                "comments, "
                "which say why each pin; `make test` rebuilds .venv-test from it"
            )
    readme = layout.root / "README.md"
    if readme.is_file():
        series = Series.load(layout.patches_dir)
        readme_table.update_readme(readme, series)
        # the results tables name the pin they compare with
        results.regenerate(layout.root, new.version, [layout.patches_dir / n for n in series.names])
        checklist += [
            f"README.md still names {old_version}: {line.strip()[:120]}"
            for line in update_prose(readme, old_version, new.version)
        ]
        checklist.append(
            "README.md: only `sglang==X`-style mentions were renamed; review what its prose says "
            "about "
            "the release (the torch it needs, its features)"
        )
    checklist.append(tag_old_state(layout.root, state))

    git = work.git
    git.run("branch", "-f", f"{BRANCH}-{old_version}", state.old_state.head)
    git.run("checkout", "-q", "-f", "-B", BRANCH, state.tip)
    git.run("branch", "-D", state.branch, check=False)
    wheel = new.wheel()
    work.save_state(
        State(
            version=new.version,
            wheel_file=wheel.file,
            wheel_sha256=wheel.sha256,
            base=state.base,
            applied=kept,
        )
    )
    checklist += refresh_drift(rebase, state)

    accepted = [
        f"{t.name}: its tests {t.tests}, accepted: {t.accepted}" for t in state.taken if t.accepted
    ]
    checklist = (
        [f"decide on the accepted failure of {line}" for line in accepted]
        + [f"the tests ran with substitutions: {note}" for note in state.env_notes]
        + checklist
        + [
            f"review the move: git -C {work.path} range-diff "
            f"upstream/{old_version}..{BRANCH}-{old_version} "
            f"upstream/{new.version}..{BRANCH}",
            "make lint test verify-tests  (the full CPU suite on the new release)",
            f"GPU: no measured run on sglang {new.version} yet: the GPU proof "
            "(scripts/gpu/check.sh) before "
            "a release",
            "commit: git add -A upstream.toml patches test README.md docs benchmark_results && git "
            "commit",
        ]
    )
    rebase.log(
        f"\nrebase: done, {len(kept)} patches on {new.requirement}, {len(state.dropped)} dropped.\n"
        f"{rebase.report(state)}\n"
        f"Written: upstream.toml, patches/ (series header too), README.md (tables, pin mentions), "
        f"{testenv.REQUIREMENTS}"
        + (f"; removed {', '.join(removed_tests)}" if removed_tests else "")
        + "\nLeft to do:\n"
        + "\n".join(f"  [ ] {item}" for item in checklist)
    )
    rebase.state_file.unlink()
