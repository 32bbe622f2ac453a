"""A port: the series refreshed for a newer sglang release, kept beside the served pin.

    ports/<release>/port.toml      [upstream] the release's wheels (as upstream.toml); [report]
                                   notes: findings the report lists; [testenv] keep: packages its
                                   CPU test env keeps at test/requirements-cpu.txt's version, with
                                   the reason; [ported] each patch of the port -> the sha256 of the
                                   main patch it was ported from; [dropped] each main patch not in
                                   the port -> "<kind>: <why>"; [behind] a ported patch whose main
                                   version changed since -> why the change is not in the port
    ports/<release>/patches/       the refreshed patches (upstream paths, headers kept) and `series`
    ports/<release>/test/          a patch's test adapted to the release's internals, at the path
                                   of the test/ file it replaces (the rest run as they are)
    ports/<release>/pending/       refreshed patches (and adapted tests) not in the series yet: each
                                   is under [dropped] with what is left to do
    ports/<release>/results.json   what `port-check --write` found (the check compares it)
    ports/<release>/REPORT.md      written from port.toml, results.json and the drift report

`port-check` verifies the wheels, applies the series exactly (no offsets, no fuzz) onto the
release in work/ports/<release>, runs every ported patch's CPU tests in the release's CPU test
env (testenv.py) with SGLANG_GEMMA4_TREE pointing at that tree, and checks that the port is not
older than the main series and that it agrees with docs/drift/<name>-<release>.json.
"""

import ast
import json
import shutil
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sglang_gemma4.stack.errors import StackError
from sglang_gemma4.stack.gitrepo import Git
from sglang_gemma4.stack.layout import Layout
from sglang_gemma4.stack.maintainer import patchtests
from sglang_gemma4.stack.patchfile import PatchFile
from sglang_gemma4.stack.pin import Pin
from sglang_gemma4.stack.series import Series
from sglang_gemma4.stack.worktree import (
    STATE_FILE,
    AppliedPatch,
    State,
    base_message,
    git_apply,
    unpack_wheel,
)

PORT_FILE, RESULTS, REPORT = "port.toml", "results.json", "REPORT.md"
UPSTREAM, SUPERSEDED, NOT_YET = "upstream already", "superseded", "not yet ported"
DROP_KINDS = (UPSTREAM, SUPERSEDED, NOT_YET)
# drift verdicts (drift.py), by what they say about a port
DRIFT_APPLIES = ("applies", "applies at offsets", "applies by 3-way merge")
DRIFT_UPSTREAM = ("already upstream (text)", "already upstream (tests)")


@dataclass(frozen=True)
class Port:
    directory: Path
    pin: Pin
    keep: dict[str, str]
    ported: dict[str, str]  # port patch name -> sha256 of the main patch it came from
    dropped: dict[str, str]  # main patch name -> "<kind>: <why>"
    behind: dict[str, str]  # ported patch name -> why main's newer version is not in the port
    notes: tuple[str, ...] = ()  # findings about the release that the report carries

    @property
    def release(self) -> str:
        return self.pin.version

    @property
    def patches_dir(self) -> Path:
        return self.directory / "patches"

    @classmethod
    def load(cls, directory: Path) -> "Port":
        path = directory / PORT_FILE
        try:
            data = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise StackError(f"{path}: cannot read the port ({e})") from e
        return cls(
            directory,
            Pin.load(path),
            dict(data.get("testenv", {}).get("keep", {})),
            dict(data.get("ported", {})),
            dict(data.get("dropped", {})),
            dict(data.get("behind", {})),
            tuple(data.get("report", {}).get("notes", ())),
        )


def drop_kind(reason: str) -> str:
    """The kind a [dropped] entry starts with, or "" when it names none of DROP_KINDS."""
    kind, _, why = reason.partition(":")
    return kind.strip() if kind.strip() in DROP_KINDS and why.strip() else ""


