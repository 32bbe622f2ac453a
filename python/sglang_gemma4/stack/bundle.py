"""An offline install bundle for a GPU host with no network (`make bundle`).

It holds the pinned sglang wheel for the target's Python (pristine), the series' changed files as
a separate overlay (so one GPU session can serve both builds, for A/B), and every wheel the
server needs at import and launch that the target lacks, resolved by pip for the target's Python
and platform rather than for the build machine.  The archive is split into
parts small enough to travel; scripts/gpu/setup.sh installs it there.
"""

import io
import json
import lzma
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from sglang_gemma4.stack.build import VERSION_FILE, series_changes, version_file_text
from sglang_gemma4.stack.errors import StackError
from sglang_gemma4.stack.fetch import MANYLINUX_X86_64, fetch_wheel
from sglang_gemma4.stack.layout import Layout
from sglang_gemma4.stack.pin import Pin
from sglang_gemma4.stack.series import Series
from sglang_gemma4.stack.stackversion import local_version
from sglang_gemma4.stack.worktree import WorkTree

PART_SIZE = 60 * 1024 * 1024
# sglang requirements (direct or pulled in by another) that the Hopper serving path with the triton
# attention backend, `--sampling-backend pytorch` and `--grammar-backend xgrammar` never imports
# (xgrammar and its apache-tvm-ffi are carried: the preset's structured output).
# (cuda-tile is carried: flashinfer.comm imports it at module level, and without flashinfer.comm
# sglang turns its tensor-parallel allreduce + RMSNorm fusion off with only a warning.)
NOT_LOADED = {
    "flash-attn-4": "FA4 kernels, SM100 only",
    "tilelang": "DeepSeek sparse-attention kernels",
    "quack-kernels": "CuTe-DSL kernels, SM100",
    "sgl-deep-gemm": "DeepGEMM fp8 GEMMs",
    "tokenspeed-mla": "MLA kernels (DeepSeek)",
    "nvidia-cutlass-dsl": "CuTe-DSL (flashinfer's SM100 paths)",
    "nvidia-cutlass-dsl-libs-base": "CuTe-DSL",
    "nvidia-cutlass-dsl-libs-core": "CuTe-DSL",
    "nvidia-cutlass-dsl-libs-cu12": "CuTe-DSL",
    "flashinfer-cubin": "prebuilt cubins; flashinfer JIT-compiles the few kernels it is asked for",
    "torchao": "quantization recipes",
    "torchcodec": "video decoding (multimodal)",
    "decord2": "video decoding (aarch64)",
    "av": "video decoding (aarch64)",
    "llguidance": "structured output",
    "outlines": "structured output",
    "modelscope": "model hub client",
    "smg-grpc-servicer": "gRPC front end",
    "kernels": "hub kernel loader",
    "torch-memory-saver": "RL weight offload",
    "py-spy": "profiler binary",
    "cuda-python": "metapackage; the image has cuda-bindings",
    "nvidia-cudnn-frontend": "flashinfer's cuDNN attention path",
    "mistral-common": "Mistral tokenizers",
    "nvidia-mathdx": "header library for the EPLB solver's JIT (not served here)",
    "nccl4py": "flashinfer's expert-parallel all-to-all (flashinfer.moe_ep), imported only there",
    "helion": "Inkling MoE kernels (sglang/kernels/ops/moe/inkling_moe.py)",
    "anthropic": "the Anthropic-API front end, imported inside its handler",
    "blobfile": "the Azure connector, imported inside it",
}
# Imported at module level on the serving path although sglang does not require them itself:
# jsonschema (sglang/srt/entrypoints/openai/serving_chat.py) is undeclared; dill
# (sglang/srt/sampling/custom_logit_processor.py, reached from server_args) comes only through
# datasets, which the benchmark client (sglang.bench_serving) imports.
UNDECLARED = ("jsonschema", "dill")
# What is kept of sglang-kernel (~380 MB, nearly all FA3/FlashMLA/SM100 libraries) on an SM90 host.
# Without FA3, a multimodal server there needs --mm-attention-backend triton_attn (check.sh mm-ab
# passes it).
KERNEL_KEEP = re.compile(
    r"^(sgl_kernel/[^/]+\.py|sgl_kernel/(?:quantization|infllm_v2)/[^/]+\.py|sgl_kernel/{arch}/.*"
    r"|sgl_kernel/spatial_ops\.abi3\.so|triton_kernels/.*|[^/]+\.dist-info/.*)$"
)
# What is left out of other wheels: files for building against them, never loaded (xgrammar's 65 MB
# static library beside the extension the server imports).
WHEEL_DROP = {"xgrammar": re.compile(r"^xgrammar/lib/.*\.a$")}
# Wheels whose extensions ship with DWARF debug info, which nothing here reads: xgrammar's 53 MB
# bindings are 3 MB without it.
STRIP_DEBUG = {"xgrammar"}


