"""sglang_gemma4.results (runs, archive, render) on made-up runs: the result.json schema and its
error messages, packing raw files, finding a quoted figure in its source, and the text
`make readme` generates from the runs."""

import copy
import tarfile
from pathlib import Path

import pytest
from result_folders import PATCH, make_run, result

from sglang_gemma4.results import archive as result_archive
from sglang_gemma4.results import render as result_text
from sglang_gemma4.results import runs as results
from sglang_gemma4.results.errors import ResultsError

NEW = "2026-11-23-h100-26b-a4b-gf540dad831-new"  # the newest of two_runs()


def test_pack_moves_raw_files_into_a_reproducible_archive(tmp_path):
    folder = make_run(tmp_path, packed=False)
    packed = result_archive.pack(folder)
    assert packed == ["ab/summary.md", "check.log", "gpu.txt"]
    left = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert left == ["README.md", "ab/summary.png", "raw.tar.xz", "result.json"]
    assert result_archive.read_archive(folder, {"gpu.txt"}) == {
        "ab/summary.md": None,
        "check.log": None,
        "gpu.txt": b"NVIDIA H100 80GB HBM3, 81559 MiB\n",
    }
    with tarfile.open(folder / "raw.tar.xz") as tar:
        assert {(m.mtime, m.uid, m.uname) for m in tar} == {(0, 0, "")}
    other = make_run(tmp_path / "again", packed=True)
    assert (other / "raw.tar.xz").read_bytes() == (folder / "raw.tar.xz").read_bytes()
    with pytest.raises(ResultsError, match="raw.tar.xz: exists"):
        result_archive.pack(folder)


def test_a_valid_run_loads_with_its_figures_in_order(tmp_path):
    run = results.load_run(make_run(tmp_path))
    assert (run.gpu_label, run.series_label, run.measured) == (
        "H100",
        "gf540dad831",
        "2026-11-23 03:46",
    )
    tpot = run.figures[0]
    assert (
        tpot.setups == ("pristine", "patched") and tpot.sources == ("raw.tar.xz:ab/summary.md",) * 2
    )
    assert f"{tpot.ratio:.3f}" == "0.717"
    assert tpot.measure_text() == "median TPOT 6.01 -> 4.31 ms (x0.717)"


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d.pop("gpu"), "keys must be exactly"),
        (lambda d: d.update(extra=1), "unknown \\['extra'\\]"),
        (lambda d: d.update(measured="2026-11-24 01:00"), "`measured` must read"),
        (
            lambda d: d["series"].update(versions=["0.5.17+gemma4.gf540dad831"]),
            "must read '0.5.12\\+gemma4.g<10 hex>'",
        ),
        (lambda d: d["figures"][0]["values"].update(patched=4.31), "decimal string"),
        (lambda d: d["figures"][0]["values"].update(other="1.0"), "one setup or two"),
        (
            lambda d: d["figures"][0].update(values={"tuned": "1.0"}),
            "setup 'tuned' is not in the run's `setups`",
        ),
        (lambda d: d["figures"][0].update(variant="70b"), "variant '70b'"),
        (lambda d: d["figures"][0].update(source="README.md"), "needs a `note`"),
        (
            lambda d: d["figures"][0].update(source={"patched": "raw.tar.xz:x"}),
            "`source` must be a file",
        ),
        (lambda d: d["figures"][0].update(colour="red"), "unknown keys \\['colour'\\]"),
        (lambda d: d.update(valid=False), "an invalid run quotes no figures"),
    ],
)
def test_schema_errors_name_the_file_and_the_field(tmp_path, change, message):
    data = result()
    change(data)
    folder = make_run(tmp_path, data=data)
    with pytest.raises(ResultsError, match=message) as error:
        results.load_run(folder)
    assert str(folder / "result.json") in str(error.value)


