"""ONNX control flow (If, Loop, Scan) and sequence ops.

Bodies run as nested lowered graphs that see the enclosing scope.  A branch condition
or trip count is read at lowering time: static under tracing when it comes from
constants/shapes; a data-dependent one makes the trace fail at that node, and the session
runs the node eagerly as a graph break, the rest compiled (``session.info["breaks"]``).
Sequences are Python lists of tensors.
"""
from __future__ import annotations

import numpy as np

import neetorch as nee
from .lowering import op, NodeView, run_nodes, LoweringError, EMPTY

_BODIES: dict = {}


def _nodes(g):
    e = _BODIES.get(id(g))
    if e is None or e[0] is not g:
        e = (g, [NodeView(n) for n in g.node])
        _BODIES[id(g)] = e
    return e[1]


def run_subgraph(ctx, g, env, inputs):
    local = dict(env)
    for vi, t in zip(g.input, inputs):
        local[vi.name] = t
    from .loader import tensor_to_numpy
    for init in g.initializer:
        local[init.name] = ctx.const(tensor_to_numpy(init))
    run_nodes(ctx, _nodes(g), local)
    return [local[o.name] for o in g.output]


@op("If")
def _if(ctx, node, cond):
    c = bool(ctx.scalar(cond))
    g = node.get("then_branch") if c else node.get("else_branch")
    return tuple(run_subgraph(ctx, g, ctx.scope, []))


@op("Loop")
def _loop(ctx, node, M=None, cond=None, *v):
    g = node.get("body")
    n_carried = len(v)
    max_trip = int(ctx.scalar(M)) if M is not None else None
    keep = bool(ctx.scalar(cond)) if cond is not None else True
    state = list(v)
    scans = None
    i = 0
    while keep and (max_trip is None or i < max_trip):
        it = ctx.const(i, dtype="int64")
        cv = cond if cond is not None else ctx.const(True)
        outs = run_subgraph(ctx, g, ctx.scope, [it, cv] + state)
        keep = bool(ctx.scalar(outs[0]))
        state = list(outs[1:1 + n_carried])
        sc = outs[1 + n_carried:]
        if scans is None:
            scans = [[] for _ in sc]
        for lst, t in zip(scans, sc):
            lst.append(t)
        i += 1
        if i > 10_000_000:
            raise LoweringError("Loop ran past 10^7 iterations")
    n_scan = len(g.output) - 1 - n_carried
    outs = state
    for k in range(n_scan):
        lst = scans[k] if scans else []
        if lst:
            outs.append(nee.stack(lst, 0) if not isinstance(lst[0], list) else lst)
        else:
            outs.append(nee.zeros(0))
    return tuple(outs)


def _stack_scan_output(vals, axis, reverse):
    y = nee.stack(vals, 0)
    ax = axis % y.ndim
    if ax:
        y = y.movedim(0, ax)
    return y.flip(ax) if reverse else y


def run_scan(ctx, node, xs, flip=lambda s, a: s.flip(a), select=lambda s, a, t: s.select(a, t),
             stack=_stack_scan_output):
    """ONNX Scan (opset 9+): state carried, scan inputs sliced along their axes (reversed where their direction
    says), the body run once per step, scan outputs stacked along their axes.  ``flip`` / ``select`` / ``stack``
    act on the values (nee tensors here; ops_string's host Scan passes versions that also take string arrays)."""
    g = node.get("body")
    n_scan_in = int(node.get("num_scan_inputs"))
    n_state = len(xs) - n_scan_in
    if n_state < 0:
        raise LoweringError(f"node {node.name} (Scan): num_scan_inputs {n_scan_in} is more than the {len(xs)} inputs")
    state, seqs = list(xs[:n_state]), list(xs[n_state:])
    in_axes = node.get("scan_input_axes") or [0] * n_scan_in
    in_dirs = node.get("scan_input_directions") or [0] * n_scan_in
    n_out = len(g.output) - n_state
    out_axes = node.get("scan_output_axes") or [0] * n_out
    out_dirs = node.get("scan_output_directions") or [0] * n_out
    seqs = [flip(s, a % s.ndim) if d else s for s, a, d in zip(seqs, in_axes, in_dirs)]
    lens = {s.shape[a % s.ndim] for s, a in zip(seqs, in_axes)}
    if len(lens) > 1:
        raise LoweringError(f"node {node.name} (Scan): the scan inputs have different lengths {sorted(lens)} along "
                            f"their scan axes")
    T = lens.pop() if lens else 0
    collected = [[] for _ in range(n_out)]
    for t in range(T):
        ins = [select(s, a % s.ndim, t) for s, a in zip(seqs, in_axes)]
        outs = run_subgraph(ctx, g, ctx.scope, state + ins)
        state = outs[:n_state]
        for k, o in enumerate(outs[n_state:]):
            collected[k].append(o)
    res = list(state)
    for k in range(n_out):
        if not collected[k]:
            raise LoweringError(f"node {node.name} (Scan): a Scan with no steps has no scan outputs to stack "
                                f"(0 iterations)")
        res.append(stack(collected[k], out_axes[k], bool(out_dirs[k])))
    return tuple(res)


