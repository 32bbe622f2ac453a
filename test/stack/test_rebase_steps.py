"""A rebase that proves what it builds, on a synthetic newer release: each patch's tests after it
goes in (a failure stops like a conflict; fixed or accepted), a resume after the process was
killed, only the patch's files staged, a repeated resolution replayed, downgrades refused before
any download, and a finish that does the chores and prints what is left."""

import json
import subprocess

from stack_helpers import make_patch, replace_line
from test_rebase import CLASH, CLEAN, LANDED, NEW_VERSION, newer_release, rebase, up, with_readme  # noqa: F401 (up: a fixture)

from sglang_gemma4.stack import dropped as dropped_toml
from sglang_gemma4.stack.pin import Pin

# while this file exists, the next run of test_clash kills the rebase running it
KILLER = "kill-the-rebase"


def with_tests(patch: str, *tests: str) -> str:
    return patch.replace(
        "Author: T <t@example.com>\n", f"Author: T <t@example.com>\nTests: {' '.join(tests)}\n"
    )


def write_test(checkout, name: str, body: str) -> str:
    path = checkout.root / "test" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(
        "import os\nimport signal\nfrom pathlib import Path\n\nimport pytest\n\n"
        "TREE = Path(os.environ['SGLANG_GEMMA4_TREE'])\n\n\n" + body
    )
    return f"test/{name}"


def commit_repository(checkout) -> None:
    git = ["git", "-C", str(checkout.root), "-c", "user.name=T", "-c", "user.email=t@example.com"]
    (checkout.root / ".gitignore").write_text("/work/\n/.cache/\n")
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "the series"], check=True)


