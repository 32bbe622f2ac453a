"""spec_step's reading of a torch-profiler trace of frozen-KV MTP steps (a synthetic trace in the
Chrome-trace format the profiler writes: gzipped JSON, traceEvents with CUDA runtime calls and GPU
kernels linked by their correlation ids), its bytes against the HBM floor (checked against sums made
here from the published shapes), its table, its streams' reading of sglang's stream, and its refusal
of a run with every draft accepted."""

import gzip
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sglang_gemma4.gpu.serve.variants import text_config
from sglang_gemma4.gpu.studies import spec_step
from sglang_gemma4.gpu.studies.spec_step import (
    Stream,
    draft_weight_bytes,
    forward_times,
    kv_read_bytes,
    kv_token_bytes,
    label_replays,
    spec_steps,
    step_bytes,
    summarize,
    wait_drained,
)


def launch(ts, correlation):
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaGraphLaunch",
        "pid": 7,
        "tid": 7,
        "ts": ts,
        "dur": 4,
        "args": {"correlation": correlation, "external id": correlation},
    }


def kernel(ts, dur, correlation, name="k", cat="kernel"):
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 0,
        "tid": 7,
        "ts": ts,
        "dur": dur,
        "args": {"correlation": correlation, "device": 0, "stream": 7},
    }


def draft_loop(start, correlation):
    """Three forwards of 3 kernels each, each ending with the logits' softmax, then the top-k
    bookkeeping: 10 kernels back to back, 10 us each."""
    names = ["gemm", "attn", "void (anonymous namespace)::cunn_SoftMaxForward<4, float>"] * 3 + [
        "gatherTopK"
    ]
    return [kernel(start + 10 * i, 10, correlation, name) for i, name in enumerate(names)]


def verify(start, correlation):
    """The target's graph: 20 kernels back to back, 20 us each."""
    return [kernel(start + 20 * i, 20, correlation, "fused_moe_kernel") for i in range(20)]


def two_steps():
    """Draft 0..100, tree + verify prep kernels 110..130, verify 200..600, sampling 610..640,
    next draft 700..800, its verify 850..1250, sampling, a third draft at 1400..1500."""
    events = [launch(0, 1), launch(150, 2), launch(650, 3), launch(800, 4), launch(1350, 5)]
    events += (
        draft_loop(0, 1)
        + verify(200, 2)
        + draft_loop(700, 3)
        + verify(850, 4)
        + draft_loop(1400, 5)
    )
    events += [
        kernel(110, 20, 11, "build_tree"),
        kernel(610, 30, 12, "verify_tree_greedy"),
        kernel(620, 30, 13, "Memcpy DtoH", cat="gpu_memcpy"),  # on the copy stream, overlapping
        kernel(1260, 40, 14, "verify_tree_greedy"),
    ]
    events.append(
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7, "ts": 0, "dur": 9999}
    )
    return events


def read_back(tmp_path, events):
    """Through the profiler's file format, as the harness reads its traces."""
    path = tmp_path / "host.pt.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"schemaVersion": 1, "deviceProperties": [], "traceEvents": events}, f)
    with gzip.open(path, "rt") as f:
        return json.load(f)["traceEvents"]


def test_steps_split_draft_verify_and_the_gaps_between(tmp_path):
    first, second = spec_steps(read_back(tmp_path, two_steps()))
    assert (
        first["period_us"] == 700
        and first["draft_span_us"] == 100
        and first["draft_busy_us"] == 100
    )
    assert first["draft_forwards_us"] == [30, 30, 40]  # the top-k after the last softmax joins it
    assert first["pre_verify_busy_us"] == 20 and first["pre_verify_idle_us"] == 100 - 20
    assert first["verify_span_us"] == 400 and first["verify_busy_us"] == 400
    assert first["post_verify_busy_us"] == 40 and first["post_verify_idle_us"] == 100 - 40
    assert (
        second["period_us"] == 700
        and second["pre_verify_busy_us"] == 0
        and second["pre_verify_idle_us"] == 50
    )
    assert second["post_verify_busy_us"] == 40 and second["post_verify_idle_us"] == 150 - 40


