"""Measured results as data: each run folder under benchmark_results/ holds a `result.json` beside its
README, its raw files in one `raw.tar.xz`, and its plots as PNG. From the result.json files this
module writes the folder index (benchmark_results/README.md), the README's current-results table and
the `Bench:` line of every patch that has results, so that a quoted figure exists in one place only.

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
                values are strings so that their precision is kept; `source` is the raw file the
                numbers are read from, "raw.tar.xz:INNER/PATH" or a plain file of the folder, or
                {setup: file} where each value comes from its own file; a figure
                whose source is README.md (quoted there, not found in a raw file) needs a `note`
                saying where the README says it came from; `patches` names the patches whose
                Bench: line quotes the figure

A source is cited as `raw.tar.xz:path/in/archive`; the same form is what a README uses for a raw file.
"""

import json
import re
import tarfile
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

from sglang_gemma4.stack.errors import StackError
from sglang_gemma4.stack.readme_table import replace_block

RESULTS_DIR = "benchmark_results"
RESULT_FILE = "result.json"
RAW_ARCHIVE = "raw.tar.xz"
RAW_PREFIX = RAW_ARCHIVE + ":"
PLAIN_NAMES = ("README.md", RESULT_FILE)  # with *.png, what stays a plain file in a run folder
FOLDER_NAME = "folder name"  # the source of a GPU or series that only the folder's name records
MEASURED = re.compile(r"^\d{4}-\d{2}-\d{2}( \d{2}:\d{2})?$")
DECIMAL = re.compile(r"^-?\d+(\.\d+)?$")
NUMBER_IN_TEXT = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:[eE][-+]?\d+)?")
VARIANT_NAMES = {"e2b": "E2B", "e4b": "E4B", "26b-a4b": "26B-A4B", "31b": "31B"}
FIGURE_KEYS = {"variant", "workload", "metric", "unit", "values", "source", "patches", "note"}
RUN_KEYS = {"summary", "valid", "measured", "gpu", "upstream", "series", "commands", "variants", "setups",
            "figures"}


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
        if len(self.values) != 2 or Decimal(self.values[0][1]) == 0:
            return None
        return Decimal(self.values[1][1]) / Decimal(self.values[0][1])

    def measure_text(self) -> str:
        """`median TPOT 6.01 -> 4.31 ms (x0.717)`, or `launch to ready 137.1 s` for one setup."""
        numbers = " -> ".join(value for _, value in self.values)
        ratio = f" (x{self.ratio:.3f})" if self.ratio is not None else ""
        return f"{self.metric} {numbers} {self.unit}".rstrip() + ratio


def grouped_text(figures: list[Figure]) -> str:
    """`26B-A4B batch1 (...), pristine vs patched: median TPOT 6.01 -> 4.31 ms (x0.717), ...; ...`:
    the figures grouped by variant, workload and setups, in their order."""
    groups: dict[tuple, list[Figure]] = {}
    for figure in figures:
        groups.setdefault((figure.variant, figure.workload, figure.setups), []).append(figure)
    return "; ".join(f"{VARIANT_NAMES[variant]} {workload}, {' vs '.join(setups)}: "
                     + ", ".join(f.measure_text() for f in group)
                     for (variant, workload, setups), group in groups.items())


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
        raise StackError(f"{where}: `{key}` must be a non-empty {kind.__name__}")
    return value


def _figure(data: dict, setups: dict[str, str], where: str) -> Figure:
    if not isinstance(data, dict):
        raise StackError(f"{where}: must be an object")
    unknown = set(data) - FIGURE_KEYS
    if unknown:
        raise StackError(f"{where}: unknown keys {sorted(unknown)} (known: {sorted(FIGURE_KEYS)})")
    values = _require(data, "values", dict, where)
    if len(values) not in (1, 2):
        raise StackError(f"{where}: `values` holds one setup or two (baseline first), not {len(values)}")
    for setup, value in values.items():
        if setup not in setups:
            raise StackError(f"{where}: setup {setup!r} is not in the run's `setups` ({', '.join(setups)})")
        if not isinstance(value, str) or not DECIMAL.match(value):
            raise StackError(f"{where}: value of {setup!r} must be a decimal string such as \"4.31\", got {value!r}")
    source = data.get("source")
    if isinstance(source, dict) and list(source) == list(values) and all(isinstance(v, str) for v in source.values()):
        sources = tuple(source.values())
    elif isinstance(source, str) and source:
        sources = (source,) * len(values)
    else:
        raise StackError(f"{where}: `source` must be a file, or {{setup: file}} for the setups of `values`")
    figure = Figure(
        variant=_require(data, "variant", str, where), workload=_require(data, "workload", str, where),
        metric=_require(data, "metric", str, where), unit=data.get("unit"),
        values=tuple(values.items()), sources=sources,
        patches=tuple(data.get("patches", ())), note=data.get("note", ""))
    if not isinstance(figure.unit, str):
        raise StackError(f"{where}: `unit` must be a string (empty for a plain number)")
    if figure.variant not in VARIANT_NAMES:
        raise StackError(f"{where}: variant {figure.variant!r} is not one of {', '.join(VARIANT_NAMES)}")
    if "README.md" in figure.sources and not figure.note:
        raise StackError(f"{where}: a figure read from README.md needs a `note` saying where the README has it from")
    return figure


