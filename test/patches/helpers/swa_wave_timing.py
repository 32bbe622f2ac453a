"""The scheduler's host time for one wave of chats, 0016 + 0017 off or on, without a model
(swa_serving): admit N requests of P prompt tokens, decode D steps (SWA maintenance as the switches
make it), finish them all at once, admit the next wave. Prints the times and, with --profile, where
finishing the wave spends its time. Not a test: a CPU measurement for
docs/kv/swa-maintenance-0.5.17.md.

    python test/patches/helpers/swa_wave_timing.py on --window 1023 --prompt 1000 \\
        --decode 1000 --requests 32
"""

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parents[2])]
import patched_tree  # noqa: E402,F401  (the patched sglang first on sys.path)
from swa_serving import Serving, publish_server_args, request  # noqa: E402


def wave(first_id: int, args) -> list:
    return [
        request(
            f"r{first_id + i}",
            [1000 + ((first_id + i) * 7 + k) % 5000 for k in range(args.prompt)],
            max_new_tokens=args.decode + 10,
        )
        for i in range(args.requests)
    ]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("switches", choices=["off", "on"])
    parser.add_argument(
        "--window", type=int, default=1023, help="sglang's window (Gemma 4's config value less one)"
    )
    parser.add_argument("--prompt", type=int, default=1000)
    parser.add_argument("--decode", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--profile", action="store_true", help="cProfile of finishing the wave")
    args = parser.parse_args()
    if args.switches == "off":
        os.environ["SGLANG_OPT_SWA_RELEASE_PASSED_PREFIX"] = "0"
        os.environ["SGLANG_OPT_SWA_POOL_FROM_RUNNING_WINDOWS"] = "0"
    publish_server_args()
    tokens = args.requests * (args.prompt + args.decode)
    serving = Serving(
        page_size=1,
        window=args.window,
        size=3 * tokens,
        size_swa=2 * tokens,
        max_requests=args.requests + 4,
        max_context_len=args.prompt + args.decode + 16,
    )
    start = time.perf_counter()
    for req in wave(0, args):
        serving.admit(req)
    admitted = time.perf_counter()
    steps = []
    for _ in range(args.decode):
        step = time.perf_counter()
        serving.decode(1)
        steps.append(time.perf_counter() - step)
    nodes = len(serving.cache.tree_core._node_arena)  # the radix tree's nodes, the root included
    finishing = time.perf_counter()
    profile = cProfile.Profile() if args.profile else None
    if profile:
        profile.enable()
    for req in list(serving.running.reqs):
        serving.finish(req)
    if profile:
        profile.disable()
    finished = time.perf_counter()
    for req in wave(args.requests, args):
        serving.admit(req)
    print(
        f"{args.switches}: admit {admitted - start:.3f} s, decode step median "
        f"{statistics.median(steps) * 1e3:.2f} ms, "
        f"{nodes} tree nodes, finish all {finished - finishing:.3f} s, admit the next wave "
        f"{time.perf_counter() - finished:.3f} s"
    )
    if profile:
        pstats.Stats(profile).sort_stats("cumulative").print_stats(12)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
