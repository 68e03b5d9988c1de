"""Placement: which device runs each node of a graph, with the transfers made explicit.

The ONNX Runtime execution-provider idea: the graph's *preferred* device is the device
of its inputs; each node runs there when that device claims it (``supports`` for the
dtypes, then ``supports_call`` for the shapes and attributes: the same questions eager
dispatch asks), otherwise on the *fallback* device (the CPU).  Where a value crosses
devices, a ``transfer`` node is inserted into the graph, so ``print(graph)`` shows
exactly what moves (``%5: float16[8, 32] = transfer(%4, args=('cpu',), kwargs=())``,
values off the CPU print as ``float16[8, 32]@simnpu:0``).  One transfer per (value,
destination) serves every consumer there; graph outputs computed on the fallback device
are transferred back, so a compiled function returns what eager returns.

Every node placed on the fallback device is a fallback: under strict mode
(``nee.set_strict(True)`` / ``NEE_STRICT=1``) placement raises :class:`FallbackError`
naming each such node; otherwise each run of the compiled graph counts them in
``nee.fallback_report()`` (op, dtypes, reason, bytes its transfers move).  The
:class:`PlacementSummary` attached to the graph (``graph.placement``;
``jitfn.placement(*args)``; the end of ``jitfn.explain``) says it per graph: ops per
device, transfers (count, bytes), fallbacks.

Placement runs after the optimization passes and before fusion: a transfer is not
elementwise, so fused groups never span devices.  The policy is greedy (each node on the
preferred device when claimed); it does not move a claimed node to the CPU to save a
round trip.  Transfers are sized from the graph's static shapes (for a shape-bucketed
graph: the bucket's largest shapes).

``place(graph)`` / ``summarize(jitfn)`` are what a model runner calls: the ONNX
``InferenceSession`` runs through ``nee.jit``, so ``summarize(session._jit)`` is its
placement summary.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from .. import profiler
from ..devices import FallbackError, claim, device, get_backend, is_strict, record_fallback
from ..ops.registry import Meta
from ..trace.ir import Graph, Value
from ..trace.tracer import ViewOp

__all__ = ["TRANSFER", "FallbackNode", "PlacementSummary", "Transfer", "TransferInfo", "place", "summarize"]


def _to_device(t, dst):
    """The transfer node's function: copy ``t`` to ``dst`` (a profiler event when timing)."""
    if not profiler.timing_enabled():
        return t.to(dst)
    t0 = time.perf_counter()
    r = t.to(dst)
    get_backend(r.device).synchronize()
    profiler.record("transfer", "transfer", f"{t.device}->{r.device}", t0, time.perf_counter() - t0,
                    t.nbytes, detail=str(tuple(t.shape)))
    return r


class Transfer(ViewOp):
    """The op of a transfer node: ``attrs = {"args": (destination,), "kwargs": ()}``.

    A view op to the rest of the JIT (it allocates its own result, so the memory plan and
    the executable leave it alone, and ``trace.run_graph`` replays it)."""
    kind = "view"
    __slots__ = ()

    def __init__(self):
        super().__init__("transfer", _to_device)

    def infer(self, metas, attrs):
        return [Meta(tuple(metas[0].shape), metas[0].dtype)]


TRANSFER = Transfer()


def is_transfer(n) -> bool:
    return n.op is TRANSFER


def _nbytes(v) -> int:
    n = v.dtype.itemsize
    for s in v.shape:
        n *= s if isinstance(s, int) else 1
    return n


@dataclass
class TransferInfo:
    value: str          # the value moved ("%4")
    src: str
    dst: str
    nbytes: int


@dataclass
class FallbackNode:
    op: str
    node: int           # index in the placed graph
    dtypes: tuple       # DTypes of inputs + outputs (as the dispatcher passes them)
    reason: str
    nbytes: int = 0     # bytes moved by the transfers this fallback causes (per run)

    @property
    def dtype_names(self) -> tuple:
        return tuple(d.name for d in self.dtypes)


@dataclass
class PlacementSummary:
    graph: str
    preferred: str
    fallback: str
    ops: dict = field(default_factory=dict)          # device -> {op name: count} (views and transfers excluded)
    views: int = 0
    transfers: list = field(default_factory=list)    # [TransferInfo]
    fallbacks: list = field(default_factory=list)    # [FallbackNode]

    @property
    def ops_per_device(self) -> dict:
        return {d: sum(c.values()) for d, c in self.ops.items()}

    @property
    def transfer_bytes(self) -> int:
        return sum(t.nbytes for t in self.transfers)

    def record_run(self) -> None:
        """Count this run's fallbacks in ``nee.fallback_report()`` (raises in strict mode)."""
        dev = device(self.preferred)
        for f in self.fallbacks:
            record_fallback(f.op, dev, f.dtypes, f.reason, f.nbytes, where=f" (node {f.node} of graph {self.graph})")

    def __str__(self) -> str:
        lines = [f"placement of {self.graph}: preferred {self.preferred}, fallback {self.fallback}"]
        for d, ops in self.ops.items():
            detail = ", ".join(f"{k} {v}" for k, v in sorted(ops.items()))
            lines.append(f"  {d:<10} {sum(ops.values()):>4} ops  ({detail})")
        if self.views:
            lines.append(f"  {'views':<10} {self.views:>4}      (no compute)")
        by_dir: dict = {}
        for t in self.transfers:
            by_dir[(t.src, t.dst)] = by_dir.get((t.src, t.dst), 0) + 1
        dirs = ", ".join(f"{s}->{d} {n}" for (s, d), n in by_dir.items())
        lines.append(f"  transfers  {len(self.transfers):>4}      ({dirs or 'none'}), {self.transfer_bytes} B per run")
        lines.append(f"  fallbacks  {len(self.fallbacks):>4}")
        for f in self.fallbacks:
            lines.append(f"    node {f.node:<4} {f.op:<14} {','.join(f.dtype_names):<28} {f.nbytes:>10} B  {f.reason}")
        return "\n".join(lines)

    __repr__ = __str__


