"""sglang_gemma4.gpu.kernels.compare_0100_tiles: its tile table is patch 0100's, and it pairs each
case's shipped tile with 0100's pick (short tile for verify-sized extends) from every tiles.jsonl it
is given."""

import json
import re
from pathlib import Path

import pytest

from sglang_gemma4.gpu.kernels import compare_0100_tiles as compare

REPO = Path(__file__).resolve().parents[3]


def test_tiles_are_the_ones_patch_0100_returns():
    patch = (REPO / "patches" / "0100-hopper-extend-attention-tiles.patch").read_text()
    tile = r"\((\d+, \d+, \d+, \d+)\)"
    picks = re.findall(rf"^\+\s+return {tile} if short else {tile}$", patch, re.M)
    as_tuple = [tuple(int(x) for x in t.split(", ")) for pair in picks for t in pair]
    assert as_tuple == [
        compare.TILES[("sliding", True)],
        compare.TILES[("sliding", False)],
        compare.TILES[("full", True)],
        compare.TILES[("full", False)],
    ]
    assert f"_HOPPER_SHORT_EXTEND_TOKENS = {compare.SHORT_EXTEND_TOKENS}" in patch


def rows(scale: float) -> list[dict]:
    out = []
    for case, new in (("prefill-1x1000", 1000), ("verify-32x4+64", 4)):
        for layer in ("sliding", "full"):
            pick = compare.TILES[(layer, new <= 16)]
            out += [
                {
                    "case": case,
                    "layer": layer,
                    "new": new,
                    "tile": [128, 64, 8, 1],
                    "shipped": True,
                    "max_rel_err": 0.0,
                    "us": 100.0 * scale,
                },
                {
                    "case": case,
                    "layer": layer,
                    "new": new,
                    "tile": list(pick),
                    "shipped": False,
                    "max_rel_err": 1e-4,
                    "us": 40.0 * scale,
                },
                {
                    "case": case,
                    "layer": layer,
                    "new": new,
                    "tile": [32, 32, 4, 2],
                    "shipped": False,
                    "max_rel_err": 5e-3,
                    "us": 10.0,
                },
            ]  # faster, but not 0100's pick
    return out


def test_table_pairs_each_case_with_0100s_tile_in_every_file(tmp_path, capsys):
    a, b = tmp_path / "h100.jsonl", tmp_path / "h200.jsonl"
    a.write_text("\n".join(json.dumps(r) for r in rows(1.0)) + "\n")
    b.write_text("\n".join(json.dumps(r) for r in rows(2.0)) + "\n")
    assert compare.main([str(a), str(b)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 + 4  # head, rule, one row per case and layer
    assert lines[2] == (
        "| prefill-1x1000 | sliding | 100.0 | 40.0 (1.0e-04) | 0.40 | 200.0 | 80.0 "
        "(1.0e-04) | 0.40 |"
    )


def test_a_file_without_0100s_tile_is_an_error(tmp_path, capsys):
    data = [
        r
        for r in rows(1.0)
        if not (
            r["case"] == "verify-32x4+64"
            and r["layer"] == "full"
            and tuple(r["tile"]) == compare.TILES[("full", True)]
        )
    ]
    path = tmp_path / "tiles.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in data) + "\n")
    assert compare.main([str(path)]) == 1
    assert "verify-32x4+64 full: no timing of 0100's tile (16, 64, 4, 1)" in capsys.readouterr().err


@pytest.mark.parametrize("layer", ["sliding", "full"])
def test_long_extends_take_the_prefill_tile(layer):
    shipped, chosen = compare.pair(rows(1.0), "prefill-1x1000", layer)
    assert shipped["shipped"] and tuple(chosen["tile"]) == compare.TILES[(layer, False)]
