"""Kernel timing the way serving runs kernels: captured once in a CUDA graph, then replayed, so
Python and launch overhead stay out of the number (the GPU scripts share this)."""

import statistics


def graph_replay_us(fn, repeats: int, calls_per_graph: int = 1) -> float:
    """Median microseconds per call of `fn`, over `repeats` replays of a graph of `calls_per_graph`
    calls."""
    import torch

    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):  # compile and warm up before the capture
            fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(calls_per_graph):
            fn()
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1000 / calls_per_graph)
    return statistics.median(samples)
