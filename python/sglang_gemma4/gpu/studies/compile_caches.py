"""What a server start compiled, read from its compile caches (issue #10 part 3, cold start).

    python -m sglang_gemma4.gpu.studies.compile_caches ROOT [--markdown]

ROOT holds the caches a start was pointed at (check.sh coldstart sets the variables):
- triton/ (TRITON_CACHE_DIR): one folder per compiled kernel, with a group file
  `__grp__<kernel name>.json`: one entry per distinct (kernel, constexpr values, launch options);
- tvm-ffi/ (TVM_FFI_CACHE_DIR): sglang's JIT CUDA modules (rope, KV store, activations, ...), one
  `<module>_<hash>/` folder per build, with the module's shared library;
- flashinfer/ (FLASHINFER_WORKSPACE_BASE): FlashInfer's JIT ops, one shared library each;
- inductor/ (TORCHINDUCTOR_CACHE_DIR): torch.compile's generated Triton kernels (group files as
above). Counts the builds per cache and name, with the times the first and the last of them were
written (seconds after the first build of all): the order and spacing of a cold start's compiles.
"""

import argparse
import json
from pathlib import Path

TRITON_GROUP = "__grp__"


def triton_builds(root: Path, cache: str) -> list[dict]:
    """One record per Triton group file under root (inductor keeps its kernels' in subfolders)."""
    return [
        {
            "cache": cache,
            "kernel": group.name[len(TRITON_GROUP) : -len(".json")],
            "written": group.stat().st_mtime,
        }
        for group in root.rglob(f"{TRITON_GROUP}*.json")
    ]


def library_builds(root: Path, cache: str, name) -> list[dict]:
    """One record per shared library under root; name(path) says which module it is."""
    return [
        {"cache": cache, "kernel": name(so), "written": so.stat().st_mtime}
        for so in root.rglob("*.so")
    ]


def builds(root: Path) -> list[dict]:
    """Every build in the caches under root, oldest first."""
    records = triton_builds(root / "triton", "triton") + triton_builds(
        root / "inductor", "inductor"
    )
    records += library_builds(root / "tvm-ffi", "tvm-ffi", lambda so: so.stem)
    records += library_builds(root / "flashinfer", "flashinfer", lambda so: so.parent.name)
    return sorted(records, key=lambda r: r["written"])


def summary(records: list[dict]) -> list[dict]:
    """Per cache and name: builds, and first/last write in seconds after the first build."""
    start = records[0]["written"] if records else 0.0
    rows = {}
    for r in records:
        key = (r["cache"], r["kernel"])
        row = rows.setdefault(
            key,
            {
                "cache": r["cache"],
                "kernel": r["kernel"],
                "builds": 0,
                "first_s": r["written"] - start,
            },
        )
        row["builds"] += 1
        row["last_s"] = r["written"] - start
    return sorted(rows.values(), key=lambda row: row["first_s"])


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("root", type=Path)
    parser.add_argument("--markdown", action="store_true")
    return parser


def main() -> int:
    args = parser().parse_args()
    records = builds(args.root)
    rows = summary(records)
    if not args.markdown:
        for row in rows:
            print(json.dumps(row))
        return 0
    span = records[-1]["written"] - records[0]["written"] if records else 0.0
    counts = {
        cache: sum(r["cache"] == cache for r in records)
        for cache in ("triton", "tvm-ffi", "flashinfer", "inductor")
    }
    table = [
        (
            f"| {r['cache']} | `{r['kernel']}` | {r['builds']} | {r['first_s']:.1f} | "
            f"{r['last_s']:.1f} |"
        )
        for r in rows
    ]
    print(
        "\n".join(
            [
                f"{len(records)} builds in {args.root} "
                f"({', '.join(f'{n} {c}' for c, n in counts.items())}), "
                f"written over {span:.1f} s",
                "",
                "| cache | kernel or module | builds | first (s) | last (s) |",
                "|---|---|---|---|---|",
                *table,
            ]
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
