"""patches/dropped.toml: the patches the series no longer carries, when and why (the source of
docs/dropped-patches.md)."""

import json
import tomllib
from dataclasses import dataclass
from pathlib import Path

from sglang_gemma4.stack.errors import StackError
from sglang_gemma4.stack.patchfile import SERIES_NAME

DROPPED_FILE = "dropped.toml"
KINDS = ("upstream", "covered", "no gain", "conflict")
FIELDS = ("release", "moved", "kind", "why", "evidence")


@dataclass(frozen=True)
class DroppedPatch:
    name: str
    release: str  # the sglang release it was dropped in the move to (or on)
    moved: bool  # dropped in a move to `release` (else while the series sat on it)
    kind: str  # one of KINDS
    why: str
    evidence: tuple[str, ...] = ()  # repository paths that show it

    @property
    def when(self) -> str:
        return f"in the move to {self.release}" if self.moved else f"on {self.release}"


def _read(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise StackError(f"{path}: {e}") from e


def problems(patches_dir: Path) -> list[str]:
    """Every entry of dropped.toml out of form (empty when none or no file)."""
    where = f"{patches_dir.name}/{DROPPED_FILE}"
    found = []
    for name, entry in _read(patches_dir / DROPPED_FILE).items():
        if not SERIES_NAME.match(name):
            found.append(f"{where}: {name!r} is not named NNNN-slug.patch")
        if not isinstance(entry, dict) or set(entry) != set(FIELDS):
            found.append(f"{where}: {name} must have exactly the fields {', '.join(FIELDS)}")
            continue
        if entry["kind"] not in KINDS:
            found.append(f"{where}: {name}: kind must be one of {', '.join(KINDS)}")
        if not isinstance(entry["moved"], bool) or not isinstance(entry["evidence"], list):
            found.append(f"{where}: {name}: moved is true or false, evidence a list of paths")
        if not str(entry["release"]).strip() or not str(entry["why"]).strip():
            found.append(f"{where}: {name}: release and why must not be empty")
        elif "\n" in entry["why"]:
            found.append(f"{where}: {name}: why is one line")
    return found


def load(patches_dir: Path) -> list[DroppedPatch]:
    """The dropped patches in file order; raises on an entry out of form."""
    found = problems(patches_dir)
    if found:
        raise StackError("\n".join(found))
    return [
        DroppedPatch(
            name,
            entry["release"],
            entry["moved"],
            entry["kind"],
            entry["why"],
            tuple(entry["evidence"]),
        )
        for name, entry in _read(patches_dir / DROPPED_FILE).items()
    ]


def render(entry: DroppedPatch) -> str:
    """One table of dropped.toml (JSON strings are TOML basic strings)."""
    return (
        f"[{json.dumps(entry.name)}]\n"
        f"release = {json.dumps(entry.release)}\n"
        f"moved = {'true' if entry.moved else 'false'}\n"
        f"kind = {json.dumps(entry.kind)}\n"
        f"why = {json.dumps(entry.why, ensure_ascii=False)}\n"
        f"evidence = {json.dumps(list(entry.evidence))}\n"
    )


def add(patches_dir: Path, entries: list[DroppedPatch]) -> None:
    """Append the entries not yet in the file (a finish run twice adds nothing twice)."""
    path = patches_dir / DROPPED_FILE
    have = {d.name for d in load(patches_dir)}
    new = [render(e) for e in entries if e.name not in have]
    if not new:
        return
    text = path.read_text() if path.is_file() else ""
    if text and not text.endswith("\n"):
        text += "\n"
    path.write_text(text + "".join(f"\n{table}" for table in new))
