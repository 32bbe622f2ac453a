"""Every hunk of a patch checked on its own against a tree, and why each failing one fails.

`git apply` stops at the first hunk it cannot place and names one per file; a maintainer moving
the series to a new release needs all of them, and needs to know whether a hunk fails because
upstream changed the code or because an earlier patch that this one builds on was not taken.
"""

import tempfile
from dataclasses import dataclass
from pathlib import Path

from sglang_gemma4.stack.gitrepo import Git
from sglang_gemma4.stack.patchfile import PatchFile

UPSTREAM_CONFLICT = "conflicts with upstream"
MISSING_FILE = "file not in the release (moved or removed upstream)"


@dataclass(frozen=True)
class HunkCheck:
    file: str
    number: int  # 1-based within its file, as PatchFile.hunks counts
    header: str
    applies: bool
    reason: str = ""  # why it does not apply

    def describe(self) -> str:
        return f"{self.file} hunk #{self.number} ({self.header}): {self.reason}"


@dataclass(frozen=True)
class _Section:
    file: str
    preamble: list[str]  # diff --git, index, ---, +++ lines
    hunks: list[list[str]]  # each: the @@ line and its body

    @property
    def creates(self) -> bool:
        return any(line.startswith("--- /dev/null") for line in self.preamble)


def _sections(diff: str) -> list[_Section]:
    sections: list[_Section] = []
    for line in diff.splitlines(keepends=True):
        if line.startswith("diff --git "):
            sections.append(_Section(line.rstrip("\n").split(" b/", 1)[-1], [line], []))
        elif not sections:
            continue
        elif line.startswith("@@"):
            sections[-1].hunks.append([line])
        elif sections[-1].hunks:
            sections[-1].hunks[-1].append(line)
        else:
            sections[-1].preamble.append(line)
    return sections


def added_lines(patch: PatchFile) -> dict[str, set[str]]:
    """Per file, the non-blank lines the patch adds (stripped)."""
    added: dict[str, set[str]] = {}
    for section in _sections(patch.diff):
        for hunk in section.hunks:
            added.setdefault(section.file, set()).update(
                line[1:].strip() for line in hunk[1:] if line.startswith("+") and line[1:].strip()
            )
    return added


def _blame(section: _Section, hunk: list[str], left_out: list[PatchFile]) -> str:
    """The earlier patch, not taken, whose added lines this hunk expects to find; else upstream."""
    expected = {
        line[1:].strip() for line in hunk[1:] if line[:1] in (" ", "-") and line[1:].strip()
    }
    for patch in reversed(left_out):
        if expected & added_lines(patch).get(section.file, set()):
            return f"depends on {patch.name}, which was not taken"
    return UPSTREAM_CONFLICT


def check_hunks(
    git: Git, tree: str, patch: PatchFile, left_out: list[PatchFile]
) -> list[HunkCheck]:
    """Apply each hunk of `patch` alone onto commit `tree` (a scratch index; no checkout touched).

    `left_out`: earlier patches of the series that are not in `tree` (dropped or skipped), so a
    failing hunk that needs their lines is told apart from one that upstream's changes broke.
    """
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        index = Git(git.repo, index_file=Path(tmp) / "index")
        index.run("read-tree", tree)
        present = set(index.out("ls-files").splitlines())
        single = Path(tmp) / "hunk.patch"
        for section in _sections(patch.diff):
            for number, hunk in enumerate(section.hunks, start=1):
                header = hunk[0].rstrip("\n")
                if not section.creates and section.file not in present:
                    reason = _blame(section, hunk, left_out)
                    results.append(
                        HunkCheck(
                            section.file,
                            number,
                            header,
                            False,
                            MISSING_FILE if reason == UPSTREAM_CONFLICT else reason,
                        )
                    )
                    continue
                single.write_text("".join(section.preamble + hunk))
                ok = (
                    index.run("apply", "--cached", "--check", str(single), check=False).returncode
                    == 0
                )
                results.append(
                    HunkCheck(
                        section.file,
                        number,
                        header,
                        ok,
                        "" if ok else _blame(section, hunk, left_out),
                    )
                )
    return results
