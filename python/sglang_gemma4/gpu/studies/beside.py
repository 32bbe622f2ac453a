"""Running streams beside a long prefill: do the requests that are decoding keep going while a long
prompt prefills?

    python -m sglang_gemma4.gpu.studies.beside --url http://127.0.0.1:30000 --out FILE.json \\
        [--streams 8] [--chat-len 128] [--chat-out 4000] [--long 131072 ...] [--long-out 16]

Streams --streams greedy requests (--chat-len prompt ids each, --chat-out tokens) to /generate; once
every one has streamed STEADY_TOKENS chunks, waits BEFORE_S seconds, then sends the --long prompts
(one request each, at once, --long-out tokens) and, once they have answered, stops the streams.
Every chunk's arrival is kept (FILE.arrivals.json, seconds from the long prompts' sending);
FILE.json gets the gaps between a stream's chunks before the long prompts were sent and while they
prefilled (from their sending to the last one's first token): p50/p99 of each, the longest gap
during, and the long prompts' time to first token. A long prompt the server refuses is recorded as
`refused` with its answer. Needs aiohttp (the pristine build has it) and no dataset: prompts are
token ids.
"""

import argparse
import asyncio
import json
import time
from pathlib import Path

STEADY_TOKENS, BEFORE_S = 32, 5.0


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100) of `values`, interpolated between the closest ranks; None when
    empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def split_gaps(
    arrivals: list[list[float]], steady_from: float, start: float, end: float
) -> tuple[list, list]:
    """Each stream's gaps between consecutive chunks (seconds), as (before, during): before, a gap
    that lies within [steady_from, start]; during, one that overlaps (start, end), the long prefill.
    A gap wholly after `end` is neither."""
    before, during = [], []
    for times in arrivals:
        for prev, this in zip(times, times[1:]):
            if prev >= steady_from and this <= start:
                before.append(this - prev)
            elif this > start and prev < end:
                during.append(this - prev)
    return before, during


def gap_summary(before: list[float], during: list[float]) -> dict:
    """p50/p99 of the gaps before and during (ms), the longest gap during, and how many of each."""
    ms = lambda value: None if value is None else round(1000 * value, 3)  # noqa: E731
    return {
        "itl_before_p50_ms": ms(percentile(before, 50)),
        "itl_before_p99_ms": ms(percentile(before, 99)),
        "itl_during_p50_ms": ms(percentile(during, 50)),
        "itl_during_p99_ms": ms(percentile(during, 99)),
        "longest_gap_during_ms": ms(max(during, default=None)),
        "gaps_before": len(before),
        "gaps_during": len(during),
    }


def chat_request(stream: int, prompt_len: int, output_len: int) -> dict:
    """A greedy streamed request of its own ids (no radix-cache hits between streams or with the
    long prompts, whose ids start higher)."""
    return {
        "input_ids": [100 + (stream * 13 + i) % 4000 for i in range(prompt_len)],
        "stream": True,
        "sampling_params": {"max_new_tokens": output_len, "ignore_eos": True, "temperature": 0},
    }


def long_request(index: int, prompt_len: int, output_len: int) -> dict:
    return {
        "input_ids": [5000 + (index * 7919 + i * 31) % 3000 for i in range(prompt_len)],
        "stream": True,
        "sampling_params": {"max_new_tokens": output_len, "ignore_eos": True, "temperature": 0},
    }


async def stream(session, url: str, request: dict, arrivals: list[float]) -> str | None:
    """POST a streamed /generate request, appending each chunk's arrival (monotonic s) to
    `arrivals`; the server's error (its status and body, or an error chunk) or None."""
    async with session.post(url + "/generate", json=request) as response:
        if response.status != 200:
            return f"{response.status}: {(await response.text())[:300]}"
        async for line in response.content:
            if not line.startswith(b"data:") or line.strip() == b"data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            if "error" in chunk:
                return str(chunk["error"])[:300]
            arrivals.append(time.monotonic())
    return None


async def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not within {timeout} s")
        await asyncio.sleep(0.01)


async def measure(
    url: str,
    streams: int,
    chat_len: int,
    chat_out: int,
    long_lens: list[int],
    long_out: int,
    before_s: float = BEFORE_S,
    steady_tokens: int = STEADY_TOKENS,
    timeout: float = 540,
) -> dict:
    import aiohttp

    arrivals = [[] for _ in range(streams)]
    # read_bufsize: a chunk holds the text so far, one line that outgrows aiohttp's 64 KiB default
    async with aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=timeout), read_bufsize=2**22
    ) as session:
        chats = [
            asyncio.create_task(
                stream(session, url, chat_request(i, chat_len, chat_out), arrivals[i])
            )
            for i in range(streams)
        ]
        try:
            await wait_for(
                lambda: (
                    all(len(a) >= steady_tokens for a in arrivals) or any(c.done() for c in chats)
                ),
                timeout / 3,
                f"{steady_tokens} chunks of every stream",
            )
            if early := [c.result() for c in chats if c.done()]:
                raise RuntimeError(f"a stream ended before decoding steadily: {early[0]}")
            steady_from = time.monotonic()
            await asyncio.sleep(before_s)
            long_arrivals = [[] for _ in long_lens]
            start = time.monotonic()
            errors = await asyncio.gather(
                *(
                    stream(session, url, long_request(i, n, long_out), long_arrivals[i])
                    for i, n in enumerate(long_lens)
                )
            )
            ended_early = sum(c.done() for c in chats)
        finally:
            for chat in chats:
                chat.cancel()  # closing the connection aborts the request on the server
            await asyncio.gather(*chats, return_exceptions=True)
    # every chunk's arrival, seconds from the long prompts' sending (main() keeps them beside the
    # record)
    since = lambda lists: [[round(t - start, 4) for t in times] for times in lists]  # noqa: E731
    record = {
        "streams": streams,
        "chat_len": chat_len,
        "chat_out": chat_out,
        "long_lens": long_lens,
        "long_out": long_out,
        "streams_ended_during": ended_early,
        "arrivals": {"streams": since(arrivals), "long": since(long_arrivals)},
    }
    if refused := next((e for e in errors if e), None):
        return {**record, "refused": refused}
    if not all(long_arrivals):
        return {**record, "refused": "a long prompt was answered without a token"}
    firsts = [times[0] for times in long_arrivals]
    before, during = split_gaps(arrivals, steady_from, start, max(firsts))
    return {
        **record,
        **gap_summary(before, during),
        "long_ttft_ms": round(1000 * (max(firsts) - start), 1),
        "long_ttfts_ms": [round(1000 * (first - start), 1) for first in firsts],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--chat-len", type=int, default=128)
    parser.add_argument("--chat-out", type=int, default=4000)
    parser.add_argument("--long", type=int, nargs="+", default=[131072], dest="long_lens")
    parser.add_argument("--long-out", type=int, default=16)
    args = parser.parse_args(argv)
    record = asyncio.run(
        measure(args.url, args.streams, args.chat_len, args.chat_out, args.long_lens, args.long_out)
    )
    args.out.with_suffix(".arrivals.json").write_text(json.dumps(record.pop("arrivals")))
    args.out.write_text(json.dumps(record) + "\n")
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
