"""The offline bundle's pieces that need no network: target loading, the dependency closure, what is
carried, the sglang-kernel trim and the uncompressed repack."""

import subprocess
import sys
import zipfile
from pathlib import Path

from packaging.requirements import Requirement

from sglang_gemma4.bundle import (NOT_LOADED, Target, carried, host_conflicts, needed, store_uncompressed,
                                 trim_kernel_wheel)

REPO = Path(__file__).resolve().parents[2]


def target(installed: dict[str, str], override=("transformers==5.6.0",)) -> Target:
    return Target(name="t", python="3.12", cuda_arch="sm90", installed=installed, override=override)


def item(name, version, *requires):
    return {"metadata": {"name": name, "version": version, "requires_dist": list(requires)}}


def test_real_target_file_loads():
    t = Target.load(REPO / "scripts/gpu/target-hopper-py312.toml")
    assert t.installed["torch"] == "2.11.0" and t.installed["triton"] == "3.6.0"
    assert "transformers==5.17.0" not in t.constraints  # replaced by the bundle
    assert "torch==2.11.0" in t.constraints


def test_closure_follows_markers_and_skips_what_is_not_loaded():
    resolved = {
        "fastapi": item("fastapi", "1.0", "starlette>=1", "pydantic"),
        "starlette": item("starlette", "1.2", "anyio"),
        "pydantic": item("pydantic", "2.0", "typing-extensions; python_version < '3.9'"),
        "anyio": item("anyio", "4.0"),
        "flashinfer-python": item("flashinfer-python", "0.6", "nvidia-cutlass-dsl", "einops"),
        "einops": item("einops", "0.8"),
        "typing-extensions": item("typing-extensions", "4"),
    }
    assert "nvidia-cutlass-dsl" in NOT_LOADED
    closure = needed(target({}), [Requirement("fastapi"), Requirement("flashinfer-python")], resolved)
    assert closure == {"fastapi": "1.0", "starlette": "1.2", "pydantic": "2.0", "anyio": "4.0",
                       "flashinfer-python": "0.6", "einops": "0.8"}


def test_carried_leaves_out_what_the_host_has_except_overrides():
    t = target({"anyio": "4.0", "transformers": "5.17.0"})
    closure = {"anyio": "4.0", "transformers": "5.6.0", "fastapi": "1.0"}
    assert carried(t, closure) == {"fastapi": "1.0", "transformers": "5.6.0"}


def fake_wheel(tmp_path: Path, files: dict[str, bytes]) -> Path:
    root = tmp_path / "sglang_kernel-1.0"
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    info = root / "sglang_kernel-1.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang-kernel\nVersion: 1.0\n")
    (info / "WHEEL").write_text("Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: cp310-abi3-manylinux2014_x86_64\n")
    out = tmp_path / "dist"
    out.mkdir()
    subprocess.run([sys.executable, "-m", "wheel", "pack", "-d", str(out), str(root)], check=True, capture_output=True)
    return next(out.glob("*.whl"))


def test_kernel_trim_keeps_only_the_target_arch(tmp_path):
    wheel = fake_wheel(tmp_path, {
        "sgl_kernel/__init__.py": b"x", "sgl_kernel/quantization/q.py": b"q",
        "sgl_kernel/sm90/common_ops.abi3.so": b"90", "sgl_kernel/sm100/common_ops.abi3.so": b"100",
        "sgl_kernel/flash_ops.abi3.so": b"fa3", "sgl_kernel/spatial_ops.abi3.so": b"sp",
        "triton_kernels/a.py": b"t", "lib/mscclpp.so": b"m", "include/x.h": b"h",
    })
    out = tmp_path / "trimmed"
    out.mkdir()
    trimmed = trim_kernel_wheel(wheel, "sm90", out)
    names = set(zipfile.ZipFile(trimmed).namelist())
    assert {"sgl_kernel/__init__.py", "sgl_kernel/quantization/q.py", "sgl_kernel/sm90/common_ops.abi3.so",
            "sgl_kernel/spatial_ops.abi3.so", "triton_kernels/a.py"} <= names
    assert not names & {"sgl_kernel/sm100/common_ops.abi3.so", "sgl_kernel/flash_ops.abi3.so", "lib/mscclpp.so",
                        "include/x.h"}
    record = zipfile.ZipFile(trimmed).read("sglang_kernel-1.0.dist-info/RECORD").decode()
    assert "flash_ops" not in record and "sm90/common_ops" in record


def test_store_uncompressed_keeps_every_member(tmp_path):
    wheel = fake_wheel(tmp_path, {"sgl_kernel/__init__.py": b"print('hi')\n" * 100})
    before = {i.filename: zipfile.ZipFile(wheel).read(i) for i in zipfile.ZipFile(wheel).infolist()}
    store_uncompressed(wheel)
    with zipfile.ZipFile(wheel) as zf:
        assert {i.filename: zf.read(i) for i in zf.infolist()} == before
        assert all(i.compress_type == zipfile.ZIP_STORED for i in zf.infolist())


def test_host_conflicts_name_the_package_and_both_versions():
    t = target({"anyio": "3.0", "numpy": "2.5.2"})
    resolved = {"starlette": item("starlette", "1.2", "anyio>=4", "numpy<3"), "fastapi": item("fastapi", "1", "anyio")}
    conflicts = host_conflicts(t, {"starlette": "1.2", "fastapi": "1"}, resolved)
    assert conflicts == ["starlette 1.2 needs anyio>=4, the host has anyio 3.0"]
