"""patches/series: the ordered list of patch files (quilt format; `#` starts a comment)."""

import re
from dataclasses import dataclass
from pathlib import Path

from sglang_gemma4.stack import dropped as dropped_toml
from sglang_gemma4.stack.errors import StackError
from sglang_gemma4.stack.patchfile import SERIES_NAME, PatchFile

# A comment that names a patch file: a dropped patch, which belongs in dropped.toml instead.
NAMES_A_PATCH = re.compile(r"^#\s*\d{4}-\S*\.patch\b")


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
        series_file = self.patches_dir / "series"
        for line in series_file.read_text().splitlines():
            if NAMES_A_PATCH.match(line):
                problems.append(
                    f"series: a dropped patch goes in {self.patches_dir.name}/"
                    f"{dropped_toml.DROPPED_FILE}, not in a comment: {line[:80]}"
                )
        out_of_form = dropped_toml.problems(self.patches_dir)
        problems += out_of_form
        if not out_of_form:
            for entry in self.dropped():
                if entry.name in seen:
                    problems.append(f"series: {entry.name} is listed and also dropped")
        return problems

    def dropped(self) -> list[dropped_toml.DroppedPatch]:
        return dropped_toml.load(self.patches_dir)

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
