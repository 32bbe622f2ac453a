"""Where a server's start goes, read from its log (issue #10 part 3).

    python -m sglang_gemma4.gpu.studies.start_times LOG [LOG ...] [--markdown]

For each sglang server log: the launch preset's prebuild of CUDA modules, which runs before the
server and so before its first log line (sglang_gemma4.gpu.serve.prebuild's own total), the time
from the first log line to weight loading done, the decode CUDA-graph capture and the piecewise
capture (sglang's own "Time elapsed"), and the first line to "The server is fired up" (ready).
Decode graph sizes come from the logged server arguments (0.5.12) or the decode capture's first line
(0.5.17).
"""

import argparse
import json
import re
from datetime import datetime
from pathlib import Path

STAMP = r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\]"
# 0.5.12's wording, then 0.5.17's (decode graphs; piecewise prefill graphs became breakable ones)
CAPTURE = (
    r"Capture (?:cuda graph|target decode CUDA graph) end\. (?:Time elapsed: |elapsed=)([\d.]+) s"
)
PIECEWISE = (
    r"Capture (?:piecewise|target prefill) CUDA graph end\. (?:Time elapsed: |elapsed=)([\d.]+) s"
)
PREBUILD = r"^prebuild: \d+ of \d+ modules ready in ([\d.]+) s"
# the decode graphs' batch sizes: 0.5.12 logs them with the server arguments, 0.5.17 where it
# captures
GRAPH_SIZES = r"(?:cuda_graph_bs=|Capture target decode CUDA graph begin\..* bs=)\[([\d, ]*)\]"


def _stamp(line: str) -> datetime | None:
    match = re.match(STAMP, line)
    return datetime.fromisoformat(match.group(1)) if match else None


def _first(pattern: str, text: str) -> float | None:
    match = re.search(pattern, text, re.MULTILINE)
    return float(match.group(1)) if match else None


def _stamp_of(lines: list[str], needle: str) -> datetime | None:
    return next((stamp for line in lines if needle in line and (stamp := _stamp(line))), None)


def start_times(text: str) -> dict:
    lines = text.splitlines()
    first = next((s for s in map(_stamp, lines) if s), None)
    loaded, ready = _stamp_of(lines, "Load weight end"), _stamp_of(lines, "The server is fired up")
    graph_bs = re.search(GRAPH_SIZES, text)
    return {
        "prebuild_s": _first(PREBUILD, text),
        "weights_loaded_s": (loaded - first).total_seconds() if first and loaded else None,
        "decode_capture_s": _first(CAPTURE, text),
        "piecewise_capture_s": _first(PIECEWISE, text),
        "ready_s": (ready - first).total_seconds() if first and ready else None,
        "decode_graph_sizes": len(graph_bs.group(1).split(","))
        if graph_bs and graph_bs.group(1)
        else 0,
        "piecewise": "disable_piecewise_cuda_graph=False" in text
        or re.search(PIECEWISE, text) is not None,
    }


def _cell(seconds: float | None) -> str:
    """A table cell: '-' where the log has no such step (a 0.0 s prebuild is a step)."""
    return "-" if seconds is None else str(seconds)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("logs", nargs="+")
    parser.add_argument("--markdown", action="store_true", help="a table instead of JSON lines")
    return parser


def main() -> int:
    args = parser().parse_args()
    rows = [{"log": log, **start_times(Path(log).read_text(errors="replace"))} for log in args.logs]
    if not args.markdown:
        print("\n".join(json.dumps(r) for r in rows))
        return 0
    print(
        "| log | decode graph sizes | piecewise | prebuild (s) | weights loaded (s) | "
        "decode capture (s) | "
        "piecewise capture (s) | ready (s) |\n|---|---|---|---|---|---|---|---|"
    )
    for r in rows:
        print(
            f"| `{r['log']}` | {r['decode_graph_sizes']} | {'on' if r['piecewise'] else 'off'} | "
            f"{_cell(r['prebuild_s'])} | {r['weights_loaded_s']} | {r['decode_capture_s']} | "
            f"{_cell(r['piecewise_capture_s'])} | {r['ready_s']} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
