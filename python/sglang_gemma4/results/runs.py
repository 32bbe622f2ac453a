"""Measured results as data: each run folder under benchmark_results/ holds a `result.json` beside
its README, its raw files in one `raw.tar.xz`, and its plots as PNG. From the result.json files this
package writes the folder index (benchmark_results/README.md), the README's current-results table
and the `Bench:` line of every patch that has results (render.py), so that a quoted figure exists
in one place only; archive.py packs the raw files and checks each figure against its source. This
module reads and checks result.json.

result.json (every key required unless marked optional):

    summary     one line: what the run holds (the index shows it)
    valid       false for a run kept as evidence of a harness defect: none of its figures is quoted
    measured    "YYYY-MM-DD HH:MM", the first timestamp in the run's logs (GPU host clock), or the
                folder's date where the logs carry none; orders the runs
    gpu         {"name", "count", "source"}: the GPU as gpu.txt or a log names it, and that file (or
                README.md, or "folder name" where nothing else records it)
    upstream    the sglang release the series was applied to, e.g. "0.5.12"
    series      {"versions", "sources"}: the series versions (`make version`) that ran, e.g.
                "0.5.12+gemma4.g30374d8e81", and the files that name them (each version in one)
    commands    the command lines that produced the raw files
    variants    the Gemma 4 shapes served or timed: e2b, e4b, 26b-a4b, 31b
    setups      {name: what it is}: the builds and switches compared
    figures     the numbers the run's README quotes, each
                  {"variant", "workload", "metric", "unit", "values": {setup: "decimal"}, "source",
                   "patches" (optional), "note" (optional)}
                with one value, or two (baseline first: the ratio is the second over the first);
                values are strings so that their precision is kept, or "refused" where the
                server refused the workload (e.g. a prompt longer than its pool; the source says
                so); `source` is the raw file the numbers are read from, "raw.tar.xz:INNER/PATH" or
                a plain file of the folder, or {setup: file} where each value comes from its own
                file; a figure whose source is README.md (quoted there, not found in a raw file)
                needs a `note` saying where the README says it came from; `patches` names the
                patches whose Bench: line quotes the figure

A source is cited as `raw.tar.xz:path/in/archive`; the same form is what a README uses for a raw
file.
"""

import json
import re
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from sglang_gemma4.results.errors import ResultsError

RESULTS_DIR = "benchmark_results"
# A run folder sits in benchmark_results/ or in a folder of the release it ran on: sglang-<release>/
RELEASE_GROUP = re.compile(r"^sglang-(\d+(?:\.\d+)+)$")
RESULT_FILE = "result.json"
RAW_ARCHIVE = "raw.tar.xz"
RAW_PREFIX = RAW_ARCHIVE + ":"
PLAIN_NAMES = ("README.md", RESULT_FILE)  # with *.png, what stays a plain file in a run folder
FOLDER_NAME = "folder name"  # the source of a GPU or series that only the folder's name records
MEASURED = re.compile(r"^\d{4}-\d{2}-\d{2}( \d{2}:\d{2})?$")
DECIMAL = re.compile(r"^-?\d+(\.\d+)?$")
REFUSED = "refused"  # a value: the server refused the workload, nothing was measured
VARIANT_NAMES = {"e2b": "E2B", "e4b": "E4B", "26b-a4b": "26B-A4B", "31b": "31B"}
FIGURE_KEYS = {"variant", "workload", "metric", "unit", "values", "source", "patches", "note"}
RUN_KEYS = {
    "summary",
    "valid",
    "measured",
    "gpu",
    "upstream",
    "series",
    "commands",
    "variants",
    "setups",
    "figures",
}


