"""The port checker (stack/port.py): a port is in step with the main series, agrees with the drift
report, applies exactly, and its report is written from its data."""

import hashlib
import json
import zipfile
from pathlib import Path

from stack_helpers import make_patch, replace_line

from sglang_gemma4.stack.maintainer import port, testenv
from sglang_gemma4.stack.patchfile import PatchFile


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _patch(name: str, n: int = 1) -> str:
    return make_patch(name, "python/sglang/x.py", "a\nb\nc\n", f"a\nb{n}\nc\n")


def _main(root: Path, patches: dict[str, str]) -> Path:
    main = root / "patches"
    main.mkdir(parents=True)
    for name, text in patches.items():
        (main / name).write_text(text)
    (main / "series").write_text("".join(f"{n}\n" for n in patches))
    return main


def _port(
    root: Path,
    ported: dict[str, str],
    dropped: dict[str, str],
    behind: dict[str, str] | None = None,
    patches: dict[str, str] | None = None,
    wheel: tuple[str, str] = ("x.whl", "0" * 64),
) -> port.Port:
    directory = root / "ports" / "9.9.9"
    (directory / "patches").mkdir(parents=True)
    for name, text in (patches or {}).items():
        (directory / "patches" / name).write_text(text)
    (directory / "patches" / "series").write_text(
        "# a comment\n" + "".join(f"{n}\n" for n in (patches or {}))
    )
    lines = [
        "[upstream]",
        'name = "sglang"',
        'version = "9.9.9"',
        "",
        "[[upstream.wheel]]",
        'python = "3.11"',
        f'file = "{wheel[0]}"',
        f'sha256 = "{wheel[1]}"',
        "",
        "[ported]",
    ]
    lines += [f'"{k}" = "{v}"' for k, v in ported.items()]
    lines += ["", "[dropped]"] + [f'"{k}" = "{v}"' for k, v in dropped.items()]
    lines += ["", "[behind]"] + [f'"{k}" = "{v}"' for k, v in (behind or {}).items()]
    (directory / port.PORT_FILE).write_text("\n".join(lines) + "\n")
    return port.Port.load(directory)


def test_a_port_in_step_with_the_series_has_no_problems(tmp_path):
    a, b = _patch("a"), _patch("b", 2)
    main = _main(tmp_path, {"0010-a.patch": a, "0020-b.patch": b})
    p = _port(
        tmp_path,
        {"0010-a.patch": _sha(a)},
        {"0020-b.patch": "not yet ported: conflicts in x.py"},
        patches={"0010-a.patch": a},
    )
    assert port.provenance_problems(p, main) == []


def test_a_patch_neither_ported_nor_dropped_is_named_with_the_line_to_add(tmp_path):
    a = _patch("a")
    main = _main(tmp_path, {"0010-a.patch": a, "0200-new.patch": _patch("new")})
    p = _port(tmp_path, {"0010-a.patch": _sha(a)}, {}, patches={"0010-a.patch": a})
    (problem,) = port.provenance_problems(p, main)
    assert "0200-new.patch is neither in the port nor in its [dropped] table" in problem
    assert '"0200-new.patch" = "not yet ported: <why>"' in problem


def test_a_change_on_main_after_the_port_is_detected_unless_behind_says_why(tmp_path):
    old, new = _patch("a"), _patch("a", 3)
    main = _main(tmp_path, {"0010-a.patch": new})
    p = _port(tmp_path, {"0010-a.patch": _sha(old)}, {}, patches={"0010-a.patch": old})
    (problem,) = port.provenance_problems(p, main)
    assert "patches/0010-a.patch changed on main since it was ported" in problem
    excused = _port(
        tmp_path / "2",
        {"0010-a.patch": _sha(old)},
        {},
        {"0010-a.patch": "the fix is for 0.5.17 only"},
        patches={"0010-a.patch": old},
    )
    assert port.provenance_problems(excused, main) == []


def test_dropped_entries_need_a_known_kind_and_a_main_patch(tmp_path):
    a = _patch("a")
    main = _main(tmp_path, {"0010-a.patch": a})
    p = _port(tmp_path, {}, {"0010-a.patch": "gone", "0099-old.patch": "superseded: by 0010"})
    problems = port.provenance_problems(p, main)
    assert any("[dropped] 0010-a.patch: the reason must read" in x for x in problems)
    assert any(
        "[dropped] names 0099-old.patch, which patches/series does not list" in x for x in problems
    )
    assert port.drop_kind("upstream already: sglang 9.9.9 does it") == port.UPSTREAM
    assert port.drop_kind("not yet ported:") == ""


def test_a_patch_both_ported_and_dropped_or_unrecorded_is_a_problem(tmp_path):
    a = _patch("a")
    main = _main(tmp_path, {"0010-a.patch": a})
    p = _port(tmp_path, {}, {"0010-a.patch": "superseded: by nothing"}, patches={"0010-a.patch": a})
    problems = port.provenance_problems(p, main)
    assert any("also in its [dropped] table" in x for x in problems)
    assert any("[ported] does not record the sha256" in x for x in problems)


