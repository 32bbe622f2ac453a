"""A run folder's raw files: packed into one reproducible raw.tar.xz, read back, and checked
against the figures, GPU and series versions its result.json says they hold."""

import re
import tarfile
from decimal import Decimal
from pathlib import Path

from sglang_gemma4.results.errors import ResultsError
from sglang_gemma4.results.runs import (
    FOLDER_NAME,
    PLAIN_NAMES,
    RAW_ARCHIVE,
    RAW_PREFIX,
    REFUSED,
    RESULT_FILE,
    Run,
)

NUMBER_IN_TEXT = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:[eE][-+]?\d+)?")


def is_plain(relative: Path) -> bool:
    return relative.name in PLAIN_NAMES or relative.suffix == ".png"


def pack(folder: Path) -> list[str]:
    """Move every raw file of `folder` (all but README, result.json and PNGs) into raw.tar.xz.

    The archive is reproducible (sorted members, no times or owners), so packing the same files
    twice gives the same bytes. Refuses a folder that already has an archive. Returns the packed
    paths.
    """
    archive = folder / RAW_ARCHIVE
    if archive.exists():
        raise ResultsError(f"{archive}: exists; unpack it first to add files")
    files = sorted(
        p for p in folder.rglob("*") if p.is_file() and not is_plain(p.relative_to(folder))
    )
    if not files:
        raise ResultsError(f"{folder}: no raw files to pack")
    with tarfile.open(archive, "w:xz", preset=9) as tar:
        for path in files:
            info = tarfile.TarInfo(path.relative_to(folder).as_posix())
            info.size, info.mode = path.stat().st_size, 0o644
            with path.open("rb") as f:
                tar.addfile(info, f)
    for path in files:
        path.unlink()
    for directory in sorted(
        (p for p in folder.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)
    ):
        if not any(directory.iterdir()):
            directory.rmdir()
    return [p.relative_to(folder).as_posix() for p in files]


def read_archive(folder: Path, wanted: set[str] | None = None) -> dict[str, bytes | None]:
    """Member names of the folder's raw.tar.xz, with the bytes of those in `wanted` (others
    None)."""
    archive = folder / RAW_ARCHIVE
    members: dict[str, bytes | None] = {}
    if not archive.is_file():
        return members
    with tarfile.open(archive, "r:xz") as tar:
        for info in tar:
            if info.isfile():
                keep = wanted is not None and info.name in wanted
                members[info.name] = tar.extractfile(info).read() if keep else None
    return members


def number_appears(value: str, text: str) -> bool:
    """Whether `text` holds a number that rounds to `value` at value's precision (4.31 matches
    4.3125)."""
    decimals = len(value.partition(".")[2])
    target, half = Decimal(value), Decimal(5) / Decimal(10) ** (decimals + 1)
    for match in NUMBER_IN_TEXT.finditer(text):
        try:
            if abs(Decimal(match.group().replace(",", "")) - target) <= half:
                return True
        except ArithmeticError:  # not a number, or one too large for Decimal (1e999999999)
            continue
    return False


def provenance_problems(run: Run, patch_names: set[str]) -> list[str]:
    """Every figure, GPU name and series version of `run` that its cited source does not hold."""
    sources = {s for f in run.figures for s in f.sources} | {run.gpu_source, *run.versions_sources}
    wanted = {s[len(RAW_PREFIX) :] for s in sources if s.startswith(RAW_PREFIX)}
    members = read_archive(run.folder, wanted)
    where = f"{run.folder.name}/{RESULT_FILE}"

    def text_of(source: str) -> str | None:
        if source == FOLDER_NAME:
            return run.folder.name
        if source.startswith(RAW_PREFIX):
            data = members.get(source[len(RAW_PREFIX) :])
        else:
            path = run.folder / source
            data = path.read_bytes() if source in PLAIN_NAMES and path.is_file() else None
        return None if data is None else data.decode(errors="replace")

    problems = []
    for source in sorted(sources):
        if text_of(source) is None:
            problems.append(
                f"{where}: source {source} is neither a member of {RAW_ARCHIVE}, README.md nor "
                f"the {FOLDER_NAME}"
            )
    gpu_text = text_of(run.gpu_source)
    if gpu_text is not None and run.gpu.lower() not in gpu_text.lower():
        problems.append(f"{where}: gpu {run.gpu!r} is not named in {run.gpu_source}")
    series_text = "\n".join(text_of(s) or "" for s in run.versions_sources)
    for version in run.versions:
        if version.rsplit(".", 1)[-1] not in series_text:
            problems.append(
                f"{where}: series {version} is named in none of {', '.join(run.versions_sources)}"
            )
    for i, figure in enumerate(run.figures):
        for (setup, value), source in zip(figure.values, figure.sources):
            text = text_of(source)
            if text is not None and not (
                REFUSED in text if value == REFUSED else number_appears(value, text)
            ):
                problems.append(
                    f"{where}: figures[{i}] {figure.metric!r} {setup}={value} is not in {source}"
                )
        problems += [
            f"{where}: figures[{i}] names patch {p}, which is not in patches/series"
            for p in figure.patches
            if p not in patch_names
        ]
    return problems
