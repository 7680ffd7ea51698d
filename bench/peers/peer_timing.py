"""Timing as `mxmoe bench` does it (tools/mxmoe/bench_timing.cpp, time_graph): one CUDA graph holds the
forwards of all rotated layers; untimed replays for at least `warmup_ms` and at least `warmup` of them,
each waited for; then `iterations` replays, each between two CUDA events; the median. A forward that
cannot be captured (host syncs) is timed the same way without the graph, and the record says so."""
from __future__ import annotations

import statistics
import time

import torch


def time_layers(body, capturable: bool, warmup: int, warmup_ms: float, iterations: int) -> dict:
    """body(): enqueues the forwards of all rotated layers on the current stream. Returns the median,
    min and max of one replay in ms, and how it was timed."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # compiles, autotunes and allocates outside the capture
        body()
        body()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph, capture_error = None, None
    if capturable:
        try:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                body()
            run = graph.replay
        except RuntimeError as err:  # a peer that syncs after all: timed eagerly, and the record says why
            graph, capture_error, run = None, str(err).splitlines()[0], body
            torch.cuda.synchronize()
    else:
        run = body
    start = time.perf_counter()
    done = 0
    while done < warmup or (time.perf_counter() - start) * 1e3 < warmup_ms:
        run()
        torch.cuda.synchronize()
        done += 1
    times = []
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(iterations):
        begin.record()
        run()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end))
    result = {"ms": statistics.median_high(times), "min_ms": min(times), "max_ms": max(times),
              "timing": "cuda-graph" if graph is not None else "eager", "warmup_replays": done}
    if capture_error:
        result["capture_error"] = capture_error
    del graph
    return result


def copy_gbps(warmup_ms: float) -> float:
    """The copy ceiling as `mxmoe bench` measures it: 1 GiB read and 1 GiB written by one elementwise
    kernel (not cudaMemcpy, which a graph may hand to a copy engine), (bytes read + written) / time."""
    n = (1 << 30) // 4
    src = torch.ones(n, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    t = time_layers(lambda: torch.mul(src, 1.0, out=dst), True, 3, warmup_ms, 20)
    return 2.0 * n * 4 / (t["ms"] * 1e-3) / 1e9