@op("Scan")
def _scan(ctx, node, *xs):
    return run_scan(ctx, node, xs)


# ---------------------------------------------------------------- sequences (Python lists)
@op("SequenceEmpty")
def _seq_empty(ctx, node):
    return ([],)


@op("SequenceConstruct")
def _seq_construct(ctx, node, *xs):
    return (list(xs),)


@op("SequenceAt")
def _seq_at(ctx, node, seq, p):
    i = int(ctx.scalar(p))
    return seq[i]


@op("SequenceErase")
def _seq_erase(ctx, node, seq, p=None):
    s = list(seq)
    i = int(ctx.scalar(p)) if p is not None else -1
    del s[i]
    return (s,)


@op("SequenceInsert")
def _seq_insert(ctx, node, seq, t, p=None):
    s = list(seq)
    if p is None:
        s.append(t)
    else:
        i = int(ctx.scalar(p))
        if i < 0:
            i += len(s)
        s.insert(i, t)
    return (s,)


@op("SequenceLength")
def _seq_len(ctx, node, seq):
    return ctx.const(len(seq), dtype="int64")


@op("SplitToSequence")
def _split_to_seq(ctx, node, x, split=None):
    axis = node.get("axis", 0) % x.ndim
    keep = node.get("keepdims", 1)
    n = x.shape[axis]
    if split is None:
        parts = [x.narrow(axis, i, 1) for i in range(n)]
        if not keep:
            parts = [p.squeeze(axis) for p in parts]
        return (parts,)
    sv = ctx.ints(split)
    if split.ndim == 0:
        k = sv[0]
        sizes = [k] * (n // k) + ([n % k] if n % k else [])
    else:
        sizes = sv
    parts, s0 = [], 0
    for s in sizes:
        parts.append(x.narrow(axis, s0, s))
        s0 += s
    return (parts,)


@op("ConcatFromSequence")
def _concat_from_seq(ctx, node, seq):
    axis = node.get("axis")
    if node.get("new_axis", 0):
        return nee.stack(list(seq), axis % (seq[0].ndim + 1))
    return nee.cat(list(seq), axis % seq[0].ndim)


# ---------------------------------------------------------------- optionals (EMPTY or the value)
@op("Optional")
def _optional(ctx, node, x=None):
    return (EMPTY if x is None else x,)


@op("OptionalHasElement")
def _opt_has(ctx, node, x=None):
    return ctx.const(np.array(x is not None and x is not EMPTY))


@op("OptionalGetElement")
def _opt_get(ctx, node, x):
    if x is EMPTY:
        raise LoweringError("OptionalGetElement of an empty optional")
    return (x,)


@op("SequenceMap")
def _seq_map(ctx, node, seq, *extra):
    g = node.get("body")
    n = len(seq)
    outs = [[] for _ in g.output]
    for i in range(n):
        ins = [seq[i]] + [e[i] if isinstance(e, list) else e for e in extra]
        r = run_subgraph(ctx, g, ctx.scope, ins)
        for lst, t in zip(outs, r):
            lst.append(t)
    return tuple(outs)