def test_the_port_and_the_drift_report_must_agree(tmp_path):
    drift = tmp_path / "sglang-9.9.9.json"
    drift.write_text(
        json.dumps(
            {
                "patches": [
                    {"name": "0010-a.patch", "verdict": "applies at offsets"},
                    {"name": "0020-b.patch", "verdict": "already upstream (tests)"},
                    {"name": "0030-c.patch", "verdict": "conflicts with upstream"},
                    {"name": "0040-d.patch", "verdict": "conflicts with upstream"},
                    {"name": "0050-e.patch", "verdict": "applies"},
                ]
            }
        )
    )
    p = _port(
        tmp_path,
        {"0020-b.patch": "0" * 64},
        {
            "0010-a.patch": "not yet ported: its hunks conflict",
            "0030-c.patch": "upstream already: it is",
            "0040-d.patch": "not yet ported: conflicts",
            "0050-e.patch": "not yet ported: its tests need adapting",
        },
        patches={"0020-b.patch": _patch("b")},
    )
    problems = port.drift_problems(p, drift)
    assert len(problems) == 3
    assert (
        "0010-a.patch 'applies at offsets', the port says it is not ported for a conflict"
        in problems[0]
    )
    assert "0020-b.patch 'already upstream (tests)', the port keeps it" in problems[1]
    assert (
        "0030-c.patch 'conflicts with upstream', the port drops it as 'upstream already'"
        in problems[2]
    )
    assert port.drift_problems(p, tmp_path / "missing.json") == []


def test_the_tree_takes_patches_exactly_and_refuses_offsets(tmp_path, checkout):
    path = "python/sglang/version.py"
    old = checkout.upstream_file(path)
    good = make_patch("good", path, old, old + "# ported\n")
    shifted = make_patch(
        "shifted", path, "# an extra line\n" + old, replace_line("# an extra line\n" + old, 2, "#")
    )
    wheel = checkout.pin.wheel()
    wheel_path = checkout.layout.cache_dir / wheel.file
    p = _port(tmp_path, {}, {}, patches={"0010-good.patch": good}, wheel=(wheel.file, wheel.sha256))
    patches, results = port.build_tree(p, wheel_path, tmp_path / "tree")
    assert [r.applies for r in results] == ["exactly"]
    assert (tmp_path / "tree" / path).read_text().endswith("# ported\n")
    q = _port(
        tmp_path / "q",
        {},
        {},
        patches={"0010-shifted.patch": shifted, "0020-good.patch": good},
        wheel=(wheel.file, wheel.sha256),
    )
    _, results = port.build_tree(q, wheel_path, tmp_path / "tree2")
    assert results[0].applies.startswith("does not apply exactly")
    assert results[1].applies == "not tried: 0010-shifted.patch does not apply"


def test_the_report_lists_outcomes_gpu_tests_and_dropped_patches(tmp_path):
    a = _patch("a")
    main_names = ["0010-a.patch", "0020-b.patch"]
    p = _port(
        tmp_path,
        {"0010-a.patch": _sha(a)},
        {"0020-b.patch": "not yet ported: conflicts in x.py"},
        patches={"0010-a.patch": a},
    )
    result = port.PatchResult(
        "0010-a.patch", "exactly", "passed", 3, 0, 0, 0, "", ["test/t.py::test_gpu"]
    )
    data = port.results_data([result], ["torch 2.13.0 instead of 2.14.1 (no CPU build)"])
    drift = {
        "patches": [
            {"name": "0010-a.patch", "verdict": "applies"},
            {"name": "0020-b.patch", "verdict": "conflicts with upstream"},
        ]
    }
    text = port.render_report(p, data, drift, main_names)
    assert (
        "| 0010-a.patch | applies | exactly | passed (3 passed, 0 failed, 0 errors, 0 skipped) | 1 "
        "|" in text
    )
    assert "- 0010-a.patch: `test/t.py::test_gpu`" in text
    assert "| 0020-b.patch | conflicts with upstream | not yet ported: conflicts in x.py |" in text
    assert "torch 2.13.0 instead of 2.14.1 (no CPU build)" in text
    assert text == port.render_report(p, data, drift, main_names)  # no dates: the check compares it


def test_kept_packages_stay_at_the_cpu_requirement_and_say_why():
    env = testenv.plan(
        "torch==2.13.0\ntransformers==5.12.1\n",
        {"torch": "2.14.1", "transformers": "5.19.0"},
        "sglang 9.9.9",
        None,
        keep={"torch": "no CPU build"},
    )
    assert env.pins == {"torch": "2.13.0", "transformers": "5.19.0"}
    assert env.notes == ["torch 2.13.0 instead of 2.14.1 (sglang 9.9.9 pins 2.14.1; no CPU build)"]


