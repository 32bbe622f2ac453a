"""build: an installable wheel of the patched tree, named by the series' local version."""

import subprocess
import sys
import zipfile
from pathlib import Path

from sglang_gemma4.stack.stackversion import local_version


def test_build_refuses_an_unapplied_or_dirty_tree(checkout, two_patches):
    proc = checkout.tool("build")
    assert proc.returncode == 1 and "make apply" in proc.stderr
    assert checkout.tool("apply").returncode == 0
    (checkout.layout.work_dir / "python/sglang/version.py").write_text("# edited\n")
    proc = checkout.tool("build")
    assert proc.returncode == 1 and "uncommitted changes" in proc.stderr


def test_built_wheel_holds_the_patches_and_reports_the_local_version(
    checkout, two_patches, tmp_path
):
    assert checkout.tool("apply").returncode == 0
    proc = checkout.tool("build")
    assert proc.returncode == 0, proc.stderr
    stack = checkout.stack()
    version = local_version(stack.pin, stack.series.patches())
    assert version.startswith(f"{stack.pin.version}+gemma4.g")
    (wheel,) = checkout.layout.dist_dir.glob("*.whl")
    assert wheel.name.startswith(f"sglang-{version}-cp311")

    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        assert (
            zf.read("sglang/srt/server_args.py").decode().splitlines()[19]
            == "# first patch was here"
        )
        assert f"sglang-{version}.dist-info/RECORD" in names
        assert any(n.endswith(".so") for n in names), "compiled modules come from the pinned wheel"
        assert f"Version: {version}" in zf.read(f"sglang-{version}.dist-info/METADATA").decode()

    # a fresh venv; sglang's dependencies come from this test environment, whose site directories a
    # .pth adds as site directories, so that their own .pth files (the test env's torchvision
    # set-up) apply
    fresh = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(fresh)], check=True)
    fresh_python = fresh / "bin" / "python"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(fresh_python),
            "install",
            "-q",
            "--no-deps",
            "--no-compile",  # byte-compiling sglang's files is pip's work, not the build's
            str(wheel),
        ],
        check=True,
    )
    (site,) = fresh.glob("lib/python*/site-packages")
    (site / "test-env-deps.pth").write_text(
        "".join(
            f"import site; site.addsitedir({p!r})\n"
            for p in sys.path
            if p.endswith("site-packages")
        )
    )
    probe = (
        "import importlib.metadata, sglang; "
        "print(sglang.__version__, importlib.metadata.version('sglang'), sglang.__file__)"
    )
    proc = subprocess.run(
        [str(fresh_python), "-c", probe], cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    reported, installed, module = proc.stdout.split()[-3:]
    assert [reported, installed] == [version, version]
    assert Path(module).resolve().is_relative_to(fresh.resolve())


def test_version_changes_with_any_patch_byte(checkout, two_patches):
    before = checkout.tool("version").stdout.strip()
    path = checkout.layout.patches_dir / "0010-first.patch"
    path.write_text(path.read_text().replace("Why: test.", "Why: test!"))
    assert checkout.tool("version").stdout.strip() != before
