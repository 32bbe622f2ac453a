"""Build the patched wheel: the pinned wheel, with the series' files swapped in, repacked by
`wheel pack --local-version` (which renames the dist-info and rewrites METADATA's Version)."""

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from sglang_gemma4.stack.errors import StackError
from sglang_gemma4.stack.patchfile import PatchFile
from sglang_gemma4.stack.pin import Pin, PinnedWheel
from sglang_gemma4.stack.stackversion import local_version
from sglang_gemma4.stack.worktree import WorkTree

VERSION_FILE = "sglang/_version.py"  # generated at upstream's build time; names the version


def series_changes(work: WorkTree, base: str, head: str) -> dict[str, bytes | None]:
    """The files the series changed (base..head), keyed by their path inside the wheel (sglang/...):
    their bytes at head, read from the work tree (callers require it synced), or None if deleted."""
    changes = {}
    for line in work.git.out("diff", "--name-status", "--no-renames", base, head).splitlines():
        status, repo_path = line.split("\t", 1)
        if not repo_path.startswith("python/"):
            raise StackError(
                f"the series changes {repo_path}, which is outside python/ and not in the wheel"
            )
        changes[repo_path[len("python/") :]] = (
            None if status == "D" else (work.path / repo_path).read_bytes()
        )
    return changes


def _overlay(changes: dict[str, bytes | None], unpacked: Path) -> list[str]:
    """Write the series' changes into the unpacked wheel; one `A|M|D path` line each."""
    done = []
    for rel, data in changes.items():
        wheel_path = unpacked / rel
        status = "D" if data is None else "M" if wheel_path.exists() else "A"
        if data is None:
            wheel_path.unlink()
        else:
            wheel_path.parent.mkdir(parents=True, exist_ok=True)
            wheel_path.write_bytes(data)
        done.append(f"{status} python/{rel}")
    return done


def version_file_text(text: str, pin: Pin, version: str) -> str:
    """sglang/_version.py rewritten so that sglang.__version__ reports `version`."""
    local = version.split("+", 1)[1]
    version_tuple = tuple(int(p) for p in pin.version.split(".")) + (local,)
    text, n_version = re.subn(
        r"^__version__ = version = .*$", f"__version__ = version = {version!r}", text, flags=re.M
    )
    text, n_tuple = re.subn(
        r"^__version_tuple__ = version_tuple = .*$",
        f"__version_tuple__ = version_tuple = {version_tuple!r}",
        text,
        flags=re.M,
    )
    if (n_version, n_tuple) != (1, 1):
        raise StackError(
            f"{VERSION_FILE}: no version assignments to rewrite (upstream changed its format?)"
        )
    return text


def build_wheel(
    work: WorkTree,
    pin: Pin,
    wheel: PinnedWheel,
    wheel_path: Path,
    patches: list[PatchFile],
    dist_dir: Path,
    log=print,
) -> Path:
    state = work.require_synced(patches)
    version = local_version(pin, patches)
    dist_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "wheel", "unpack", "-d", tmp, str(wheel_path)],
            check=True,
            capture_output=True,
        )
        unpacked = Path(tmp) / f"{pin.name}-{pin.version}"
        changed = _overlay(series_changes(work, state.base, state.head), unpacked)
        version_file = unpacked / VERSION_FILE
        version_file.write_text(version_file_text(version_file.read_text(), pin, version))
        out = Path(tmp) / "out"
        out.mkdir()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "wheel",
                "pack",
                "--local-version",
                version.split("+", 1)[1],
                "-d",
                str(out),
                str(unpacked),
            ],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise StackError(f"wheel pack failed:\n{proc.stderr.strip()}")
        (built,) = out.glob("*.whl")
        target = dist_dir / built.name
        shutil.move(str(built), target)
    log(f"build: {len(patches)} patches, {len(changed)} files changed from {wheel.file}")
    for line in changed:
        log(f"build:   {line}")
    log(f"build: wrote {target}")
    return target
