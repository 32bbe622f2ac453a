"""The header linter and the series consistency check, on synthetic patches."""

import subprocess
import tomllib
from pathlib import Path

import pytest
from stack_helpers import REPO

from sglang_gemma4.stack import dropped as dropped_toml
from sglang_gemma4.stack.maintainer import subjects
from sglang_gemma4.stack.maintainer.lint import lint, lint_patch
from sglang_gemma4.stack.patchfile import PatchFile
from sglang_gemma4.stack.series import Series

GOOD = """\
From: A Person <a@example.com>
Subject: Do one thing
Author: A Person <a@example.com>
Upstream-Status: Submitted, https://github.com/sgl-project/sglang/pull/1
Origin: vendor
Tests: test/t.py
Bench: none
Kill-Switch: SGLANG_THING=0

Why: because.

How: like this.

Drop when: upstream has it.

---
diff --git a/python/sglang/x.py b/python/sglang/x.py
--- a/python/sglang/x.py
+++ b/python/sglang/x.py
@@ -1 +1 @@
-a
+b
"""


@pytest.fixture
def root(tmp_path) -> Path:
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "t.py").write_text("")
    (tmp_path / "patches").mkdir()
    return tmp_path


def errors_for(root: Path, text: str) -> list[str]:
    path = root / "patches" / "0010-x.patch"
    path.write_text(text)
    return lint_patch(PatchFile.read(path), root)


def test_good_header_passes(root):
    assert errors_for(root, GOOD) == []


@pytest.mark.parametrize(
    "old, new, expected",
    [
        ("Subject: Do one thing\n", "", "missing header field Subject"),
        ("Author: A Person <a@example.com>\n", "Author: somebody\n", "Author must read"),
        ("From: A Person <a@example.com>\n", "From: B <b@example.com>\n", "must equal Author"),
        (
            "Submitted, https://github.com/sgl-project/sglang/pull/1",
            "Submitted, soon",
            "must name the PR",
        ),
        (
            "Submitted, https://github.com/sgl-project/sglang/pull/1",
            "Applied-Upstream, later",
            "must name the release",
        ),
        (
            "Submitted, https://github.com/sgl-project/sglang/pull/1",
            "maybe",
            "must start with one of",
        ),
        ("Tests: test/t.py", "Tests: test/missing.py", "test/missing.py does not exist"),
        ("Tests: test/t.py", "Tests: t.py", "at least one file under test/"),
        ("Bench: none", "Bench: scripts/nope.sh", "scripts/nope.sh does not exist"),
        ("Kill-Switch: SGLANG_THING=0", "Kill-Switch: sometimes", "Kill-Switch must be"),
        ("Drop when: upstream has it.", "", "starting 'Drop when:'"),
        ("Origin: vendor\n", "Origin: vendor\nColour: blue\n", "unknown header field Colour"),
        ("Why: because.", "Why: TODO", "TODO placeholders"),
        (
            "a/python/sglang/x.py b/python/sglang/x.py",
            "a/sglang/x.py b/sglang/x.py",
            "upstream repo paths",
        ),
        ("Subject: Do one thing", "Subject: Do one thing.", "no final period"),
    ],
)
def test_each_rule_bites(root, old, new, expected):
    assert old in GOOD
    errors = errors_for(root, GOOD.replace(old, new, 1))
    assert any(expected in e for e in errors), errors


def test_why_and_how_are_at_most_ten_lines(root):
    ten = GOOD.replace("How: like this.", "How: like this.\n" + "more.\n" * 8, 1)
    assert errors_for(root, ten) == []
    errors = errors_for(root, ten.replace("more.\n", "more.\nand more.\n", 1))
    assert [e for e in errors if "Why: + How: take 11 non-empty lines" in e], errors


def test_series_problems(root):
    patches = root / "patches"
    for name in ("0010-a.patch", "0020-b.patch", "0005-c.patch", "0030-unlisted.patch"):
        (patches / name).write_text(GOOD)
    (patches / "series").write_text(
        "# comment\n0010-a.patch\n0020-b.patch  # trailing comment\n"
        "0020-b.patch\n0005-c.patch\nBad_Name.patch\n0040-missing.patch\n"
    )
    problems = Series.load(patches).problems()
    expected = [
        "0020-b.patch is listed twice",
        "0005-c.patch is out of numeric order",
        "'Bad_Name.patch' is not named NNNN-slug.patch",
        "0040-missing.patch is listed but",
        "patches/0030-unlisted.patch is not listed",
    ]
    for text in expected:
        assert any(text in p for p in problems), (text, problems)
    assert len(lint(Series.load(patches), root)) >= len(expected)


def test_consistent_series_has_no_problems(root):
    (root / "patches" / "0010-a.patch").write_text(GOOD)
    (root / "patches" / "series").write_text("0010-a.patch\n")
    assert lint(Series.load(root / "patches"), root) == []