def provenance_problems(port: Port, main_patches_dir: Path) -> list[str]:
    """Every way the port is older than, or out of step with, the main series (empty: none)."""
    problems = list(Series(port.patches_dir, tuple(_names(port))).problems())
    main_names = list(Series.load(main_patches_dir).names)
    names = _names(port)
    for name in main_names:
        if name in names and name in port.dropped:
            problems.append(f"{name} is in the port's series and also in its [dropped] table")
        elif name not in names and name not in port.dropped:
            problems.append(
                f"patches/{name} is neither in the port nor in its [dropped] table: port it, or "
                "add "
                f'"{name}" = "{NOT_YET}: <why>" under [dropped] in '
                f"{port.directory.name}/{PORT_FILE}"
            )
    for name, reason in sorted(port.dropped.items()):
        if name not in main_names:
            problems.append(f"[dropped] names {name}, which patches/series does not list")
        if not drop_kind(reason):
            problems.append(
                f"[dropped] {name}: the reason must read '<kind>: <why>' with kind one of "
                f"{', '.join(DROP_KINDS)}: {reason!r}"
            )
    for name in names:
        main = main_patches_dir / name
        recorded = port.ported.get(name)
        if name not in main_names or not main.is_file():
            problems.append(f"the port's {name} is not a patch of patches/series")
        elif not recorded:
            problems.append(
                f"[ported] does not record the sha256 of patches/{name} that {name} was ported from"
            )
        elif recorded != PatchFile.read(main).sha256 and name not in port.behind:
            problems.append(
                f"patches/{name} changed on main since it was ported (sha256 {recorded[:12]}..., "
                "now "
                f"{PatchFile.read(main).sha256[:12]}...): carry the change to the port and record "
                "the "
                f"new sha256 under [ported], or say why not under [behind]"
            )
    for name in sorted(set(port.ported) - set(names)):
        problems.append(f"[ported] names {name}, which the port's series does not list")
    for name in sorted(set(port.behind) - set(names)):
        problems.append(f"[behind] names {name}, which the port's series does not list")
    return problems


def drift_problems(port: Port, drift_json: Path) -> list[str]:
    """Where the port and the drift report for its release disagree (empty: they agree, or no
    report)."""
    if not drift_json.is_file():
        return []
    rows = {row["name"]: row["verdict"] for row in json.loads(drift_json.read_text())["patches"]}
    names = set(_names(port))
    problems = []
    for name, verdict in rows.items():
        kind = drop_kind(port.dropped.get(name, ""))
        where = f"{drift_json.name} finds {name} '{verdict}'"
        if verdict in DRIFT_APPLIES and kind == NOT_YET and "conflict" in port.dropped[name]:
            problems.append(f"{where}, the port says it is not ported for a conflict: it applies")
        if verdict in DRIFT_UPSTREAM and name in names:
            problems.append(f"{where}, the port keeps it: drop it as '{UPSTREAM}: ...'")
        if kind == UPSTREAM and verdict not in DRIFT_UPSTREAM:
            problems.append(f"{where}, the port drops it as '{UPSTREAM}'")
    return problems


def _names(port: Port) -> list[str]:
    from sglang_gemma4.stack.series import read_names

    return read_names(port.patches_dir / "series")


@dataclass
class PatchResult:
    name: str
    applies: str  # "exactly", or why not
    tests: str = ""  # patchtests verdict
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    first_error: str = ""
    gpu_unverified: list[str] = field(
        default_factory=list
    )  # GPU-marked tests, not run on this release
    test_files: list[str] = field(
        default_factory=list
    )  # what ran: test/..., or the port's adapted version

    @property
    def ok(self) -> bool:
        return self.applies == "exactly" and self.tests in (
            patchtests.PASSED,
            patchtests.NO_CPU_TESTS,
        )


def build_tree(port: Port, wheel: Path, tree: Path) -> tuple[list[PatchFile], list[PatchResult]]:
    """tree = the release + one commit per port patch, each applied exactly (stops at the first
    that does not: the ones after it are reported as not applied).  Its state file is a work
    tree's (worktree.py), so build.py can make the port's wheel from it."""
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    git = Git(tree)
    git.run("init", "-q")
    (tree / ".git" / "info").mkdir(parents=True, exist_ok=True)
    (tree / ".git" / "info" / "exclude").write_text("__pycache__/\n*.pyc\n")
    unpack_wheel(wheel, tree)  # in place: committed from the index, never checked out again
    pinned = next((w for w in port.pin.wheels if w.file == wheel.name), port.pin.wheel())
    git.run("add", "-A", ".")
    head = git.commit_tree(git.out("write-tree"), None, base_message(port.pin, pinned))
    git.run("update-ref", "HEAD", head)
    state = State(
        version=port.pin.version, wheel_file=pinned.file, wheel_sha256=pinned.sha256, base=head
    )
    patches = [PatchFile.read(port.patches_dir / name) for name in _names(port)]
    results = []
    broken = ""
    for patch in patches:
        if broken:
            results.append(PatchResult(patch.name, f"not tried: {broken} does not apply"))
            continue
        result = git_apply(git, patch, "--index")
        if not result.ok or result.offsets:
            why = (
                result.error.strip()
                if not result.ok
                else "at offsets: " + "; ".join(result.offsets)
            )
            results.append(PatchResult(patch.name, f"does not apply exactly: {why}"))
            git.run("reset", "-q", "--hard")
            broken = patch.name
            continue
        tree_id = git.out("write-tree")
        head = git.commit_tree(tree_id, head, patch.commit_message(), patch.fields.get("Author"))
        git.run("reset", "-q", "--hard", head)
        state.applied.append(AppliedPatch(patch.name, patch.sha256, head))
        results.append(PatchResult(patch.name, "exactly"))
    (tree / ".git" / STATE_FILE).write_text(json.dumps(asdict(state), indent=1))
    return patches, results


