"""The offline bundle's pieces that need no network: target loading, the dependency closure, what is
carried, the wheel trims (sglang-kernel's arch, xgrammar's static library) and the uncompressed
repack."""

import ctypes
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from sglang_gemma4.stack.bundle import (
    NOT_LOADED,
    Target,
    carried,
    host_conflicts,
    needed,
    store_uncompressed,
    trim_wheel,
    wheel_filter,
)

REPO = Path(__file__).resolve().parents[2]


def target(installed: dict[str, str], override=("transformers==5.12.1",)) -> Target:
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
    closure = needed(
        target({}), [Requirement("fastapi"), Requirement("flashinfer-python")], resolved
    )
    assert closure == {
        "fastapi": "1.0",
        "starlette": "1.2",
        "pydantic": "2.0",
        "anyio": "4.0",
        "flashinfer-python": "0.6",
        "einops": "0.8",
    }


def test_carried_leaves_out_what_the_host_has_except_overrides():
    t = target({"anyio": "4.0", "transformers": "5.17.0"})
    closure = {"anyio": "4.0", "transformers": "5.12.1", "fastapi": "1.0"}
    assert carried(t, closure) == {"fastapi": "1.0", "transformers": "5.12.1"}


def fake_wheel(tmp_path: Path, files: dict[str, bytes]) -> Path:
    root = tmp_path / "sglang_kernel-1.0"
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    info = root / "sglang_kernel-1.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang-kernel\nVersion: 1.0\n")
    (info / "WHEEL").write_text(
        "Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: cp310-abi3-manylinux2014_x86_64\n"
    )
    out = tmp_path / "dist"
    out.mkdir()
    subprocess.run(
        [sys.executable, "-m", "wheel", "pack", "-d", str(out), str(root)],
        check=True,
        capture_output=True,
    )
    return next(out.glob("*.whl"))


def test_kernel_trim_keeps_only_the_target_arch(tmp_path):
    wheel = fake_wheel(
        tmp_path,
        {
            "sgl_kernel/__init__.py": b"x",
            "sgl_kernel/quantization/q.py": b"q",
            "sgl_kernel/infllm_v2/a.py": b"i",
            "sgl_kernel/sm90/common_ops.abi3.so": b"90",
            "sgl_kernel/sm100/common_ops.abi3.so": b"100",
            "sgl_kernel/flash_ops.abi3.so": b"fa3",
            "sgl_kernel/spatial_ops.abi3.so": b"sp",
            "triton_kernels/a.py": b"t",
            "lib/mscclpp.so": b"m",
            "include/x.h": b"h",
        },
    )
    out = tmp_path / "trimmed"
    out.mkdir()
    trimmed = trim_wheel(wheel, wheel_filter(wheel, "sm90"), out)
    names = set(zipfile.ZipFile(trimmed).namelist())
    assert {
        "sgl_kernel/__init__.py",
        "sgl_kernel/quantization/q.py",
        "sgl_kernel/infllm_v2/a.py",
        "sgl_kernel/sm90/common_ops.abi3.so",
        "sgl_kernel/spatial_ops.abi3.so",
        "triton_kernels/a.py",
    } <= names
    assert not names & {
        "sgl_kernel/sm100/common_ops.abi3.so",
        "sgl_kernel/flash_ops.abi3.so",
        "lib/mscclpp.so",
        "include/x.h",
    }
    record = zipfile.ZipFile(trimmed).read("sglang_kernel-1.0.dist-info/RECORD").decode()
    assert "flash_ops" not in record and "sm90/common_ops" in record


def test_xgrammar_loses_only_its_static_library():
    keep = wheel_filter(Path("xgrammar-0.2.1-cp312-cp312-manylinux_2_28_x86_64.whl"), "sm90")
    assert not keep("xgrammar/lib/libxgrammar.a")
    assert keep("xgrammar/libxgrammar_bindings.so") and keep("xgrammar/matcher.py")
    assert wheel_filter(Path("fastapi-0.165.0-py3-none-any.whl"), "sm90") is None


@pytest.mark.skipif(
    not (shutil.which("gcc") and shutil.which("strip")), reason="needs gcc and binutils"
)
def test_a_stripped_extension_loses_its_debug_info_only(tmp_path):
    (tmp_path / "ext.c").write_text("int answer(void) { return 42; }\n")
    library = tmp_path / "ext.so"
    subprocess.run(
        ["gcc", "-g", "-shared", "-fPIC", "-o", str(library), str(tmp_path / "ext.c")], check=True
    )
    wheel = fake_wheel(tmp_path, {"sgl_kernel/ext.so": library.read_bytes()})
    out = tmp_path / "trimmed"
    out.mkdir()
    trimmed = trim_wheel(wheel, lambda rel: True, out, strip_debug=True)
    stripped = tmp_path / "stripped.so"
    stripped.write_bytes(zipfile.ZipFile(trimmed).read("sgl_kernel/ext.so"))
    sections = subprocess.run(
        ["readelf", "-S", str(stripped)], capture_output=True, text=True, check=True
    ).stdout
    assert ".debug_info" not in sections and ".text" in sections
    assert ctypes.CDLL(str(stripped)).answer() == 42


def test_store_uncompressed_keeps_every_member(tmp_path):
    wheel = fake_wheel(tmp_path, {"sgl_kernel/__init__.py": b"print('hi')\n" * 100})
    before = {i.filename: zipfile.ZipFile(wheel).read(i) for i in zipfile.ZipFile(wheel).infolist()}
    store_uncompressed(wheel)
    with zipfile.ZipFile(wheel) as zf:
        assert {i.filename: zf.read(i) for i in zf.infolist()} == before
        assert all(i.compress_type == zipfile.ZIP_STORED for i in zf.infolist())


def test_host_conflicts_name_the_package_and_both_versions():
    t = target({"anyio": "3.0", "numpy": "2.5.2"})
    resolved = {
        "starlette": item("starlette", "1.2", "anyio>=4", "numpy<3"),
        "fastapi": item("fastapi", "1", "anyio"),
    }
    conflicts = host_conflicts(t, {"starlette": "1.2", "fastapi": "1"}, resolved)
    assert conflicts == ["starlette 1.2 needs anyio>=4, the host has anyio 3.0"]
