"""benchmark_results/ as data: every run folder has a valid result.json whose figures its raw files
hold, its raw files in one raw.tar.xz, no code; every path a README or another file cites resolves;
and the index, the README's results table and the patches' Bench: lines are what `make readme`
writes from the result.json files."""

import fnmatch
import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

from sglang_gemma4.markdown import between
from sglang_gemma4.results import archive as result_archive
from sglang_gemma4.results import render as result_text
from sglang_gemma4.results import runs as results
from sglang_gemma4.stack.patchfile import PatchFile
from sglang_gemma4.stack.pin import Pin
from sglang_gemma4.stack.series import Series

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / results.RESULTS_DIR
FOLDERS = results.run_folders(RESULTS)
MAX_BYTES = 10 * 2**20  # a third of the 30 MB the folder held before its raw files were compressed
TICK = re.compile(r"`([^`\n]+)`")
FILE_NAME = re.compile(r"^\S+\.(log|jsonl|json|md|txt|png|gz)$")  # a token that must name a file
CITED_ELSEWHERE = re.compile(
    r"benchmark_results/(?:sglang-[0-9.]*[0-9]/)?\d{4}-\d\d-\d\d[^\s`'\"();,\]]*"
)


@pytest.fixture(scope="module")
def runs() -> list[results.Run]:
    return results.load_runs(RESULTS)


@cache
def members(folder: Path) -> tuple[str, ...]:
    return tuple(result_archive.read_archive(folder))


def test_every_folder_holds_readme_result_archive_and_plots_only():
    assert FOLDERS
    for folder in FOLDERS:
        files = [p.relative_to(folder) for p in folder.rglob("*") if p.is_file()]
        names = {p.as_posix() for p in files}
        assert {"README.md", results.RESULT_FILE, results.RAW_ARCHIVE} <= names, folder.name
        loose = [
            n for n in names if n != results.RAW_ARCHIVE and not result_archive.is_plain(Path(n))
        ]
        assert not loose, (
            f"{folder.name}: raw files outside {results.RAW_ARCHIVE}: {loose} (pack-run)"
        )
    code = [p for p in RESULTS.rglob("*") if p.suffix in (".py", ".patch", ".sh")]
    code += [
        f"{f.name}/raw.tar.xz:{m}"
        for f in FOLDERS
        for m in members(f)
        if m.endswith((".py", ".patch"))
    ]
    assert not code, f"code under benchmark_results/ (belongs in scripts/ or git history): {code}"


def test_the_folder_stays_small():
    size = sum(p.stat().st_size for p in RESULTS.rglob("*") if p.is_file())
    assert size <= MAX_BYTES, (
        f"benchmark_results/ holds {size / 2**20:.1f} MiB (limit {MAX_BYTES / 2**20:.0f})"
    )


def test_every_result_validates_and_its_figures_are_in_its_sources(runs):
    assert {run.folder for run in runs} == set(FOLDERS)
    patches = set(Series.load(ROOT / "patches").names)
    problems = [p for run in runs for p in result_archive.provenance_problems(run, patches)]
    assert not problems, "\n".join(problems)


def expand(pattern: str) -> list[str]:
    """`check-call{1,2}.log` -> both names; `<setup>` placeholders match anything."""
    pattern = re.sub(r"<[^>]+>", "*", pattern)
    match = re.search(r"\{([^{}]*)\}", pattern)
    if not match:
        return [pattern]
    return [
        p
        for part in match.group(1).split(",")
        for p in expand(pattern[: match.start()] + part + pattern[match.end() :])
    ]


def in_archive(folder: Path, pattern: str) -> bool:
    """Whether `pattern` (a path, a folder ending in /, or a glob) names a member of the folder's
    archive."""
    names = members(folder)
    for p in expand(pattern.rstrip("/")):
        if any(
            n == p or n.startswith(p + "/") or fnmatch.fnmatch(n, p) or fnmatch.fnmatch(n, p + "/*")
            for n in names
        ):
            return True
    return False


def plain(folder: Path, pattern: str) -> bool:
    return any(list(folder.glob(p.rstrip("/"))) for p in expand(pattern) if p.strip("/"))


