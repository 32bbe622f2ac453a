"""Commit subjects of at most `max-length` characters for every commit after a given one
(.ci/commit-subjects.toml), checked on the repository's own git history."""

import subprocess
import tomllib
from pathlib import Path

RULE_FILE = Path(".ci") / "commit-subjects.toml"


def long_subjects(root: Path) -> tuple[list[str], str]:
    """(problems, note): one problem per commit after the rule's `since` whose subject is too long;
    the note says why nothing was checked (no rule file, not a git checkout, `since` not in this
    clone's history), else it is empty."""
    rule_file = root / RULE_FILE
    if not rule_file.is_file():
        return [], f"no {RULE_FILE}"
    rule = tomllib.loads(rule_file.read_text())
    since, limit = rule["since"], int(rule["max-length"])

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)

    if git("rev-parse", "--git-dir").returncode != 0:
        return [], "not a git checkout"
    if git("cat-file", "-e", f"{since}^{{commit}}").returncode != 0:
        return [], f"{since[:12]} is not in this clone's history (a shallow clone?)"
    log = git("log", "--format=%h%x00%s", f"{since}..HEAD")
    if log.returncode != 0:
        return [], f"git log failed: {log.stderr.strip()}"
    problems = []
    for line in log.stdout.splitlines():
        commit, subject = line.split("\0", 1)
        if len(subject) > limit:
            problems.append(
                f"commit {commit}: subject is {len(subject)} characters (at most {limit}): "
                f"{subject[:60]}..."
            )
    return problems, ""
