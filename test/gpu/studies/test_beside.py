"""beside.py: the running streams' gaps before and during a long prefill (the timing math), its
client against a fake streaming /generate on loopback, and bench.py's record of a beside workload
(measured or refused)."""

import asyncio
import json

import pytest
from aiohttp import web

from sglang_gemma4.gpu.serve.server import Server
from sglang_gemma4.gpu.stages.table import expand
from sglang_gemma4.gpu.studies import bench, beside
from sglang_gemma4.gpu.studies.beside import gap_summary, measure, percentile, split_gaps


def test_percentile_interpolates_between_ranks():
    assert percentile([], 50) is None
    assert percentile([3.0], 99) == 3.0
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert percentile(list(range(101)), 99) == 99
    assert percentile([0.0, 10.0], 99) == pytest.approx(9.9)


def test_gaps_split_at_the_long_prompts_sending_and_first_token():
    # steady from 1.0; long prompts sent at 2.0, first token of the last at 3.0
    stream_a = [
        0.5,
        1.0,
        1.1,
        1.2,
        2.5,
        2.6,
        3.5,
    ]  # 0.5->1.0 before steadiness: dropped; 1.2->2.5 spans the send
    stream_b = [1.5, 1.9, 3.2, 3.3, 3.4]  # 3.2->3.3 and after: once the prefill is over, neither
    before, during = split_gaps([stream_a, stream_b], steady_from=1.0, start=2.0, end=3.0)
    assert before == pytest.approx([0.1, 0.1, 0.4])
    assert during == pytest.approx([1.3, 0.1, 0.9, 1.3])
    summary = gap_summary(before, during)
    assert summary["itl_before_p50_ms"] == 100.0 and summary["longest_gap_during_ms"] == 1300.0
    assert summary["gaps_before"] == 3 and summary["gaps_during"] == 4
    assert gap_summary([], [])["itl_during_p99_ms"] is None


class FakeServer:
    """/generate streaming a chunk every STEP s; a long prompt (over 1000 ids) holds every stream
    for PREFILL s before its first chunk, as a prefill that runs alone does; over `limit` ids it is
    refused."""

    STEP, PREFILL = 0.005, 0.3

    def __init__(self, limit: int):
        self.limit, self.prefilling = limit, asyncio.Event()
        self.prefilling.set()  # set: nothing prefills, the streams run

    async def generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        ids = len(body["input_ids"])
        if ids > self.limit:
            await response.write(
                b'data: {"error": {"message": "input is longer than the context"}}\n\n'
            )
            return response
        if ids > 1000:
            self.prefilling.clear()
            await asyncio.sleep(self.PREFILL)
            self.prefilling.set()
        for token in range(body["sampling_params"]["max_new_tokens"]):
            await self.prefilling.wait()
            await response.write(
                b"data: " + json.dumps({"text": "x", "meta_info": {"n": token}}).encode() + b"\n\n"
            )
            await asyncio.sleep(self.STEP)
        await response.write(b"data: [DONE]\n\n")
        return response


async def served(long_lens: list[int], limit: int = 10_000) -> dict:
    fake = FakeServer(limit)
    app = web.Application()
    app.router.add_post("/generate", fake.generate)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        return await asyncio.wait_for(
            measure(
                f"http://127.0.0.1:{port}",
                3,
                16,
                10_000,
                long_lens,
                4,
                before_s=0.2,
                steady_tokens=5,
                timeout=20,
            ),
            30,
        )
    finally:
        await runner.cleanup()


def test_the_client_measures_the_streams_stalled_by_a_long_prefill():
    record = asyncio.run(served([2000]))
    assert (
        record["gaps_before"] > 10 and record["itl_before_p99_ms"] < 0.8 * FakeServer.PREFILL * 1000
    )
    assert record["longest_gap_during_ms"] >= 0.9 * FakeServer.PREFILL * 1000
    assert record["itl_during_p99_ms"] > record["itl_before_p99_ms"]
    assert record["long_ttft_ms"] >= FakeServer.PREFILL * 1000 and len(record["long_ttfts_ms"]) == 1
    assert record["streams_ended_during"] == 0 and "refused" not in record
    first_long = record["arrivals"]["long"][0][0]
    assert first_long == pytest.approx(record["long_ttft_ms"] / 1000, abs=1e-3)
    assert all(
        any(t < 0 for t in times) and any(t > first_long for t in times)
        for times in record["arrivals"]["streams"]
    )