def citation_problem(folder: Path, token: str) -> str | None:
    """What is wrong with `token` as a path cited in `folder`'s README, or None."""
    if token.startswith("../"):  # another run: ../RUN/..., or ../../sglang-X/RUN/... across groups
        base, rest = folder, token
        while rest.startswith("../"):
            base, rest = base.parent, rest[3:]
        other, _, inner = rest.partition("/")
        if results.RELEASE_GROUP.match(other):
            base, (other, _, inner) = base / other, inner.partition("/")
        cited = token[: len(token) - len(inner)].rstrip("/")
        if not (base / other).is_dir() or base.resolve() not in (
            RESULTS.resolve(),
            *(g.resolve() for g in RESULTS.glob("sglang-*")),
        ):
            return f"{token}: no folder {other}"
        if not inner:
            return None
        folder, token = base / other, inner
        if not token.startswith(results.RAW_PREFIX) and not plain(folder, token):
            return f"{cited}/{token}: not in that folder" + (
                f" (cite it as {cited}/{results.RAW_PREFIX}{token})"
                if in_archive(folder, token)
                else ""
            )
    if token.startswith(results.RAW_PREFIX):
        inner = token[len(results.RAW_PREFIX) :]
        return (
            None
            if in_archive(folder, inner)
            else f"{token}: no such member in {folder.name}/{results.RAW_ARCHIVE}"
        )
    if in_archive(folder, token) and not plain(folder, token):
        return f"{token}: inside the archive, cite it as {results.RAW_PREFIX}{token}"
    if FILE_NAME.match(token) and not plain(folder, token) and not (ROOT / token).exists():
        return f"{token}: names no file of {folder.name}, plain or in its {results.RAW_ARCHIVE}"
    return None  # not a file of this folder: a command, a flag, a directory of the GPU host


def prose_tokens(readme: Path) -> list[str]:
    """The `...` spans of a README outside code blocks (commands there show what ran, not
    citations)."""
    tokens, fenced = [], False
    for line in readme.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and not line.startswith("    "):
            tokens += TICK.findall(line)
    return tokens


def test_every_path_a_run_readme_cites_resolves():
    problems = [
        f"{folder.name}/README.md: {problem}"
        for folder in FOLDERS
        for token in prose_tokens(folder / "README.md")
        if (problem := citation_problem(folder, token.strip()))
    ]
    assert not problems, "\n".join(problems)


def test_every_benchmark_results_path_cited_elsewhere_resolves():
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files"], capture_output=True, text=True, check=True
    ).stdout
    problems = []
    for name in listed.splitlines():
        if name.startswith(results.RESULTS_DIR + "/") or not (ROOT / name).is_file():
            continue
        try:
            text = (ROOT / name).read_text()
        except UnicodeDecodeError:
            continue
        for cited in (c.rstrip(".:") for c in CITED_ELSEWHERE.findall(text)):
            group, _, rest = cited[len(results.RESULTS_DIR) + 1 :].partition("/")
            if not results.RELEASE_GROUP.match(group):  # a run folder directly in RESULTS_DIR
                group, rest = "", cited[len(results.RESULTS_DIR) + 1 :]
            folder_glob, _, inner = rest.partition("/")
            folders = [
                f
                for f in FOLDERS
                if fnmatch.fnmatch(f.name, folder_glob) and group in ("", f.parent.name)
            ]
            if not folders:
                problems.append(f"{name}: {cited}: no such run folder")
            elif inner and not any(
                citation_problem(f, inner) is None
                and (inner.startswith(results.RAW_PREFIX) or plain(f, inner))
                for f in folders
            ):
                problems.append(
                    f"{name}: {cited}: {citation_problem(folders[0], inner) or 'not in the folder'}"
                )
    assert not problems, "\n".join(problems)


def test_generated_index_table_and_bench_lines_are_current(runs):
    pin = Pin.load(ROOT / "upstream.toml")
    assert (RESULTS / "README.md").read_text() == result_text.index_markdown(runs), (
        "benchmark_results/README.md is stale: run `make readme`"
    )
    readme = ROOT / "README.md"
    _, table, _ = between(
        readme.read_text(), result_text.RESULTS_BEGIN, result_text.RESULTS_END, readme
    )
    assert table.strip() == result_text.results_table(runs, pin.version), (
        "README results table is stale: run `make readme`"
    )
    _, mtp, _ = between(readme.read_text(), result_text.MTP_BEGIN, result_text.MTP_END, readme)
    assert mtp.strip() == result_text.mtp_table(runs), (
        "README MTP table is stale: run `make readme`"
    )
    for name in Series.load(ROOT / "patches").names:
        bench = PatchFile.read(ROOT / "patches" / name).fields["Bench"]
        expected = result_text.bench_line(name, runs, pin.version)
        if expected is None:
            assert results.RESULTS_DIR not in bench, (
                f"patches/{name}: Bench: cites results that no result.json attributes to it (add "
                "it to `patches`)"
            )
        else:
            assert bench == expected, f"patches/{name}: Bench: line is stale: run `make readme`"


def test_the_results_table_shows_runs_on_the_pinned_release_only(runs):
    pin = Pin.load(ROOT / "upstream.toml")
    table = result_text.results_table(runs, pin.version)
    rows = [
        line
        for line in table.splitlines()
        if line.startswith("| ") and not line.startswith("| variant")
    ]
    if pin.version in {run.upstream for run in runs}:
        assert rows and all(f"| sglang {pin.version}, series " in row for row in rows)
    else:
        assert table.startswith(f"No run on sglang {pin.version} yet") and not rows