def test_end_to_end_conflict_failing_test_interruption_drop_finish(checkout, up, tmp_path):
    old = checkout.pin.version
    clash_test = write_test(
        checkout,
        "test_clash.py",
        (
            "def test_clash_resolved():\n"
            f"    killer = Path(__file__).with_name('{KILLER}')\n"
            "    if killer.exists():  # the rebase is killed while it runs this test\n"
            "        killer.unlink()\n"
            "        os.kill(os.getppid(), signal.SIGKILL)\n"
            f"    assert '# ours at 30' in (TREE / '{CLASH}').read_text()\n"
        ),
    )
    feature_test = write_test(
        checkout,
        "test_feature.py",
        (
            "def test_feature():\n"
            f"    text = (TREE / '{CLEAN}').read_text()\n"
            "    assert '# FEATURE' in text and '# BROKEN' not in text\n"
        ),
    )
    landed_test = write_test(checkout, "test_landed.py", "def test_landed():\n    pass\n")
    landed = replace_line(up[LANDED], 10, "# ours, later upstream")
    patches = {
        "0010-clash.patch": with_tests(
            make_patch("clash", CLASH, up[CLASH], replace_line(up[CLASH], 30, "# ours at 30")),
            clash_test,
        ),
        "0020-feature.patch": with_tests(
            make_patch("feature", CLEAN, up[CLEAN], up[CLEAN] + "# FEATURE\n"), feature_test
        ),
        "0030-landed.patch": with_tests(
            make_patch("landed", LANDED, up[LANDED], landed), landed_test
        ),
    }
    checkout.write_series(patches)
    series = checkout.layout.series_file
    series.write_text(
        series.read_text().replace("# test series", f"# The stack on sglang {old}, in order.")
    )
    with_readme(checkout)
    readme = checkout.root / "README.md"
    readme.write_text(
        readme.read_text() + f"\nPinned: `sglang=={old}`; wheel `dist/sglang-{old}+gemma4.*.whl`.\n"
        f"Newest on torch 2.11 is {old}.\n"
    )
    requirements = checkout.root / "test" / "requirements-cpu.txt"
    requirements.write_text(
        f"# the releases sglang {old} pins\ntransformers==5.0.0\nwheel==0.48.0\n"
    )
    drift_dir = checkout.root / "docs" / "drift"
    drift_dir.mkdir(parents=True)
    for release in (
        NEW_VERSION,
        "9.0.0",
    ):  # one the move reaches (removed), one newer whose wheels are not here
        (drift_dir / f"sglang-{release}.json").write_text(
            json.dumps({"release": release, "wheels": {"x.whl": "0"}})
        )
        (drift_dir / f"sglang-{release}.md").write_text("report\n")
    commit_repository(checkout)
    assert checkout.tool("apply").returncode == 0
    release_clash = replace_line(up[CLASH], 30, "# upstream 30")
    wheels = newer_release(
        checkout,
        tmp_path / "release",
        {CLASH: release_clash, CLEAN: "# BROKEN\n" + up[CLEAN], LANDED: landed},
    )
    work = checkout.layout.work_dir

    # 1. a conflict: stopped, the upstream test check ran (and fails without the patch)
    proc = rebase(checkout, "--wheel", *map(str, wheels))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "stopped at patch 1/3 0010-clash.patch" in proc.stdout
    assert "Already upstream? no: its tests fail without it" in proc.stdout
    assert "tests run with" in proc.stdout  # which interpreter ran them, in every report

    # a scratch file is not staged into the patch: refused, named
    (work / "notes.txt").write_text("scratch\n")
    (work / CLASH).write_text(replace_line(release_clash, 30, "# ours at 30, on upstream 30"))
    refused = checkout.tool("rebase", "--continue")
    assert refused.returncode == 1 and "notes.txt" in refused.stderr
    (work / "notes.txt").unlink()
    adapted = checkout.root / clash_test  # a test adapted at the stop is named in the table
    adapted.write_text(adapted.read_text() + "\n# adapted to the release\n")

    # 2. the continue is killed while the resolution's tests run; a second continue resumes
    (checkout.root / "test" / KILLER).write_text("")
    killed = checkout.tool("rebase", "--continue")
    assert killed.returncode == -9, killed.stdout + killed.stderr
    proc = checkout.tool("rebase", "--continue")
    assert "resuming at patch 1/3" in proc.stdout

    # 3. the next patch applies but its tests fail: a stop like a conflict
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert (
        "stopped at patch 2/3 0020-feature.patch: it applied, but its tests failed" in proc.stdout
    )
    assert "first error: assert" in proc.stdout
    assert (
        f"rerun: SGLANG_GEMMA4_TREE={work} PYTHONPATH=python " in proc.stdout
    )  # as the rebase ran them
    assert (
        "| 0010-clash.patch | resolved by hand | 1 (1) | passed (1 passed" in proc.stdout
    )  # the resolution kept
    assert "already upstream? no: its tests fail without it (1 failed; first error: " in proc.stdout
    assert "; its tests edited at the conflict |" in proc.stdout
    (work / CLEAN).write_text((work / CLEAN).read_text().replace("# BROKEN\n", ""))
    proc = checkout.tool("rebase", "--continue")  # the fix folds into the patch, its tests pass

    # 4. already upstream by text: dropped with the maintainer's reason
    assert proc.returncode == 1 and "0030-landed.patch: it looks already upstream" in proc.stdout
    proc = checkout.tool("rebase", "--continue", "--drop", "--why", "global_config.py has it")

    # 5. the finish and its chores
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert Pin.load(checkout.layout.pin_file).version == NEW_VERSION
    feature = (checkout.layout.patches_dir / "0020-feature.patch").read_text()
    assert "-# BROKEN" in feature and "+# FEATURE" in feature
    assert (
        "| 0020-feature.patch | refreshed (offsets), fixed by hand after its tests failed |"
        in proc.stdout
    )
    text = series.read_text()
    assert text.splitlines()[0] == f"# The stack on sglang {NEW_VERSION}, in order."
    assert "0030-landed.patch" not in text
    (landed,) = dropped_toml.load(checkout.layout.patches_dir)
    assert landed.name == "0030-landed.patch" and landed.release == NEW_VERSION
    assert landed.why.startswith("already upstream (text)")
    assert not (checkout.root / landed_test).exists() and (checkout.root / clash_test).exists()
    assert (
        requirements.read_text()
        == f"# the releases sglang {NEW_VERSION} pins\ntransformers==5.12.1\nwheel==0.48.0\n"
    )
    prose = readme.read_text()
    assert f"`sglang=={NEW_VERSION}`" in prose and f"dist/sglang-{NEW_VERSION}+gemma4" in prose
    tag = subprocess.run(
        ["git", "-C", str(checkout.root), "tag", "--list", f"series/{old}"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert tag == f"series/{old}"
    checklist = proc.stdout.split("Left to do:")[1]
    assert f"git push origin series/{old}" in checklist
    assert f"README.md still names {old}: Newest on torch 2.11 is {old}." in checklist
    assert sorted(p.name for p in drift_dir.iterdir()) == ["sglang-9.0.0.json", "sglang-9.0.0.md"]
    assert "make rebase-check TO=9.0.0" in checklist
    assert (
        "transformers 5.0.0 -> 5.12.1" in checklist and "make lint test verify-tests" in checklist
    )
    assert checkout.git("rev-parse", "--abbrev-ref", "HEAD") == "gemma4"
    assert "up to date" in checkout.tool("apply").stdout


def test_accepted_failure_could_not_run_and_upstream_by_tests_at_a_conflict(checkout, up, tmp_path):
    broken = write_test(
        checkout, "test_broken.py", "import module_that_is_not_there\n\n\ndef test_x():\n    pass\n"
    )
    upstream = write_test(
        checkout,
        "test_upstream.py",
        (
            "def test_behaviour():\n    pass\n\n\n"
            "@pytest.mark.kill_switch\n"
            "def test_switch_off_restores_upstream():\n"
            f"    assert 'SWITCH' in (TREE / '{CLASH}').read_text()\n"
        ),
    )
    patches = {
        "0010-broken.patch": with_tests(
            make_patch("broken", CLEAN, up[CLEAN], up[CLEAN] + "# ours\n"), broken
        ),
        "0020-upstream.patch": with_tests(
            make_patch("upstream", CLASH, up[CLASH], replace_line(up[CLASH], 30, "# SWITCH")),
            upstream,
        ),
    }
    checkout.write_series(patches)
    assert checkout.tool("apply").returncode == 0
    wheels = newer_release(
        checkout, tmp_path / "release", {CLASH: replace_line(up[CLASH], 30, "# theirs")}
    )
    proc = rebase(checkout, "--wheel", *map(str, wheels))
    assert proc.returncode == 1
    assert "its tests could not run" in proc.stdout and "module_that_is_not_there" in proc.stdout
    assert (
        checkout.tool("rebase", "--continue", "--accept-failing").returncode == 1
    )  # a reason is required
    proc = checkout.tool(
        "rebase", "--continue", "--accept-failing", "--why", "needs a package the env lacks"
    )
    assert proc.returncode == 1
    # the kill_switch test, which fails without the patch, is left out of the upstream check
    assert "Already upstream? its tests pass without it" in proc.stdout
    proc = checkout.tool("rebase", "--continue", "--drop")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (dropped,) = dropped_toml.load(checkout.layout.patches_dir)
    assert dropped.why.startswith("already upstream (tests): its tests pass without it")
    assert "accepted: needs a package the env lacks" in proc.stdout


def test_a_recorded_resolution_is_replayed_after_an_abort(checkout, up, tmp_path):
    patches = {
        "0010-clash.patch": make_patch(
            "clash", CLASH, up[CLASH], replace_line(up[CLASH], 30, "# ours")
        ),
        "0020-later.patch": make_patch(
            "later", CLASH, up[CLASH], replace_line(up[CLASH], 60, "# ours at 60")
        ),
    }
    checkout.write_series(patches)
    assert checkout.tool("apply").returncode == 0
    release = replace_line(replace_line(up[CLASH], 30, "# theirs"), 60, "# theirs at 60")
    wheels = newer_release(checkout, tmp_path / "release", {CLASH: release})
    assert rebase(checkout, "--wheel", *map(str, wheels), "--skip-tests").returncode == 1
    (checkout.layout.work_dir / CLASH).write_text(replace_line(release, 30, "# ours, on theirs"))
    proc = checkout.tool("rebase", "--continue")
    assert proc.returncode == 1 and "stopped at patch 2/2 0020-later.patch" in proc.stdout
    assert checkout.tool("rebase", "--abort").returncode == 0

    proc = rebase(checkout, "--wheel", *map(str, wheels), "--skip-tests")  # the same move again
    assert "a recorded resolution resolved " + CLASH in proc.stdout
    assert "| 0010-clash.patch | resolved by a recorded resolution |" in proc.stdout
    assert "stopped at patch 2/2 0020-later.patch" in proc.stdout


def test_state_is_checked_before_any_download(checkout):
    checkout.write_series({})
    older = checkout.tool("rebase", "--to", "0.5.1")
    assert (
        older.returncode == 1
        and "older than the pinned" in older.stderr
        and "downloading" not in older.stdout
    )
    same = checkout.tool("rebase", "--to", checkout.pin.version)
    assert same.returncode == 1 and "already on" in same.stderr
    unsynced = checkout.tool("rebase", "--to", "9.9.9")  # no work tree yet: said before downloading
    assert (
        unsynced.returncode == 1
        and "make apply" in unsynced.stderr
        and "downloading" not in unsynced.stdout
    )


def test_resume_after_a_kill_in_the_middle_of_an_apply(checkout, up, tmp_path, monkeypatch):
    """Killed with a patch half applied in the tree and nothing recorded: the continue redoes it."""
    from sglang_gemma4.cli import main
    from sglang_gemma4.stack.maintainer.rebase import Rebase

    patches = {
        "0010-a.patch": make_patch("a", CLEAN, up[CLEAN], up[CLEAN] + "# a\n"),
        "0020-b.patch": make_patch("b", CLASH, up[CLASH], replace_line(up[CLASH], 30, "# b")),
    }
    checkout.write_series(patches)
    assert checkout.tool("apply").returncode == 0
    wheels = newer_release(checkout, tmp_path / "release", {LANDED: "# new\n" + up[LANDED]})
    real = Rebase._take

    def killed_at_the_second(self, state, patch):
        if patch.name == "0020-b.patch":
            self.work.git.run("apply", "--index", str(patch.path))
            raise KeyboardInterrupt
        return real(self, state, patch)

    monkeypatch.setattr(Rebase, "_take", killed_at_the_second)
    monkeypatch.chdir(checkout.root)
    try:
        main(["rebase", "--wheel", *map(str, wheels), "--skip-tests"])
    except KeyboardInterrupt:
        pass
    monkeypatch.setattr(Rebase, "_take", real)
    assert checkout.git("status", "--porcelain")  # the half-applied patch
    proc = checkout.tool("rebase", "--continue")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "resuming at patch 2/2" in proc.stdout
    assert checkout.git("log", "--format=%s").splitlines()[:2] == ["b", "a"]


def test_the_finish_regenerates_a_newer_drift_report_from_cached_wheels(checkout, up, tmp_path):
    from types import SimpleNamespace

    from sglang_gemma4.stack.maintainer.rebase import Rebase
    from sglang_gemma4.stack.maintainer.rebase_finish import refresh_drift

    checkout.write_series(
        {
            "0010-clash.patch": make_patch(
                "clash", CLASH, up[CLASH], replace_line(up[CLASH], 30, "# ours")
            )
        }
    )
    assert checkout.tool("apply").returncode == 0
    wheels = newer_release(
        checkout, tmp_path / "release", {CLASH: replace_line(up[CLASH], 30, "# theirs")}
    )
    for wheel in wheels:
        wheel.rename(checkout.layout.cache_dir / wheel.name)
    drift_dir = checkout.root / "docs" / "drift"
    drift_dir.mkdir(parents=True)
    report = drift_dir / f"sglang-{NEW_VERSION}.json"
    report.write_text(json.dumps({"release": NEW_VERSION, "wheels": {w.name: "0" for w in wheels}}))
    # as at the end of a move to the current pin: the report for a newer release is made again
    todo = refresh_drift(
        Rebase(checkout.layout, log=lambda _: None), SimpleNamespace(new_pin=checkout.pin)
    )
    assert json.loads(report.read_text())["patches"][0]["verdict"] == "conflicts with upstream"
    assert (
        f"Drift of the series against sglang=={NEW_VERSION}"
        in report.with_suffix(".md").read_text()
    )
    assert todo == [
        f"make rebase-check TO={NEW_VERSION}   (adds the already-upstream test column; regenerated "
        "by text)"
    ]


def test_a_test_fixed_in_the_repository_is_reported(checkout, up, tmp_path):
    """Failing tests fixed in their test file, not in the tree: the table says the test was edited,
    so the record of the move names every edit a maintainer made at a stop."""
    test = write_test(
        checkout,
        "test_version.py",
        f"def test_marker():\n    assert 'OLD-ONLY' in (TREE / '{CLEAN}').read_text()\n",
    )
    checkout.write_series(
        {
            "0010-feature.patch": with_tests(
                make_patch("feature", CLEAN, up[CLEAN], up[CLEAN] + "# FEATURE\n"), test
            )
        }
    )
    assert checkout.tool("apply").returncode == 0
    wheels = newer_release(checkout, tmp_path / "release", {LANDED: "# new\n" + up[LANDED]})
    proc = rebase(checkout, "--wheel", *map(str, wheels))
    assert proc.returncode == 1 and "its tests failed" in proc.stdout, proc.stdout + proc.stderr
    (checkout.root / test).write_text(
        (checkout.root / test).read_text().replace("OLD-ONLY", "# FEATURE")
    )
    proc = checkout.tool("rebase", "--continue")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "its tests edited after they failed" in proc.stdout
    assert (
        "| 0010-feature.patch | clean | 1 (0) | passed (1 passed, 0 failed, 0 errors, 0 skipped) | "
        "its tests edited after they failed |" in proc.stdout
    )


def test_a_drop_at_a_conflict_checks_again_with_the_tests_adapted_there(checkout, up, tmp_path):
    """At a conflict the already-upstream check fails on a test the release broke (not on the
    behaviour); its first error says so. Adapted at the stop, the drop runs the check again and
    keeps the tests' evidence, not a bare "dropped at a conflict"."""
    test = write_test(
        checkout,
        "test_moved.py",
        "def test_behaviour():\n"
        "    assert (TREE / 'OLD_HELPER').exists(), 'the test needs OLD_HELPER'\n",
    )
    checkout.write_series(
        {
            "0010-clash.patch": with_tests(
                make_patch("clash", CLASH, up[CLASH], replace_line(up[CLASH], 30, "# ours")), test
            )
        }
    )
    assert checkout.tool("apply").returncode == 0
    wheels = newer_release(
        checkout,
        tmp_path / "release",
        {CLASH: replace_line(up[CLASH], 30, "# theirs, the same fix")},
    )
    proc = rebase(checkout, "--wheel", *map(str, wheels))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert (
        "Already upstream? no: its tests fail without it (1 failed; first error: AssertionError: "
        "the test needs "
        "OLD_HELPER" in proc.stdout
    )
    (checkout.root / test).write_text(
        (checkout.root / test).read_text().replace("OLD_HELPER", "python")
    )
    proc = checkout.tool("rebase", "--continue", "--drop", "--why", "upstream line 30")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "its tests were edited: already upstream? its tests pass without it" in proc.stdout
    (clash,) = dropped_toml.load(checkout.layout.patches_dir)
    assert (clash.name, clash.release, clash.kind) == ("0010-clash.patch", NEW_VERSION, "upstream")
    assert clash.why == (
        "already upstream (tests): its tests pass without it (passed (1 passed, 0 failed, "
        f"0 errors, 0 skipped)) on {NEW_VERSION} (tests edited at the stop); upstream line 30"
    )
