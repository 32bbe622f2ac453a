"""The rebase workflow on a synthetic newer release: stop at a conflict, resolve, continue, finish;
abort; already-upstream by text and by the patch's own tests (drop or keep); every failing hunk
named, and a hunk that needs a dropped patch told apart from one upstream broke; rebase-check's
report and drift-status."""

import base64
import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from result_folders import make_run
from stack_helpers import make_patch, replace_line

from sglang_gemma4.results.render import MTP_BEGIN, MTP_END, RESULTS_BEGIN, RESULTS_END
from sglang_gemma4.results.runs import RESULTS_DIR
from sglang_gemma4.stack import dropped as dropped_toml
from sglang_gemma4.stack.maintainer.readme_table import BEGIN, DROPPED_BEGIN, DROPPED_END, END
from sglang_gemma4.stack.patchfile import PatchFile
from sglang_gemma4.stack.pin import Pin

NEW_VERSION = "0.5.99"
CLEAN, SHIFTED, CLASH = (
    "python/sglang/version.py",
    "python/sglang/srt/server_args.py",
    "python/sglang/utils.py",
)
LANDED = "python/sglang/global_config.py"


def newer_release(checkout, tmp: Path, edits: dict[str, str]) -> list[Path]:
    """The pinned wheels with `edits` (repo path -> new text), as NEW_VERSION: each member copied
    into an uncompressed zip (a test reads its wheels once), RECORD's lines renamed and rehashed."""
    old_info = f"sglang-{checkout.pin.version}.dist-info/"
    new_info = f"sglang-{NEW_VERSION}.dist-info/"
    changed = {path[len("python/") :]: text.encode() for path, text in edits.items()}
    tmp.mkdir(parents=True, exist_ok=True)
    built = []
    for wheel in checkout.pin.wheels:
        target = tmp / wheel.file.replace(f"-{checkout.pin.version}-", f"-{NEW_VERSION}-")
        with (
            zipfile.ZipFile(checkout.layout.cache_dir / wheel.file) as old,
            zipfile.ZipFile(target, "w") as new,
        ):
            for name in old.namelist():
                data = changed[name] if name in changed else old.read(name)
                if name == old_info + "RECORD":
                    data = _record(data.decode(), changed, old_info, new_info).encode()
                new.writestr(name.replace(old_info, new_info, 1), data)
        built.append(target)
    return built


def _record(text: str, changed: dict[str, bytes], old_info: str, new_info: str) -> str:
    lines = []
    for line in text.splitlines():
        path = line.split(",", 1)[0]
        if path in changed:
            digest = base64.urlsafe_b64encode(hashlib.sha256(changed[path]).digest())
            line = f"{path},sha256={digest.rstrip(b'=').decode()},{len(changed[path])}"
        lines.append(line.replace(old_info, new_info, 1))
    return "\n".join(lines) + "\n"


def with_readme(checkout) -> None:
    (checkout.root / "README.md").write_text(
        f"# test\n\n{BEGIN}\nold table\n{END}\n\n{DROPPED_BEGIN}\nold\n{DROPPED_END}\n"
        f"\n{RESULTS_BEGIN}\nold\n{RESULTS_END}\n\n{MTP_BEGIN}\nold\n{MTP_END}\n"
    )


def repository_files(checkout) -> dict[str, str]:
    files = [
        checkout.layout.pin_file,
        *checkout.layout.patches_dir.iterdir(),
        checkout.root / "README.md",
    ]
    return {p.name: p.read_text() for p in files if p.is_file()}


def rebase(checkout, *args: str) -> subprocess.CompletedProcess:
    return checkout.tool("rebase", *args, "--python", sys.executable)


@pytest.fixture
def up(checkout) -> dict[str, str]:
    return {path: checkout.upstream_file(path) for path in (CLEAN, SHIFTED, CLASH, LANDED)}


