"""The rebase's parts that need no work tree: the release's CPU environment plan, test verdicts,
and the finish's edits of the series, README and requirements."""

import json
import sys
from pathlib import Path

from stack_helpers import REPO

from sglang_gemma4.stack import dropped as dropped_toml
from sglang_gemma4.stack.maintainer import patchtests, rebase_finish, testenv
from sglang_gemma4.stack.pin import Pin


def test_the_release_pins_override_the_cpu_requirements_and_unmet_pins_are_named():
    pin = Pin.load(REPO / "upstream.toml")
    pins = testenv.wheel_pins(REPO / ".cache" / "upstream" / pin.wheel().file, pin.wheel().python)
    assert pins["transformers"] and pins["torch"]  # the wheel's unconditional == pins
    assert "checkpoint-engine" not in pins  # an extra's
    assert pins["torch"] == "2.11.0" and pins["transformers"] == "5.12.1"
    release = {"torch": "2.12.0", "transformers": "5.13.0"}
    requirements = "# why\ntorch==2.13.0\ntransformers==5.12.1\npytest==9.2.0\n"
    available = {
        "torch": ["2.9.0", "2.10.0", "2.13.0"],
        "transformers": ["5.12.1", "5.13.0"],
        "pytest": ["9.2.0"],
    }
    plan = testenv.plan(requirements, release, "sglang 9", available.get)
    assert plan.pins == {"torch": "2.13.0", "transformers": "5.13.0", "pytest": "9.2.0"}
    assert plan.notes == [
        "torch 2.13.0 instead of 2.12.0 (sglang 9 pins 2.12.0; pip finds no 2.12.0 here)"
    ]
    assert (
        testenv.plan(requirements, release, "sglang 9", None).pins["torch"] == "2.12.0"
    )  # offline: as pinned


def test_nearest_version():
    assert testenv.nearest("2.11.0", ["2.9.1", "2.10.0", "2.13.0"]) == "2.10.0"
    assert testenv.nearest("2.11.0", ["2.10.0", "2.12.0"]) == "2.12.0"  # a tie: the newer
    assert testenv.nearest("5.12.1", ["4.57.0", "5.0.0"]) == "5.0.0"


def test_a_cached_environment_is_reused(tmp_path):
    """Reused from wherever it is reached: the interpreter stamped at the build names the checkout
    that built it (.cache/testenv/ is shared by checkouts through a link), not this one."""
    from sglang_gemma4.stack.layout import Layout

    layout = Layout(tmp_path)
    directory = testenv.env_dir(
        layout, "9.9.9", testenv.python_version(__import__("sys").executable)
    )
    directory.mkdir(parents=True)
    (directory / testenv.STAMP).write_text(
        json.dumps({"python": "/other-checkout/bin/python", "notes": ["torch x"], "pins": {}})
    )
    env = testenv.ensure(layout, "9.9.9", Path("unused.whl"))
    assert env.python == str(directory / "bin" / "python") and "torch x" in env.describe()


def junit(tmp_path, cases: str) -> Path:
    path = tmp_path / "junit.xml"
    path.write_text(f"<testsuites><testsuite>{cases}</testsuite></testsuites>")
    return path


def test_test_verdicts(tmp_path):
    collection = (
        '<testcase classname="" name="test/x.py"><error message="collection failure">'
        "E   RuntimeError: config namespace 'serving' not published</error></testcase>"
    )
    run = patchtests.parse_junit(junit(tmp_path, collection))
    assert (
        run.verdict == patchtests.COULD_NOT_RUN
        and "namespace 'serving' not published" in run.first_error
    )
    failed = (
        '<testcase name="a"/><testcase name="b">'
        '<failure message="assert 1 == 2">E   assert 1 == 2</failure></testcase>'
    )
    assert patchtests.parse_junit(junit(tmp_path, failed)).verdict == patchtests.FAILED
    skipped = '<testcase name="a"><skipped message="gpu"/></testcase>'
    assert patchtests.parse_junit(junit(tmp_path, skipped)).first_error == "every test was skipped"
    assert (
        patchtests.parse_junit(junit(tmp_path, '<testcase name="a"/>')).verdict == patchtests.PASSED
    )