@dataclass(frozen=True)
class Figure:
    variant: str
    workload: str
    metric: str
    unit: str
    values: tuple[tuple[str, str], ...]  # (setup, decimal string), baseline first
    sources: tuple[str, ...]  # the file each value is read from, in the order of `values`
    patches: tuple[str, ...] = ()
    note: str = ""

    @property
    def setups(self) -> tuple[str, ...]:
        return tuple(setup for setup, _ in self.values)

    @property
    def ratio(self) -> Decimal | None:
        if (
            len(self.values) != 2
            or REFUSED in dict(self.values).values()
            or Decimal(self.values[0][1]) == 0
        ):
            return None
        return Decimal(self.values[1][1]) / Decimal(self.values[0][1])

    def measure_text(self) -> str:
        """`median TPOT 6.01 -> 4.31 ms (x0.717)`, or `launch to ready 137.1 s` for one setup; with
        a refused side, `median TTFT refused -> 5012.3 ms` (each number with its unit)."""
        if any(value == REFUSED for _, value in self.values):
            return f"{self.metric} " + " -> ".join(
                value if value == REFUSED else f"{value} {self.unit}".rstrip()
                for _, value in self.values
            )
        numbers = " -> ".join(value for _, value in self.values)
        ratio = f" (x{self.ratio:.3f})" if self.ratio is not None else ""
        return f"{self.metric} {numbers} {self.unit}".rstrip() + ratio


@dataclass(frozen=True)
class Run:
    folder: Path
    summary: str
    valid: bool
    measured: str
    gpu: str
    gpu_count: int
    gpu_source: str
    upstream: str
    versions: tuple[str, ...]
    versions_sources: tuple[str, ...]
    commands: tuple[str, ...]
    variants: tuple[str, ...]
    setups: dict[str, str]
    figures: tuple[Figure, ...]

    @property
    def name(self) -> str:
        return self.folder.name

    @property
    def path(self) -> str:
        """The folder as it sits under benchmark_results/: NAME, or sglang-<release>/NAME."""
        group = self.folder.parent.name
        return f"{group}/{self.name}" if RELEASE_GROUP.match(group) else self.name

    @property
    def gpu_label(self) -> str:
        """H100 / H200 / 2 x H200: the model, without memory size and product suffixes."""
        model = re.search(r"[A-Z]\d{2,3}", self.gpu)
        label = model.group() if model else self.gpu
        return f"{self.gpu_count} x {label}" if self.gpu_count > 1 else label

    @property
    def series_label(self) -> str:
        """g30374d8e81 (several joined by /): the series hash of each version."""
        return "/".join(v.rsplit(".", 1)[-1] for v in self.versions)


def _require(data: dict, key: str, kind: type, where: str):
    value = data.get(key)
    if not isinstance(value, kind) or (kind is not bool and not value and value != 0):
        raise ResultsError(f"{where}: `{key}` must be a non-empty {kind.__name__}")
    return value


def _figure(data: dict, setups: dict[str, str], where: str) -> Figure:
    if not isinstance(data, dict):
        raise ResultsError(f"{where}: must be an object")
    unknown = set(data) - FIGURE_KEYS
    if unknown:
        raise ResultsError(
            f"{where}: unknown keys {sorted(unknown)} (known: {sorted(FIGURE_KEYS)})"
        )
    values = _require(data, "values", dict, where)
    if len(values) not in (1, 2):
        raise ResultsError(
            f"{where}: `values` holds one setup or two (baseline first), not {len(values)}"
        )
    for setup, value in values.items():
        if setup not in setups:
            raise ResultsError(
                f"{where}: setup {setup!r} is not in the run's `setups` ({', '.join(setups)})"
            )
        if not isinstance(value, str) or not (DECIMAL.match(value) or value == REFUSED):
            raise ResultsError(
                f'{where}: value of {setup!r} must be a decimal string such as "4.31" (or '
                f'"{REFUSED}"), got {value!r}'
            )
    source = data.get("source")
    if (
        isinstance(source, dict)
        and list(source) == list(values)
        and all(isinstance(v, str) for v in source.values())
    ):
        sources = tuple(source.values())
    elif isinstance(source, str) and source:
        sources = (source,) * len(values)
    else:
        raise ResultsError(
            f"{where}: `source` must be a file, or {{setup: file}} for the setups of `values`"
        )
    figure = Figure(
        variant=_require(data, "variant", str, where),
        workload=_require(data, "workload", str, where),
        metric=_require(data, "metric", str, where),
        unit=data.get("unit"),
        values=tuple(values.items()),
        sources=sources,
        patches=tuple(data.get("patches", ())),
        note=data.get("note", ""),
    )
    if not isinstance(figure.unit, str):
        raise ResultsError(f"{where}: `unit` must be a string (empty for a plain number)")
    if figure.variant not in VARIANT_NAMES:
        raise ResultsError(
            f"{where}: variant {figure.variant!r} is not one of {', '.join(VARIANT_NAMES)}"
        )
    if "README.md" in figure.sources and not figure.note:
        raise ResultsError(
            f"{where}: a figure read from README.md needs a `note` saying where the README has it "
            "from"
        )
    return figure


