"""refresh exports work tree commits into patch files (header kept); new starts a patch from
edits."""

from sglang_gemma4.stack.maintainer.lint import lint_patch
from sglang_gemma4.stack.patchfile import PatchFile

GIT_USER = ("-c", "user.name=U", "-c", "user.email=u@x")


def changed_lines(patch_text: str) -> list[str]:
    return [
        line
        for line in patch_text.splitlines()
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]


def test_refresh_rewrites_the_diff_and_keeps_the_header(checkout, two_patches):
    assert checkout.tool("apply").returncode == 0
    path = checkout.layout.patches_dir / "0010-first.patch"
    header_before = PatchFile.read(path).header
    # edit patch 1 in the work tree the git way: fixup commit + autosquash rebase
    target = checkout.layout.work_dir / "python/sglang/srt/server_args.py"
    target.write_text(
        target.read_text().replace("# first patch was here", "# first patch, amended")
    )
    first = checkout.git("rev-parse", "HEAD~1")
    checkout.git(*GIT_USER, "commit", "-qa", "--fixup", first)
    checkout.git(
        *GIT_USER,
        "-c",
        "sequence.editor=true",
        "rebase",
        "-q",
        "-i",
        "--autosquash",
        f"upstream/{checkout.pin.version}",
    )

    proc = checkout.tool("refresh")
    assert proc.returncode == 0, proc.stderr
    assert "0010-first.patch rewritten" in proc.stdout
    patch = PatchFile.read(path)
    assert patch.header == header_before
    assert "+# first patch, amended" in patch.diff
    second = PatchFile.read(checkout.layout.patches_dir / "0020-second.patch")
    assert changed_lines(second.text) == changed_lines(two_patches["0020-second.patch"])
    proc = checkout.tool("apply")
    assert proc.returncode == 0 and "up to date" in proc.stdout  # refresh left the tree in sync


def test_refresh_refuses_commits_without_a_patch(checkout, two_patches):
    assert checkout.tool("apply").returncode == 0
    target = checkout.layout.work_dir / "python/sglang/version.py"
    target.write_text(target.read_text() + "# loose\n")
    checkout.git(*GIT_USER, "commit", "-qam", "loose commit")
    proc = checkout.tool("refresh")
    assert proc.returncode == 1 and "loose commit" in proc.stderr and "no Patch-File" in proc.stderr


def test_new_turns_edits_into_a_patch_at_the_end(checkout, two_patches):
    assert checkout.tool("apply").returncode == 0
    target = checkout.layout.work_dir / "python/sglang/srt/server_args.py"
    target.write_text(
        target.read_text().replace(
            'RADIX_EVICTION_POLICY_CHOICES = ["lru"',
            'RADIX_EVICTION_POLICY_CHOICES = ["lru", "new"',
        )
    )
    proc = checkout.tool("new", "my-change", "--subject", "Add a policy", "--author", "A <a@b.c>")
    assert proc.returncode == 0, proc.stderr
    names = checkout.layout.series_file.read_text().split()
    assert names[-1] == "0030-my-change.patch"
    patch = PatchFile.read(checkout.layout.patches_dir / "0030-my-change.patch")
    assert patch.fields["Subject"] == "Add a policy" and patch.fields["Author"] == "A <a@b.c>"
    assert '+RADIX_EVICTION_POLICY_CHOICES = ["lru", "new"' in patch.diff
    assert any("TODO" in e for e in lint_patch(patch, checkout.root))  # the author must fill it in
    assert checkout.git("status", "--porcelain") == ""
    assert checkout.git("log", "-1", "--format=%s") == "Add a policy"
    assert "up to date" in checkout.tool("apply").stdout


def test_new_needs_edits(checkout, two_patches):
    assert checkout.tool("apply").returncode == 0
    proc = checkout.tool("new", "nothing", "--subject", "x")
    assert proc.returncode == 1 and "no uncommitted edits" in proc.stderr
