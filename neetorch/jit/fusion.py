"""Fusion: which nodes become one kernel.

This module only *decides*; rendering is the device's job, so other backends can render
the same groups.  Three stages, run in this order by :func:`fuse_elementwise`
(the list :data:`FUSION_STAGES`):

1. ``group_elementwise``: chains of elementwise nodes sharing one iteration space become
   one :class:`FusedElementwise` node (CPU renderer: ``devices/cpu/elementwise.compile_group``).
   A float16/bfloat16 result joins a group only on a backend whose fused kernels round it after
   its member op, as eager stores it (``rounds_low_float_members``: the CPU); elsewhere it ends
   the group.  Stages 2 and 3 take no group computing a low float.
2. ``fuse_reduction_prologues``: an elementwise group feeding a row reduction over the last
   dim (softmax, log_softmax, layer_norm, rms_norm) joins it: one :class:`ReductionPrologue`
   node computes the group and normalizes its rows while they are in cache (residual add +
   layer_norm, scale/mask + softmax): one read of the inputs, one write of each output.
   The group's values needed elsewhere (the residual stream) are still written.
3. ``fuse_matmul_epilogues``: a ``matmul`` (or ``conv2d``) whose only consumer is an
   elementwise group or a reduction prologue becomes one :class:`MatmulEpilogue` node: the
   GEMM writes its result and the epilogue runs on it right after, while it is in cache
   (bias, activation, residual, mask, softmax, layer_norm), without a separate launch or
   an intermediate buffer in the memory plan.

Composite nodes (stages 2 and 3) keep the nodes they replace in ``op.parts``: a device that
cannot render a pattern runs those instead.  A device renders a pattern through the
compiler it registers as ``backend.kernels["compile:" + op.pattern]`` (CPU:
``devices/cpu/kernels/fused.py``).
"""
from __future__ import annotations

from ..ops.registry import Meta
from ..ops.shape_rules import broadcast_shapes
from ..tensor.dtypes import LOW_FLOATS
from ..trace.ir import Graph, Node

__all__ = ["ConvPrologue", "FusedElementwise", "MatmulEpilogue", "ReductionPrologue", "fuse_conv_prologues",
           "fuse_elementwise", "group_elementwise",
           "fuse_reduction_prologues", "fuse_matmul_epilogues", "FUSION_STAGES"]


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


def group_elementwise(g: Graph) -> Graph:
    """Replace maximal runs of elementwise nodes over the same output shape by fused nodes."""
    index = {n: i for i, n in enumerate(g.nodes)}
    users = g.users()
    group_of: dict = {}
    groups: list[list[Node]] = []
    for n in g.nodes:
        if not _is_ew(n) or (any(o.dtype in LOW_FLOATS for o in n.outputs) and not _rounds_low(n.outputs[0].device)):
            # a float16/bfloat16 result is rounded after every op, as in eager: it joins a group only on a
            # backend whose fused kernels round each member's result (``rounds_low_float_members``)
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


# ------------------------------------------------------------------ composite patterns
def _infer_parts(parts, inputs, outputs, metas):
    """Output metas of a chain of part nodes for input metas ``metas`` (shapes recomputed, so a
    shape-polymorphic executable gets the actual sizes; dtypes are those of the graph)."""
    env = {v: m for v, m in zip(inputs, metas)}
    for n in parts:
        ins = [env[a] for a in n.inputs]
        if isinstance(n.op, FusedElementwise):
            shape = broadcast_shapes(*[tuple(m.shape) for m in ins])
            res = [Meta(shape, o.dtype) for o in n.op.outputs]
            for o, m in zip(n.op.outputs, res):
                env[o] = m
        else:
            res = n.op.infer(ins, n.attrs)
        for o, m in zip(n.outputs, res):
            env[o] = m
    return [env[o] for o in outputs]


class _Composite:
    """A fused pattern: ``parts`` (original nodes, in order) run as one kernel."""
    kind = "fused"
    pattern = ""

    def infer(self, metas, attrs):
        return _infer_parts(self.parts, self.inputs, self.outputs, metas)

    def __repr__(self):
        return self.name


class ReductionPrologue(_Composite):
    """``group`` (a FusedElementwise node) then the row reduction ``red`` (softmax / log_softmax
    over the last dim, layer_norm / rms_norm) on its result, row by row while the row is in cache.

    ``src`` is the group value ``red`` normalizes; it is among ``outputs`` only when needed
    elsewhere.  Outputs: the group's external outputs, then ``red``'s output.
    """
    pattern = "reduction_prologue"

    def __init__(self, group: Node, red: Node, outputs: list):
        self.group = group
        self.red = red
        self.src = red.inputs[0]
        self.parts = [group, red]
        self.inputs = list(group.inputs) + [a for a in red.inputs[1:] if a not in group.inputs]
        self.outputs = outputs
        self.name = f"{group.op.name}+{red.name}"