def load_run(folder: Path) -> Run:
    path = folder / RESULT_FILE
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise ResultsError(f"{path}: cannot read ({e.strerror})") from e
    except json.JSONDecodeError as e:
        raise ResultsError(f"{path}: not JSON ({e})") from e
    where = str(path)
    if not isinstance(data, dict):
        raise ResultsError(f"{where}: must hold one object")
    if set(data) != RUN_KEYS:
        raise ResultsError(
            f"{where}: keys must be exactly {sorted(RUN_KEYS)}; missing "
            f"{sorted(RUN_KEYS - set(data))}, unknown {sorted(set(data) - RUN_KEYS)}"
        )
    measured = _require(data, "measured", str, where)
    if not MEASURED.match(measured) or not folder.name.startswith(measured[:10]):
        raise ResultsError(
            f"{where}: `measured` must read 'YYYY-MM-DD[ HH:MM]' on the folder's date, got "
            f"{measured!r}"
        )
    gpu, series = _require(data, "gpu", dict, where), _require(data, "series", dict, where)
    upstream = _require(data, "upstream", str, where)
    group = RELEASE_GROUP.match(folder.parent.name)
    if group and group.group(1) != upstream:
        raise ResultsError(f"{where}: a run on sglang {upstream} in {folder.parent.name}/")
    versions = tuple(_require(series, "versions", list, f"{where}: series"))
    bad = [
        v for v in versions if not re.match(rf"^{re.escape(upstream)}\+gemma4\.g[0-9a-f]{{10}}$", v)
    ]
    if bad:
        raise ResultsError(
            f"{where}: series versions must read '{upstream}+gemma4.g<10 hex>', got {bad}"
        )
    setups = _require(data, "setups", dict, where)
    if not isinstance(data["figures"], list):
        raise ResultsError(
            f"{where}: `figures` must be a list (empty for a run that quotes no number)"
        )
    figures = tuple(
        _figure(f, setups, f"{where}: figures[{i}]") for i, f in enumerate(data["figures"])
    )
    if not isinstance(data["valid"], bool) or (figures and not data["valid"]):
        raise ResultsError(
            f"{where}: `valid` must be true or false, and an invalid run quotes no figures"
        )
    return Run(
        folder=folder,
        summary=_require(data, "summary", str, where),
        valid=data["valid"],
        measured=measured,
        gpu=_require(gpu, "name", str, f"{where}: gpu"),
        gpu_count=_require(gpu, "count", int, f"{where}: gpu"),
        gpu_source=_require(gpu, "source", str, f"{where}: gpu"),
        upstream=upstream,
        versions=versions,
        versions_sources=tuple(_require(series, "sources", list, f"{where}: series")),
        commands=tuple(_require(data, "commands", list, where)),
        variants=tuple(_require(data, "variants", list, where)),
        setups=setups,
        figures=figures,
    )


def run_folders(results_dir: Path) -> list[Path]:
    """Every run folder: those directly under `results_dir` and those in its sglang-<release>/."""
    folders = []
    for p in sorted(results_dir.iterdir()):
        if p.is_dir() and RELEASE_GROUP.match(p.name):
            folders += sorted(q for q in p.iterdir() if q.is_dir())
        elif p.is_dir():
            folders.append(p)
    return folders


def load_runs(results_dir: Path) -> list[Run]:
    """Every run, oldest first."""
    missing = [p.name for p in run_folders(results_dir) if not (p / RESULT_FILE).is_file()]
    if missing:
        raise ResultsError(f"{results_dir}: no {RESULT_FILE} in {', '.join(missing)}")
    return sorted(
        (load_run(p) for p in run_folders(results_dir)), key=lambda r: (r.measured, r.name)
    )