def test_a_folder_without_result_json_is_named(tmp_path):
    make_run(tmp_path)
    (tmp_path / "2026-11-24-h100-e2b-g0123456789-new").mkdir()
    with pytest.raises(ResultsError, match="no result.json in 2026-11-24-h100-e2b-g0123456789-new"):
        results.load_runs(tmp_path)


@pytest.mark.parametrize(
    "value, text, found",
    [
        ("4.31", "median_tpot_ms: 4.3125", True),
        ("4.31", "4.3151", False),
        ("10277", "#tokens: 10,277", True),
        ("0.88", "mem_fraction_static=0.88,", True),
        ("6.00", "6.0049 ms", True),
        ("6.00", "6.0051 ms", False),
        ("94.80", '"decode_capture_s": 94.8', True),
        ("2.72", "no number here", False),
        ("2.72", "a scale of 9e999999999 then 2.72", True),
    ],
)
def test_a_figure_is_found_at_its_own_precision(value, text, found):
    assert result_archive.number_appears(value, text) is found


def test_provenance_names_each_figure_its_source_does_not_hold(tmp_path):
    assert result_archive.provenance_problems(results.load_run(make_run(tmp_path)), {PATCH}) == []
    data = result()
    data["figures"][0]["values"]["patched"] = "4.30"
    data["figures"][1]["source"] = "raw.tar.xz:ab/missing.md"
    data["gpu"]["name"] = "NVIDIA H200"
    data["series"]["versions"] = ["0.5.12+gemma4.g0000000000"]
    problems = result_archive.provenance_problems(
        results.load_run(make_run(tmp_path / "bad", data=data)), set()
    )
    assert sorted(p.split(": ", 1)[1] for p in problems) == sorted(
        [
            "source raw.tar.xz:ab/missing.md is neither a member of raw.tar.xz, README.md nor the "
            "folder name",
            "gpu 'NVIDIA H200' is not named in raw.tar.xz:gpu.txt",
            "series 0.5.12+gemma4.g0000000000 is named in none of raw.tar.xz:check.log",
            "figures[0] 'median TPOT' patched=4.30 is not in raw.tar.xz:ab/summary.md",
            f"figures[0] names patch {PATCH}, which is not in patches/series",
        ]
    )


def two_runs(tmp_path) -> list[results.Run]:
    older = result(measured="2026-11-22 10:00")
    older["series"]["versions"] = ["0.5.12+gemma4.gf540dad831"]
    for f in older["figures"]:
        f.pop("patches", None)
    older["figures"][0]["values"] = {"pristine": "6.01", "patched": "4.31"}
    newer = copy.deepcopy(result())
    newer["figures"] = newer["figures"][:1]
    pair = result(
        measured="2026-11-21 09:00",
        gpu={"name": "NVIDIA H100 80GB HBM3", "count": 2, "source": "raw.tar.xz:gpu.txt"},
    )
    pair["figures"] = pair["figures"][1:]
    make_run(tmp_path, "2026-11-22-h100-26b-a4b-gf540dad831-old", older)
    make_run(tmp_path, "2026-11-23-h100-26b-a4b-gf540dad831-new", newer)
    make_run(tmp_path, "2026-11-21-h100x2-26b-a4b-gf540dad831-tp", pair)
    return results.load_runs(tmp_path)


