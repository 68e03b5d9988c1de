"""Dispatch trace: every kernel launch, eager and compiled, plus compile events and cache hits.

``with nee.profile() as prof: ...`` then ``print(prof.table())`` or
``prof.export_chrome_trace("trace.json")`` (opens in Perfetto / chrome://tracing).
``NEE_DEBUG>=2`` prints one line per kernel launch as it happens.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from dataclasses import dataclass

from . import _env

__all__ = ["profile", "Event", "active"]

_active: list = [None]


@dataclass
class Event:
    name: str
    kind: str            # "kernel" | "compile" | "cache_hit"
    device: str
    start: float         # seconds (perf_counter)
    dur: float
    nbytes: int = 0
    flops: int = 0
    detail: str = ""     # fused ops, shape bucket...
    tid: int = 0

    @property
    def gbps(self) -> float:
        return self.nbytes / self.dur / 1e9 if self.dur > 0 else 0.0


def active():
    return _active[0]


def timing_enabled() -> bool:
    return _active[0] is not None or _env.DEBUG >= 2


def op_flops(name: str, in_shapes, out_shape) -> int:
    """Floating-point operations (2 per multiply-add) of one launch of the ops whose cost is their products,
    from static shapes: matmul (``(..., M, K) @ (..., K, N)``, 1-D operands as torch), conv2d /
    conv_transpose2d (2 x output (or input, transposed) elements x the weight's elements per output channel);
    0 for every other op and for symbolic dims (the profile's GFLOP/s column stays empty for them)."""
    shapes = [tuple(s) for s in in_shapes[:2]] + [tuple(out_shape)]
    if not all(type(d) is int or hasattr(d, "__index__") and not isinstance(d, str) for s in shapes for d in s):
        return 0
    try:
        if name == "matmul" and len(in_shapes) >= 2:
            a, b = in_shapes[0], in_shapes[1]
            K = a[-1] if len(a) else 1
            n = 1
            for d in tuple(out_shape):
                n *= d
            return 2 * n * K
        if name in ("conv2d", "conv_transpose2d") and len(in_shapes) >= 2:
            w = in_shapes[1]
            per = 1
            for d in w[1:]:
                per *= d
            n = 1
            for d in (tuple(out_shape) if name == "conv2d" else tuple(in_shapes[0])):
                n *= d
            return 2 * n * per
    except TypeError:      # (a symbolic dim)
        return 0
    return 0


def record(name, kind, device, start, dur, nbytes=0, flops=0, detail="") -> None:
    p = _active[0]
    ev = Event(name, kind, str(device), start, dur, nbytes, flops, detail, threading.get_ident())
    if p is not None:
        with p._lock:
            p.events.append(ev)
    if _env.DEBUG >= 2 and kind == "kernel":
        rate = f"{ev.gbps:6.2f} GB/s" if nbytes else ""
        print(f"[neetorch] {name:<40} {ev.device:<6} {dur * 1e6:10.1f} us {rate} {detail}", file=sys.stderr)


class profile:
    """Context manager collecting :class:`Event` s for everything run inside it."""

    def __init__(self):
        self.events: list[Event] = []
        self._lock = threading.Lock()
        self._prev = None

    def __enter__(self):
        self._prev = _active[0]
        _active[0] = self
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        _active[0] = self._prev
        return False

    def kernels(self):
        return [e for e in self.events if e.kind == "kernel"]

    def table(self, sort_by: str = "total", row_limit: int = 20) -> str:
        """Top kernels: calls, total and mean time, bytes moved, achieved GB/s and GFLOP/s."""
        agg: dict = {}
        for e in self.kernels():
            a = agg.setdefault((e.name, e.device), [0, 0.0, 0, 0])
            a[0] += 1
            a[1] += e.dur
            a[2] += e.nbytes
            a[3] += e.flops
        rows = sorted(agg.items(), key=lambda kv: -kv[1][1] if sort_by == "total" else -kv[1][0])
        lines = [f"{'kernel':<44}{'device':<8}{'calls':>7}{'total ms':>11}{'mean us':>10}{'GB/s':>8}{'GFLOP/s':>9}"]
        for (name, dev), (n, t, b, f) in rows[:row_limit]:
            gb = f"{b / t / 1e9:8.2f}" if b and t else f"{'':>8}"
            gf = f"{f / t / 1e9:9.2f}" if f and t else f"{'':>9}"
            lines.append(f"{name[:43]:<44}{dev:<8}{n:>7}{t * 1e3:>11.3f}{t / n * 1e6:>10.1f}{gb}{gf}")
        comp = [e for e in self.events if e.kind == "compile"]
        hits = [e for e in self.events if e.kind == "cache_hit"]
        lines.append(f"compile events: {len(comp)} ({sum(e.dur for e in comp):.3f} s), cache hits: {len(hits)}")
        return "\n".join(lines)

    def export_chrome_trace(self, path: str | os.PathLike) -> None:
        """Write a Chrome trace-event JSON file (Perfetto / chrome://tracing)."""
        t0 = min((e.start for e in self.events), default=0.0)
        evs = []
        for e in self.events:
            args = {"device": e.device, "bytes": e.nbytes}
            if e.detail:
                args["detail"] = e.detail
            if e.nbytes and e.dur:
                args["GB/s"] = round(e.gbps, 3)
            if e.flops and e.dur:
                args["GFLOP/s"] = round(e.flops / e.dur / 1e9, 3)
            evs.append({"name": e.name, "cat": e.kind, "ph": "X", "ts": (e.start - t0) * 1e6,
                        "dur": max(e.dur * 1e6, 0.001), "pid": os.getpid(), "tid": e.tid, "args": args})
        with open(path, "w") as f:
            json.dump({"traceEvents": evs, "displayTimeUnit": "ms"}, f)
