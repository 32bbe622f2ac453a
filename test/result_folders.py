"""Made-up result folders for the tests (test/results, and the rebase's in test/stack): a
result.json, its raw files and their packed raw.tar.xz."""

import json
from pathlib import Path

from sglang_gemma4.results import archive

PATCH = "0160-triton-swa-decode-no-device-sync.patch"
SUMMARY = (
    "| batch1 | median_tpot_ms | 6.01 | 4.31 | 0.717 |\n"
    "| chat | output_throughput | 2849.68 | 3528.29 | 1.238 |\n"
)


def result(**changes) -> dict:
    data = {
        "summary": "pristine vs patched, 26B-A4B",
        "valid": True,
        "measured": "2026-11-23 03:46",
        "gpu": {"name": "NVIDIA H100 80GB HBM3", "count": 1, "source": "raw.tar.xz:gpu.txt"},
        "upstream": "0.5.12",
        "series": {"versions": ["0.5.12+gemma4.gf540dad831"], "sources": ["raw.tar.xz:check.log"]},
        "commands": ["OUT=$R/ab bash scripts/gpu/check.sh ab"],
        "variants": ["26b-a4b"],
        "setups": {"pristine": "sglang as released", "patched": "the series"},
        "figures": [
            {
                "variant": "26b-a4b",
                "workload": "batch1",
                "metric": "median TPOT",
                "unit": "ms",
                "values": {"pristine": "6.01", "patched": "4.31"},
                "source": "raw.tar.xz:ab/summary.md",
                "patches": [PATCH],
            },
            {
                "variant": "26b-a4b",
                "workload": "chat",
                "metric": "output throughput",
                "unit": "tok/s",
                "values": {"pristine": "2849.68", "patched": "3528.29"},
                "source": "raw.tar.xz:ab/summary.md",
            },
        ],
    }
    data.update(changes)
    return data


def make_run(
    root: Path,
    name: str = "2026-11-23-h100-26b-a4b-gf540dad831-ab",
    data: dict | None = None,
    packed: bool = True,
) -> Path:
    folder = root / name
    (folder / "ab").mkdir(parents=True)
    (folder / "README.md").write_text("# a run\n")
    (folder / "result.json").write_text(json.dumps(data or result()))
    (folder / "gpu.txt").write_text("NVIDIA H100 80GB HBM3, 81559 MiB\n")
    (folder / "check.log").write_text("setup: series 0.5.12+gemma4.gf540dad831\n")
    (folder / "ab" / "summary.md").write_text(SUMMARY)
    (folder / "ab" / "summary.png").write_bytes(b"\x89PNG")
    if packed:
        archive.pack(folder)
    return folder
