"""scripts/gpu/setup.sh on a stand-in bundle: it installs once, writes both builds' environments,
and a second run on the same host neither reinstalls nor re-imports the builds to print their
versions."""

import io
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def wheel(path: Path, name: str, files: dict[str, str]) -> None:
    info = f"{name}-0.5.12.dist-info"
    files = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.5.12\n",
        f"{info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    files[f"{info}/RECORD"] = "".join(f"{member},,\n" for member in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(path, "w") as whl:
        for member, text in files.items():
            whl.writestr(member, text)


def bundle(directory: Path, imports_log: Path, server_args_py: str = "") -> None:
    # Importing sglang.version leaves a line in imports_log: the test counts the version checks.
    version_py = (
        f"open({str(imports_log)!r}, 'a').write('import\\n')\n__version__ = {{version!r}}\n"
    )
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz") as tar:

        def add(name: str, data: bytes) -> None:
            member = tarfile.TarInfo(name)
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))

        whl = directory / "sglang-0.5.12-py3-none-any.whl"
        wheel(
            whl,
            "sglang",
            {
                "sglang/__init__.py": "",
                "sglang/version.py": version_py.format(version="0.5.12"),
                "sglang/srt/__init__.py": "",
                "sglang/srt/server_args.py": server_args_py,
                # stand-ins the version check imports instead of the real ones (seconds each)
                "torch/__init__.py": "__version__ = '2.0.test'\n",
                "transformers/__init__.py": "__version__ = '5.0.test'\n",
            },
        )
        add(f"bundle/wheels/{whl.name}", whl.read_bytes())
        add(
            "bundle/overlay/sglang/version.py",
            version_py.format(version="0.5.12+gemma4.gtest").encode(),
        )
        add(
            "bundle/manifest.json",
            json.dumps(
                {"series_version": "0.5.12+gemma4.gtest", "patches": ["0001-a.patch"]}
            ).encode(),
        )
    (directory / "bundle.tar.xz.part-00").write_bytes(buffer.getvalue())


def run_setup(bundle_dir: Path, prefix: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFIX": str(prefix), "PYTHON": sys.executable}
    return subprocess.run(
        ["bash", str(REPO / "scripts/gpu/setup.sh"), str(bundle_dir)],
        env=env,
        capture_output=True,
        text=True,
    )


def setup(bundle_dir: Path, prefix: Path) -> str:
    done = run_setup(bundle_dir, prefix)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_installs_once_and_reads_versions_back_on_a_second_run(tmp_path):
    bundle_dir, imports_log = tmp_path / "bundle", tmp_path / "imports.log"
    bundle_dir.mkdir()
    bundle(bundle_dir, imports_log)
    prefix = tmp_path / "prefix"

    first = setup(bundle_dir, prefix)
    assert "already installed" not in first
    assert (
        "setup: pristine: 0.5.12 transformers 5.0.test torch 2.0.test" in first
        and "setup: patched: 0.5.12+gemma4.gtest transformers 5.0.test torch 2.0.test" in first
    )
    assert imports_log.read_text().count("import") == 2  # one version check per build

    second = setup(bundle_dir, prefix)
    assert "already installed" in second
    version_lines = [
        line
        for line in first.splitlines()
        if line.startswith(("setup: pristine", "setup: patched"))
    ]
    assert all(line in second for line in version_lines)
    assert imports_log.read_text().count("import") == 2  # read back, not re-imported
    assert (prefix / "env-patched.sh").read_text().count(f"{prefix}/patched:{prefix}/site") == 1


def test_a_module_the_server_imports_but_the_bundle_lacks_fails_the_install(tmp_path):
    bundle_dir = tmp_path / "bundle"
    bundle_dir.mkdir()
    bundle(
        bundle_dir, tmp_path / "imports.log", server_args_py="import a_module_no_bundle_carries\n"
    )
    done = run_setup(bundle_dir, tmp_path / "prefix")
    assert done.returncode != 0
    assert "No module named 'a_module_no_bundle_carries'" in done.stderr