def test_the_results_table_keeps_the_newest_run_per_variant_workload_and_gpu(tmp_path):
    runs = two_runs(tmp_path)
    assert [r.name for r in runs] == [
        "2026-11-21-h100x2-26b-a4b-gf540dad831-tp",
        "2026-11-22-h100-26b-a4b-gf540dad831-old",
        "2026-11-23-h100-26b-a4b-gf540dad831-new",
    ]
    rows = result_text.comparison_rows(runs, ("pristine", "patched"))
    assert [(run.name, [f.workload for f in figures]) for run, figures in rows] == [
        ("2026-11-23-h100-26b-a4b-gf540dad831-new", ["batch1"]),  # newer than -old's batch1
        ("2026-11-21-h100x2-26b-a4b-gf540dad831-tp", ["chat"]),  # two GPUs: a row of its own
        ("2026-11-22-h100-26b-a4b-gf540dad831-old", ["chat"]),  # the newest chat on one H100
    ]
    row = (
        "| 26B-A4B | batch1 | median TPOT 6.01 -> 4.31 ms (x0.717) | H100 | sglang 0.5.12, series "
        "gf540dad831 | "
        f"[{NEW}]({results.RESULTS_DIR}/{NEW}/README.md) |"
    )
    assert row in result_text.results_table(runs, "0.5.12").splitlines()
    newer_pin = result_text.results_table(
        runs, "0.5.17"
    )  # the README shows the pinned release's runs only
    assert newer_pin.startswith("No run on sglang 0.5.17 yet") and "| 26B-A4B |" not in newer_pin


def test_the_mtp_table_compares_mtp_off_with_mtp_on_only(tmp_path):
    mtp = result(measured="2026-11-24 10:00")
    mtp["setups"] = {
        "mtp-off": "the preset",
        "mtp-on": "the preset with --mtp, simulated acceptance",
    }
    mtp["figures"] = mtp["figures"][:1]
    mtp["figures"][0]["values"] = {"mtp-off": "4.31", "mtp-on": "2.85"}
    mtp["figures"][0].pop("patches", None)
    two_runs(tmp_path)
    make_run(tmp_path, "2026-11-24-h100-26b-a4b-gf540dad831-mtp", mtp)
    rows = [
        line
        for line in result_text.mtp_table(results.load_runs(tmp_path)).splitlines()
        if line.startswith("| 26B")
    ]
    assert rows == [
        "| 26B-A4B | batch1 | median TPOT 4.31 -> 2.85 ms (x0.661) | H100 | sglang 0.5.12, series "
        "gf540dad831 | "
        "[2026-11-24-h100-26b-a4b-gf540dad831-mtp]"
        f"({results.RESULTS_DIR}/2026-11-24-h100-26b-a4b-gf540dad831-mtp/README.md) |"
    ]


def test_a_newer_mtp_run_replaces_an_older_one_that_logged_another_accept_length(tmp_path):
    for day, logged, on in (("24", "2.80", "2.85"), ("25", "2.75", "2.62")):
        mtp = result(measured=f"2026-11-{day} 10:00")
        mtp["setups"] = {
            "mtp-off": "the preset",
            "mtp-on": "the preset with --mtp, simulated acceptance",
        }
        mtp["figures"] = mtp["figures"][:1]
        mtp["figures"][0].update(
            workload=f"batch1, MTP at accept 2.8 (logged {logged})",
            values={"mtp-off": "4.31", "mtp-on": on},
        )
        mtp["figures"][0].pop("patches", None)
        make_run(tmp_path, f"2026-11-{day}-h100-26b-a4b-gf540dad831-mtp", mtp)
    rows = [
        line
        for line in result_text.mtp_table(results.load_runs(tmp_path)).splitlines()
        if line.startswith("| 26B")
    ]
    assert len(rows) == 1 and rows[0].startswith(
        "| 26B-A4B | batch1, MTP at accept 2.8 (logged 2.75) | median TPOT 4.31 -> 2.62 ms"
    )


def test_bench_line_lists_the_patchs_figures_newest_run_first(tmp_path):
    runs = two_runs(tmp_path)
    line = result_text.bench_line(PATCH, runs, "0.5.17")
    assert line == (
        f"{results.RESULTS_DIR}/{NEW}/README.md; "
        "H100, sglang 0.5.12 series gf540dad831: 26B-A4B batch1, pristine vs patched: "
        "median TPOT 6.01 -> 4.31 ms (x0.717) (not measured on sglang 0.5.17 yet)"
    )
    assert result_text.bench_line(PATCH, runs, "0.5.12").endswith("(x0.717)")
    assert result_text.bench_line("0004-reject-bad-logit-bias.patch", runs, "0.5.17") is None


