"""The header linter and the series consistency check, on synthetic patches."""

from pathlib import Path

import pytest

from sglang_gemma4.stack.lint import lint, lint_patch
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


@pytest.mark.parametrize("old, new, expected", [
    ("Subject: Do one thing\n", "", "missing header field Subject"),
    ("Author: A Person <a@example.com>\n", "Author: somebody\n", "Author must read"),
    ("From: A Person <a@example.com>\n", "From: B <b@example.com>\n", "must equal Author"),
    ("Submitted, https://github.com/sgl-project/sglang/pull/1", "Submitted, soon", "must name the PR"),
    ("Submitted, https://github.com/sgl-project/sglang/pull/1", "Applied-Upstream, later", "must name the release"),
    ("Submitted, https://github.com/sgl-project/sglang/pull/1", "maybe", "must start with one of"),
    ("Tests: test/t.py", "Tests: test/missing.py", "test/missing.py does not exist"),
    ("Tests: test/t.py", "Tests: t.py", "at least one file under test/"),
    ("Bench: none", "Bench: scripts/nope.sh", "scripts/nope.sh does not exist"),
    ("Kill-Switch: SGLANG_THING=0", "Kill-Switch: sometimes", "Kill-Switch must be"),
    ("Drop when: upstream has it.", "", "starting 'Drop when:'"),
    ("Origin: vendor\n", "Origin: vendor\nColour: blue\n", "unknown header field Colour"),
    ("Why: because.", "Why: TODO", "TODO placeholders"),
    ("a/python/sglang/x.py b/python/sglang/x.py", "a/sglang/x.py b/sglang/x.py", "upstream repo paths"),
    ("Subject: Do one thing", "Subject: Do one thing.", "no final period"),
])
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
    (patches / "series").write_text("# comment\n0010-a.patch\n0020-b.patch  # trailing comment\n"
                                    "0020-b.patch\n0005-c.patch\nBad_Name.patch\n0040-missing.patch\n")
    problems = Series.load(patches).problems()
    expected = ["0020-b.patch is listed twice", "0005-c.patch is out of numeric order",
                "'Bad_Name.patch' is not named NNNN-slug.patch", "0040-missing.patch is listed but",
                "patches/0030-unlisted.patch is not listed"]
    for text in expected:
        assert any(text in p for p in problems), (text, problems)
    assert len(lint(Series.load(patches), root)) >= len(expected)


def test_consistent_series_has_no_problems(root):
    (root / "patches" / "0010-a.patch").write_text(GOOD)
    (root / "patches" / "series").write_text("0010-a.patch\n")
    assert lint(Series.load(root / "patches"), root) == []


def test_dropped_patches_are_read_from_the_series_comments(root):
    (root / "patches" / "0010-a.patch").write_text(GOOD)
    (root / "patches" / "series").write_text(
        "# the stack\n"
        "# 0005-old.patch: dropped in the move to sglang 0.5.17: upstream does it in srt/x.py f()\n"
        "0010-a.patch\n"
        "# 0020-gone.patch: dropped on sglang 0.5.12: measured, no gain\n")
    series = Series.load(root / "patches")
    assert series.problems() == []
    assert [(d.name, d.release, d.moved, d.why) for d in series.dropped()] == [
        ("0005-old.patch", "0.5.17", True, "upstream does it in srt/x.py f()"),
        ("0020-gone.patch", "0.5.12", False, "measured, no gain")]


@pytest.mark.parametrize("comment, expected", [
    ("# 0005-old.patch: dropped: upstream has it", "a comment naming a patch must read"),  # no release
    ("# 0005-old.patch removed", "a comment naming a patch must read"),
    ("# 0010-a.patch: dropped on sglang 0.5.12: but still listed", "0010-a.patch is listed and also named as dropped"),
])
def test_a_dropped_patch_comment_out_of_form_is_a_problem(root, comment, expected):
    (root / "patches" / "0010-a.patch").write_text(GOOD)
    (root / "patches" / "series").write_text(f"0010-a.patch\n{comment}\n")
    problems = Series.load(root / "patches").problems()
    assert any(expected in p for p in problems), problems