def test_the_kept_port_is_consistent_with_the_series():
    root = Path(__file__).resolve().parents[2]
    p = port.Port.load(root / "ports" / "0.5.23")
    assert port.provenance_problems(p, root / "patches") == []
    assert port.drift_problems(p, root / "docs" / "drift" / "sglang-0.5.23.json") == []
    for name in port._names(p):
        assert (
            PatchFile.read(p.patches_dir / name).header
            == PatchFile.read(root / "patches" / name).header
        )


def _one_file_release(checkout, path: str, text: str) -> tuple[str, str]:
    """A cached release wheel holding only `path`: each check builds its tree in milliseconds."""
    wheel = checkout.layout.cache_dir / "sglang-9.9.9-cp311-cp311-manylinux_2_34_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(path[len("python/") :], text)
    return wheel.name, hashlib.sha256(wheel.read_bytes()).hexdigest()


def test_check_compares_the_report_and_a_new_dropped_line_needs_only_a_re_render(
    tmp_path, checkout
):
    path = "python/sglang/version.py"
    old = checkout.upstream_file(path)
    good = make_patch("good", path, old, old + "# ported\n")
    root = checkout.root
    _main(root, {"0010-good.patch": good})
    p = _port(
        root,
        {"0010-good.patch": _sha(good)},
        {},
        patches={"0010-good.patch": good},
        wheel=_one_file_release(checkout, path, old),
    )
    (p.directory / port.RESULTS).write_text(
        json.dumps(
            port.results_data([port.PatchResult("0010-good.patch", "exactly", "passed", 1)], [])
        )
    )
    problems = port.check(
        checkout.layout, "9.9.9", None, write=False, run_tests_too=False, log=lambda *_: None
    )
    assert len(problems) == 1 and "REPORT.md is not the report of 9.9.9's data" in problems[0]
    assert (
        port.check(
            checkout.layout, "9.9.9", None, write=True, run_tests_too=False, log=lambda *_: None
        )
        == []
    )
    assert (
        port.check(
            checkout.layout, "9.9.9", None, write=False, run_tests_too=False, log=lambda *_: None
        )
        == []
    )
    # a new patch on main: one line under [dropped], then the report re-rendered without tests
    _main(root / "next", {"0010-good.patch": good, "0230-new.patch": _patch("new")})
    for f in (root / "next" / "patches").iterdir():
        (root / "patches" / f.name).write_text(f.read_text())
    problems = port.check(
        checkout.layout, "9.9.9", None, write=False, run_tests_too=False, log=lambda *_: None
    )
    assert any(
        "0230-new.patch is neither in the port nor in its [dropped] table" in x for x in problems
    )
    toml = p.directory / port.PORT_FILE
    toml.write_text(
        toml.read_text().replace(
            "[dropped]\n", '[dropped]\n"0230-new.patch" = "not yet ported: new"\n'
        )
    )
    problems = port.check(
        checkout.layout, "9.9.9", None, write=False, run_tests_too=False, log=lambda *_: None
    )
    assert len(problems) == 1 and "REPORT.md" in problems[0]
    assert (
        port.check(
            checkout.layout, "9.9.9", None, write=True, run_tests_too=False, log=lambda *_: None
        )
        == []
    )
    assert (
        "| 0230-new.patch | not in the report | not yet ported: new |"
        in (p.directory / port.REPORT).read_text()
    )


def test_a_rebase_onto_a_ported_release_tests_in_the_ports_environment(tmp_path, monkeypatch):
    """The rebase's CPU environment keeps what the release's port keeps (its torch with no CPU
    build): otherwise pip cannot resolve the release's pins, and only a port-check's environment,
    built first, would let the rebase's tests run."""
    from types import SimpleNamespace

    from sglang_gemma4 import cli
    from sglang_gemma4.stack.layout import Layout
    from sglang_gemma4.stack.pin import Pin, PinnedWheel

    p = _port(tmp_path, {}, {})
    (p.directory / port.PORT_FILE).write_text(
        (p.directory / port.PORT_FILE).read_text() + '\n[testenv.keep]\ntorch = "no CPU build"\n'
    )
    asked = {}
    monkeypatch.setattr(testenv, "python_version", lambda python: "3.11")
    monkeypatch.setattr(testenv, "ensure", lambda *a, **kw: asked.update(kw))
    args = SimpleNamespace(skip_tests=False, python=None, env_python="python3")
    pin = Pin("sglang", "9.9.9", (PinnedWheel("3.11", "x.whl", "0" * 64),))
    for release, keep in (("9.9.9", {"torch": "no CPU build"}), ("9.9.10", {})):
        stack = SimpleNamespace(layout=Layout(tmp_path))
        cli.test_env(stack, args, Pin(pin.name, release, pin.wheels), [tmp_path / "x.whl"])
        assert asked["keep"] == keep
