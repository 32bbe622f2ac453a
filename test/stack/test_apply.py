"""apply: pristine base + one commit per patch; idempotent; exact hunks only; never overwrites
the user's edits or commits unless forced, and even then keeps them."""

from stack_helpers import make_patch, replace_line


def subjects(checkout) -> list[str]:
    return checkout.git("log", "--reverse", "--format=%s").splitlines()


def test_apply_makes_base_plus_one_commit_per_patch(checkout, two_patches):
    proc = checkout.tool("apply")
    assert proc.returncode == 0, proc.stderr
    assert subjects(checkout) == [
        f"sglang {checkout.pin.version} (pristine upstream)",
        "first",
        "second",
    ]
    assert checkout.git("log", "-1", "--format=%an <%ae>") == "T <t@example.com>"
    assert "Patch-File: 0020-second.patch" in checkout.git("log", "-1", "--format=%b")
    server_args = (checkout.layout.work_dir / "python/sglang/srt/server_args.py").read_text()
    assert server_args.splitlines()[19] == "# first patch was here"
    assert checkout.git("status", "--porcelain") == ""
    assert checkout.git("rev-parse", f"upstream/{checkout.pin.version}") == checkout.git(
        "rev-list", "--max-parents=0", "HEAD"
    )


def test_apply_is_idempotent(checkout, two_patches):
    assert checkout.tool("apply").returncode == 0
    head = checkout.git("rev-parse", "HEAD")
    proc = checkout.tool("apply")
    assert proc.returncode == 0 and "up to date" in proc.stdout
    assert checkout.git("rev-parse", "HEAD") == head


def test_changed_patch_is_reapplied_from_there(checkout, two_patches):
    assert checkout.tool("apply").returncode == 0
    first = checkout.git("rev-parse", "HEAD~1")
    path = checkout.layout.patches_dir / "0020-second.patch"
    path.write_text(path.read_text().replace("Subject: second", "Subject: second, reworded"))
    proc = checkout.tool("apply")
    assert proc.returncode == 0, proc.stderr
    assert "rewinding past 0020-second.patch" in proc.stdout
    assert checkout.git("rev-parse", "HEAD~1") == first
    assert subjects(checkout)[-1] == "second, reworded"


def test_mismatched_hunk_names_patch_file_and_hunk(checkout, two_patches):
    """The second hunk's context no longer matches upstream: no fuzz, so the patch must fail."""
    path = "python/sglang/srt/server_args.py"
    old = checkout.upstream_file(path)
    lines = old.splitlines()
    # hunk #2 changes the first line from 400 on whose leading context line (3 above) is unique text
    second = next(
        n for n in range(400, len(lines)) if lines[n - 4].strip() and old.count(lines[n - 4]) == 1
    )
    new = replace_line(replace_line(old, 100, "# first hunk"), second, "# second hunk")
    text = make_patch("third", path, old, new)
    context = lines[second - 4]  # corrupt that context line
    text = text.replace("\n " + context + "\n", "\n " + context + " # drifted\n", 1)
    checkout.write_series({**two_patches, "0030-third.patch": text})
    proc = checkout.tool("apply")
    assert proc.returncode == 1
    assert "0030-third.patch" in proc.stderr and path in proc.stderr and "hunk #2" in proc.stderr
    assert subjects(checkout)[-1] == "second"  # the last good patch
    assert checkout.git("status", "--porcelain") == ""  # nothing half-applied


def test_dirty_work_tree_is_refused_then_stashed_with_force(checkout, two_patches):
    assert checkout.tool("apply").returncode == 0
    edited = checkout.layout.work_dir / "python/sglang/version.py"
    edited.write_text(edited.read_text() + "# my local edit\n")
    path = checkout.layout.patches_dir / "0020-second.patch"
    path.write_text(path.read_text().replace("Subject: second", "Subject: second v2"))
    proc = checkout.tool("apply")
    assert proc.returncode == 1 and "uncommitted changes" in proc.stderr
    assert edited.read_text().endswith("# my local edit\n")  # untouched
    proc = checkout.tool("apply", "--force")
    assert proc.returncode == 0, proc.stderr
    assert "my local edit" in checkout.git("stash", "show", "-p", "stash@{0}")
    assert subjects(checkout)[-1] == "second v2"


def test_local_commit_is_refused_then_kept_on_a_branch_with_force(checkout, two_patches):
    assert checkout.tool("apply").returncode == 0
    edited = checkout.layout.work_dir / "python/sglang/version.py"
    edited.write_text(edited.read_text() + "# committed locally\n")
    checkout.git("-c", "user.name=U", "-c", "user.email=u@x", "commit", "-qam", "my work")
    proc = checkout.tool("apply")
    assert proc.returncode == 1 and "commits that no patch file holds" in proc.stderr
    assert checkout.git("log", "-1", "--format=%s") == "my work"
    proc = checkout.tool("apply", "--force")
    assert proc.returncode == 0, proc.stderr
    branches = checkout.git("branch", "--list", "backup/*", "--format=%(refname:short)").split()
    assert len(branches) == 1
    assert checkout.git("log", "-1", "--format=%s", branches[0]) == "my work"
    assert subjects(checkout)[-1] == "second"


def test_status_reports_each_patch(checkout, two_patches):
    proc = checkout.tool("status")
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert [(r[1], r[2], r[3]) for r in rows] == [
        ("0010-first.patch", "yes", "no"),
        ("0020-second.patch", "yes", "no"),
    ]
    assert checkout.tool("apply").returncode == 0
    rows = [
        line.split()
        for line in checkout.tool("status").stdout.splitlines()
        if line.strip()[:1].isdigit()
    ]
    assert [r[3] for r in rows] == ["yes", "yes"]
