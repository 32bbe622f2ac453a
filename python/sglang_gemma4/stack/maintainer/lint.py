"""Header lint: every patch says what it does, why, how it is tested and its upstream status."""

import re
from pathlib import Path

from sglang_gemma4.stack.patchfile import PatchFile
from sglang_gemma4.stack.series import Series

REQUIRED = ("Subject", "Author", "Upstream-Status", "Origin", "Tests", "Bench", "Kill-Switch")
OPTIONAL = (
    "From",
    "Bug",
    "Git-commit",
    "Forwarded",
    "Last-Update",
    "Reviewed-by",
    "Applied-Upstream",
)
AUTHOR = re.compile(r"^[^<>]+ <[^<>@\s]+@[^<>\s]+>$")
UPSTREAM_STATUS = {
    # form: (pattern, what it must name)
    "Not yet": (re.compile(r"^Not yet, \S"), "a reason"),
    "Submitted": (re.compile(r"^Submitted, .*(https?://\S+|#\d+)"), "the PR (URL or #number)"),
    "Applied-Upstream": (re.compile(r"^Applied-Upstream, .*\d+\.\d+"), "the release that has it"),
    "Never": (re.compile(r"^Never, \S"), "a reason"),
}
KILL_SWITCH = re.compile(r"^(none|[A-Z][A-Z0-9_]*(=\S+)?)$")
DESCRIPTION_PARTS = ("Why:", "How:", "Drop when:")
MAX_SUBJECT = 80
MAX_WHY_HOW_LINES = 10


def listed_paths(value: str) -> list[str]:
    """The file paths in a Tests/Bench value: the part before any `;` comment."""
    return [p for p in re.split(r"[,\s]+", value.split(";", 1)[0]) if p]


def why_how_lines(description: str) -> int:
    """Non-empty lines from `Why:` up to `Drop when:` (the short story a reviewer reads)."""
    lines, inside = 0, False
    for line in description.splitlines():
        if line.startswith("Why:"):
            inside = True
        elif line.startswith("Drop when:"):
            inside = False
        lines += inside and bool(line.strip())
    return lines


def lint_patch(patch: PatchFile, root: Path) -> list[str]:
    where = f"patches/{patch.name}"
    errors = []
    fields = patch.fields
    for name in REQUIRED:
        if not fields.get(name):
            errors.append(f"{where}: missing header field {name}:")
    for name in fields:
        if name not in REQUIRED and name not in OPTIONAL:
            errors.append(
                f"{where}: unknown header field {name}: (known: {', '.join(REQUIRED + OPTIONAL)})"
            )
    if "TODO" in patch.header:
        errors.append(f"{where}: header still has TODO placeholders")
        return errors  # the checks below would only repeat them

    subject = fields.get("Subject", "")
    if len(subject) > MAX_SUBJECT or subject.endswith("."):
        errors.append(
            f"{where}: Subject must be at most {MAX_SUBJECT} characters with no final period"
        )
    author = fields.get("Author")
    if author and not AUTHOR.match(author):
        errors.append(f"{where}: Author must read 'Name <email>', got {author!r}")
    if "From" in fields and fields["From"] != author:
        errors.append(f"{where}: From: (read by `git am`) must equal Author:")

    status = fields.get("Upstream-Status")
    if status:
        form = next((k for k in UPSTREAM_STATUS if status.startswith(k + ",")), None)
        if form is None:
            errors.append(
                f"{where}: Upstream-Status must start with one of: "
                + ", ".join(f"'{k}, ...'" for k in UPSTREAM_STATUS)
            )
        elif not UPSTREAM_STATUS[form][0].match(status):
            errors.append(f"{where}: Upstream-Status '{form}' must name {UPSTREAM_STATUS[form][1]}")

    tests = fields.get("Tests")
    if tests:
        paths = listed_paths(tests)
        if not any(p.startswith("test/") for p in paths):
            errors.append(f"{where}: Tests: must list at least one file under test/")
        errors += [f"{where}: Tests: {p} does not exist" for p in paths if not (root / p).exists()]
    bench = fields.get("Bench")
    if bench and listed_paths(bench) != ["none"]:
        errors += [
            f"{where}: Bench: {p} does not exist"
            for p in listed_paths(bench)
            if not (root / p).exists()
        ]
    kill_switch = fields.get("Kill-Switch")
    if kill_switch and not KILL_SWITCH.match(kill_switch):
        errors.append(
            f"{where}: Kill-Switch must be 'none' or an environment variable (NAME or NAME=value)"
        )

    description = patch.description
    for part in DESCRIPTION_PARTS:
        if not re.search(rf"^{re.escape(part)}\s*\S", description, re.M):
            errors.append(f"{where}: description needs a paragraph starting '{part}'")
    if (n := why_how_lines(description)) > MAX_WHY_HOW_LINES:
        errors.append(
            f"{where}: Why: + How: take {n} non-empty lines, at most {MAX_WHY_HOW_LINES}"
            " (link the evidence: docs/, crash_repro/, benchmark_results/)"
        )

    if not patch.files:
        errors.append(f"{where}: no `diff --git` section")
    for line in patch.diff.splitlines():
        if line.startswith("diff --git ") and not re.match(
            r"^diff --git a/python/\S+ b/python/\S+$", line
        ):
            errors.append(
                f"{where}: diff paths must be upstream repo paths a/python/... b/python/...: {line}"
            )
    return errors


def lint(series: Series, root: Path) -> list[str]:
    errors = series.problems()
    if not errors:
        errors += [
            f"patches/dropped.toml: {entry.name}: evidence {path} does not exist"
            for entry in series.dropped()
            for path in entry.evidence
            if not (root / path).exists()
        ]
    for name in series.names:
        path = series.patches_dir / name
        if path.is_file():
            errors += lint_patch(PatchFile.read(path), root)
    return errors
