"""Start-time breakdown read from a server log."""

from sglang_gemma4.gpu.studies.start_times import main, start_times

LOG = """launch_gemma4: patched sglang, 26b-a4b, tp 1, 127.0.0.1:30000
prebuild: rope(True, 256, bfloat16): 9.1 s
prebuild: 8 of 8 modules ready in 37.4 s
[2026-11-22 06:53:44] server_args=ServerArgs(model_path='m', cuda_graph_bs=[1, 2, 4, 8], disable_piecewise_cuda_graph=False)
[2026-11-22 06:54:12] Load weight end. elapsed=0.21 s, type=Gemma4ForCausalLM, avail mem=30.65 GB, mem usage=47.85 GB.
[2026-11-22 06:55:43] Capture cuda graph end. Time elapsed: 91.03 s. mem usage=0.13 GB. avail mem=11.27 GB.
[2026-11-22 06:56:27] Capture piecewise CUDA graph end. Time elapsed: 44.31 s. mem usage=1.96 GB. avail mem=9.30 GB.
[2026-11-22 06:56:56] The server is fired up and ready to roll!
"""  # noqa: E501 (verbatim log lines)


def test_breakdown_of_a_full_start():
    assert start_times(LOG) == {
        "prebuild_s": 37.4,
        "weights_loaded_s": 28.0,
        "decode_capture_s": 91.03,
        "piecewise_capture_s": 44.31,
        "ready_s": 192.0,
        "decode_graph_sizes": 4,
        "piecewise": True,
    }


def test_a_start_that_never_got_ready():
    times = start_times(
        LOG.replace(
            "disable_piecewise_cuda_graph=False", "disable_piecewise_cuda_graph=True"
        ).split("[2026-11-22 06:55:43]")[0]
    )
    assert times["ready_s"] is None and times["decode_capture_s"] is None and not times["piecewise"]
    assert times["weights_loaded_s"] == 28.0


def test_a_start_without_the_prebuild():
    assert start_times(LOG.split("\n", 3)[3])["prebuild_s"] is None


def test_table_shows_a_prebuild_that_found_everything_built(tmp_path, capsys, monkeypatch):
    warm = tmp_path / "warm.log"
    warm.write_text(
        LOG.replace(
            "prebuild: 8 of 8 modules ready in 37.4 s",
            "prebuild: 8 of 8 modules ready in 0.0 s (built before: x)",
        )
    )
    cold = tmp_path / "no-prebuild.log"
    cold.write_text(LOG.split("\n", 3)[3])
    monkeypatch.setattr("sys.argv", ["start_times", str(warm), str(cold), "--markdown"])
    main()
    warm_row, cold_row = capsys.readouterr().out.splitlines()[2:]
    assert warm_row.split(" | ")[3] == "0.0" and cold_row.split(" | ")[3] == "-"


LOG_0_5_17 = """[2026-11-25 02:33:20] server_args=ServerArgs(model_path='m', cuda_graph_max_bs_decode=64)
[2026-11-25 02:33:51] Load weight end. elapsed=0.21 s, type=Gemma4ForCausalLM, avail mem=30.65 GB, mem usage=47.85 GB.
[2026-11-25 02:33:55] Capture target prefill CUDA graph begin. backend=breakable, num_tokens=[4, 8, 12], avail mem=11.40 GB
[2026-11-25 02:34:47] Capture target prefill CUDA graph end. elapsed=52.45 s, mem usage=1.84 GB, avail mem=9.56 GB.
[2026-11-25 02:34:47] Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, bs=[1, 2, 4, 8, 12, 16], avail mem=9.56 GB
[2026-11-25 02:34:57] Capture target decode CUDA graph end. elapsed=9.42 s, mem usage=0.21 GB, avail mem=9.34 GB.
[2026-11-25 02:35:07] The server is fired up and ready to roll!
"""  # noqa: E501 (verbatim log lines)


def test_breakdown_of_a_0_5_17_start():
    assert start_times(LOG_0_5_17) == {
        "prebuild_s": None,
        "weights_loaded_s": 31.0,
        "decode_capture_s": 9.42,
        "piecewise_capture_s": 52.45,
        "ready_s": 107.0,
        "decode_graph_sizes": 6,
        "piecewise": True,
    }
