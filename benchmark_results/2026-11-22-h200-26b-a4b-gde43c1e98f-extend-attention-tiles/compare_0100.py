# Patch 0100's tile vs the shipped one, read from tiles.jsonl files (time and max rel err per case).
import json, sys
CHOICE = {("sliding", True): [16, 64, 4, 2], ("sliding", False): [64, 64, 8, 2],
          ("full", True): [16, 64, 4, 1], ("full", False): [32, 64, 8, 2]}
print("| case | layer | " + " | ".join(f"{p.split('/')[-1]}: shipped us | 0100 us | ratio" for p in sys.argv[1:]) + " |")
tables = [[json.loads(l) for l in open(p)] for p in sys.argv[1:]]
keys = [(r["case"], r["layer"]) for r in tables[0] if r["shipped"]]
for case, layer in keys:
    cells = []
    for rows in tables:
        new = next(r["new"] for r in rows if r["case"] == case)
        pick = CHOICE[(layer, new <= 16)]
        shipped = next(r for r in rows if r["case"] == case and r["layer"] == layer and r["shipped"])
        ours = next(r for r in rows if r["case"] == case and r["layer"] == layer and not r["shipped"] and r["tile"] == pick)
        cells.append(f"{shipped['us']:.1f} | {ours['us']:.1f} (err {ours['max_rel_err']:.1e}) | {ours['us'] / shipped['us']:.2f}")
    print(f"| {case} | {layer} | " + " | ".join(cells) + " |")
