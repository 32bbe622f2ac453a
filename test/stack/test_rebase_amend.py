"""`make rebase-amend`: at a stop at failing tests whose cause is in a patch moved earlier, the
edits in the work tree go into that patch's commit (the later ones replayed on it), both patches'
tests run again, and the table says where it was amended. Each refusal leaves the stop as it
was."""

from stack_helpers import make_patch, replace_line
from test_rebase import CLASH, LANDED, NEW_VERSION, SHIFTED, newer_release, rebase, up, with_readme  # noqa: F401 (up: a fixture)
from test_rebase_steps import with_tests, write_test

from sglang_gemma4.stack.patchfile import PatchFile


def stopped_as_it_was(checkout, head: str, state: str, edited: str) -> bool:
    work = checkout.layout.work_dir
    state_file = work / ".git" / "sglang-gemma4-rebase.json"
    return (
        checkout.git("rev-parse", "HEAD") == head,
        checkout.git("rev-parse", "--abbrev-ref", "HEAD").startswith("rebase/"),
        state_file.read_text() == state,
        (work / SHIFTED).read_text() == edited,
        checkout.git("diff", "--cached", "--name-only") == "",
    )


def test_a_fix_for_an_earlier_patch_is_amended_into_it_from_a_later_stop(checkout, up, tmp_path):
    early_test = write_test(
        checkout,
        "test_early.py",
        "def test_early():\n"
        f"    text = (TREE / '{SHIFTED}').read_text()\n"
        "    assert '# early at 100' in text and 'BAD' not in text\n",
    )
    later_test = write_test(
        checkout,
        "test_later.py",
        "def test_later_needs_the_early_fix():\n"
        f"    assert '# early at 100, fixed' in (TREE / '{SHIFTED}').read_text()\n",
    )
    early = replace_line(replace_line(up[SHIFTED], 100, "# early at 100"), 400, "# early at 400")
    landed = replace_line(up[LANDED], 10, "# ours, later upstream")
    patches = {
        "0005-landed.patch": make_patch("landed", LANDED, up[LANDED], landed),
        "0010-early.patch": with_tests(
            make_patch("early", SHIFTED, up[SHIFTED], early), early_test
        ),
        "0020-later.patch": with_tests(
            make_patch("later", SHIFTED, early, replace_line(early, 401, "# later at 401")),
            later_test,
        ),
        "0030-last.patch": make_patch(
            "last", CLASH, up[CLASH], replace_line(up[CLASH], 30, "# last")
        ),
    }
    checkout.write_series(patches)
    with_readme(checkout)
    assert checkout.tool("apply").returncode == 0
    refused = checkout.tool("rebase", "--amend", "0010-early.patch")
    assert refused.returncode == 1 and "no rebase in progress" in refused.stderr
    wheels = newer_release(checkout, tmp_path / "release", {LANDED: landed})
    work = checkout.layout.work_dir

    proc = rebase(checkout, "--wheel", *map(str, wheels))
    assert proc.returncode == 1 and "0005-landed.patch: it looks already upstream" in proc.stdout
    refused = checkout.tool("rebase", "--amend", "0010-early.patch")
    assert refused.returncode == 1 and "amend goes with a stop at failing tests" in refused.stderr
    proc = checkout.tool("rebase", "--continue", "--drop")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "stopped at patch 3/4 0020-later.patch: it applied, but its tests failed" in proc.stdout
    assert "make rebase-amend PATCH=NAME" in proc.stdout

    def amend(name: str):
        return checkout.tool("rebase", "--amend", name)

    head = checkout.git("rev-parse", "HEAD")
    state_file = work / ".git" / "sglang-gemma4-rebase.json"
    state = state_file.read_text()
    assert "no edits in" in amend("0010-early.patch").stderr
    assert "it names no patch of the series" in amend("0099").stderr
    assert "it was dropped from this move" in amend("0005").stderr
    assert "is the stopped patch: `make rebase-continue`" in amend("0020-later.patch").stderr
    assert "it is not moved yet (the rebase is at 0020-later.patch)" in amend("0030").stderr

    # edits outside the named patch's files: refused, each named, nothing touched
    clash = (work / CLASH).read_text()
    (work / CLASH).write_text(clash + "# elsewhere\n")
    (work / "notes.txt").write_text("scratch\n")
    refused = amend("0010-early.patch")
    assert refused.returncode == 1
    assert "files 0010-early.patch does not touch:\n  notes.txt\n  python/sglang/utils.py" in (
        refused.stderr
    )
    (work / CLASH).write_text(clash)
    (work / "notes.txt").unlink()

    # an edit next to a later patch's change: the replay conflicts; all restored
    conflicting = replace_line((work / SHIFTED).read_text(), 400, "# early at 400, fixed")
    (work / SHIFTED).write_text(conflicting)
    refused = amend("0010-early.patch")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert f"do not replay onto the patches after 0010-early.patch: a conflict in {SHIFTED}" in (
        refused.stderr
    )
    assert stopped_as_it_was(checkout, head, state, conflicting) == (True,) * 5

    # an edit that breaks the earlier patch's own tests: refused, all restored
    breaking = replace_line(up[SHIFTED], 100, "# early at 100 BAD")
    breaking = replace_line(replace_line(breaking, 400, "# early at 400"), 401, "# later at 401")
    (work / SHIFTED).write_text(breaking)
    refused = amend("0010")
    assert refused.returncode == 1 and "breaks 0010-early.patch's own tests" in refused.stderr
    assert stopped_as_it_was(checkout, head, state, breaking) == (True,) * 5

    # the fix: into 0010, 0020 replayed on it, both patches' tests pass
    (work / SHIFTED).write_text(breaking.replace("100 BAD", "100, fixed"))
    proc = amend("0010-early.patch")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0010-early.patch's tests on its commit: passed (1 passed" in proc.stdout
    assert "0020-later.patch's tests now: passed (1 passed" in proc.stdout
    assert checkout.git("status", "--porcelain") == ""
    assert checkout.git("log", "--format=%s", "-2").splitlines() == ["later", "early"]
    assert checkout.git("rev-parse", "HEAD~2") == checkout.git(
        "rev-parse", f"upstream/{NEW_VERSION}^{{}}"
    )
    assert "# early at 100, fixed" in checkout.git("show", "HEAD~1:" + SHIFTED)
    status = checkout.tool("rebase", "--status").stdout
    assert "stopped: tests: passed (1 passed" in status
    assert "amended at this stop: 0010-early.patch" in status

    proc = checkout.tool("rebase", "--continue")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (
        "| 0010-early.patch | clean | 2 (0) | passed (1 passed, 0 failed, 0 errors, 0 skipped) | "
        "amended at the stop of 0020-later.patch |" in proc.stdout
    )
    early_patch = PatchFile.read(checkout.layout.patches_dir / "0010-early.patch")
    later_patch = PatchFile.read(checkout.layout.patches_dir / "0020-later.patch")
    assert "+# early at 100, fixed" in early_patch.diff
    assert "# early at 100" not in later_patch.diff and "+# later at 401" in later_patch.diff
    assert early_patch.header == PatchFile(checkout.root / "x", patches["0010-early.patch"]).header