def _preferred_of(g: Graph):
    for v in list(g.inputs) + list(g.consts):
        d = device(v.device)
        if d.type != "cpu":
            return d
    return None


def _claim_of(backend, n) -> str | None:
    op = n.op
    if getattr(op, "kind", "") in ("random", "replay"):
        return None   # a sampler / setitem (trace.tracer.RandomOp, ReplayOp) runs on every device as it does eagerly
    nodes = getattr(op, "nodes", None)
    if nodes is not None:  # a fused group (placement normally runs before fusion): claimed when every member is
        for m in nodes:
            r = claim(backend, m.op.name, m.inputs, m.outputs, m.attrs)
            if r is not None:
                return r
        return None
    return claim(backend, op.name, n.inputs, n.outputs, n.attrs)


def place(g: Graph, preferred=None, fallback="cpu") -> Graph:
    """Assign every node of ``g`` to ``preferred`` (default: the device of the graph's inputs)
    where that device claims it, else to ``fallback``; insert transfer nodes; attach
    ``g.placement`` (a :class:`PlacementSummary`).  Edits ``g`` in place and returns it.

    Raises :class:`~neetorch.devices.FallbackError` in strict mode when any node falls back."""
    fb = device(fallback)
    pref = device(preferred) if preferred is not None else (_preferred_of(g) or fb)
    summary = PlacementSummary(g.name, str(pref), str(fb))
    for v in list(g.inputs) + list(g.consts):
        v.device = device(v.device)
    if pref == fb:  # nothing to partition: every node runs on the fallback device itself
        for n in g.nodes:
            for o in n.outputs:
                o.device = device(o.device)
            if isinstance(n.op, ViewOp):
                summary.views += 1
            else:
                summary.ops.setdefault(str(fb), {})
                summary.ops[str(fb)][n.name] = summary.ops[str(fb)].get(n.name, 0) + 1
        g.placement = summary
        return g
    backend = get_backend(pref)
    moved: dict = {}         # (value, destination) -> transferred value
    fallback_of: dict = {}   # value produced on the fallback device -> the FallbackNode (through views)
    nodes: list = []
    summary.ops = {str(pref): {}, str(fb): {}}

    def fetch(v: Value, dst, user: FallbackNode | None) -> Value:
        if v.device == dst:
            return v
        key = (v, dst)
        t = moved.get(key)
        if t is None:
            n = g.add_node(TRANSFER, [v], {"args": (str(dst),), "kwargs": ()}, [Meta(v.shape, v.dtype)])
            g.nodes.pop()           # add_node appends; we build the new order ourselves
            t = n.outputs[0]
            t.device = dst
            moved[key] = t
            nodes.append(n)
            summary.transfers.append(TransferInfo(repr(v), str(v.device), str(dst), _nbytes(v)))
            owner = user if dst == fb else fallback_of.get(v)
            if owner is not None:
                owner.nbytes += _nbytes(v)
        return t

    for n in list(g.nodes):
        if isinstance(n.op, ViewOp):
            dst = n.inputs[0].device
            n.inputs = [n.inputs[0]] + [fetch(a, dst, None) for a in n.inputs[1:]]
            for o in n.outputs:
                o.device = dst
                if n.inputs[0] in fallback_of:
                    fallback_of[o] = fallback_of[n.inputs[0]]
            summary.views += 1
            nodes.append(n)
            continue
        reason = _claim_of(backend, n)
        dst = pref if reason is None else fb
        fnode = None
        if reason is not None:
            dtypes = tuple([a.dtype for a in n.inputs] + [o.dtype for o in n.outputs])
            fnode = FallbackNode(n.name, -1, dtypes, reason)
            summary.fallbacks.append(fnode)
        n.inputs = [fetch(a, dst, fnode) for a in n.inputs]
        for o in n.outputs:
            o.device = dst
            if fnode is not None:
                fallback_of[o] = fnode
        if fnode is not None:
            fnode.node = len(nodes)
        ops = summary.ops[str(dst)]
        ops[n.name] = ops.get(n.name, 0) + 1
        nodes.append(n)
    out_set = set(g.inputs) | set(g.consts)
    g.outputs = [o if o in out_set or o.device == pref else fetch(o, pref, None) for o in g.outputs]
    g.nodes = nodes
    g.placement = summary
    if summary.fallbacks and is_strict():
        what = "; ".join(f"{f.op} (node {f.node}, {', '.join(f.dtype_names)}): {f.reason}" for f in summary.fallbacks)
        raise FallbackError(f"graph {g.name}: {len(summary.fallbacks)} op(s) would fall back from {pref} to {fb}: "
                            f"{what} (strict mode; unset NEE_STRICT or call nee.set_strict(False) to allow "
                            f"fallbacks)")
    return g.validate()


def summarize(jitfn) -> list:
    """The placement summaries of every specialization a ``nee.jit`` function has compiled so far
    (for model runners such as ``onnx.InferenceSession``)."""
    out = []
    for entry in list(jitfn._cache.values()):
        if isinstance(entry, tuple):
            s = getattr(entry[1], "placement", None)
            if s is not None:
                out.append(s)
    return out