@dataclass(frozen=True)
class Target:
    name: str
    python: str
    cuda_arch: str
    installed: dict[str, str]  # canonical name -> version on the host
    override: tuple[str, ...]

    @classmethod
    def load(cls, path: Path) -> "Target":
        data = tomllib.loads(path.read_text())
        installed = {}
        for line in (path.parent / data["installed"]).read_text().splitlines():
            if "==" in line:
                name, version = line.split("==", 1)
                installed[canonicalize_name(name)] = version.strip()
        return cls(
            name=data["name"],
            python=data["python"],
            cuda_arch=data["cuda_arch"],
            installed=installed,
            override=tuple(data["override"]),
        )

    @property
    def present(self) -> frozenset[str]:
        return frozenset(self.installed)

    @property
    def override_names(self) -> set[str]:
        return {canonicalize_name(Requirement(o).name) for o in self.override}

    @property
    def constraints(self) -> list[str]:
        """Host versions the resolver must keep (the rest is checked after resolving: constraining
        pip with the host's whole package list makes it backtrack for many minutes)."""
        return [f"{n}=={self.installed[n]}" for n in ("torch", "triton") if n in self.installed]

    def applies(self, req: Requirement) -> bool:
        """Whether a requirement's environment marker holds on the target (no extras)."""
        if req.marker is None:
            return True
        env = default_environment()
        env.update(
            python_version=self.python,
            python_full_version=f"{self.python}.0",
            sys_platform="linux",
            platform_system="Linux",
            platform_machine="x86_64",
            implementation_name="cpython",
            platform_python_implementation="CPython",
            os_name="posix",
            extra="",
        )
        return req.marker.evaluate(env)

    def pip_target_args(self) -> list[str]:
        args = [
            "--only-binary=:all:",
            "--python-version",
            self.python,
            "--implementation",
            "cp",
            "--abi",
            "cp" + self.python.replace(".", ""),
            "--abi",
            "abi3",
            "--abi",
            "none",
        ]
        for platform in MANYLINUX_X86_64:
            args += ["--platform", platform]
        return args + ["--platform", "any"]