def load_run(folder: Path) -> Run:
    path = folder / RESULT_FILE
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise StackError(f"{path}: cannot read ({e.strerror})") from e
    except json.JSONDecodeError as e:
        raise StackError(f"{path}: not JSON ({e})") from e
    where = str(path)
    if not isinstance(data, dict):
        raise StackError(f"{where}: must hold one object")
    if set(data) != RUN_KEYS:
        raise StackError(f"{where}: keys must be exactly {sorted(RUN_KEYS)}; missing "
                         f"{sorted(RUN_KEYS - set(data))}, unknown {sorted(set(data) - RUN_KEYS)}")
    measured = _require(data, "measured", str, where)
    if not MEASURED.match(measured) or not folder.name.startswith(measured[:10]):
        raise StackError(f"{where}: `measured` must read 'YYYY-MM-DD[ HH:MM]' on the folder's date, got {measured!r}")
    gpu, series = _require(data, "gpu", dict, where), _require(data, "series", dict, where)
    upstream = _require(data, "upstream", str, where)
    versions = tuple(_require(series, "versions", list, f"{where}: series"))
    bad = [v for v in versions if not re.match(rf"^{re.escape(upstream)}\+gemma4\.g[0-9a-f]{{10}}$", v)]
    if bad:
        raise StackError(f"{where}: series versions must read '{upstream}+gemma4.g<10 hex>', got {bad}")
    setups = _require(data, "setups", dict, where)
    if not isinstance(data["figures"], list):
        raise StackError(f"{where}: `figures` must be a list (empty for a run that quotes no number)")
    figures = tuple(_figure(f, setups, f"{where}: figures[{i}]") for i, f in enumerate(data["figures"]))
    if not isinstance(data["valid"], bool) or (figures and not data["valid"]):
        raise StackError(f"{where}: `valid` must be true or false, and an invalid run quotes no figures")
    return Run(
        folder=folder, summary=_require(data, "summary", str, where), valid=data["valid"], measured=measured,
        gpu=_require(gpu, "name", str, f"{where}: gpu"), gpu_count=_require(gpu, "count", int, f"{where}: gpu"),
        gpu_source=_require(gpu, "source", str, f"{where}: gpu"), upstream=upstream, versions=versions,
        versions_sources=tuple(_require(series, "sources", list, f"{where}: series")),
        commands=tuple(_require(data, "commands", list, where)), variants=tuple(_require(data, "variants", list, where)),
        setups=setups, figures=figures)


def run_folders(results_dir: Path) -> list[Path]:
    return sorted(p for p in results_dir.iterdir() if p.is_dir())


def load_runs(results_dir: Path) -> list[Run]:
    """Every run, oldest first."""
    missing = [p.name for p in run_folders(results_dir) if not (p / RESULT_FILE).is_file()]
    if missing:
        raise StackError(f"{results_dir}: no {RESULT_FILE} in {', '.join(missing)}")
    return sorted((load_run(p) for p in run_folders(results_dir)), key=lambda r: (r.measured, r.name))


# -- raw archives --------------------------------------------------------------------------------

def is_plain(relative: Path) -> bool:
    return relative.name in PLAIN_NAMES or relative.suffix == ".png"