def build(layout: Layout, release: str, python: str | None, log=print) -> Path:
    """dist/sglang-<release>+gemma4.g<hash>-*.whl: the release's wheel with the port's series in."""
    from sglang_gemma4.stack.build import build_wheel
    from sglang_gemma4.stack.fetch import fetch_wheel
    from sglang_gemma4.stack.worktree import WorkTree

    port = Port.load(port_dir(layout, release))
    wheel = port.pin.wheel(python)
    path = fetch_wheel(port.pin, wheel, layout.cache_dir, log)
    tree = layout.root / "work" / "ports" / release
    patches, results = build_tree(port, path, tree)
    broken = [f"{r.name} {r.applies}" for r in results if r.applies != "exactly"]
    if broken:
        raise StackError("the port does not apply: " + "; ".join(broken))
    return build_wheel(WorkTree(tree), port.pin, wheel, path, patches, layout.dist_dir, log)


def port_tests(root: Path, port: Port, patch: PatchFile) -> list[str]:
    """The patch's test files, each replaced by the port's own version where it has one:
    test/x/test_y.py -> ports/<release>/test/x/test_y.py (a test adapted to the release's
    internals)."""
    tests = []
    for test in patchtests.test_files(patch):
        own = port.directory / test
        tests.append(str(own.relative_to(root)) if own.is_file() else test)
    return tests


def _marks_gpu(node: ast.AST) -> bool:
    """A decorator or pytestmark value that is (or lists) pytest.mark.gpu."""
    return any(
        isinstance(n, ast.Attribute)
        and n.attr == "gpu"
        and isinstance(n.value, ast.Attribute)
        and n.value.attr == "mark"
        for n in ast.walk(node)
    )


def gpu_tests(root: Path, tests: list[str]) -> list[str]:
    """The tests marked gpu, read from the files (not imported): `file::function` or `file::Class`;
    every test of a file whose pytestmark is gpu."""
    found = []
    for test in tests:
        path = root / test
        if not path.is_file():
            continue
        module = ast.parse(path.read_text())
        whole = any(
            isinstance(n, ast.Assign)
            and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)
            and _marks_gpu(n.value)
            for n in module.body
        )
        for node in module.body:
            if isinstance(
                node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
            ) and node.name.startswith(("test", "Test")):
                if whole or any(_marks_gpu(d) for d in node.decorator_list):
                    found.append(f"{test}::{node.name}")
    return found


def run_tests(
    root: Path,
    port: Port,
    tree: Path,
    patches: list[PatchFile],
    results: list[PatchResult],
    python: str,
    log=print,
    jobs: int | None = None,
) -> None:
    """Each ported patch's CPU tests against the port's whole tree, `jobs` patches at once
    (default: one per core; the tree is only read)."""

    def test_one(applied: tuple[PatchFile, PatchResult]) -> None:
        patch, result = applied
        tests = port_tests(root, port, patch)
        run = patchtests.run_patch_tests(root, tree, patch, python, tests=tests)
        result.test_files = tests
        result.tests, result.passed, result.failed = run.verdict, run.passed, run.failed
        result.errors, result.skipped, result.first_error = run.errors, run.skipped, run.first_error
        result.gpu_unverified = gpu_tests(root, tests)
        log(
            f"port-check: {patch.name} ({', '.join(tests)}): {run.summary()}; "
            f"{len(result.gpu_unverified)} GPU-marked tests unverified"
        )

    applied = [(p, r) for p, r in zip(patches, results) if r.applies == "exactly"]
    patchtests.in_parallel(test_one, applied, jobs)


