"""Shared pieces of the single-op benches against onnxruntime (conv_vs_ort, pool_vs_ort, depthwise_vs_ort).
Imports nothing of neetorch (the thread count must be set before neetorch is imported)."""
from __future__ import annotations

import json
import os
import sys
import time


def threads_and_clock(argv=None):
    """(threads, clock) from ``--threads N`` / ``--threads=N`` in argv (default 1), NEE_NUM_THREADS set to it:
    one thread is timed by process CPU time, more by wall time (the other threads' CPU time is not the call's
    latency)."""
    argv = sys.argv if argv is None else argv
    nt = 1
    for i, a in enumerate(argv):
        if a.startswith("--threads"):
            nt = int(a.split("=", 1)[1] if "=" in a else argv[i + 1])
    os.environ["NEE_NUM_THREADS"] = str(nt)
    return nt, (time.process_time if nt == 1 else time.perf_counter)


def node_times(sess) -> dict:
    """{node name: its minimum kernel time in us} over the calls an onnxruntime session made with profiling on
    (``SessionOptions.enable_profiling``); ends the profile and removes its file."""
    path = sess.end_profiling()
    with open(path) as fh:
        ev = json.load(fh)
    os.remove(path)
    best: dict = {}
    suffix = "_kernel_time"
    for e in ev:
        if e.get("cat") == "Node" and e["name"].endswith(suffix):
            n = e["name"][:-len(suffix)]
            best[n] = min(best.get(n, float("inf")), e["dur"])
    return best