def pack(folder: Path) -> list[str]:
    """Move every raw file of `folder` (all but README, result.json and PNGs) into raw.tar.xz.

    The archive is reproducible (sorted members, no times or owners), so packing the same files twice
    gives the same bytes. Refuses a folder that already has an archive. Returns the packed paths.
    """
    archive = folder / RAW_ARCHIVE
    if archive.exists():
        raise StackError(f"{archive}: exists; unpack it first to add files")
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not is_plain(p.relative_to(folder)))
    if not files:
        raise StackError(f"{folder}: no raw files to pack")
    with tarfile.open(archive, "w:xz", preset=9) as tar:
        for path in files:
            info = tarfile.TarInfo(path.relative_to(folder).as_posix())
            info.size, info.mode = path.stat().st_size, 0o644
            with path.open("rb") as f:
                tar.addfile(info, f)
    for path in files:
        path.unlink()
    for directory in sorted((p for p in folder.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        if not any(directory.iterdir()):
            directory.rmdir()
    return [p.relative_to(folder).as_posix() for p in files]


def read_archive(folder: Path, wanted: set[str] | None = None) -> dict[str, bytes | None]:
    """Member names of the folder's raw.tar.xz, with the bytes of those in `wanted` (others None)."""
    archive = folder / RAW_ARCHIVE
    members: dict[str, bytes | None] = {}
    if not archive.is_file():
        return members
    with tarfile.open(archive, "r:xz") as tar:
        for info in tar:
            if info.isfile():
                keep = wanted is not None and info.name in wanted
                members[info.name] = tar.extractfile(info).read() if keep else None
    return members


def number_appears(value: str, text: str) -> bool:
    """Whether `text` holds a number that rounds to `value` at value's precision (4.31 matches 4.3125)."""
    decimals = len(value.partition(".")[2])
    target, half = Decimal(value), Decimal(5) / Decimal(10) ** (decimals + 1)
    for match in NUMBER_IN_TEXT.finditer(text):
        try:
            if abs(Decimal(match.group().replace(",", "")) - target) <= half:
                return True
        except InvalidOperation:
            continue
    return False


def provenance_problems(run: Run, patch_names: set[str]) -> list[str]:
    """Every figure, GPU name and series version of `run` that its cited source does not hold."""
    sources = {s for f in run.figures for s in f.sources} | {run.gpu_source, *run.versions_sources}
    wanted = {s[len(RAW_PREFIX):] for s in sources if s.startswith(RAW_PREFIX)}
    members = read_archive(run.folder, wanted)
    where = f"{run.folder.name}/{RESULT_FILE}"

    def text_of(source: str) -> str | None:
        if source == FOLDER_NAME:
            return run.folder.name
        if source.startswith(RAW_PREFIX):
            data = members.get(source[len(RAW_PREFIX):])
        else:
            path = run.folder / source
            data = path.read_bytes() if source in PLAIN_NAMES and path.is_file() else None
        return None if data is None else data.decode(errors="replace")

    problems = []
    for source in sorted(sources):
        if text_of(source) is None:
            problems.append(f"{where}: source {source} is neither a member of {RAW_ARCHIVE}, README.md nor "
                            f"the {FOLDER_NAME}")
    gpu_text = text_of(run.gpu_source)
    if gpu_text is not None and run.gpu.lower() not in gpu_text.lower():
        problems.append(f"{where}: gpu {run.gpu!r} is not named in {run.gpu_source}")
    series_text = "\n".join(text_of(s) or "" for s in run.versions_sources)
    for version in run.versions:
        if version.rsplit(".", 1)[-1] not in series_text:
            problems.append(f"{where}: series {version} is named in none of {', '.join(run.versions_sources)}")
    for i, figure in enumerate(run.figures):
        for (setup, value), source in zip(figure.values, figure.sources):
            text = text_of(source)
            if text is not None and not number_appears(value, text):
                problems.append(f"{where}: figures[{i}] {figure.metric!r} {setup}={value} is not in {source}")
        problems += [f"{where}: figures[{i}] names patch {p}, which is not in patches/series"
                     for p in figure.patches if p not in patch_names]
    return problems


# -- generated text --------------------------------------------------------------------------------

RESULTS_BEGIN = "<!-- results-table: generated by `make readme` from benchmark_results/*/result.json -->"
RESULTS_END = "<!-- /results-table -->"
INDEX_HEAD = """# Measured results

One folder per run: `README.md` (what ran, what it shows), `result.json` (the figures it quotes,
each with the raw file it comes from; schema in `python/sglang_gemma4/stack/results.py`), `raw.tar.xz`
(the raw output: logs, JSONL, tables, traces) and the PNG plots. A README cites a raw file as
`raw.tar.xz:path/inside`; `tar -xJf raw.tar.xz path/inside` extracts it. Folders are named
`<date>-<gpu>-<variant>-g<series hash>-<workload>`. A run marked invalid is kept as evidence of a
harness defect: quote none of its numbers.

This index, the README's results table and the patches' `Bench:` lines are generated from the
result.json files by `make readme`. A new run: copy its output here, write its README.md and
result.json, then `.venv/bin/sglang-gemma4 pack-run benchmark_results/<run>` moves the raw files into
its raw.tar.xz, and `make readme`.
"""


def index_markdown(runs: list[Run]) -> str:
    lines = [INDEX_HEAD, "| run | GPU | sglang | series | what it holds |", "|---|---|---|---|---|"]
    for run in runs:
        summary = run.summary if run.valid else f"**invalid**: {run.summary}"
        lines.append(f"| [{run.name}]({run.name}/README.md) | {run.gpu_label} | {run.upstream} | "
                     f"{run.series_label} | {summary} |")
    return "\n".join(lines) + "\n"


def comparison_rows(runs: list[Run], setups: tuple[str, ...]) -> list[tuple[Run, list[Figure]]]:
    """For each (variant, workload, GPU) compared between exactly `setups`: the newest run's figures."""
    newest: dict[tuple[str, str, str], tuple[Run, list[Figure]]] = {}
    for run in runs:  # oldest first, so a later run replaces an earlier one
        found: dict[tuple[str, str, str], list[Figure]] = {}
        for figure in run.figures:
            if figure.setups == setups:
                found.setdefault((figure.variant, figure.workload, run.gpu_label), []).append(figure)
        for key, figures in found.items():
            newest[key] = (run, figures)
    order = list(VARIANT_NAMES)
    return [newest[k] for k in sorted(newest, key=lambda k: (order.index(k[0]), k[1], k[2]))]


def results_table(runs: list[Run], pin_version: str) -> str:
    rows = comparison_rows(runs, ("pristine", "patched"))
    on_pin = [run for run, _ in rows if run.upstream == pin_version]
    lines = [f"Pristine sglang vs the patched build, same call, newest run per variant, workload and GPU "
             f"(one run a side unless the run's README says otherwise). The stack is pinned to sglang "
             f"{pin_version}; " + ("every row says which release it was measured on." if on_pin else
                                   f"no run on {pin_version} yet: every row below was measured on an "
                                   f"earlier release and series, named in its row."),
             "", "| variant | workload | pristine -> patched (patched / pristine) | GPU | measured on | run |",
             "|---|---|---|---|---|---|"]
    for run, figures in rows:
        cells = ", ".join(f.measure_text() for f in figures)
        lines.append(f"| {VARIANT_NAMES[figures[0].variant]} | {figures[0].workload} | {cells} | {run.gpu_label} | "
                     f"sglang {run.upstream}, series {run.series_label} | "
                     f"[{run.name}](benchmark_results/{run.name}/README.md) |")
    return "\n".join(lines)


def bench_line(patch: str, runs: list[Run], pin_version: str) -> str | None:
    """The Bench: value of `patch`: its figures, newest run first; None when no run quotes it."""
    quoting = [(run, [f for f in run.figures if patch in f.patches]) for run in reversed(runs)]
    quoting = [(run, figures) for run, figures in quoting if figures]
    if not quoting:
        return None
    paths = ", ".join(f"benchmark_results/{run.name}/README.md" for run, _ in quoting)
    groups = [f"{run.gpu_label}, sglang {run.upstream} series {run.series_label}: {grouped_text(figures)}"
              for run, figures in quoting]
    releases = sorted({run.upstream for run, _ in quoting})
    tail = "" if pin_version in releases else f" (not measured on sglang {pin_version} yet)"
    return f"{paths}; " + " | ".join(groups) + tail


def set_field(header_text: str, field: str, value: str) -> str:
    """The patch text with the one-line header field `field` set to `value`."""
    pattern = re.compile(rf"^{re.escape(field)}:[^\n]*(\n[ \t][^\n]*)*", re.M)
    head_end = header_text.find("\ndiff --git ")
    head = header_text if head_end < 0 else header_text[:head_end]
    if not pattern.search(head):
        raise StackError(f"no {field}: field in the header")
    new_head = pattern.sub(lambda _: f"{field}: {value}", head, count=1)
    return new_head + ("" if head_end < 0 else header_text[head_end:])


def update_bench_lines(patch_paths: list[Path], runs: list[Run], pin_version: str) -> list[str]:
    """Rewrite the Bench: line of every patch a run quotes; returns the names of the patches changed."""
    changed = []
    for path in patch_paths:
        line = bench_line(path.name, runs, pin_version)
        if line is None:
            continue
        text = path.read_text()
        try:
            new = set_field(text, "Bench", line)
        except StackError as e:
            raise StackError(f"{path}: {e}") from None
        if new != text:
            path.write_text(new)
            changed.append(path.name)
    return changed


def regenerate(root: Path, pin_version: str, patch_paths: list[Path]) -> str:
    """Write the index, the README's results table and the Bench: lines from the result.json files."""
    runs = load_runs(root / RESULTS_DIR)
    (root / RESULTS_DIR / "README.md").write_text(index_markdown(runs))
    replace_block(root / "README.md", RESULTS_BEGIN, RESULTS_END, results_table(runs, pin_version))
    changed = update_bench_lines(patch_paths, runs, pin_version)
    return (f"{RESULTS_DIR}/README.md and the README's results table from {len(runs)} runs; "
            f"Bench: rewritten in {len(changed)} patches")
