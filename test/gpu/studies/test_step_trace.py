"""step_trace's reading of a profiler trace: decode steps from CUDA-graph replays, what the GPU did
between them and how long it idled."""

from sglang_gemma4.gpu.studies.step_trace import decode_steps, kernel_table, summarize, union_us


def kernel(ts, dur, correlation, cat="kernel", name="k"):
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "ts": ts,
        "dur": dur,
        "args": {"correlation": correlation},
    }


def launch(ts, correlation):
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaGraphLaunch",
        "ts": ts,
        "dur": 5,
        "args": {"correlation": correlation},
    }


def test_union_counts_overlaps_once():
    assert union_us([]) == 0
    assert union_us([(0, 10), (5, 15), (20, 25)]) == 20
    assert union_us([(0, 100), (10, 20)]) == 100


def test_steps_split_graph_time_outside_kernels_and_idle():
    events = [
        launch(0, 1),
        launch(900, 2),
        launch(1900, 3),
        # replay 1: two streams overlapping, 100..600 busy
        kernel(100, 300, 1),
        kernel(250, 350, 1),
        kernel(650, 50, 7),
        kernel(720, 30, 8, cat="gpu_memcpy"),  # sampling after it
        # replay 2 starts at 1000: 1000..1400
        kernel(1000, 400, 2),
        kernel(1500, 100, 9),
        kernel(2000, 100, 3),  # replay 3: only bounds step 2
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 700, "dur": 1000},  # CPU: ignored
    ]
    rows = decode_steps(events)
    assert len(rows) == 2
    first, second = rows
    assert (
        first["period_us"] == 900
        and first["graph_span_us"] == 500
        and first["graph_busy_us"] == 500
    )
    assert (
        first["graph_kernels"] == 2
        and first["outside_graph_busy_us"] == 80
        and first["idle_us"] == 320
    )
    assert second["period_us"] == 1000 and second["graph_span_us"] == 400
    assert second["outside_graph_busy_us"] == 100 and second["idle_us"] == 500


def test_kernels_not_from_a_replay_are_never_graph_time():
    events = [
        launch(0, 1),
        launch(500, 2),
        kernel(10, 100, 1),
        kernel(200, 50, 99),
        kernel(600, 10, 2),
    ]
    (row,) = decode_steps(events)
    assert (
        row["graph_busy_us"] == 100
        and row["outside_graph_busy_us"] == 50
        and row["idle_us"] == 600 - 110 - 50
    )


def test_device_to_host_copies_between_replays_are_counted_per_step():
    # a host read of a GPU value (e.g. a mask select's size) shows as a DtoH copy outside the graph
    events = [
        launch(0, 1),
        launch(500, 2),
        launch(1000, 3),
        kernel(10, 100, 1),
        kernel(510, 100, 2),
        kernel(1010, 100, 3),
        kernel(150, 2, 40, cat="gpu_memcpy", name="Memcpy DtoH (Device -> Pinned)"),
        kernel(160, 2, 41, cat="gpu_memcpy", name="Memcpy HtoD (Pinned -> Device)"),
        kernel(300, 2, 42, cat="gpu_memcpy", name="Memcpy DtoH (Device -> Pageable)"),
        kernel(50, 2, 43, cat="gpu_memcpy", name="Memcpy DtoH (Device -> Pinned)"),
    ]  # inside replay 1's span
    first, second = decode_steps(events)
    assert first["host_reads"] == 2 and second["host_reads"] == 0


def test_summary_has_a_row_per_build_with_medians_and_the_steps_that_read_the_gpu():
    rows = {
        "pristine": [
            {
                "period_us": p,
                "graph_span_us": 1,
                "graph_busy_us": 1,
                "outside_graph_busy_us": 0,
                "idle_us": 2,
                "host_reads": r,
            }
            for p, r in ((5, 0), (7, 2), (100, 1))
        ],
        "patched": [],
    }
    table = summarize(rows)
    assert "| pristine | 3 | 7.0 |" in table and table.splitlines()[2].endswith("| 2 |")
    assert "| patched | 0 | nan |" in table


def test_kernels_are_timed_by_name_inside_the_graph_and_between_replays():
    events = [
        launch(0, 1),
        launch(500, 2),
        launch(1000, 3),
        kernel(10, 100, 1, name="void moe<1, 2>(int)"),
        kernel(120, 30, 1, name="void moe<1, 2>(int)"),
        kernel(160, 20, 1, name="attn"),
        kernel(300, 7, 50, name="fill"),
        kernel(510, 50, 2, name="void moe<1, 2>(int)"),
        kernel(1010, 10, 3, name="attn"),
    ]
    first, second = decode_steps(events)
    assert first["graph_kernel_us"] == {"moe<1, 2>(int)": 130, "attn": 20}
    assert first["outside_kernel_us"] == {"fill": 7} and second["outside_kernel_us"] == {}
    table = kernel_table({"off": [first, second], "on": [first]}, top=2)
    lines = table.splitlines()
    # medians per step, a step without the kernel counting 0; largest first; only the top 2 rows
    assert lines[2] == "| graph | `moe<1, 2>(int)` | 90.0 | 130.0 |"
    assert lines[3] == "| graph | `attn` | 10.0 | 20.0 |" and len(lines) == 4