def test_the_client_records_a_refused_long_prompt():
    record = asyncio.run(served([2000, 20_000]))
    assert record["refused"].startswith("{'message': 'input is longer")
    assert "itl_during_p99_ms" not in record


def beside_run(tmp_path, monkeypatch, written: dict, log_line: str = "") -> dict:
    server = Server("26b-a4b", "patched", tmp_path / "s.server.log")
    server.log_path.write_text(
        "max_total_num_tokens=456407 full_layer_tokens=456407 swa_layer_tokens=60000\n"
    )

    def client(argv, **kwargs):
        assert "sglang_gemma4.gpu.studies.beside" in argv and argv[argv.index("--long") + 1 :] == [
            "131072"
        ]
        (tmp_path / argv[argv.index("--out") + 1]).write_text(json.dumps(written) + "\n")
        with server.log_path.open("a") as log:
            log.write(log_line)
        return bench.subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(bench.subprocess, "run", client)
    return bench.run_workload(server, "patched", "long-128k-beside-chat", "/tok", tmp_path)


def test_a_beside_workload_is_a_bench_record_with_its_metrics(tmp_path, monkeypatch):
    record = beside_run(
        tmp_path,
        monkeypatch,
        {"itl_before_p99_ms": 9.0, "itl_during_p99_ms": 900.0, "long_ttft_ms": 30000.0},
    )
    assert record["workload"] == "long-128k-beside-chat" and record["full_layer_tokens"] == 456407
    table = bench.summarize([record], ["patched"])
    assert "| long-128k-beside-chat | itl_during_p99_ms | 900.00 |" in table
    assert "| long-128k-beside-chat | long_ttft_ms | 30000.00 |" in table


def test_a_refused_beside_workload_is_recorded_not_measured(tmp_path, monkeypatch):
    record = beside_run(tmp_path, monkeypatch, {"refused": "too long"})
    assert record["refused"] == "too long" and "itl_during_p99_ms" not in record
    logged = beside_run(
        tmp_path, monkeypatch, {"refused": "x"}, "[2026] [http_server] Error: pool too small\n"
    )
    assert logged["refused"] == "pool too small"
    assert "| long-128k-beside-chat | refused | pool too small |" in bench.summarize(
        [logged], ["patched"]
    )


def test_beside_main_writes_its_record(tmp_path, monkeypatch):
    async def fake(url, *args):
        return {
            "url": url,
            "long_lens": args[3],
            "arrivals": {"streams": [[-0.1, 0.2]], "long": [[0.15]]},
        }

    monkeypatch.setattr(beside, "measure", fake)
    assert (
        beside.main(
            ["--url", "http://x", "--out", str(tmp_path / "r.json"), "--long", "60000", "60000"]
        )
        == 0
    )
    assert json.loads((tmp_path / "r.json").read_text()) == {
        "url": "http://x",
        "long_lens": [60000, 60000],
    }
    assert json.loads((tmp_path / "r.arrivals.json").read_text())["long"] == [
        [0.15]
    ]  # kept apart from the record


def test_the_long_experiment_runs_the_beside_workloads_its_argument_names(tmp_path):
    (step,) = expand(
        f"long:pristine,patched:workloads={' '.join(bench.BESIDE_WORKLOADS)}", tmp_path
    ).steps
    argv = list(step.argv)
    workloads = argv[argv.index("--workloads") + 1 : argv.index("--")]
    assert workloads == ["long-128k-beside-chat", "long-3x60k-beside-chat"]
    assert (
        set(workloads) <= bench.MAY_NOT_FIT
    )  # a refused long prompt is recorded, not a failed run
