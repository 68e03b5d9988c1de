"""Fusion: which nodes become one kernel.

This module only *decides*: it groups chains of elementwise nodes that share one
iteration space and replaces each group with a single node whose op is a
:class:`FusedElementwise`.  Rendering a group into code is the device's job
(``devices/cpu/elementwise.compile_group`` for the CPU), so other backends can
render the same groups.
"""
from __future__ import annotations

from ..ops.registry import Meta
from ..trace.ir import Graph, Node

__all__ = ["FusedElementwise", "fuse_elementwise"]


class FusedElementwise:
    """A group of elementwise nodes run as one kernel.

    ``nodes`` are the original nodes in order; ``inputs`` the values they read from
    outside the group; ``outputs`` the values the rest of the graph needs.
    """
    kind = "fused"

    def __init__(self, nodes: list, inputs: list, outputs: list):
        self.nodes = nodes
        self.inputs = inputs
        self.outputs = outputs
        self.name = "fused[" + "+".join(n.name for n in nodes) + "]"

    def infer(self, metas, attrs):
        return [Meta(o.shape, o.dtype) for o in self.outputs]

    def __repr__(self):
        return self.name


def _is_ew(n: Node) -> bool:
    return getattr(n.op, "kind", "") == "elementwise" and "py" in getattr(n.op, "expr", {})


def fuse_elementwise(g: Graph) -> Graph:
    """Replace maximal runs of elementwise nodes over the same output shape by fused nodes."""
    index = {n: i for i, n in enumerate(g.nodes)}
    users = g.users()
    group_of: dict = {}
    groups: list[list[Node]] = []
    for n in g.nodes:
        if not _is_ew(n):
            continue
        shape = n.outputs[0].shape
        target = None
        # join the group of the latest-scheduled producer, if that cannot delay a consumer
        for a in n.inputs:
            p = a.producer
            if p is None or p not in group_of:
                continue
            gi = group_of[p]
            grp = groups[gi]
            if grp[0].outputs[0].shape != shape:
                continue
            ok = True
            for m in grp:
                for o in m.outputs:
                    for u in users.get(o, ()):
                        if u is not n and group_of.get(u) != gi and index[u] < index[n]:
                            ok = False
            if ok and (target is None or index[grp[-1]] > index[groups[target][-1]]):
                target = gi
        if target is None:
            group_of[n] = len(groups)
            groups.append([n])
        else:
            group_of[n] = target
            groups[target].append(n)
    out_set = set(g.outputs)
    new_nodes = []
    emitted = set()
    last = {gi: grp[-1] for gi, grp in enumerate(groups)}
    for n in g.nodes:
        gi = group_of.get(n)
        if gi is None:
            new_nodes.append(n)
            continue
        grp = groups[gi]
        if len(grp) == 1:
            new_nodes.append(n)
            continue
        if n is not last[gi] or gi in emitted:
            continue
        emitted.add(gi)
        members = set(grp)
        produced = {o for m in grp for o in m.outputs}
        inputs = []
        for m in grp:
            for a in m.inputs:
                if a not in produced and a not in inputs:
                    inputs.append(a)
        outputs = [o for m in grp for o in m.outputs
                   if o in out_set or any(u not in members for u in users.get(o, ()))]
        op = FusedElementwise(grp, inputs, outputs)
        fused = Node(op, inputs, {}, outputs)
        for o in outputs:
            o.producer = fused
        new_nodes.append(fused)
    g.nodes = new_nodes
    return g.validate()