def test_update_bench_lines_rewrites_only_patches_with_results(tmp_path):
    runs = two_runs(tmp_path)
    header = (
        "Subject: x\nAuthor: A <a@b>\nBench: old figures;\n  continued here\nKill-Switch: none\n\n"
        "Why: y\n---\ndiff --git a/python/x b/python/x\n+Bench: not a header line\n"
    )
    quoted, other = tmp_path / PATCH, tmp_path / "0004-reject-bad-logit-bias.patch"
    quoted.write_text(header)
    other.write_text(header)
    assert result_text.update_bench_lines([quoted, other], runs, "0.5.17") == [PATCH]
    text = quoted.read_text()
    assert f"Bench: {result_text.bench_line(PATCH, runs, '0.5.17')}\nKill-Switch: none\n" in text
    assert "continued here" not in text and text.endswith("+Bench: not a header line\n")
    assert other.read_text() == header
    assert result_text.update_bench_lines([quoted], runs, "0.5.17") == []  # already current


def test_regenerate_writes_index_table_and_bench_lines(tmp_path):
    root = tmp_path / "checkout"
    two_runs(root / results.RESULTS_DIR)
    (root / "README.md").write_text(
        f"# x\n\n{result_text.RESULTS_BEGIN}\nold\n{result_text.RESULTS_END}\n"
        f"{result_text.MTP_BEGIN}\nold\n{result_text.MTP_END}\nend\n"
    )
    patch = root / PATCH
    patch.write_text("Subject: x\nBench: none\n\nWhy: y\n")
    message = result_text.regenerate(root, "0.5.17", [patch])
    runs = results.load_runs(root / results.RESULTS_DIR)
    assert message.endswith("from 3 runs; Bench: rewritten in 1 patches")
    assert (root / results.RESULTS_DIR / "README.md").read_text() == result_text.index_markdown(
        runs
    )
    assert (root / "README.md").read_text() == (
        f"# x\n\n{result_text.RESULTS_BEGIN}\n{result_text.results_table(runs, '0.5.17')}\n"
        f"{result_text.RESULTS_END}\n{result_text.MTP_BEGIN}\n"
        f"{result_text.mtp_table(runs)}\n{result_text.MTP_END}\nend\n"
    )
    assert "Bench: benchmark_results/" in patch.read_text()


def test_the_index_marks_invalid_runs(tmp_path):
    make_run(
        tmp_path,
        "2026-11-23-h100-26b-a4b-g0123456789-chat-INVALID",
        result(
            valid=False,
            figures=[],
            summary="the stream decoded to no text",
            series={"versions": ["0.5.12+gemma4.g0123456789"], "sources": ["folder name"]},
        ),
    )
    index = result_text.index_markdown(results.load_runs(tmp_path))
    assert (
        "| [2026-11-23-h100-26b-a4b-g0123456789-chat-INVALID]"
        "(2026-11-23-h100-26b-a4b-g0123456789-chat-INVALID/README.md) | H100 | 0.5.12 | "
        "g0123456789 | **invalid**: the stream decoded to no text |"
    ) in index


def test_pack_run_command_packs_a_folder_once(tmp_path, capsys, monkeypatch):
    from sglang_gemma4 import cli

    monkeypatch.setenv("SGLANG_GEMMA4_ROOT", str(Path(__file__).resolve().parents[2]))
    folder = make_run(tmp_path, packed=False)
    assert cli.main(["pack-run", str(folder)]) == 0
    assert f"pack-run: 3 files moved into {folder / 'raw.tar.xz'}" in capsys.readouterr().out
    assert cli.main(["pack-run", str(folder)]) == 1
    assert "raw.tar.xz: exists; unpack it first" in capsys.readouterr().err


