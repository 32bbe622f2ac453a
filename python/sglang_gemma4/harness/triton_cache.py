"""What a Triton cache holds: one entry per kernel compile (issue #10 part 3, cold start).

    python -m sglang_gemma4.harness.triton_cache DIR [--markdown]

Triton writes every compiled kernel into its own folder of TRITON_CACHE_DIR with a group file,
`__grp__<kernel name>.json`. Started on an empty cache, a server leaves one entry per distinct
(kernel, constexpr values, launch options) it compiled; this counts them per kernel name, with the
times the first and the last of them were written (seconds after the first compile of all).
"""

import argparse
import json
from pathlib import Path

GROUP_PREFIX = "__grp__"


def compiles(cache: Path) -> list[dict]:
    """One record per compiled kernel: its name and when its group file was written."""
    records = []
    for group in cache.glob(f"*/{GROUP_PREFIX}*.json"):
        name = group.name[len(GROUP_PREFIX):-len(".json")]
        records.append({"kernel": name, "written": group.stat().st_mtime})
    return sorted(records, key=lambda r: r["written"])


def summary(records: list[dict]) -> list[dict]:
    """Per kernel name: compiles, and first/last write in seconds after the first compile."""
    start = records[0]["written"] if records else 0.0
    rows = {}
    for r in records:
        row = rows.setdefault(r["kernel"], {"kernel": r["kernel"], "compiles": 0, "first_s": r["written"] - start})
        row["compiles"] += 1
        row["last_s"] = r["written"] - start
    return sorted(rows.values(), key=lambda row: (-row["compiles"], row["kernel"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cache", type=Path)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    records = compiles(args.cache)
    rows = summary(records)
    if not args.markdown:
        for row in rows:
            print(json.dumps(row))
        return 0
    span = records[-1]["written"] - records[0]["written"] if records else 0.0
    print(f"{len(records)} kernel compiles in {args.cache}, written over {span:.1f} s\n")
    print("| kernel | compiles | first (s) | last (s) |\n|---|---|---|---|")
    for row in rows:
        print(f"| `{row['kernel']}` | {row['compiles']} | {row['first_s']:.1f} | {row['last_s']:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