class MatmulEpilogue(_Composite):
    """``matmul`` (or ``conv2d``: any op in :data:`EPILOGUE_PRODUCERS`) then ``epilogue`` (a
    FusedElementwise or ReductionPrologue node reading the product ``acc``) as one kernel.
    Inputs: the producer's operands, then the epilogue's other inputs."""
    pattern = "matmul_epilogue"

    def __init__(self, mm: Node, epilogue: Node):
        self.matmul = mm
        self.epilogue = epilogue
        self.acc = mm.outputs[0]
        self.parts = [mm, epilogue]
        self.inputs = list(mm.inputs) + [a for a in epilogue.inputs if a is not self.acc]
        self.outputs = list(epilogue.outputs)
        self.name = f"{mm.name}+{epilogue.op.name}"


# ops whose single output can take an elementwise epilogue (the producer writes a scratch buffer,
# the epilogue reads it right after): matmul (BLAS), conv2d (im2col + BLAS)
EPILOGUE_PRODUCERS = ("matmul", "conv2d")


_ROW_REDUCTIONS = ("softmax", "log_softmax", "layer_norm", "rms_norm")
_FLOAT = ("float32", "float64")   # patterns (row kernels, GEMM epilogues) do not render float16/bfloat16


def _floats_only(vals) -> bool:
    return all(v.dtype not in LOW_FLOATS for v in vals)


def _members(grp: Node) -> list:
    """Every value a group (or reduction prologue) node computes inside, its members' results included."""
    op = grp.op
    if isinstance(op, ReductionPrologue):
        return _members(op.group) + list(op.red.outputs)
    return [o for m in getattr(op, "nodes", ()) for o in m.outputs]


_LOW_ROUNDING: dict = {}


def _rounds_low(dev) -> bool:
    """Whether the backend of ``dev`` renders fused groups with float16/bfloat16 members rounded after
    each member op (the backend attribute ``rounds_low_float_members``; CPU: yes).  Elsewhere a
    low-float result ends a group (the member then runs alone, as in eager)."""
    key = str(dev)
    r = _LOW_ROUNDING.get(key)
    if r is None:
        from ..devices import device, get_backend
        try:
            be = get_backend(device(key))
        except RuntimeError:   # a device unavailable here: its graphs never run
            return False
        r = _LOW_ROUNDING[key] = bool(getattr(be, "rounds_low_float_members", False))
    return r


def _as_group(g: Graph, n: Node, users) -> Node | None:
    """``n`` if it is a fused group node; a one-node group for a lone elementwise node."""
    if isinstance(n.op, FusedElementwise):
        return n
    if not _is_ew(n) or len(n.outputs) != 1:
        return None
    op = FusedElementwise([n], list(dict.fromkeys(n.inputs)), list(n.outputs))
    return Node(op, op.inputs, {}, list(n.outputs))


def _replace(g: Graph, old: list, new: Node, at: Node) -> None:
    """Put ``new`` where ``at`` was and drop the nodes in ``old``."""
    drop = set(old)
    out = []
    for n in g.nodes:
        if n is at:
            out.append(new)
        elif n not in drop:
            out.append(n)
    g.nodes = out
    for o in new.outputs:
        o.producer = new


def _same_device(vals) -> bool:
    return len({str(v.device) for v in vals}) <= 1


def fuse_reduction_prologues(g: Graph) -> Graph:
    """softmax/log_softmax over the last dim and layer_norm/rms_norm whose input comes from an
    elementwise group of the same shape take the group in as their prologue.  One pass with the users
    map and positions kept current per fusion (as :func:`fuse_matmul_epilogues`)."""
    users = g.users()
    index = {n: i for i, n in enumerate(g.nodes)}
    outs = set(g.outputs)
    placed: dict = {}
    dropped: set = set()
    for red in list(g.nodes):
        if red.name not in _ROW_REDUCTIONS or not red.inputs:
            continue
        x = red.inputs[0]
        if x.dtype.name not in _FLOAT or red.outputs[0].dtype is not x.dtype or not x.shape:
            continue
        if red.name in ("softmax", "log_softmax") and red.attrs.get("dim") != len(x.shape) - 1:
            continue
        p = x.producer
        if p is None or p not in index or p in dropped:
            continue
        grp = _as_group(g, p, users)
        if grp is None or tuple(grp.op.outputs[0].shape) != tuple(x.shape):
            continue
        if any(a in grp.op.outputs for a in red.inputs[1:]):
            continue   # weight/bias computed by the group: not a prologue
        vals = list(grp.op.inputs) + list(grp.op.outputs) + list(red.inputs) + list(red.outputs)
        if not _floats_only(vals + _members(grp)) or not _same_device(vals):
            continue
        # the group now runs at red's position: nobody may read its outputs in between
        ri = index[red]
        ext = []
        ok = True
        for o in grp.op.outputs:
            us = [u for u in users.get(o, ()) if u is not red and u is not p]
            if any(index[u] < ri for u in us):
                ok = False
            if o is not x or us or o in outs:
                ext.append(o)
        if not ok:
            continue
        op = ReductionPrologue(grp, red, ext + list(red.outputs))
        index[_place(users, placed, dropped, op, red, p)] = ri
    if placed or dropped:
        _rebuild(g, placed, dropped)
    return g.validate()