def results_data(results: list[PatchResult], env_notes: list[str]) -> dict:
    return {"env_notes": env_notes, "patches": [asdict(r) for r in results]}


def render_report(port: Port, data: dict, drift: dict | None, main_names: list[str]) -> str:
    rows = {r["name"]: r for r in data["patches"]}
    drift_rows = {r["name"]: r["verdict"] for r in (drift or {}).get("patches", [])}
    lines = [
        f"# sglang-gemma4 on sglang {port.release}",
        "",
        f"Written by `make port-check PORT={port.release} WRITE=1` from `{PORT_FILE}`, `{RESULTS}` "
        "and "
        f"docs/drift/sglang-{port.release}.json; `make port-check PORT={port.release}` fails when "
        "they disagree.",
        "",
        f"- release: {port.pin.requirement}, "
        + ", ".join(f"`{w.file}` sha256 `{w.sha256}`" for w in port.pin.wheels),
        f"- ported: {len(rows)} of the {len(main_names)} patches of patches/series; "
        f"not in the port: {len(port.dropped)}",
        "- CPU test environment: " + ("; ".join(data["env_notes"]) or "the release's pins"),
        "",
        "## Patches in the port",
        "",
        "| patch | drift report | applies | CPU tests | GPU-marked tests (unverified on this "
        "release) |",
        "|---|---|---|---|---|",
    ]
    for name in _names(port):
        r = rows.get(name, {})
        tests = r.get("tests", "")
        if tests in (patchtests.PASSED, patchtests.FAILED, patchtests.COULD_NOT_RUN):
            tests += (
                f" ({r['passed']} passed, {r['failed']} failed, {r['errors']} errors, "
                f"{r['skipped']} skipped)"
            )
        if r.get("first_error"):
            tests += f"; first error: {r['first_error']}"
        adapted = [t for t in r.get("test_files", []) if not t.startswith("test/")]
        if adapted:
            tests += "; adapted to this release: " + ", ".join(f"`{t}`" for t in adapted)
        gpu = len(r.get("gpu_unverified", []))
        behind = (
            f" (main's newer version not carried: {port.behind[name]})"
            if name in port.behind
            else ""
        )
        lines.append(
            f"| {name}{behind} | {drift_rows.get(name, 'not in the report')} | "
            f"{r.get('applies', 'not run')} "
            f"| {tests or 'not run'} | {gpu or 'none'} |"
        )
    unverified = [(r["name"], t) for r in data["patches"] for t in r.get("gpu_unverified", [])]
    if unverified:
        lines += ["", "## GPU-marked tests, unverified on this release", ""]
        lines += [f"- {name}: `{test}`" for name, test in unverified]
    if port.notes:
        lines += ["", "## Notes on this release", ""] + [f"- {note}" for note in port.notes]
    lines += [
        "",
        "## Patches of patches/series not in the port",
        "",
        "| patch | drift report | why |",
        "|---|---|---|",
    ]
    for name in main_names:
        if name in port.dropped:
            lines.append(
                f"| {name} | {drift_rows.get(name, 'not in the report')} | {port.dropped[name]} |"
            )
    return "\n".join(lines) + "\n"


def drift_json(layout: Layout, port: Port) -> Path:
    return layout.root / "docs" / "drift" / f"{port.pin.name}-{port.release}.json"


def kept_test_packages(layout: Layout, release: str) -> dict[str, str]:
    """The port's [testenv.keep] where `release` has a port, so that a rebase's CPU environment is
    the one its port-check builds (e.g. no CPU build of the release's torch); otherwise none."""
    directory = layout.root / "ports" / release
    return Port.load(directory).keep if (directory / PORT_FILE).is_file() else {}


def port_dir(layout: Layout, release: str) -> Path:
    directory = layout.root / "ports" / release
    if not (directory / PORT_FILE).is_file():
        known = (
            ", ".join(sorted(p.parent.name for p in (layout.root / "ports").glob(f"*/{PORT_FILE}")))
            or "none"
        )
        raise StackError(
            f"no port for sglang {release} (ports/{release}/{PORT_FILE}; ports here: {known})"
        )
    return directory


