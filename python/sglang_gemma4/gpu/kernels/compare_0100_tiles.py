"""Patch 0100's Hopper extend-attention tiles against the tile sglang ships, read from the
tiles.jsonl files that bench_extend_attention_tiles writes (one per GPU): per case and layer the
shipped tile's time, 0100's tile's time and max relative error, and their ratio; one column group
per file.

    python -m sglang_gemma4.gpu.kernels.compare_0100_tiles H100/tiles.jsonl H200/tiles.jsonl

Needs no GPU and nothing but the standard library.
"""

import argparse
import json
import sys
from pathlib import Path

SHORT_EXTEND_TOKENS = (
    16  # patch 0100: a batch whose longest extend is at most this takes the short tile
)
# patch 0100's _get_hopper_extend_tile, (BLOCK_M, BLOCK_N, num_warps, num_stages) by (layer, short)
TILES = {
    ("sliding", True): (16, 64, 4, 2),
    ("sliding", False): (64, 64, 8, 2),
    ("full", True): (16, 64, 4, 1),
    ("full", False): (32, 64, 8, 2),
}


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def pair(rows: list[dict], case: str, layer: str) -> tuple[dict, dict]:
    """The shipped tile's row and patch 0100's row for one case and layer."""
    mine = [r for r in rows if r["case"] == case and r["layer"] == layer]
    shipped = next((r for r in mine if r["shipped"]), None)
    if shipped is None:
        raise ValueError(f"{case} {layer}: no row of the shipped tile")
    tile = TILES[(layer, shipped["new"] <= SHORT_EXTEND_TOKENS)]
    chosen = next((r for r in mine if not r["shipped"] and tuple(r["tile"]) == tile), None)
    if chosen is None or chosen.get("us") is None:
        raise ValueError(f"{case} {layer}: no timing of 0100's tile {tile}")
    return shipped, chosen


def table(files: dict[str, list[dict]]) -> str:
    names = list(files)
    head = (
        "| case | layer | "
        + " | ".join(f"{n}: shipped us | 0100 us (max rel err) | ratio" for n in names)
        + " |"
    )
    lines = [head, "|---|---|" + "---|---|---|" * len(names)]
    first = files[names[0]]
    for row in (r for r in first if r["shipped"]):
        cells = []
        for name in names:
            shipped, chosen = pair(files[name], row["case"], row["layer"])
            cells.append(
                f"{shipped['us']:.1f} | {chosen['us']:.1f} ({chosen['max_rel_err']:.1e}) | "
                f"{chosen['us'] / shipped['us']:.2f}"
            )
        lines.append(f"| {row['case']} | {row['layer']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("tiles", nargs="+", type=Path, help="tiles.jsonl files, one per GPU")
    args = p.parse_args(argv)
    try:
        print(table({str(path): read_rows(path) for path in args.tiles}))
    except (OSError, KeyError, ValueError) as e:
        print(f"compare_0100_tiles: {e!r}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