def test_an_accepted_failure_is_tested_again_from_a_later_stop(checkout, up, tmp_path):
    """No edits in the tree: the earlier patch went on with failing tests, adapted since in this
    repository; its tests run again and, passing, its accepted failure leaves the table."""
    early_test = write_test(
        checkout,
        "test_early.py",
        f"def test_early():\n    assert 'OLD-ONLY' in (TREE / '{SHIFTED}').read_text()\n",
    )
    later_test = write_test(checkout, "test_later.py", "def test_later():\n    assert False\n")
    patches = {
        "0010-early.patch": with_tests(
            make_patch("early", SHIFTED, up[SHIFTED], replace_line(up[SHIFTED], 100, "# early")),
            early_test,
        ),
        "0020-later.patch": with_tests(
            make_patch("later", CLASH, up[CLASH], replace_line(up[CLASH], 30, "# later")),
            later_test,
        ),
    }
    checkout.write_series(patches)
    assert checkout.tool("apply").returncode == 0
    wheels = newer_release(checkout, tmp_path / "release", {LANDED: "# new\n" + up[LANDED]})
    proc = rebase(checkout, "--wheel", *map(str, wheels))
    assert proc.returncode == 1 and "0010-early.patch: it applied, but its tests" in proc.stdout
    proc = checkout.tool("rebase", "--continue", "--accept-failing", "--why", "to be adapted")
    assert proc.returncode == 1 and "0020-later.patch: it applied, but its tests" in proc.stdout

    proc = checkout.tool("rebase", "--amend", "0010")  # not adapted yet: it stays accepted
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0010-early.patch's tests still fail; its accepted failure stays" in proc.stdout
    (checkout.root / early_test).write_text(
        (checkout.root / early_test).read_text().replace("OLD-ONLY", "# early")
    )
    proc = checkout.tool("rebase", "--amend", "0010")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0010-early.patch's tests on its commit: passed (1 passed" in proc.stdout
    assert (
        "| 0010-early.patch | clean | 1 (0) | passed (1 passed, 0 failed, 0 errors, 0 skipped) | "
        "tested again at the stop of 0020-later.patch |"
        in checkout.tool("rebase", "--status").stdout
    )
    assert "no edits in" in checkout.tool("rebase", "--amend", "0010").stderr  # nothing to do