DROPPED = """\
# the patches the series no longer carries
["0005-old.patch"]
release = "0.5.17"
moved = true
kind = "upstream"
why = "upstream does it in srt/x.py f()"
evidence = []

["0020-gone.patch"]
release = "0.5.12"
moved = false
kind = "no gain"
why = "measured, no gain"
evidence = ["test/t.py"]
"""


def test_dropped_patches_are_read_from_dropped_toml(root):
    (root / "patches" / "0010-a.patch").write_text(GOOD)
    (root / "patches" / "series").write_text("# the stack\n0010-a.patch\n")
    (root / "patches" / dropped_toml.DROPPED_FILE).write_text(DROPPED)
    series = Series.load(root / "patches")
    assert lint(series, root) == []
    assert [(d.name, d.when, d.kind, d.why, d.evidence) for d in series.dropped()] == [
        (
            "0005-old.patch",
            "in the move to 0.5.17",
            "upstream",
            "upstream does it in srt/x.py f()",
            (),
        ),
        ("0020-gone.patch", "on 0.5.12", "no gain", "measured, no gain", ("test/t.py",)),
    ]


def test_a_rebase_adds_dropped_patches_once(root):
    (root / "patches" / dropped_toml.DROPPED_FILE).write_text(DROPPED)
    entry = dropped_toml.DroppedPatch("0030-new.patch", "0.5.18", True, "conflict", 'a "why"')
    dropped_toml.add(root / "patches", [entry])
    text = (root / "patches" / dropped_toml.DROPPED_FILE).read_text()
    assert text.startswith(DROPPED) and dropped_toml.load(root / "patches")[-1] == entry
    dropped_toml.add(root / "patches", [entry])
    assert (root / "patches" / dropped_toml.DROPPED_FILE).read_text() == text


@pytest.mark.parametrize(
    "series, dropped, expected",
    [
        (
            "# 0005-old.patch: dropped on sglang 0.5.12: measured, no gain\n",
            "",
            "a dropped patch goes in patches/dropped.toml, not in a comment",
        ),
        ("", DROPPED.replace('kind = "upstream"', 'kind = "gone"'), "kind must be one of"),
        ("", DROPPED.replace("evidence = []\n", ""), "must have exactly the fields"),
        ("", DROPPED.replace("0005-old", "0010-a"), "0010-a.patch is listed and also dropped"),
        ("", DROPPED.replace("test/t.py", "nowhere"), "evidence nowhere does not exist"),
    ],
)
def test_a_dropped_patch_out_of_form_is_a_problem(root, series, dropped, expected):
    (root / "patches" / "0010-a.patch").write_text(GOOD)
    (root / "patches" / "series").write_text(f"0010-a.patch\n{series}")
    (root / "patches" / dropped_toml.DROPPED_FILE).write_text(dropped)
    problems = lint(Series.load(root / "patches"), root)
    assert any(expected in p for p in problems), problems


def git_repo(root: Path, *subjects: str) -> list[str]:
    """A repository with one empty commit per subject; returns their full hashes."""
    git = ["git", "-C", str(root), "-c", "user.name=T", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    hashes = []
    for subject in subjects:
        subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", subject], check=True)
        hashes.append(
            subprocess.run(
                [*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True
            ).stdout.strip()
        )
    return hashes


def write_rule(root: Path, since: str, limit: int = 20) -> None:
    (root / subjects.RULE_FILE).parent.mkdir(exist_ok=True)
    (root / subjects.RULE_FILE).write_text(f'since = "{since}"\nmax-length = {limit}\n')


def test_only_commits_after_since_need_short_subjects(tmp_path):
    long = "a subject well over twenty characters"
    old, since, _, _ = git_repo(tmp_path, long, "start", "short one", long + " again")
    write_rule(tmp_path, since)
    problems, note = subjects.long_subjects(tmp_path)
    assert note == "" and len(problems) == 1
    assert "subject is 43 characters (at most 20)" in problems[0] and old[:7] not in problems[0]


def test_subjects_are_not_checked_where_the_history_is_missing(tmp_path):
    assert subjects.long_subjects(tmp_path) == ([], f"no {subjects.RULE_FILE}")
    write_rule(tmp_path, "0" * 40)
    assert subjects.long_subjects(tmp_path)[1] == "not a git checkout"
    git_repo(tmp_path, "first")
    problems, note = subjects.long_subjects(tmp_path)
    assert problems == [] and "is not in this clone's history" in note


def test_the_repository_rule_names_a_full_commit_hash():
    rule = tomllib.loads((REPO / subjects.RULE_FILE).read_text())
    assert rule["max-length"] == 72 and len(rule["since"]) == 40