def _place(users: dict, placed: dict, dropped: set, op, at: Node, absorbed: Node) -> Node:
    """The node of composite ``op`` taking ``at``'s place (``placed``), ``absorbed`` dropped, its outputs produced
    by it and ``users`` rewired (the one placement of every fusion pass here)."""
    node = Node(op, op.inputs, {}, op.outputs)
    placed[at] = node
    dropped.add(absorbed)
    for o in node.outputs:
        o.producer = node
    _rewire_users(users, node, (absorbed, at))
    return node


def _rewire_users(users: dict, new: Node, gone) -> None:
    """``users`` (Graph.users) after nodes ``gone`` became ``new``: each of new's inputs is read by new in
    their place (one pass over new's inputs, not a rescan of the graph)."""
    for a in dict.fromkeys(new.inputs):
        us = [u for u in users.get(a, ()) if u not in gone]
        us.append(new)
        users[a] = us


def _rebuild(g: Graph, placed: dict, dropped: set) -> None:
    """One rewrite of the node list for every fusion of a pass: ``placed`` maps a node to the fused node
    taking its position; ``dropped`` nodes go."""
    g.nodes = [placed.get(n, n) for n in g.nodes if n not in dropped]


def fuse_matmul_epilogues(g: Graph) -> Graph:
    """A matmul (or conv2d) whose product is read only by one elementwise group (or reduction
    prologue) of the product's own shape runs that group as its epilogue.

    One pass, in graph order, with the users map updated per fusion and the node list rewritten once
    (a rescan per fusion made compile time quadratic in graph size: an unrolled 2-layer bidirectional
    LSTM at T=100 spent 4 of its 7.6 s first call here).  A fusion never makes an earlier candidate
    eligible (it only replaces readers), so this fuses what restarting after each fusion would."""
    users = g.users()
    outs = set(g.outputs)
    placed: dict = {}
    dropped: set = set()
    for mm in list(g.nodes):
        if mm.name not in EPILOGUE_PRODUCERS or len(mm.outputs) != 1 or getattr(mm.op, "check", None) is not None:
            continue
        acc = mm.outputs[0]
        us = users.get(acc, [])
        if acc in outs or len(set(us)) != 1 or acc.dtype.name not in _FLOAT:
            continue
        e = us[0]
        if isinstance(e.op, ReductionPrologue):
            if acc not in e.op.group.op.inputs:
                continue   # read by the reduction itself (weight), not the prologue
            shape = e.op.group.op.outputs[0].shape
        else:
            e = _as_group(g, e, users)
            if e is None:
                continue
            shape = e.op.outputs[0].shape
        if tuple(shape) != tuple(acc.shape):
            continue   # the epilogue broadcasts the product: not one pass over it
        vals = list(mm.inputs) + list(e.op.inputs) + list(e.op.outputs)
        if not _floats_only(vals + _members(e)) or not _same_device(vals):
            continue
        op = MatmulEpilogue(mm, e)
        # at us[0]: a node of g.nodes (a product fused earlier in this pass is no group: never an ``e``)
        _place(users, placed, dropped, op, us[0], mm)
    if placed or dropped:
        _rebuild(g, placed, dropped)
    return g.validate()


class ConvPrologue(_Composite):
    """A per-input-channel scale / shift / relu group (``group``: a FusedElementwise node; DenseNet's
    BatchNormalization + ReLU) whose only reader is an unpadded stride-1 1x1 ``conv2d`` (``conv``: the conv2d
    node or a MatmulEpilogue node of one), as one kernel: the conv applies the group to its input as it reads it
    (CPU: kernels/conv_epilogue.py's compile_conv_prologue).  Inputs: the group's, then the conv node's other
    than the group's result ``x``; outputs: the conv node's."""
    pattern = "conv_prologue"

    def __init__(self, group: Node, conv: Node):
        self.group = group
        self.conv = conv
        self.x = group.op.outputs[0]
        self.parts = [group, conv]
        self.inputs = list(group.op.inputs) + [a for a in conv.inputs if a is not self.x]
        self.outputs = list(conv.outputs)
        self.name = f"{group.op.name}+{conv.op.name}"