def test_a_trace_starting_on_a_verify_skips_to_the_first_draft():
    events = [launch(0, 9), *verify(0, 9)]
    events += (
        [launch(500, 1), launch(650, 2), launch(1100, 3)]
        + draft_loop(500, 1)
        + verify(650, 2)
        + draft_loop(1100, 3)
    )
    (row,) = spec_steps(events)
    assert row["period_us"] == 600 and row["draft_busy_us"] == 100


def test_graphs_of_one_size_cannot_be_told_apart():
    with pytest.raises(
        ValueError, match="cannot tell the draft loop's graph from the verify graph"
    ):
        label_replays([[(0, 1, "k")] * 5, [(2, 3, "k")] * 5])


def test_a_draft_loop_without_its_softmaxes_is_not_split():
    kernels = [(10 * i, 10 * i + 10, "gemm") for i in range(6)]
    assert forward_times(kernels, forwards=3) is None


def test_kv_and_weight_bytes_from_the_published_shapes():
    config = text_config("26b-a4b")
    per_layer = kv_token_bytes(config)
    assert per_layer == {"full_attention": 2 * 2 * 512 * 2, "sliding_attention": 2 * 8 * 256 * 2}
    # 5 full layers read the whole context, 25 sliding layers at most the window
    assert (
        kv_read_bytes(config["layer_types"], per_layer, 4000, 1024)
        == 5 * 4096 * 4000 + 25 * 8192 * 1024
    )
    assert (
        kv_read_bytes(config["layer_types"], per_layer, 300, 1024) == (5 * 4096 + 25 * 8192) * 300
    )


def test_draft_weights_are_the_assistant_without_kv_projections():
    embed, projections = 262144 * 1024, 2 * 2816 * 1024 + 1024 * 2816
    mlp, norms = 3 * 1024 * 8192, 4 * 1024
    sliding = 2 * 1024 * 16 * 256 + mlp + 256 + norms  # q and o, MLP, q norm, layer norms
    full = 2 * 1024 * 16 * 512 + mlp + 512 + norms
    assert draft_weight_bytes("26b-a4b") == 2 * (embed + projections + 3 * sliding + full + 1024)


def test_step_bytes_count_verify_tokens_and_three_draft_forwards():
    target = {"dense": 1000, "experts": 12800, "num_experts": 128, "top_k": 8}
    one = step_bytes("26b-a4b", target, draft_weights=500, batch=1, context=300)
    four = step_bytes("26b-a4b", target, draft_weights=500, batch=4, context=300)
    assert one["verify_weights"] == pytest.approx(
        1000 + 12800 * (1 - (120 / 128) ** 4)
    )  # 4 verify tokens
    assert four["verify_weights"] == pytest.approx(1000 + 12800 * (1 - (120 / 128) ** 16))
    assert one["draft_weights"] == four["draft_weights"] == 3 * 500
    assert (
        one["verify_kv"] == (5 * 4096 + 25 * 8192) * 300
        and four["verify_kv"] == 4 * one["verify_kv"]
    )
    assert (
        one["draft_kv"] == 3 * (4096 + 3 * 8192) * 300
    )  # 1 full and 3 sliding assistant layers, 3 forwards


def record(batch, steps, gpu="NVIDIA H100 80GB HBM3"):
    return {
        "variant": "26b-a4b",
        "build": "patched",
        "gpu": gpu,
        "accept_len": 2.8,
        "logged_accept_len": 2.79,
        "batch": batch,
        "context": 300,
        "steps": steps,
        "bytes": {
            "verify_weights": 3.35e9,
            "verify_kv": 0,
            "draft_weights": 0.5e9,
            "draft_kv": 0.17e9,
        },
    }


