"""patches/series: the ordered list of patch files (quilt format; `#` starts a comment)."""

import re
from dataclasses import dataclass
from pathlib import Path

from sglang_gemma4.stack.errors import StackError
from sglang_gemma4.stack.patchfile import SERIES_NAME, PatchFile

# A patch that left the series stays named in a comment, with the release and the reason:
#   # 0007-slug.patch: dropped in the move to sglang 0.5.17: <why, and where upstream does it>
DROPPED = re.compile(
    r"^#\s*(\d{4}-[a-z0-9-]+\.patch): dropped (in the move to|on) sglang (\S+): (\S.*)$"
)
NAMES_A_PATCH = re.compile(r"^#\s*\d{4}-\S*\.patch\b")


@dataclass(frozen=True)
class DroppedPatch:
    name: str
    release: str  # the sglang release it was dropped in the move to (or on)
    moved: bool  # dropped in a move to `release` (else while the series sat on it)
    why: str


def read_dropped(series_file: Path) -> tuple[list[DroppedPatch], list[str]]:
    """The dropped patches the series' comments name, and the comments that name a patch in
    another form."""
    dropped, malformed = [], []
    for line in series_file.read_text().splitlines():
        match = DROPPED.match(line)
        if match:
            name, how, release, why = match.groups()
            dropped.append(DroppedPatch(name, release, how == "in the move to", why))
        elif NAMES_A_PATCH.match(line):
            malformed.append(line)
    return dropped, malformed


def read_names(series_file: Path) -> list[str]:
    if not series_file.is_file():
        raise StackError(f"{series_file}: missing")
    names = []
    for line in series_file.read_text().splitlines():
        entry = line.split("#", 1)[0].strip()
        if entry:
            names.append(entry)
    return names


@dataclass(frozen=True)
class Series:
    patches_dir: Path
    names: tuple[str, ...]

    @classmethod
    def load(cls, patches_dir: Path) -> "Series":
        return cls(patches_dir, tuple(read_names(patches_dir / "series")))

    def problems(self) -> list[str]:
        """Every way the series and the patches folder disagree (empty when consistent)."""
        problems = []
        seen: set[str] = set()
        last_number = -1
        for name in self.names:
            match = SERIES_NAME.match(name)
            if not match:
                problems.append(f"series: {name!r} is not named NNNN-slug.patch (lower-case slug)")
            elif int(match.group(1)) <= last_number:
                problems.append(f"series: {name} is out of numeric order (numbers must increase)")
            else:
                last_number = int(match.group(1))
            if name in seen:
                problems.append(f"series: {name} is listed twice")
            seen.add(name)
            if not (self.patches_dir / name).is_file():
                problems.append(f"series: {name} is listed but patches/{name} does not exist")
        for path in sorted(self.patches_dir.glob("*.patch")):
            if path.name not in seen:
                problems.append(f"patches/{path.name} is not listed in patches/series")
        dropped, malformed = read_dropped(self.patches_dir / "series")
        for line in malformed:
            problems.append(
                "series: a comment naming a patch must read '# NNNN-slug.patch: dropped in the "
                "move "
                f"to sglang X: why' (or 'dropped on sglang X: why'): {line[:80]}"
            )
        for entry in dropped:
            if entry.name in seen:
                problems.append(f"series: {entry.name} is listed and also named as dropped")
        return problems

    def dropped(self) -> list[DroppedPatch]:
        return read_dropped(self.patches_dir / "series")[0]

    def check(self) -> None:
        problems = self.problems()
        if problems:
            raise StackError("inconsistent series:\n  " + "\n  ".join(problems))

    def patches(self) -> list[PatchFile]:
        self.check()
        return [PatchFile.read(self.patches_dir / name) for name in self.names]

    def append(self, name: str) -> None:
        series_file = self.patches_dir / "series"
        text = series_file.read_text()
        if text and not text.endswith("\n"):
            text += "\n"
        series_file.write_text(text + name + "\n")