def test_conflict_stops_resolve_continue_finishes(checkout, up, tmp_path):
    ours_clash = replace_line(replace_line(up[CLASH], 30, "# ours at 30"), 60, "# ours at 60")
    patches = {
        "0010-clean.patch": make_patch("clean", CLEAN, up[CLEAN], up[CLEAN] + "# ours\n"),
        "0020-shifted.patch": make_patch(
            "shifted", SHIFTED, up[SHIFTED], replace_line(up[SHIFTED], 400, "# ours at 400")
        ),
        "0030-clash.patch": make_patch("clash", CLASH, up[CLASH], ours_clash),
    }
    checkout.write_series(patches)
    with_readme(checkout)
    assert checkout.tool("apply").returncode == 0
    release_clash = replace_line(replace_line(up[CLASH], 30, "# upstream 30"), 60, "# upstream 60")
    wheels = newer_release(
        checkout,
        tmp_path / "release",
        {SHIFTED: "# new\n# upstream\n# lines\n" + up[SHIFTED], CLASH: release_clash},
    )
    before = repository_files(checkout)
    old = checkout.pin.version

    proc = rebase(checkout, "--wheel", *map(str, wheels))
    assert proc.returncode == 1
    assert "stopped at patch 3/3 0030-clash.patch" in proc.stdout
    assert (
        f"{CLASH} hunk #1" in proc.stdout and f"{CLASH} hunk #2" in proc.stdout
    )  # every failing hunk
    assert "conflicts with upstream" in proc.stdout and "conflict markers" in proc.stdout
    assert repository_files(checkout) == before  # nothing written before the last patch
    work_file = checkout.layout.work_dir / CLASH
    assert "<<<<<<<" in work_file.read_text()
    assert checkout.git("rev-parse", "--abbrev-ref", "HEAD") == f"rebase/{NEW_VERSION}"

    refused = checkout.tool("rebase", "--continue")
    assert refused.returncode == 1 and f"{CLASH}: conflict markers left" in refused.stderr
    status = checkout.tool("rebase", "--status").stdout
    assert f"rebase: to sglang {NEW_VERSION} (branch rebase/{NEW_VERSION}), patch 3/3" in status
    assert "2 taken, 0 dropped" in status and "stopped: conflict" in status
    assert "make rebase-continue" in status and "| 0030-clash.patch | stopped: conflict |" in status
    assert checkout.tool("refresh").returncode == 1  # no export under a rebase's feet

    resolved = replace_line(
        replace_line(release_clash, 30, "# ours at 30, on upstream 30"), 60, "# upstream 60"
    )
    work_file.write_text(resolved)
    proc = checkout.tool("rebase", "--continue")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert Pin.load(checkout.layout.pin_file).version == NEW_VERSION
    assert checkout.tool("rebase", "--status").stdout == "rebase: none under way\n"
    clash = PatchFile.read(checkout.layout.patches_dir / "0030-clash.patch")
    assert "+# ours at 30, on upstream 30" in clash.diff and "# ours at 60" not in clash.diff
    assert clash.header == PatchFile(Path("x"), patches["0030-clash.patch"]).header
    shifted = PatchFile.read(checkout.layout.patches_dir / "0020-shifted.patch")
    assert [h.old_start for h in shifted.hunks] == [
        h.old_start + 3 for h in PatchFile(Path("x"), patches["0020-shifted.patch"]).hunks
    ]
    readme = (checkout.root / "README.md").read_text()
    assert "old table" not in readme and "[0030-clash.patch](patches/0030-clash.patch)" in readme
    report = proc.stdout
    assert (
        "| 0010-clean.patch | clean |" in report
        and "| 0030-clash.patch | resolved by hand | 2 (2) |" in report
    )
    assert checkout.git("log", "--reverse", "--format=%s").splitlines() == [
        f"sglang {NEW_VERSION} (pristine upstream)",
        "clean",
        "shifted",
        "clash",
    ]
    assert "up to date" in checkout.tool("apply").stdout
    checkout.git("range-diff", f"upstream/{old}..gemma4-{old}", f"upstream/{NEW_VERSION}..gemma4")