def wheel_requirements(wheel: Path, target: Target) -> list[Requirement]:
    """Requires-Dist of a wheel that apply on the target (no extras)."""
    with zipfile.ZipFile(wheel) as zf:
        (metadata,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        lines = zf.read(metadata).decode().splitlines()
    reqs = [
        Requirement(line.split(":", 1)[1].strip())
        for line in lines
        if line.startswith("Requires-Dist:")
    ]
    return [r for r in reqs if target.applies(r)]


def _pip_errors(stderr: str) -> str:
    return "\n".join(
        line for line in stderr.splitlines() if not line.startswith("WARNING: Location")
    )[-3000:]


def resolve(target: Target, roots: list[str], log=print) -> dict[str, dict]:
    """pip's resolution of `roots` for the target: {name: report item}."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "requirements.txt").write_text("\n".join(roots) + "\n")
        (Path(tmp) / "constraints.txt").write_text("\n".join(target.constraints) + "\n")
        report = Path(tmp) / "report.json"
        log(
            f"bundle: resolving {len(roots)} requirements for {target.name} with pip (metadata "
            "only) ..."
        )
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--dry-run",
                "--ignore-installed",
                "--quiet",
                "--report",
                str(report),
                "--target",
                str(Path(tmp) / "t"),
                *target.pip_target_args(),
                "-r",
                str(Path(tmp) / "requirements.txt"),
                "-c",
                str(Path(tmp) / "constraints.txt"),
            ],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise StackError(
                f"pip could not resolve the bundle for {target.name}:\n{_pip_errors(proc.stderr)}"
            )
        items = json.loads(report.read_text())["install"]
    return {canonicalize_name(i["metadata"]["name"]): i for i in items}


def needed(target: Target, roots: list[Requirement], resolved: dict[str, dict]) -> dict[str, str]:
    """name -> version of what the server loads: the roots' dependency closure without
    NOT_LOADED."""
    todo = [canonicalize_name(r.name) for r in roots]
    seen: dict[str, str] = {}
    while todo:
        name = todo.pop()
        if name in seen or name in NOT_LOADED:
            continue
        item = resolved[name]
        seen[name] = item["metadata"]["version"]
        for spec in item["metadata"].get("requires_dist", []):
            req = Requirement(spec)
            if target.applies(req):
                todo.append(canonicalize_name(req.name))
    return seen


def host_conflicts(
    target: Target, packages: dict[str, str], resolved: dict[str, dict]
) -> list[str]:
    """Requirements of carried wheels that the host's own version of a package does not meet."""
    conflicts = []
    for name in packages:
        for spec in resolved[name]["metadata"].get("requires_dist", []):
            req = Requirement(spec)
            dep = canonicalize_name(req.name)
            if dep in packages or dep in NOT_LOADED or dep not in target.installed:
                continue
            if target.applies(req) and not req.specifier.contains(
                target.installed[dep], prereleases=True
            ):
                conflicts.append(
                    f"{name} {packages[name]} needs {req}, the host has {dep} "
                    f"{target.installed[dep]}"
                )
    return conflicts


def carried(target: Target, closure: dict[str, str]) -> dict[str, str]:
    return {
        n: v
        for n, v in sorted(closure.items())
        if n not in target.present or n in target.override_names
    }


def download(target: Target, packages: dict[str, str], dest: Path, log=print) -> list[Path]:
    log(f"bundle: downloading {len(packages)} wheels ...")
    specs = [f"{name}=={version}" for name, version in packages.items()]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--quiet",
            "--progress-bar",
            "off",
            *target.pip_target_args(),
            "-d",
            str(dest),
            *specs,
        ],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise StackError(f"pip download failed:\n{_pip_errors(proc.stderr)}")
    return sorted(dest.glob("*.whl"))


def trim_wheel(wheel: Path, keep, dest: Path, strip_debug: bool = False) -> Path:
    """The wheel with only the files `keep(path)` accepts (and its shared libraries without debug
    info if asked), repacked by `wheel` (RECORD rewritten)."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "wheel", "unpack", "-d", tmp, str(wheel)],
            check=True,
            capture_output=True,
        )
        (unpacked,) = Path(tmp).iterdir()
        for path in sorted(unpacked.rglob("*"), reverse=True):
            rel = path.relative_to(unpacked).as_posix()
            if path.is_file() and not keep(rel):
                path.unlink()
            elif path.is_dir() and not any(path.iterdir()):
                path.rmdir()
            elif strip_debug and path.suffix == ".so":
                subprocess.run(
                    ["strip", "--strip-debug", str(path)], check=True, capture_output=True
                )
        subprocess.run(
            [sys.executable, "-m", "wheel", "pack", "-d", str(dest), str(unpacked)],
            check=True,
            capture_output=True,
        )
    (trimmed,) = dest.glob(wheel.name.split("-")[0] + "-*.whl")
    return trimmed


def wheel_filter(wheel: Path, arch: str):
    """keep(path) for a wheel the bundle trims, or None to carry it whole."""
    dist = wheel.name.split("-")[0]
    if dist == "sglang_kernel":
        return re.compile(KERNEL_KEEP.pattern.format(arch=arch)).match
    if dist in WHEEL_DROP:
        return lambda rel: not WHEEL_DROP[dist].match(rel)
    return None


def store_uncompressed(wheel: Path) -> None:
    """Rewrite a wheel's zip without compression (same members, same RECORD) so that the xz pass
    over the whole bundle compresses the contents instead of deflate's output."""
    tmp = wheel.with_suffix(".stored")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            data = src.read(info)
            info.compress_type = zipfile.ZIP_STORED
            dst.writestr(info, data)
    tmp.replace(wheel)