def test_finish_edits_the_prose_but_not_generated_tables_or_drop_comments(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(
        "Pinned `sglang==0.5.17`; `git rebase upstream/0.5.17`; sglang 0.5.17's pins.\n"
        "<!-- results-table: generated -->\n| sglang 0.5.17, series g1 |\n<!-- /results-table -->\n"
        "torch 2.11 is newest for 0.5.17.\n"
    )
    left = rebase_finish.update_prose(readme, "0.5.17", "0.5.18")
    assert (
        readme.read_text().splitlines()[0]
        == "Pinned `sglang==0.5.18`; `git rebase upstream/0.5.18`; sglang 0.5.18's pins."
    )
    assert "| sglang 0.5.17, series g1 |" in readme.read_text()
    assert left == ["torch 2.11 is newest for 0.5.17."]
    series = tmp_path / "series"
    series.write_text("# stack on sglang 0.5.17\n0001-a.patch\n0002-b.patch\n")
    rebase_finish.update_series(
        series, {"0002-b.patch": "already upstream (text): x"}, "0.5.17", "0.5.18"
    )
    assert series.read_text() == "# stack on sglang 0.5.18\n0001-a.patch\n"
    assert dropped_toml.load(tmp_path) == [
        dropped_toml.DroppedPatch(
            "0002-b.patch", "0.5.18", True, "upstream", "already upstream (text): x"
        )
    ]
    texts = series.read_text(), (tmp_path / dropped_toml.DROPPED_FILE).read_text()
    rebase_finish.update_series(
        series, {"0002-b.patch": "already upstream (text): x"}, "0.5.17", "0.5.18"
    )
    assert (
        series.read_text(),
        (tmp_path / dropped_toml.DROPPED_FILE).read_text(),
    ) == texts  # idempotent


def fake_python(tmp_path: Path) -> Path:
    """An interpreter stand-in: Python 3.11; pip finds torch 2.9.0 and 2.13.0 only."""
    script = tmp_path / "python"
    script.write_text(
        '#!/bin/sh\nif [ "$1" = -c ]; then echo 3.11; exit 0; fi\n'
        'case "$*" in *"torch=="*) echo "ERROR: (from versions: 2.9.0, 2.13.0)" >&2 ;;\n'
        '  *) echo "ERROR: No matching distribution (from versions: none)" >&2 ;; esac\nexit 1\n'
    )
    script.chmod(0o755)
    return script


def test_the_environment_is_built_once_with_the_nearest_torch(tmp_path, checkout):
    """ensure() plans with pip's answers, builds with test/env/build.sh (a stand-in here) into a
    partial folder, and keeps the notes beside the environment for every later report."""
    from sglang_gemma4.stack.layout import Layout

    root = tmp_path / "repo"
    (root / "test" / "env").mkdir(parents=True)
    (root / "test" / "requirements-cpu.txt").write_text("torch==2.13.0\nwheel==0.48.0\n")
    build = root / "test" / "env" / "build.sh"
    build.write_text('#!/bin/sh\nmkdir -p "$2/bin" && cp "$3" "$2/requirements.txt"\n')
    build.chmod(0o755)
    python = fake_python(tmp_path)
    wheel = checkout.layout.cache_dir / checkout.pin.wheel().file  # sglang 0.5.17 pins torch 2.11.0
    env = testenv.ensure(Layout(root), "0.5.17", wheel, str(python), log=lambda _: None)
    directory = root / ".cache" / "testenv" / "sglang-0.5.17-py3.11"
    assert env.python == str(directory / "bin" / "python")
    assert (directory / "requirements.txt").read_text() == "torch==2.13.0\nwheel==0.48.0\n"
    assert env.notes == [
        "torch 2.13.0 instead of 2.11.0 (sglang 0.5.17 pins 2.11.0; pip finds no 2.11.0 here)"
    ]
    build.write_text("#!/bin/sh\nexit 1\n")  # a second call reuses the environment
    assert testenv.ensure(Layout(root), "0.5.17", wheel, str(python)).notes == env.notes


def test_a_patch_with_only_gpu_tests_has_no_cpu_tests(tmp_path):
    from sglang_gemma4.stack.patchfile import PatchFile

    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "test_gpu.py").write_text(
        "import pytest\n\n\n@pytest.mark.gpu\ndef test_x():\n    pass\n"
    )
    patch = PatchFile(tmp_path / "0010-x.patch", "Subject: x\nTests: test/test_gpu.py\n\n---\n")
    run = patchtests.run_patch_tests(tmp_path, tmp_path, patch, sys.executable)
    assert run.verdict == patchtests.NO_CPU_TESTS and run.ok


def test_patch_tests_import_this_checkouts_tools(tmp_path):
    """A release's CPU environment has the tools installed from the checkout that built it; a
    patch's tests run from another checkout import that checkout's tools."""
    from sglang_gemma4.stack.patchfile import PatchFile

    package = tmp_path / "python" / "sglang_gemma4"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "test_tools.py").write_text(
        "from pathlib import Path\n\nimport sglang_gemma4\n\n\ndef test_x():\n"
        f"    assert Path(sglang_gemma4.__file__).parent == Path({str(package)!r})\n"
    )
    patch = PatchFile(tmp_path / "0010-x.patch", "Subject: x\nTests: test/test_tools.py\n\n---\n")
    run = patchtests.run_patch_tests(tmp_path, tmp_path, patch, sys.executable)
    assert run.verdict == patchtests.PASSED, run.summary()