def test_abort_restores_the_old_stack(checkout, up, tmp_path):
    patches = {
        "0010-clash.patch": make_patch(
            "clash", CLASH, up[CLASH], replace_line(up[CLASH], 30, "# ours")
        )
    }
    checkout.write_series(patches)
    assert checkout.tool("apply").returncode == 0
    head = checkout.git("rev-parse", "HEAD")
    before = repository_files(checkout)
    wheels = newer_release(
        checkout, tmp_path / "release", {CLASH: replace_line(up[CLASH], 30, "# theirs")}
    )
    assert rebase(checkout, "--wheel", *map(str, wheels)).returncode == 1
    assert checkout.tool("apply").returncode == 1  # apply refuses while the rebase is stopped

    proc = checkout.tool("rebase", "--abort")
    assert proc.returncode == 0, proc.stderr
    assert checkout.git("rev-parse", "HEAD") == head
    assert checkout.git("rev-parse", "--abbrev-ref", "HEAD") == "gemma4"
    assert checkout.git("status", "--porcelain") == ""
    assert f"rebase/{NEW_VERSION}" not in checkout.git("branch", "--list")
    assert repository_files(checkout) == before
    assert "up to date" in checkout.tool("apply").stdout


def test_upstream_by_text_is_proposed_and_dropped(checkout, up, tmp_path):
    landed = replace_line(up[LANDED], 10, "# ours, later upstream")
    patches = {
        "0010-landed.patch": make_patch("landed", LANDED, up[LANDED], landed),
        "0020-clean.patch": make_patch("clean", CLEAN, up[CLEAN], up[CLEAN] + "# ours\n"),
    }
    checkout.write_series(patches)
    with_readme(checkout)
    make_run(checkout.root / RESULTS_DIR)  # a measured run, on the old release
    assert checkout.tool("apply").returncode == 0
    wheels = newer_release(checkout, tmp_path / "release", {LANDED: landed})
    proc = rebase(checkout, "--wheel", *map(str, wheels))
    assert proc.returncode == 1
    assert (
        "0010-landed.patch: it looks already upstream" in proc.stdout
        and "reverse-applies" in proc.stdout
    )

    kept = checkout.tool(
        "rebase", "--continue"
    )  # keeping a change the release already holds: nothing to keep
    assert kept.returncode == 1 and "changes nothing" in kept.stderr
    proc = checkout.tool("rebase", "--continue", "--drop", "--why", "global_config.py has it")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (checkout.layout.patches_dir / "0010-landed.patch").exists()
    series = checkout.layout.series_file.read_text()
    assert "0010-landed.patch" not in series and "0020-clean.patch" in series
    (landed,) = dropped_toml.load(checkout.layout.patches_dir)
    assert (landed.name, landed.when, landed.kind) == (
        "0010-landed.patch",
        f"in the move to {NEW_VERSION}",
        "upstream",
    )
    assert landed.why.startswith("already upstream (text)")
    assert landed.why.endswith("; global_config.py has it")
    dropped = (checkout.root / "docs" / "dropped-patches.md").read_text()  # generated from it
    assert f"| 0010-landed | in the move to {NEW_VERSION} | upstream | already upstream (text)" in (
        dropped
    )
    readme = (checkout.root / "README.md").read_text()
    assert f"No run on sglang {NEW_VERSION} yet" in readme  # the results table too


def upstream_by_tests_series(checkout, up) -> dict[str, str]:
    """A patch whose own test checks for a marker; the release gets the marker another way."""
    test = checkout.root / "test" / "test_marker.py"
    test.parent.mkdir(exist_ok=True)
    test.write_text(
        "import os\nfrom pathlib import Path\n\n\ndef test_marker():\n"
        f"    assert 'MARKER' in (Path(os.environ['SGLANG_GEMMA4_TREE']) / '{CLEAN}').read_text()\n"
    )
    patch = make_patch("marker", CLEAN, up[CLEAN], up[CLEAN] + "# MARKER, ours\n")
    patch = patch.replace(
        "Author: T <t@example.com>\n", "Author: T <t@example.com>\nTests: test/test_marker.py\n"
    )
    return {"0010-marker.patch": patch}