_PROLOGUE_OPS = ("mul", "add", "relu")


def prologue_steps(grp_op, x):
    """``(data, [(kind, operand or None)])`` when the FusedElementwise op ``grp_op`` computes ``x`` (N, C, H, W) as
    a chain of mul / add by per-channel operands ((C, 1, 1) or (1, C, 1, 1)) and relu over one input ``data`` of
    x's shape and dtype, else None."""
    nodes = grp_op.nodes
    if len(grp_op.outputs) != 1 or grp_op.outputs[0] is not x or nodes[-1].outputs[0] is not x or \
            len(x.shape) != 4 or len(nodes) > 8:
        return None
    C = x.shape[1]
    shape = tuple(x.shape)
    steps, prev = [], None
    for i, n in enumerate(nodes):
        if n.op.name not in _PROLOGUE_OPS or n.attrs or len(n.outputs) != 1 or \
                tuple(n.outputs[0].shape) != shape or n.outputs[0].dtype != x.dtype:
            return None
        if n.op.name == "relu":
            if len(n.inputs) != 1:
                return None
            cur, other = n.inputs[0], None
        else:
            if len(n.inputs) != 2:
                return None
            a, b = n.inputs
            if prev is not None:
                if (a is prev) == (b is prev):
                    return None
                cur, other = (a, b) if a is prev else (b, a)
            else:
                per = [v for v in (a, b) if len(v.shape) in (3, 4) and tuple(v.shape)[-3:] == (C, 1, 1) and
                       all(d == 1 for d in tuple(v.shape)[:-3])]
                if len(per) != 1:
                    return None
                other = per[0]
                cur = b if other is a else a
            if other.dtype != x.dtype or not (len(other.shape) in (3, 4) and tuple(other.shape)[-3:] == (C, 1, 1)
                                              and all(d == 1 for d in tuple(other.shape)[:-3])):
                return None
        if prev is None:
            if tuple(cur.shape) != shape or cur.dtype != x.dtype:
                return None
            data = cur
        elif cur is not prev:
            return None
        steps.append((n.op.name, other))
        prev = n.outputs[0]
    return data, steps


def fuse_conv_prologues(g: Graph) -> Graph:
    """An unpadded stride-1 one-group 1x1 conv2d (alone or with its epilogue) whose input is an elementwise
    group's only output, read by nothing else, of the form :func:`prologue_steps` takes, runs that group as its
    prologue (:class:`ConvPrologue`).  One pass, as :func:`fuse_matmul_epilogues`."""
    users = g.users()
    outs = set(g.outputs)
    index = {n: i for i, n in enumerate(g.nodes)}
    placed: dict = {}
    dropped: set = set()
    for n in list(g.nodes):
        cv = n.op.matmul if isinstance(n.op, MatmulEpilogue) else n
        if cv.name != "conv2d" or len(cv.inputs) < 2 or len(n.outputs) != 1:
            continue
        x, w = cv.inputs[0], cv.inputs[1]
        a = cv.attrs
        if len(w.shape) != 4 or tuple(w.shape[2:]) != (1, 1) or a.get("groups") != 1 or \
                tuple(a.get("stride", ())) != (1, 1) or any(a.get("padding", (1,))):
            continue
        if x in outs or n.inputs[0] is not x or sum(v is x for v in n.inputs) != 1 or \
                len(set(users.get(x, ()))) != 1:
            continue
        p = x.producer
        if p is None or p not in index or p in dropped or not isinstance(p.op, FusedElementwise):
            continue
        if x.dtype.name not in _FLOAT or prologue_steps(p.op, x) is None:
            continue
        vals = list(p.op.inputs) + list(n.inputs) + list(n.outputs)
        if not _floats_only(vals + _members(p)) or not _same_device(vals):
            continue
        op = ConvPrologue(p, n)
        index[_place(users, placed, dropped, op, n, p)] = index[n]
    if placed or dropped:
        _rebuild(g, placed, dropped)
    return g.validate()


FUSION_STAGES = [
    ("elementwise", group_elementwise),
    ("reduction_prologues", fuse_reduction_prologues),
    ("matmul_epilogues", fuse_matmul_epilogues),
    ("conv_prologues", fuse_conv_prologues),
]


def fuse_elementwise(g: Graph) -> Graph:
    """All fusion stages (:data:`FUSION_STAGES`), in order."""
    for _, stage in FUSION_STAGES:
        g = stage(g)
    return g
