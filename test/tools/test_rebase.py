"""rebase onto a (synthetic) newer release: clean / refreshed / already upstream / conflict."""

import subprocess
import sys
from pathlib import Path

from stack_helpers import make_patch, replace_line

from sglang_gemma4.patchfile import PatchFile
from sglang_gemma4.pin import Pin

NEW_VERSION = "0.5.99"
FILES = {
    "clean": "python/sglang/version.py",
    "shifted": "python/sglang/srt/server_args.py",
    "landed": "python/sglang/global_config.py",
    "clash": "python/sglang/utils.py",
}


def newer_release(checkout, tmp: Path, edits: dict[str, str]) -> Path:
    """The pinned wheel with `edits` (repo path -> new text), repacked as NEW_VERSION."""
    pin = checkout.pin
    wheel = checkout.layout.cache_dir / pin.wheel().file
    subprocess.run([sys.executable, "-m", "wheel", "unpack", "-d", str(tmp), str(wheel)], check=True,
                   capture_output=True)
    unpacked = tmp / f"sglang-{pin.version}"
    for repo_path, text in edits.items():
        (unpacked / repo_path[len("python/"):]).write_text(text)
    (unpacked / f"sglang-{pin.version}.dist-info").rename(unpacked / f"sglang-{NEW_VERSION}.dist-info")
    out = tmp / "dist"
    out.mkdir()
    subprocess.run([sys.executable, "-m", "wheel", "pack", "-d", str(out), str(unpacked)], check=True,
                   capture_output=True)
    (built,) = out.glob("*.whl")
    return built


def test_rebase_reports_each_outcome(checkout, tmp_path):
    up = {key: checkout.upstream_file(path) for key, path in FILES.items()}
    ours = {
        "clean": up["clean"] + "# ours\n",
        "shifted": replace_line(up["shifted"], 400, "# ours at 400"),
        "landed": replace_line(up["landed"], 10, "# ours, later upstream"),
        "clash": replace_line(up["clash"], 30, "# ours at 30"),
    }
    patches = {f"00{i}0-{key}.patch": make_patch(key, FILES[key], up[key], ours[key])
               for i, key in enumerate(FILES, start=1)}
    checkout.write_series(patches)
    assert checkout.tool("apply").returncode == 0
    new_wheel = newer_release(checkout, tmp_path / "release", {
        FILES["shifted"]: "# new\n# upstream\n# lines\n" + up["shifted"],
        FILES["landed"]: ours["landed"],
        FILES["clash"]: replace_line(up["clash"], 30, "# upstream changed line 30"),
    })
    pin_before = checkout.layout.pin_file.read_text()

    proc = checkout.tool("rebase", "--wheel", str(new_wheel))
    assert proc.returncode == 1
    verdicts = {line.split("|")[2].strip(): line.split("|")[3].strip()
                for line in proc.stdout.splitlines() if line.startswith("| ") and not line.startswith("| #")}
    assert verdicts == {"0010-clean.patch": "clean", "0020-shifted.patch": "refreshed",
                        "0030-landed.patch": "already upstream", "0040-clash.patch": "conflict"}
    assert f"{FILES['clash']}: hunk #1" in proc.stderr
    assert checkout.layout.pin_file.read_text() == pin_before  # nothing written on conflict
    assert {p.name: p.read_text() for p in checkout.layout.patches_dir.glob("*.patch")} == patches

    del patches["0040-clash.patch"]
    checkout.write_series(patches)
    assert checkout.tool("apply").returncode == 0
    proc = checkout.tool("rebase", "--wheel", str(new_wheel))
    assert proc.returncode == 0, proc.stderr
    assert Pin.load(checkout.layout.pin_file).version == NEW_VERSION
    assert not (checkout.layout.patches_dir / "0030-landed.patch").exists()
    series = checkout.layout.series_file.read_text()
    assert f"# 0030-landed.patch: dropped, applied upstream in {NEW_VERSION}" in series
    shifted = PatchFile.read(checkout.layout.patches_dir / "0020-shifted.patch")
    assert "+# ours at 400" in shifted.diff
    assert [h.old_start for h in shifted.hunks] == [
        h.old_start + 3 for h in PatchFile(Path("x"), patches["0020-shifted.patch"]).hunks]
    assert checkout.git("log", "--reverse", "--format=%s").splitlines() == [
        f"sglang {NEW_VERSION} (pristine upstream)", "clean", "shifted"]
    assert "up to date" in checkout.tool("apply").stdout
    checkout.git("range-diff", "upstream/0.5.12..gemma4-0.5.12", f"upstream/{NEW_VERSION}..gemma4")