def test_table_has_medians_per_batch_and_the_hbm_floor(tmp_path):
    steps = spec_steps(two_steps()) + [
        dict(spec_steps(two_steps())[0], period_us=900, draft_forwards_us=None)
    ]
    table = summarize([record(1, steps), record(4, [])])
    assert (
        "| 1 | 3 | 2.79 | 700.0 | 100.0 | 20.0 | 80.0 | 400.0 | 40.0 | 60.0 | 30.0 / 30.0 / 40.0 |"
        in table
    )
    assert (
        "| 1 | 300 | 3.350 | 1000.0 | 400.0 | 0.670 | 200.0 | 100.0 |" in table
    )  # 3.35 TB/s on an H100
    assert "| 4 | 0 | 2.79 | nan |" in table and table.count("n/a") == 1
    assert "| 1 | 300 | 3.350 | ? |" in summarize([record(1, steps, gpu="some GPU")])


def test_report_rewrites_the_table_from_the_records(tmp_path, monkeypatch, capsys):
    jsonl = tmp_path / "26b-a4b-patched-spec-step.jsonl"
    jsonl.write_text(json.dumps(record(1, spec_steps(two_steps()))) + "\n")
    monkeypatch.setattr("sys.argv", ["spec_step", "--report", str(jsonl)])
    assert spec_step.main() == 0
    assert jsonl.with_suffix(".md").read_text() == summarize([record(1, spec_steps(two_steps()))])


class FakeGenerate(BaseHTTPRequestHandler):
    """sglang's /generate stream: one data line a step, meta_info with the counts, then [DONE]."""

    def do_POST(self):
        self.server.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(200)
        self.end_headers()
        for tokens in (3, 6, 9):
            meta = {"completion_tokens": tokens}
            self.wfile.write(
                b"data: " + json.dumps({"text": "x", "meta_info": meta}).encode() + b"\n\n"
            )
        self.wfile.write(b"data: [DONE]\n\n")

    def do_GET(self):
        """/v1/loads: one request still running on the first poll, none after."""
        self.server.polls += 1
        body = json.dumps(
            {"loads": [{"num_running_reqs": int(self.server.polls == 1), "num_waiting_reqs": 0}]}
        )
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeGenerate)
    server.polls, server.bodies = 0, []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


def test_stream_keeps_the_latest_counts(fake_server):
    stream = Stream(f"http://127.0.0.1:{fake_server.server_port}", seed=0)
    stream.start()
    stream.join(30)
    assert (stream.tokens, stream.error) == (9, None)


def test_a_stream_sends_its_prompt_length_greedy(fake_server):
    stream = spec_step.Stream(
        f"http://127.0.0.1:{fake_server.server_port}", seed=3, prompt_len=1500
    )
    stream.start()
    stream.join(30)
    (body,) = fake_server.bodies
    assert len(body["input_ids"]) == 1500 and body["sampling_params"]["temperature"] == 0


def test_the_accept_length_is_read_from_the_decode_lines_after_the_mark(tmp_path):
    log = tmp_path / "server.log"
    line = (
        "[2026-11-25 04:50:11] Decode batch, #running-req: 4, #full token: 246, accept "
        "len: {}, accept rate: 0.72, "
        "cuda graph: True\n"
    )
    log.write_text(line.format("4.00") * 3)
    mark = log.stat().st_size
    with open(log, "a") as f:
        f.write("".join(line.format(v) for v in ("3.15", "2.95", "3.05")))
    assert spec_step.logged_accept_len(log, mark) == 3.05
    with pytest.raises(RuntimeError, match="no decode line with an accept length"):
        spec_step.logged_accept_len(log, log.stat().st_size)


def test_drained_once_no_request_runs(fake_server):
    wait_drained(f"http://127.0.0.1:{fake_server.server_port}", timeout=30)
    assert fake_server.polls == 2