def overlay_files(work: WorkTree, base: str, head: str, pin: Pin, version: str) -> dict[str, bytes]:
    """The series' changed files, keyed by their path inside site-packages (sglang/...), plus
    sglang/_version.py naming the series."""
    version_file = work.git.run("show", f"{base}:python/{VERSION_FILE}").stdout
    files = {VERSION_FILE: version_file_text(version_file, pin, version).encode()}
    for rel, data in series_changes(work, base, head).items():
        if data is None:
            raise StackError(f"the series deletes python/{rel}: an overlay cannot express that")
        files[rel] = data
    return files


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def write_parts(archive: bytes, out_dir: Path, stem: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.tar.xz.part-*"):  # one bundle per folder: setup.sh joins every part
        old.unlink()
    parts = []
    for i in range(0, len(archive), PART_SIZE):
        part = out_dir / f"{stem}.tar.xz.part-{i // PART_SIZE:02d}"
        part.write_bytes(archive[i : i + PART_SIZE])
        parts.append(part)
    return parts


def build_bundle(layout: Layout, target_file: Path, out_dir: Path, log=print) -> list[Path]:
    target = Target.load(target_file)
    pin = Pin.load(layout.pin_file)
    patches = Series.load(layout.patches_dir).patches()
    work = WorkTree(layout.work_dir)
    state = work.require_synced(patches)
    version = local_version(pin, patches)
    sglang_wheel = fetch_wheel(pin, pin.wheel(target.python), layout.cache_dir, log)

    # Roots: what sglang asks for that the server loads and the host lacks (or must replace).
    skipped = {*NOT_LOADED, *target.present, *target.override_names}
    roots = [
        r
        for r in wheel_requirements(sglang_wheel, target)
        if canonicalize_name(r.name) not in skipped
    ]
    roots += [Requirement(o) for o in target.override] + [
        Requirement(name) for name in UNDECLARED if canonicalize_name(name) not in target.present
    ]
    resolved = resolve(target, [str(r) for r in roots], log)
    packages = carried(target, needed(target, roots, resolved))
    conflicts = host_conflicts(target, packages, resolved)
    if conflicts:
        raise StackError(
            f"carried wheels conflict with {target.name}'s own packages:\n  "
            + "\n  ".join(conflicts)
        )
    with tempfile.TemporaryDirectory() as tmp:
        wheels_dir = Path(tmp) / "wheels"
        wheels = download(target, packages, wheels_dir, log)
        for wheel in wheels:
            keep = wheel_filter(wheel, target.cuda_arch)
            if keep is not None:
                trimmed_dir = Path(tmp) / "trimmed" / wheel.name
                trimmed_dir.mkdir(parents=True)
                strip_debug = wheel.name.split("-")[0] in STRIP_DEBUG
                trimmed = trim_wheel(wheel, keep, trimmed_dir, strip_debug)
                wheel.unlink()
                shutil.move(str(trimmed), wheels_dir / trimmed.name)
        shutil.copy2(sglang_wheel, wheels_dir / sglang_wheel.name)
        for wheel in wheels_dir.glob("*.whl"):
            store_uncompressed(wheel)
        manifest = {
            "series_version": version,
            "target": target.name,
            "upstream": pin.requirement,
            "patches": [p.name for p in patches],
            "wheels": sorted(p.name for p in wheels_dir.glob("*.whl")),
            "not_loaded": sorted(NOT_LOADED),
        }
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            tar.add(wheels_dir, arcname="bundle/wheels")
            for rel, data in overlay_files(work, state.base, state.head, pin, version).items():
                _add_bytes(tar, f"bundle/overlay/{rel}", data)
            _add_bytes(
                tar, "bundle/manifest.json", (json.dumps(manifest, indent=1) + "\n").encode()
            )
        log("bundle: compressing (xz) ...")
        archive = lzma.compress(buffer.getvalue(), preset=6)
    parts = write_parts(archive, out_dir, f"sglang-gemma4-{version}-{target.name}")
    log(
        f"bundle: {len(manifest['wheels'])} wheels, {len(archive) / 2**20:.1f} MiB in {len(parts)} "
        f"parts -> {out_dir}"
    )
    for name in manifest["wheels"]:
        log(f"bundle:   {name}")
    return parts