@pytest.mark.parametrize("decision", ["keep", "drop"])
def test_upstream_by_tests_asks_the_maintainer(checkout, up, tmp_path, decision):
    checkout.write_series(upstream_by_tests_series(checkout, up))
    assert checkout.tool("apply").returncode == 0
    wheels = newer_release(
        checkout, tmp_path / "release", {CLEAN: "# MARKER, upstream's own\n" + up[CLEAN]}
    )
    proc = rebase(
        checkout, "--wheel", *map(str, wheels), "--check-upstream"
    )  # it applies: checked on request
    assert proc.returncode == 1
    assert (
        "already upstream (tests): its tests pass without it (passed (1 passed, 0 failed"
        in proc.stdout
    )

    proc = checkout.tool("rebase", "--continue", *(["--drop"] if decision == "drop" else []))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    patch_file = checkout.layout.patches_dir / "0010-marker.patch"
    if decision == "drop":
        assert not patch_file.exists()
        (dropped,) = dropped_toml.load(checkout.layout.patches_dir)
        assert dropped.kind == "upstream" and dropped.why.startswith("already upstream (tests)")
    else:
        assert "+# MARKER, ours" in PatchFile.read(patch_file).diff
        assert "| 0010-marker.patch | kept though it looked upstream |" in proc.stdout


def test_hunk_needing_a_dropped_patch_is_told_apart(checkout, up, tmp_path):
    first = replace_line(up[CLASH], 30, "# first patch at 30")
    second = replace_line(first, 31, "# second patch at 31, beside the first")
    patches = {
        "0010-first.patch": make_patch("first", CLASH, up[CLASH], first),
        "0020-second.patch": make_patch("second", CLASH, first, second),
    }
    checkout.write_series(patches)
    assert checkout.tool("apply").returncode == 0
    wheels = newer_release(
        checkout, tmp_path / "release", {CLASH: replace_line(up[CLASH], 30, "# upstream 30")}
    )
    proc = rebase(checkout, "--wheel", *map(str, wheels))
    assert "0010-first.patch" in proc.stdout and "conflicts with upstream" in proc.stdout
    proc = checkout.tool("rebase", "--continue", "--drop")
    assert proc.returncode == 1
    assert "stopped at patch 2/2 0020-second.patch" in proc.stdout
    assert "depends on 0010-first.patch, which was not taken" in proc.stdout
    assert checkout.tool("rebase", "--abort").returncode == 0


def test_rebase_check_reports_and_drift_status_detects_a_stale_report(checkout, up, tmp_path):
    landed = replace_line(up[LANDED], 10, "# ours, later upstream")
    patches = {
        "0010-clean.patch": make_patch("clean", CLEAN, up[CLEAN], up[CLEAN] + "# ours\n"),
        "0020-landed.patch": make_patch("landed", LANDED, up[LANDED], landed),
        "0030-clash.patch": make_patch(
            "clash", CLASH, up[CLASH], replace_line(up[CLASH], 30, "# ours")
        ),
    }
    checkout.write_series(patches)
    assert checkout.tool("apply").returncode == 0
    head = checkout.git("rev-parse", "HEAD")
    wheels = newer_release(
        checkout,
        tmp_path / "release",
        {LANDED: landed, CLASH: replace_line(up[CLASH], 30, "# theirs")},
    )
    assert checkout.tool("drift-status").returncode == 1  # no report yet

    proc = checkout.tool("rebase-check", "--wheel", *map(str, wheels), "--skip-tests")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(
        (checkout.root / "docs" / "drift" / f"sglang-{NEW_VERSION}.json").read_text()
    )
    assert [
        (p["name"], p["verdict"], p["hunks"], p["failed_hunks"]) for p in report["patches"]
    ] == [
        ("0010-clean.patch", "applies", 1, 0),
        ("0020-landed.patch", "already upstream (text)", 1, 1),
        ("0030-clash.patch", "conflicts with upstream", 1, 1),
    ]
    assert (
        f"{CLASH} hunk #1"
        in (checkout.root / "docs" / "drift" / f"sglang-{NEW_VERSION}.md").read_text()
    )
    assert checkout.git("rev-parse", "HEAD") == head and checkout.git("status", "--porcelain") == ""
    assert checkout.tool("drift-status").returncode == 0

    (checkout.layout.patches_dir / "0010-clean.patch").write_text(
        make_patch("clean", CLEAN, up[CLEAN], up[CLEAN] + "# ours, changed\n")
    )
    stale = checkout.tool("drift-status")
    assert stale.returncode == 1 and f"make rebase-check TO={NEW_VERSION}" in stale.stdout
