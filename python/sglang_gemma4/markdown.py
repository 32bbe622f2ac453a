"""Generated blocks in Markdown files: the text between two marker comments, rewritten whole.
Shared by the stack's patch tables and the results' tables; imports nothing of the package."""

from pathlib import Path


class MarkerError(Exception):
    """A file lacks the markers of the block to rewrite (the CLI reports it as a message)."""


def between(text: str, begin: str, end: str, where: Path) -> tuple[str, str, str]:
    """(before, inside, after) of the block that `begin` and `end` mark in `text`."""
    if begin not in text or end not in text:
        raise MarkerError(f"{where}: no {begin} ... {end} markers")
    before, rest = text.split(begin, 1)
    inside, after = rest.split(end, 1)
    return before, inside, after


def replace_block(path: Path, begin: str, end: str, body: str) -> None:
    """Rewrite the block between `begin` and `end` in the file at `path` with `body`."""
    before, _, after = between(path.read_text(), begin, end, path)
    path.write_text(f"{before}{begin}\n{body}\n{end}{after}")