def test_the_results_table_shows_long_prompts_by_length_and_a_refused_side(tmp_path):
    """The long-context workloads: a TTFT per prompt length, in the order of the lengths, and a
    prompt one side refused (its pool too small) as `refused`, with no ratio; the source must say
    so."""
    long = result(measured="2026-11-24 10:00")
    long["figures"] = [
        {
            "variant": "26b-a4b",
            "workload": workload,
            "metric": "median TTFT",
            "unit": "ms",
            "values": values,
            "source": "raw.tar.xz:ab/summary.md",
        }
        for workload, values in (
            ("long-250k", {"pristine": "refused", "patched": "52000.5"}),
            ("long-128k", {"pristine": "30100.0", "patched": "20050.0"}),
            ("long-16k", {"pristine": "1500.0", "patched": "1000.0"}),
        )
    ]
    folder = make_run(tmp_path, "2026-11-24-h100-26b-a4b-gf540dad831-long", long, packed=False)
    (folder / "ab" / "summary.md").write_text(
        "| long-250k | median_ttft_ms | - | 52000.50 |\n"
        "| long-250k | refused | too long | - |\n"
        "| long-128k | median_ttft_ms | 30100.00 | 20050.00 |\n"
        "| long-16k | median_ttft_ms | 1500.00 | 1000.00 |\n"
    )
    result_archive.pack(folder)
    run = results.load_run(folder)
    assert result_archive.provenance_problems(run, set()) == []
    refused = run.figures[0]
    assert refused.ratio is None and refused.measure_text() == "median TTFT refused -> 52000.5 ms"
    rows = [
        line.split(" | ")[1:3]
        for line in result_text.results_table([run], "0.5.12").splitlines()
        if line.startswith("| 26B")
    ]
    assert rows == [
        ["long-16k", "median TTFT 1500.0 -> 1000.0 ms (x0.667)"],
        ["long-128k", "median TTFT 30100.0 -> 20050.0 ms (x0.666)"],
        ["long-250k", "median TTFT refused -> 52000.5 ms"],
    ]
    unsaid = copy.deepcopy(long)
    unsaid["figures"][0]["values"] = {"pristine": "52000.5", "patched": "refused"}
    other = make_run(
        tmp_path / "b", "2026-11-24-h100-26b-a4b-gf540dad831-long", unsaid
    )  # its summary.md: no refusal
    problems = [
        p.split(": ", 1)[1]
        for p in result_archive.provenance_problems(results.load_run(other), set())
    ]
    assert "figures[0] 'median TTFT' patched=refused is not in raw.tar.xz:ab/summary.md" in problems
    assert results.load_run(other).figures[0].measure_text() == "median TTFT 52000.5 ms -> refused"


def test_runs_grouped_by_release_sit_beside_flat_ones_and_are_linked_where_they_are(tmp_path):
    old = result(measured="2026-11-22 10:00")
    make_run(tmp_path / "sglang-0.5.12", "2026-11-22-h100-26b-a4b-gf540dad831-old", old)
    make_run(tmp_path, NEW)
    runs = results.load_runs(tmp_path)
    assert [run.path for run in runs] == [
        "sglang-0.5.12/2026-11-22-h100-26b-a4b-gf540dad831-old",
        NEW,
    ]
    index = result_text.index_markdown(runs)
    assert "[2026-11-22-h100-26b-a4b-gf540dad831-old](sglang-0.5.12/2026-11-22-h100-" in index
    assert f"{results.RESULTS_DIR}/sglang-0.5.12/2026-11-22-" in result_text.bench_line(
        PATCH, runs[:1], "0.5.17"
    )


def test_a_run_in_the_folder_of_another_release_is_refused(tmp_path):
    folder = make_run(tmp_path / "sglang-0.5.17", NEW)
    with pytest.raises(ResultsError, match=r"a run on sglang 0.5.12 in sglang-0.5.17/"):
        results.load_runs(tmp_path)
    assert results.run_folders(tmp_path) == [folder]