def check(
    layout: Layout,
    release: str,
    python: str | None,
    write: bool,
    run_tests_too: bool = True,
    log=print,
) -> list[str]:
    """Every problem of the port (empty: it is in step, applies exactly and its CPU tests pass).
    With `write`, results.json and REPORT.md are rewritten from this run instead of compared;
    without the tests, REPORT.md is checked (or rewritten) against the recorded results.json."""
    from sglang_gemma4.stack.fetch import fetch_all
    from sglang_gemma4.stack.maintainer import testenv

    port = Port.load(port_dir(layout, release))
    problems = provenance_problems(port, layout.patches_dir)
    drift_path = drift_json(layout, port)
    problems += drift_problems(port, drift_path)
    wheels = fetch_all(port.pin, layout.cache_dir, log)
    wheel = wheels[port.pin.wheels.index(port.pin.wheel())]
    tree = layout.root / "work" / "ports" / release
    patches, results = build_tree(port, wheel, tree)
    env_notes: list[str] = []
    if run_tests_too:
        if python:
            env = testenv.given(python)
        else:
            env = testenv.ensure(layout, release, wheel, log=log, keep=port.keep)
        env_notes = env.notes
        run_tests(layout.root, port, tree, patches, results, env.python, log)
    for result in results:
        if result.applies != "exactly":
            problems.append(f"{result.name} {result.applies}")
        elif run_tests_too and not result.ok:
            problems.append(
                f"{result.name}: CPU tests on {release}: {result.tests}"
                + (f" (first error: {result.first_error})" if result.first_error else "")
            )
    drift = json.loads(drift_path.read_text()) if drift_path.is_file() else None
    main_names = list(Series.load(layout.patches_dir).names)
    results_file, report_file = port.directory / RESULTS, port.directory / REPORT
    recorded = json.loads(results_file.read_text()) if results_file.is_file() else None
    if run_tests_too:
        data = results_data(results, env_notes)
        # The patches' outcomes must be this run's; the environment notes may differ by machine
        # (another nearest version), so the report is compared with the recorded data's.
        if not write and (not recorded or recorded["patches"] != data["patches"]):
            problems.append(
                f"{results_file.relative_to(layout.root)} differs from this run's outcomes: "
                f"make port-check PORT={release} WRITE=1, and commit it"
            )
        if write:
            results_file.write_text(json.dumps(data, indent=1) + "\n")
            recorded = data
    elif recorded and [r["name"] for r in recorded["patches"]] != [r.name for r in results]:
        problems.append(
            f"{results_file.relative_to(layout.root)} records other patches than the port's "
            "series: "
            f"make port-check PORT={release} WRITE=1 (with the tests)"
        )
    if recorded is None:
        problems.append(
            f"no {results_file.relative_to(layout.root)}: make port-check PORT={release} WRITE=1"
        )
        return problems
    report = render_report(port, recorded, drift, main_names)
    if write:
        report_file.write_text(report)
        log(
            f"port-check: wrote {report_file.relative_to(layout.root)}"
            + (" and its results.json" if run_tests_too else " from the recorded results.json")
        )
    elif not report_file.is_file() or report_file.read_text() != report:
        problems.append(
            f"{report_file.relative_to(layout.root)} is not the report of {port.directory.name}'s "
            "data: "
            f"make port-check PORT={release} WRITE=1 (TESTS=0 re-renders it from the recorded "
            "results), "
            "and commit it"
        )
    return problems
    data = results_data(results, env_notes)
    drift = json.loads(drift_path.read_text()) if drift_path.is_file() else None
    main_names = list(Series.load(layout.patches_dir).names)
    results_file, report_file = port.directory / RESULTS, port.directory / REPORT
    if write:
        results_file.write_text(json.dumps(data, indent=1) + "\n")
        report_file.write_text(render_report(port, data, drift, main_names))
        log(
            f"port-check: wrote {results_file.relative_to(layout.root)} and "
            f"{report_file.relative_to(layout.root)}"
        )
    else:
        # The patches' outcomes must be this run's; the environment notes may differ by machine
        # (another nearest version), so the report is compared with the recorded data's.
        recorded = json.loads(results_file.read_text()) if results_file.is_file() else None
        if not recorded or recorded["patches"] != data["patches"]:
            problems.append(
                f"{results_file.relative_to(layout.root)} differs from this run's outcomes: "
                f"make port-check PORT={release} WRITE=1, and commit it"
            )
        elif not report_file.is_file() or report_file.read_text() != render_report(
            port, recorded, drift, main_names
        ):
            problems.append(
                f"{report_file.relative_to(layout.root)} is not the report of "
                f"{port.directory.name}'s "
                f"data: make port-check PORT={release} WRITE=1, and commit it"
            )
    return problems
