"""A patch file of the series: a DEP-3 style header, then a git diff against upstream repo paths.

    From: Name <email>          (optional; `git am` reads it, so it must equal Author)
    Subject: One line
    Author: Name <email>
    Upstream-Status: Not yet, <reason>
    Origin: ...
    Tests: test/patches/test_x.py
    Bench: none
    Kill-Switch: none

    Why: ...
    How: ...
    Drop when: ...

    ---
    diff --git a/python/sglang/... b/python/sglang/...

git apply and patch(1)/quilt skip the header; git am takes From/Subject and the description.
"""

import hashlib
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from sglang_gemma4.stack.errors import StackError

DIFF_START = re.compile(r"^diff --git ", re.M)
FIELD = re.compile(r"^([A-Za-z][A-Za-z-]*):[ \t]*(.*)$")
HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@.*$")
SERIES_NAME = re.compile(r"^(\d{4})-[a-z0-9]+(?:-[a-z0-9]+)*\.patch$")


@dataclass(frozen=True)
class Hunk:
    file: str
    number: int  # 1-based within its file
    old_start: int
    header: str  # the @@ line


@dataclass(frozen=True)
class PatchFile:
    path: Path
    text: str

    @classmethod
    def read(cls, path: Path) -> "PatchFile":
        try:
            return cls(path=path, text=path.read_text())
        except OSError as e:
            raise StackError(f"{path}: cannot read ({e.strerror})") from e

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def number(self) -> int:
        match = SERIES_NAME.match(self.name)
        return int(match.group(1)) if match else -1

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    @cached_property
    def header(self) -> str:
        """Everything before the first `diff --git` line."""
        match = DIFF_START.search(self.text)
        return self.text[: match.start()] if match else self.text

    @property
    def diff(self) -> str:
        return self.text[len(self.header) :]

    @cached_property
    def fields(self) -> dict[str, str]:
        """The `Name: value` block at the top (continuation lines start with white space)."""
        fields: dict[str, str] = {}
        last = None
        for line in self.header.splitlines():
            if not line.strip():
                break
            if line[0] in " \t" and last:
                fields[last] += " " + line.strip()
                continue
            match = FIELD.match(line)
            if not match:
                break
            last = match.group(1)
            fields[last] = match.group(2).strip()
        return fields

    @property
    def subject(self) -> str:
        return self.fields.get("Subject", self.name)

    @property
    def description(self) -> str:
        """The prose between the field block and the `---` line that ends the header."""
        _, _, rest = self.header.partition("\n\n")
        lines = rest.splitlines()
        if "---" in lines:
            lines = lines[: lines.index("---")]
        return "\n".join(lines).strip()

    @cached_property
    def hunks(self) -> list[Hunk]:
        hunks: list[Hunk] = []
        current, count = None, 0
        for line in self.diff.splitlines():
            if line.startswith("diff --git "):
                current = line.split(" b/", 1)[-1]
                count = 0
            match = HUNK.match(line)
            if match and current:
                count += 1
                hunks.append(Hunk(current, count, int(match.group(1)), line))
        return hunks

    @property
    def files(self) -> list[str]:
        """Repo paths the diff touches, from its `diff --git a/X b/Y` lines (the b/ side)."""
        return [
            line.split(" b/", 1)[-1]
            for line in self.diff.splitlines()
            if line.startswith("diff --git ")
        ]

    def hunk_at(self, file: str, old_start: int) -> Hunk | None:
        for hunk in self.hunks:
            if hunk.file == file and hunk.old_start == old_start:
                return hunk
        return None

    def commit_message(self) -> str:
        """Subject and description for the work tree commit, plus the trailer refresh relies on."""
        parts = [self.subject]
        if self.description:
            parts.append(self.description)
        parts.append(f"Patch-File: {self.name}")
        return "\n\n".join(parts) + "\n"

    def with_diff(self, diff: str) -> str:
        """This patch's header over a new diff (refresh)."""
        header = self.header if self.header.endswith("\n") else self.header + "\n"
        return header + diff
