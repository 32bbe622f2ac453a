"""A CPU test environment per upstream release, for the rebase's per-patch tests.

test/requirements-cpu.txt lists what the CPU tests need, pinned for the current release.  For a
newer release, each of those packages that the release's wheel pins (`Requires-Dist: x==V`) takes
the wheel's version instead; a version pip cannot find (offline, or no CPU build) is replaced by
the nearest one it can, and every such substitution is named in the rebase's reports.  The
environment is built once per release and Python under .cache/testenv/ and reused.
"""

import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from sglang_gemma4.stack.errors import StackError
from sglang_gemma4.stack.layout import Layout

REQUIREMENTS = "test/requirements-cpu.txt"
STAMP = "testenv.json"
PIN_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)\s*$")
FROM_VERSIONS = re.compile(r"\(from versions: ([^)]*)\)")


@dataclass
class EnvPlan:
    pins: dict[str, str]  # requirement name as written in requirements-cpu.txt -> version
    notes: list[str] = field(default_factory=list)  # each pin not met as the release asks


@dataclass
class TestEnv:
    python: str
    notes: list[str]
    pins: dict[str, str]

    def describe(self) -> str:
        where = f"tests ran with {self.python}"
        return where + ("; " + "; ".join(self.notes) if self.notes else "")


def wheel_pins(wheel: Path, python: str) -> dict[str, str]:
    """`name==version` requirements of a wheel's METADATA that hold on Linux x86_64 for `python`."""
    with zipfile.ZipFile(wheel) as zf:
        (metadata,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        text = zf.read(metadata).decode()
    env = default_environment() | {
        "sys_platform": "linux",
        "platform_machine": "x86_64",
        "python_version": python,
        "extra": "",
    }
    pins = {}
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        if req.marker and not req.marker.evaluate(env):
            continue
        exact = [s.version for s in req.specifier if s.operator == "=="]
        if exact:
            pins[canonicalize_name(req.name)] = exact[0]
    return pins


def _key(version: str) -> tuple:
    try:
        release = Version(version).release
    except InvalidVersion:
        return (0,)
    return tuple(release) + (0,) * (3 - len(release))


def nearest(wanted: str, versions: list[str]) -> str:
    """The version closest to `wanted`, major first, then minor, then micro (the newer on a tie)."""
    target = _key(wanted)
    return min(
        versions,
        key=lambda v: (tuple(abs(a - b) for a, b in zip(_key(v), target)), [-x for x in _key(v)]),
    )


def plan(
    requirements_text: str,
    release_pins: dict[str, str],
    release: str,
    available: Callable[[str], list[str]] | None,
    keep: dict[str, str] | None = None,
) -> EnvPlan:
    """The pins of the release's CPU environment (see the module's doc).  `keep` names packages
    that stay at requirements-cpu.txt's version whatever the release pins, each with the reason
    (e.g. no CPU build of the release's torch): the reason is one of the notes."""
    result = EnvPlan({})
    keep = {canonicalize_name(k): v for k, v in (keep or {}).items()}
    for line in requirements_text.splitlines():
        match = PIN_LINE.match(line.strip())
        if not match:
            continue
        name, current = match.groups()
        wanted = release_pins.get(canonicalize_name(name), current)
        if canonicalize_name(name) in keep:
            if wanted != current:
                result.notes.append(
                    f"{name} {current} instead of {wanted} ({release} pins {wanted}; "
                    f"{keep[canonicalize_name(name)]})"
                )
            result.pins[name] = current
            continue
        chosen = wanted
        versions = available(name) if available else []
        if versions and wanted not in versions:
            chosen = nearest(wanted, versions)
            asker = release if canonicalize_name(name) in release_pins else REQUIREMENTS
            asked = f"{asker} pins {wanted}"
            result.notes.append(
                f"{name} {chosen} instead of {wanted} ({asked}; pip finds no {wanted} here)"
            )
        result.pins[name] = chosen
    return result


def pip_versions(python: str, name: str) -> list[str]:
    """The versions of `name` pip can install here (its configured indexes and find-links)."""
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            [
                python,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--dest",
                tmp,
                "--retries",
                "0",
                "--timeout",
                "15",
                "--progress-bar",
                "off",
                f"{name}==0.0.0.dev0",
            ],
            capture_output=True,
            text=True,
        )
    match = FROM_VERSIONS.search(proc.stderr)
    if not match or match.group(1).strip() == "none":
        return []
    return [v.strip() for v in match.group(1).split(",") if v.strip()]


def env_dir(layout: Layout, release: str, python_version: str) -> Path:
    return layout.root / ".cache" / "testenv" / f"sglang-{release}-py{python_version}"


def python_version(python: str) -> str:
    return subprocess.run(
        [python, "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def load(directory: Path) -> TestEnv | None:
    """The environment cached at `directory`; its interpreter is the one found there, not the path
    stamped at its build (.cache/testenv/ is shared by checkouts through a link, and outlives
    them)."""
    stamp = directory / STAMP
    if not stamp.is_file():
        return None
    return TestEnv(**json.loads(stamp.read_text()) | {"python": str(directory / "bin" / "python")})


def ensure(
    layout: Layout,
    release: str,
    wheel: Path,
    base_python: str = sys.executable,
    log=print,
    keep: dict[str, str] | None = None,
) -> TestEnv:
    """The release's CPU environment, built first if it is not cached (atomically: a partial
    environment never sits at its final path).  `keep`: see plan()."""
    version = python_version(base_python)
    directory = env_dir(layout, release, version)
    cached = load(directory)
    if cached:
        return cached
    requirements = (layout.root / REQUIREMENTS).read_text()
    log(f"test env: planning the CPU environment of sglang {release} (Python {version}) ...")
    env_plan = plan(
        requirements,
        wheel_pins(wheel, version),
        f"sglang {release}",
        lambda name: pip_versions(base_python, name),
        keep,
    )
    for note in env_plan.notes:
        log(f"test env: {note}")
    partial = directory.with_name(directory.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    req_file = partial.parent / f"{directory.name}-requirements.txt"
    req_file.write_text("".join(f"{name}=={version}\n" for name, version in env_plan.pins.items()))
    build = layout.root / "test" / "env" / "build.sh"
    proc = subprocess.run([str(build), base_python, str(partial), str(req_file)], cwd=layout.root)
    if proc.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise StackError(
            f"building the CPU test environment of sglang {release} failed (pip's output above); "
            "TESTS=0 runs the rebase without tests, REBASE_PYTHON=... names an interpreter to use"
        )
    env = TestEnv(
        python=str(directory / "bin" / "python"), notes=env_plan.notes, pins=env_plan.pins
    )
    (partial / STAMP).write_text(json.dumps(asdict(env), indent=1) + "\n")
    shutil.rmtree(directory, ignore_errors=True)
    partial.rename(directory)
    return env


def given(python: str) -> TestEnv:
    """An interpreter the maintainer named (REBASE_PYTHON / --python): used as it is."""
    return TestEnv(
        python=python,
        notes=[
            f"{python} was named for the tests; its packages were not checked "
            "against the release's pins"
        ],
        pins={},
    )
