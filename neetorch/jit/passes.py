"""Graph passes: each is a small function ``Graph -> Graph`` (rewriting in place).

The pipeline is the list :data:`PIPELINE`; ``jit(fn).explain(...)`` prints the graph
after each stage.
"""
from __future__ import annotations

import os
import threading

import numpy as np

from ..ops import registry
from ..tensor import _storage
from ..trace.ir import Graph, Node, Value
from ..trace.tracer import ViewOp

__all__ = ["fold_constants", "merge_equal_constants", "drop_repeated_setitems", "eliminate_common_subexpressions", "eliminate_dead_code", "simplify", "PIPELINE",
           "replace_uses", "hoist_elementwise_over_views", "freeze_constants", "memo_product_weights",
           "check_weights", "WeightsChanged", "ConstGuard", "const_guards", "check_const_guards"]


def replace_uses(g: Graph, old: Value, new: Value) -> None:
    for n in g.nodes:
        n.inputs = [new if a is old else a for a in n.inputs]
    g.outputs = [new if o is old else o for o in g.outputs]


def fold_constants(g: Graph) -> Graph:
    """Evaluate nodes whose inputs are all constants; their outputs become constants."""
    keep = []
    for n in g.nodes:
        if n.inputs and all(a in g.consts for a in n.inputs) and not isinstance(n.op, ViewOp) \
                and getattr(n.op, "kind", "") != "random":
            res = registry.run(n.op, [g.consts[a] for a in n.inputs], n.attrs)
            for o, t in zip(n.outputs, res):
                o.producer = None
                o.kind = "const"
                g.consts[o] = t
            continue
        keep.append(n)
    g.nodes = keep
    return g


def _attr_key(attrs: dict):
    try:
        return repr(sorted(attrs.items()))
    except TypeError:
        return None


def drop_repeated_setitems(g: Graph) -> Graph:
    """``setitem(setitem(b, i, v), i, v)`` is ``setitem(b, i, v)``: Python runs ``y[i] += v`` as an in-place add
    on the view ``y[i]`` (written through to ``y``: a setitem) and then ``y[i] = <that view>`` (the same setitem
    again, a second copy of ``y``)."""
    from ..trace.tracer import ReplayOp
    keep = []
    for n in g.nodes:
        p = n.inputs[0].producer if n.inputs else None
        if isinstance(n.op, ReplayOp) and p is not None and isinstance(p.op, ReplayOp) and p.op.fn is n.op.fn \
                and n.op.name == "setitem" and p.op.name == "setitem" and n.inputs[1:] == p.inputs[1:] \
                and repr(n.op.tmpl) == repr(p.op.tmpl):
            replace_uses(g, n.outputs[0], p.outputs[0])
            continue
        keep.append(n)
    g.nodes = keep
    return g


def eliminate_common_subexpressions(g: Graph) -> Graph:
    """Two nodes applying the same op with the same attributes to the same values are one (not two whose results
    are both returned, or viewed by returned values: eager returns distinct tensors, _returned)."""
    seen: dict = {}
    keep = []
    ret = _returned(g)
    for n in g.nodes:
        ak = _attr_key(n.attrs)
        key = None if ak is None else (n.op.name, id(n.op), tuple(a.id for a in n.inputs), ak)
        prev = seen.get(key) if key is not None else None
        if prev is not None and len(prev.outputs) == len(n.outputs) and \
                not (any(o in ret for o in n.outputs) and any(p in ret for p in prev.outputs)):
            for o, p in zip(n.outputs, prev.outputs):
                replace_uses(g, o, p)
            continue
        if key is not None:
            seen[key] = n
        keep.append(n)
    g.nodes = keep
    return g


# constants held as numpy arrays up to this many bytes are compared for merging (merge_equal_constants)
MERGE_CONST_MAX_BYTES = 64 << 20


def merge_equal_constants(g: Graph) -> Graph:
    """Constants with the same dtype, shape, device and bytes become one value, so that :func:`eliminate_common_subexpressions`
    then merges the nodes applying the same op to them (onnxruntime's CSE does the same over initializers).  Only
    for graphs whose constants never change (``g.consts_frozen``: ``nee.jit(freeze=...)``, ONNX sessions); a
    default-mode graph's captured tensors may be written later, so two that are equal now stay apart.  Bytes, not
    values: ``-0.0`` and ``0.0`` stay two constants (their products' signs of zero differ), NaN payloads compare
    as stored.  Cheap on real models: a handful of sampled elements tells almost every pair apart before a full
    comparison."""
    if not getattr(g, "consts_frozen", False):
        return g
    groups: dict = {}
    for v, t in g.consts.items():
        d = getattr(t, "_data", None)
        if not isinstance(d, np.ndarray) or d.size < 2 or d.nbytes > MERGE_CONST_MAX_BYTES or d.dtype.hasobject:
            continue
        groups.setdefault((d.dtype.str, d.shape, str(t.device)), []).append(v)
    for vs in groups.values():
        if len(vs) < 2:
            continue
        kept: list = []    # (value, bytes view, sample)
        for v in vs:
            d = np.ascontiguousarray(g.consts[v]._data).reshape(-1).view(np.uint8)
            idx = np.linspace(0, d.size - 1, num=min(d.size, 64)).astype(np.intp)
            sample = d[idx]
            for kv, kd, ks in kept:
                if np.array_equal(sample, ks) and np.array_equal(d, kd):
                    replace_uses(g, v, kv)
                    break
            else:
                kept.append((v, d, sample))
    return g


def _view_key(t):
    """What makes two captured tensors the same frozen value: the memory they read (numpy-backed
    tensors), else the tensor object itself (kept alive by the memo holding it)."""
    d = t._data
    if isinstance(d, np.ndarray):
        return (d.__array_interface__["data"][0], d.shape, d.strides, d.dtype.str, str(t.device))
    return ("id", id(t))


def _snapshot(t, cols: bool = False):
    """A copy of ``t`` no later write to ``t`` reaches: contiguous (``cols``: a 2-D matrix stored
    column-major, the transpose of a contiguous one), or for a broadcast (stride-0) view of a CPU
    tensor the copied compact data broadcast again (not materialized at full size)."""
    d = t._data
    if isinstance(d, np.ndarray) and 0 in d.strides and d.size > 1:
        from ..tensor.tensor import Tensor
        compact = d[tuple(slice(0, 1) if st == 0 else slice(None) for st in d.strides)].copy()
        return Tensor._make(np.broadcast_to(compact, d.shape), t.device, t.dtype)
    if cols:
        return t.t().contiguous().t()
    return t.contiguous() if not t.is_contiguous() else t.clone()


# products with fewer rows than this are matrix-vector-like: bound by streaming the weight, which
# OpenBLAS's gemv does faster along a row-major W.T (dot products, 26-27 GB/s on this box: 1 x 1536
# @ 1536 x 384, weights cold, wall time) than along a row-major W (21-22 GB/s); from this many rows
# the product is a GEMM, faster with a row-major W (OpenBLAS ``A @ W`` 12-19% faster than ``A @ W.T``
# on the 128-row products of a transformer block, one thread)
FREEZE_MIN_ROWS = 8


def _product_layout(g: Graph, v: Value):
    """The layout the products reading ``v`` as their right operand want: ``"rows"`` (row-major
    (K, N)) when every one has at least FREEZE_MIN_ROWS rows, ``"cols"`` (column-major: a row-major
    (N, K) seen transposed) when v is a matrix and every product has fewer, None when v has another
    use, is an output, or the products disagree."""
    uses = [(n, i) for n in g.nodes for i, a in enumerate(n.inputs) if a is v]
    if not uses or v in g.outputs:
        return None
    want = set()
    for n, i in uses:
        if n.name != "matmul" or i != 1:
            return None
        lhs = n.inputs[0].shape
        rows = 1
        for s in lhs[:-1]:
            rows *= s if isinstance(s, int) else FREEZE_MIN_ROWS
        want.add("rows" if rows >= FREEZE_MIN_ROWS or len(v.shape) != 2 else "cols")
    return want.pop() if len(want) == 1 else None


def _in_layout(t, layout) -> bool:
    if layout == "cols":
        return t.t().is_contiguous()
    return t.is_contiguous()


def freeze_constants(g: Graph, mode, memo: dict) -> Graph:
    """Captured tensors become frozen copies (``nee.jit(fn, freeze=...)``; not in :data:`PIPELINE`).

    ``mode=True``: every constant is replaced by a snapshot (:func:`_snapshot`) taken the first
    time the function meets it (``memo``: shared by all of the function's specializations, so every
    shape bucket sees the same values and holds one copy per layout); later in-place changes to the
    captured tensors are not seen.  ``mode="views"``: only constants (no stride-0 dim) read solely
    as the right operand of products, and only when not already in the layout those products want
    (:func:`_product_layout`), are moved (in place: the tensor object gets the new storage) to that
    layout, for owners whose tensors never change and whose memory nobody else reads (ONNX sessions'
    initializers: ``Gemm``'s ``transB`` weights of GEMMs, ``MatMul`` weights of a decoder step's
    matrix-vector products).  Either mode lays a product's weight out as :func:`_product_layout` says."""
    for v, t in list(g.consts.items()):
        layout = _product_layout(g, v) if t.ndim >= 2 and 0 not in t.stride() else None
        if mode != True:  # noqa: E712 - mode is True or "views"
            if layout is None or _in_layout(t, layout):
                continue
        key = _view_key(t)
        if mode == True:  # noqa: E712 - the values as of the first sight, whatever layouts follow
            first = memo.get((key, None))
            if first is None:
                first = memo[(key, None)] = (t, _snapshot(t))
            src = first[1]
            if layout != "cols" or _in_layout(src, layout):
                g.consts[v] = src
                continue
        else:
            # the owner's tensors never change and nobody else reads their memory: the tensor itself
            # moves to the new layout (same values), so the old buffer is freed with its last reference
            # (no second copy of an initializer) and later traces meet it already laid out
            new = _snapshot(t, layout == "cols")
            t._set_storage(new._data, new._device, new._dtype)
            continue
        hit = memo.get((key, layout))
        if hit is None:
            hit = memo[(key, layout)] = (t, _snapshot(src, layout == "cols"))
        g.consts[v] = hit[1]
    return g


# ---------------------------------------------------------------- default mode: guarded weight layouts
# NEE_JIT_WEIGHT_MEMO=0: products read captured weights as they are laid out (F.linear's W.T: OpenBLAS's
# slower NT form), no re-laid-out copies
_WEIGHT_MEMO = [os.environ.get("NEE_JIT_WEIGHT_MEMO", "1") not in ("0", "", "false", "False")]

#: copies: re-laid-out copies made (first sight and after each change); live: weights of exported storages read
#: in place instead; changes: revalidations that found the weight changed
memo_stats = {"copies": 0, "live": 0, "changes": 0}


class WeightsChanged(RuntimeError):
    """A captured weight is now of another shape, dtype or device (``weight.data = other``): the compiled
    program no longer fits it; the jit function specializes again."""


_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


class WeightMemo:
    """The copy of a captured tensor laid out as its products want (``layout``: "rows" = C order, "cols" =
    Fortran order), kept in step with the tensor (default mode: in-place updates are seen).

    The tensor is reached again from ``src`` (what the function captured: a parameter) through ``steps``
    (the view functions that made the constant, e.g. linear's ``weight.t()``), so ``src.data = other`` is
    followed.  :func:`check_weights` (every call) trusts the copy while ``src`` has the same storage object
    and the storage's write counter (tensor/_storage.py) has not moved; on a change a new copy is made (a
    new array swapped into ``holder``: a call running in another thread keeps the one it started with;
    copies are never written, so they are marked immutable like frozen constants).  An *exported* storage
    (handed out through ``numpy()``/``__array__``/DLPack, wrapping a caller's array, memory neetorch does not
    own) can change unseen: ``holder`` then views the tensor's own memory (``live``: the products read it as
    laid out, as without the memo; comparing it bitwise with a snapshot every call would read the weights
    twice: +30% on a 2-layer MLP block, more than the layout gains)."""
    __slots__ = ("src", "steps", "layout", "holder", "data", "ver", "cell", "watch", "live", "lock",
                 "__weakref__")

    def __init__(self, src, steps, layout, live):
        from ..tensor.tensor import Tensor
        self.src, self.steps, self.layout = src, steps, layout
        self.lock = threading.Lock()
        self.watch = self.cell = None
        self.ver = -1
        self.holder = Tensor._make(live._data, live._device, live._dtype)   # (storage replaced by _rebuild)
        self._rebuild(live, src._data)

    def live_view(self):
        t = self.src
        try:
            for fn, args, kwargs in self.steps:
                t = fn(t, *args, **kwargs)
        except Exception as e:   # noqa: BLE001 - the captured tensor no longer fits the view (a new trace says how)
            raise WeightsChanged(f"jit: a captured tensor no longer takes the view the compiled products read: "
                                 f"{type(e).__name__}: {e}") from e
        return t

    def _rebuild(self, live, data) -> None:
        """The holder's storage for ``live`` (under the lock, or before the entry is shared)."""
        h = self.holder
        arr = live._data
        if not isinstance(arr, np.ndarray) or live._device != h._device or live._dtype is not h._dtype or \
                arr.shape != h._data.shape:
            raise WeightsChanged(f"jit: a captured tensor the compiled products read is now {live._dtype.name}"
                                 f"{list(arr.shape) if hasattr(arr, 'shape') else ''} on {live._device} (was "
                                 f"{h._dtype.name}{list(h._data.shape)} on {h._device})")
        self.ver = -1                 # (concurrent checks wait on the lock until the new copy is in place)
        w = self.watch
        if w is None or w.cell is None or w.cell[1] is not _storage.root(arr):
            nw = _storage.Watch(arr)
            if w is not None:
                w.release()
            self.watch = w = nw
        cell = w.cell
        ver = cell[0]                 # (read before copying: a write while copying moves it again)
        if cell[3]:
            new = arr                 # exported: the tensor's own memory, read live
            memo_stats["live"] += 1
        else:
            new = np.empty(arr.shape, arr.dtype, order="F" if self.layout == "cols" else "C")
            np.copyto(new, arr)
            h._backend().mark_immutable(new)   # (nobody writes a copy: a change makes a new one)
            memo_stats["copies"] += 1
        h._set_storage(new, h._device, h._dtype)
        self.live = new is arr
        self.cell = cell
        self.data = data
        self.ver = ver

    def check(self) -> None:
        with self.lock:
            data = self.src._data
            if data is self.data:
                if self.cell[0] == self.ver:
                    return        # another thread made the new copy meanwhile
                if self.live:
                    self.ver = self.cell[0]   # (the products read the tensor itself)
                    return
            memo_stats["changes"] += 1
            self._rebuild(self.live_view(), data)


def check_weights(memos) -> None:
    """Per call of a jitted function (``jit/api.py``): each guarded weight copy still matches its tensor
    (a storage identity and a counter comparison each)."""
    for e in memos:
        if e.src._data is not e.data or e.cell[0] != e.ver:
            e.check()


class ConstGuard:
    """A storage a trace-time constant was computed from (``F.linear(x, w * 2)``'s ``w * 2``, run eagerly while
    tracing: trace/tracer.py ``Tracer.derive``).  :func:`check_const_guards` (every call, default mode) raises
    :class:`WeightsChanged` once the storage was written since the trace, so the function is traced again and
    the constant recomputed.  The storage's write counter (tensor/_storage.py) tells, except for an *exported*
    storage (numpy()/from_numpy/DLPack: written by code neetorch does not see): for those a private copy of the
    storage taken at trace time is compared bitwise with it every call.  Exported sources of derived
    constants are rare (a caller's array wrapped by ``from_numpy`` and then transformed inside the function);
    the comparison costs one read of the source per call, far less than re-tracing every call would (a trace
    runs the Python function, the passes and the executable's planning: milliseconds)."""
    __slots__ = ("watch", "cell", "ver", "root", "snap", "tensor", "data", "__weakref__")

    def __init__(self, root, tensor=None, data=None):
        # ``tensor``: the captured tensor read (None: gone), ``data`` its storage then (``.data =`` changes it)
        self.tensor, self.data = (tensor, data) if tensor is not None else (_NO_DATA, None)
        self.watch = w = _storage.Watch(root)   # (released when the graph holding the guard is collected)
        self.cell = w.cell
        self.root = root
        self.ver = self.cell[0]
        self.snap = None
        if self.cell[3]:
            self.snap = np.array(root, copy=True)

    def same(self) -> bool:
        """Bitwise equality of an exported storage with its trace-time copy."""
        a, b = self.root, self.snap
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.flags.c_contiguous and a.dtype.itemsize in _UINT:
            return bool(np.array_equal(a.reshape(-1).view(_UINT[a.dtype.itemsize]),
                                       b.reshape(-1).view(_UINT[a.dtype.itemsize])))
        return a.tobytes() == b.tobytes()


class _NoData:
    _data = None


_NO_DATA = _NoData()


def const_guards(g: Graph) -> list | None:
    """Guards on the storages the graph's trace-time constants were computed from (the tracer lists them:
    ``graph.const_sources``); None when there are none (the per-call check is then skipped)."""
    src = getattr(g, "const_sources", None)
    if not src:
        return None
    return [ConstGuard(*e) for e in src]


def check_const_guards(guards) -> None:
    """Per call (``jit/api.py``): raises :class:`WeightsChanged` when a storage a constant was computed from
    was written since the trace (a counter comparison each; exported storages: a bitwise comparison)."""
    for gd in guards:
        if gd.cell[0] != gd.ver or gd.tensor._data is not gd.data or (gd.snap is not None and not gd.same()):
            raise WeightsChanged("jit: a captured tensor a trace-time constant was computed from has changed")


def _origin(g: Graph, t):
    """(captured tensor, view steps) that made constant ``t`` (the tracer records views of captured tensors)."""
    cv = getattr(g, "const_views", None) or {}
    steps = []
    seen = set()
    while id(t) not in seen:
        seen.add(id(t))
        e = cv.get(id(t))
        if e is None or e[0] is not t:
            break
        _, base, fn, args, kwargs = e
        steps.append((fn, tuple(args), dict(kwargs)))
        t = base
    steps.reverse()
    return t, tuple(steps)


def view_guards(g: Graph) -> list | None:
    """Default mode: (captured tensor, its storage array now) for each constant of ``g`` that is a view of a
    captured tensor (``x @ W.t()``, ``x * W[0]``: the view, taken at trace time, holds the storage it was taken
    of).  ``W.data = other`` replaces the tensor's storage, which the view does not follow: :func:`check_view_guards`
    (every call, an identity test each) then has the function traced again, as eager ops take the view anew.
    In-place writes keep the storage (the view reads them live) and write-backs copy into it: neither trips it.
    None when there are none."""
    out, seen = [], set()
    for t in g.consts.values():
        src, steps = _origin(g, t)
        if steps and src is not t and id(src) not in seen and isinstance(getattr(src, "_data", None), np.ndarray):
            seen.add(id(src))
            out.append((src, src._data))
    return out or None


def check_view_guards(guards) -> None:
    """Per call: raises :class:`WeightsChanged` when a captured tensor some constant is a view of has another
    storage than at the trace (:func:`view_guards`)."""
    for t, d in guards:
        if t._data is not d:
            raise WeightsChanged("jit: a captured tensor a constant is a view of has a new storage (.data =)")


def _steps_key(steps):
    try:
        return tuple((getattr(fn, "__qualname__", None) or repr(fn), repr(args), repr(sorted(kw.items())))
                     for fn, args, kw in steps)
    except Exception:   # noqa: BLE001 - an argument without a usable repr: no sharing
        return ("id", id(steps))


def memo_product_weights(g: Graph, memo: dict, lock) -> list:
    """Default mode's counterpart of :func:`freeze_constants`' layouts: each constant read only as the
    right operand of products, not in the layout they want (:func:`_product_layout`: ``F.linear``'s ``W.T``
    for GEMMs), is replaced by a :class:`WeightMemo` copy in that layout, kept in step with the captured
    tensor by :func:`check_weights` on every call.  ``memo`` (the jit function's, under ``lock``) shares one
    copy per weight and layout between specializations.  Returns the graph's memos."""
    if not _WEIGHT_MEMO[0]:
        return []
    out = []
    for v, t in list(g.consts.items()):
        d = t._data
        if t.ndim < 2 or t._device.type != "cpu" or type(d) is not np.ndarray or d.size == 0 or \
                0 in d.strides or d.dtype.itemsize not in _UINT or d.dtype.kind not in "fiub":
            continue
        layout = _product_layout(g, v)
        if layout is None or _in_layout(t, layout):
            continue
        src, steps = _origin(g, t)
        key = ("weight_memo", id(src), _steps_key(steps), layout)
        with lock:
            e = memo.get(key)
            if e is not None and e.src is src:
                try:
                    e.check()
                    ok = e.holder._data.shape == d.shape and e.holder._dtype is t._dtype
                except WeightsChanged:
                    ok = False
                if not ok:
                    e = None
            else:
                e = None
            if e is None:
                e = memo[key] = WeightMemo(src, steps, layout, t)
        g.consts[v] = e.holder
        out.append(e)
    return out


def eliminate_dead_code(g: Graph) -> Graph:
    """Drop nodes none of whose outputs reach a graph output, and unused constants."""
    live = set(g.outputs)
    keep = []
    for n in reversed(g.nodes):
        if any(o in live for o in n.outputs):
            keep.append(n)
            live.update(n.inputs)
    g.nodes = keep[::-1]
    g.consts = {v: t for v, t in g.consts.items() if v in live}
    return g


def _const_value(g: Graph, v: Value):
    t = g.consts.get(v)
    if t is None or t.numel() != 1:
        return None
    return t.numpy(force=True).reshape(()).item()


# op -> (input position of the identity element, value): x*1, 1*x, x/1, x-0, x+0 (ints only:
# -0.0 + 0.0 is +0.0), x**1
_IDENTITIES = {"mul": [(1, 1), (0, 1)], "true_divide": [(1, 1)], "sub": [(1, 0)], "pow": [(1, 1)]}


def _returned(g: Graph) -> set:
    """The graph's outputs and the values they view (what the caller gets memory of)."""
    ret = set()
    for o in g.outputs:
        while o not in ret:
            ret.add(o)
            p = o.producer
            if p is None or not isinstance(p.op, ViewOp) or not p.inputs:
                break
            o = p.inputs[0]
    return ret


def simplify(g: Graph) -> Graph:
    """Exact algebraic identities only (no change in any result bit, dtype or shape); not for a returned value
    (``return x * 1`` is a new tensor, not ``x``: eager's)."""
    keep = []
    ret = _returned(g)
    for n in g.nodes:
        rules = list(_IDENTITIES.get(n.name, ()))
        if n.name == "add" and n.outputs[0].dtype.category != 2:
            rules += [(1, 0), (0, 0)]
        done = False
        for pos, ident in rules:
            if len(n.inputs) != 2:
                break
            c = _const_value(g, n.inputs[pos])
            other = n.inputs[1 - pos]
            o = n.outputs[0]
            if c is not None and c == ident and other.shape == o.shape and other.dtype is o.dtype and o not in ret:
                replace_uses(g, o, other)
                done = True
                break
        if not done:
            keep.append(n)
    g.nodes = keep
    return g


# views that only re-index elements (a reshape that must copy still keeps every value)
_INDEX_VIEWS = frozenset(("reshape", "view", "transpose", "permute", "t", "unsqueeze", "squeeze", "flatten",
                          "swapaxes", "movedim", "mT"))


def _from_matmul(v: Value, depth: int = 8) -> bool:
    """``v`` is a matmul's product or computed elementwise from one (so it is, or becomes, part
    of that matmul's epilogue)."""
    p = v.producer
    if p is None or depth == 0:
        return False
    if p.name == "matmul":
        return True
    if getattr(p.op, "kind", "") != "elementwise":
        return False
    return any(_from_matmul(a, depth - 1) for a in p.inputs)


def hoist_elementwise_over_views(g: Graph) -> Graph:
    """``ew(view(y), scalars...)`` -> ``view(ew(y, scalars...))`` for re-indexing views.

    Exact (elementwise ops commute with re-indexing); the op then runs over ``y``'s own
    (usually contiguous) layout and can fuse with ``y``'s producer: attention's
    ``heads(linear(x)) * scale`` becomes part of the projection's epilogue instead of a
    strided pass of its own.  Applies when the viewed value comes from a matmul (through
    elementwise ops only: the op joins that epilogue), the other operands are 0-d constants,
    every value of the view chain has this one reader, and the result is not a graph output.
    """
    changed = True
    while changed:
        changed = False
        users = g.users()
        outs = set(g.outputs)
        for n in g.nodes:
            if getattr(n.op, "kind", "") != "elementwise" or len(n.outputs) != 1 or n.outputs[0] in outs:
                continue
            tens = [a for a in n.inputs if not (a in g.consts and g.consts[a].ndim == 0)]
            if len(tens) != 1 or tens[0].shape != n.outputs[0].shape:
                continue
            chain = []
            x = tens[0]
            while (x.producer is not None and isinstance(x.producer.op, ViewOp) and x.producer.name in _INDEX_VIEWS
                   and len(x.producer.inputs) == 1 and len(x.producer.outputs) == 1 and x not in outs
                   and len(users.get(x, ())) == 1):
                chain.append(x.producer)
                x = x.producer.inputs[0]
            if not chain or x.producer is None or len(users.get(x, ())) != 1 or not _from_matmul(x):
                continue
            chain.reverse()
            y = x
            o = n.outputs[0]
            first = g._value(y.shape, o.dtype, o.device, "node")
            new_n = Node(n.op, [y if a is tens[0] else a for a in n.inputs], n.attrs, [first])
            first.producer = new_n
            new_nodes = [new_n]
            prev = first
            for k, v in enumerate(chain):
                out = o if k == len(chain) - 1 else g._value(v.outputs[0].shape, o.dtype, o.device, "node")
                vn = Node(v.op, [prev], v.attrs, [out])
                out.producer = vn
                new_nodes.append(vn)
                prev = out
            drop = set(chain)
            rebuilt = []
            for m in g.nodes:
                if m is n:
                    rebuilt.extend(new_nodes)
                elif m not in drop:
                    rebuilt.append(m)
            g.nodes = rebuilt
            changed = True
            break
    return g


# views that permute axes (a reshape of their result may have to copy)
_PERMUTING_VIEWS = frozenset(("permute", "transpose", "t", "swapaxes", "movedim", "mT"))
_COPY_RESHAPES = [os.environ.get("NEE_JIT_COPY_RESHAPES", "1") not in ("0", "", "false", "False")]


def _view_strides(n: Node, in_strides):
    """The strides view node ``n`` gives its (single) output over an input with ``in_strides`` (elements), or None
    when it cannot be told."""
    a = n.inputs[0]
    try:
        r = n.op.on_stand_in(a.shape, a.dtype, in_strides, n.attrs)
    except Exception:   # noqa: BLE001 - a view the stand-in cannot take: leave the node alone
        return None
    if isinstance(r, (tuple, list)) or tuple(r.shape) != tuple(n.outputs[0].shape):
        return None
    return [s // a.dtype.itemsize for s in r._data.strides]


def materialize_copying_reshapes(g: Graph) -> Graph:
    """``reshape(permute(y))`` that cannot be a view (the permuted axes are merged: ShuffleNet's channel shuffle
    ``Reshape -> Transpose -> Reshape``, attention's heads merged back) -> ``reshape(copy(permute(y)))``: the copy is
    an elementwise node (a same-dtype cast), so it runs as a generated kernel, split over the threads, into a
    buffer of the memory plan, or fuses with its neighbours, instead of the reshape's single-threaded strided copy
    into memory of its own at run time; the reshape of the copy is then a view.  Exact (a copy of the values).
    Applies where the permuted value is a kernel's output (row-major) and the reshape is not a graph output."""
    if not _COPY_RESHAPES[0]:
        return g
    from ..ops.elementwise import _cast
    from ..tensor.views import _compute_stride
    outs = set(g.outputs)
    ret = _returned(g)
    add = {}
    for n in g.nodes:
        if not (isinstance(n.op, ViewOp) and n.name in ("reshape", "flatten", "view") and len(n.inputs) == 1
                and len(n.outputs) == 1 and n.outputs[0] not in outs):
            continue
        x = n.inputs[0]
        p = x.producer
        if p is None or not isinstance(p.op, ViewOp) or p.name not in _PERMUTING_VIEWS or len(p.inputs) != 1 \
                or len(p.outputs) != 1:
            continue
        chain = [p]      # the views from a kernel's (row-major) output to x
        y = p.inputs[0]
        while y.producer is not None and isinstance(y.producer.op, ViewOp) and len(y.producer.inputs) == 1 \
                and len(y.producer.outputs) == 1 and len(chain) < 8:
            chain.append(y.producer)
            y = y.producer.inputs[0]
        if y.producer is None or isinstance(y.producer.op, ViewOp) or y in g.inputs or y in g.consts:
            continue
        # (row-major; a returned elementwise result has eager's layout at run time: executable._out_layouts)
        xs = y.strides if y.strides is not None and y in ret and getattr(y.producer.op, "kind", None) == \
            "elementwise" and len(y.strides) == len(y.shape) else None
        for v in reversed(chain):
            xs = _view_strides(v, xs)
            if xs is None:
                break
        if xs is None or _compute_stride(list(x.shape), xs, list(n.outputs[0].shape)) is not None:
            continue   # (a view after all)
        add[id(n)] = x
    if not add:
        return g
    nodes = []
    for n in g.nodes:
        x = add.get(id(n))
        if x is not None:
            c = Node(_cast, [x], {"dtype": x.dtype})
            v = g._value(x.shape, x.dtype, x.device, "node")
            v.producer = c
            c.outputs.append(v)
            nodes.append(c)
            n.inputs[0] = v
        nodes.append(n)
    g.nodes = nodes
    return g


def _view_node(g: Graph, name: str, fn, x: Value, shape, *args) -> Value:
    """A new view node ``fn(x, *args)`` of result ``shape`` (x's dtype and device); returns its output."""
    v = g._value(tuple(shape), x.dtype, x.device, "node")
    n = Node(ViewOp(name, fn), [x], {"args": tuple(args), "kwargs": ()}, [v])
    v.producer = n
    return v


def pointwise_convs_as_matmuls(g: Graph) -> Graph:
    """``conv2d(x, w, b)`` of a 1x1 kernel over a 1x1 plane (groups 1, no padding; on the CPU, float32 / float64) ->
    ``reshape(matmul(w2, x2) + b2)``: the same sums of products (a conv over a 1x1 plane is a GEMV / GEMM), which then
    runs as a matmul step whose bias and following elementwise ops are its GEMM epilogue.  The convs of
    squeeze-and-excitation blocks (MobileNetV3, EfficientNet: two per block on the pooled channels) ran the conv
    path's per-call set-up for a few thousand multiply-adds: 20-37 us a step at one thread against ~3 us as a matmul.
    Batch 1: ``w (O, C) @ x (C, 1)``, a GEMV over w's rows; batch N: ``x (N, C) @ w.t()``, a Linear."""
    from ..tensor import views as V
    mm, add = registry.OPS["matmul"], registry.OPS["add"]
    nodes = []
    for n in g.nodes:
        x = n.inputs[0] if n.name == "conv2d" and len(n.inputs) in (2, 3) else None
        w = n.inputs[1] if x is not None else None
        if (x is None or len(x.shape) != 4 or tuple(x.shape[2:]) != (1, 1) or len(w.shape) != 4
                or tuple(w.shape[2:]) != (1, 1) or n.attrs.get("groups") != 1 or any(n.attrs.get("padding", (1,)))
                or x.dtype.name not in ("float32", "float64") or w.dtype is not x.dtype or str(x.device) != "cpu"
                or str(w.device) != "cpu" or 0 in x.shape or 0 in w.shape):
            nodes.append(n)
            continue
        (N, C), O = x.shape[:2], w.shape[0]
        out = n.outputs[0]
        w2 = _view_node(g, "reshape", V.reshape, w, (O, C), (O, C))
        new = [w2.producer]
        if N == 1:
            x2 = _view_node(g, "reshape", V.reshape, x, (C, 1), (C, 1))
            prod_args, pshape = [w2, x2], (O, 1)
        else:
            x2 = _view_node(g, "reshape", V.reshape, x, (N, C), (N, C))
            wt = _view_node(g, "t", V.t, w2, (C, O))
            new.append(wt.producer)
            prod_args, pshape = [x2, wt], (N, O)
        new.append(x2.producer)
        y = g._value(pshape, out.dtype, out.device, "node")
        new.append(Node(mm, prod_args, {}, [y]))
        y.producer = new[-1]
        if len(n.inputs) == 3:
            b = n.inputs[2]
            if N == 1:
                b = _view_node(g, "reshape", V.reshape, b, (O, 1), (O, 1))
                new.append(b.producer)
            s = g._value(pshape, out.dtype, out.device, "node")
            new.append(Node(add, [y, b], {}, [s]))
            s.producer = new[-1]
            y = s
        r = Node(ViewOp("reshape", V.reshape), [y], {"args": (tuple(out.shape),), "kwargs": ()}, [out])
        out.producer = r
        new.append(r)
        nodes.extend(new)
    g.nodes = nodes
    return g


def _live_taps(n_in: int, n_out: int, k: int, s: int, pad0: int, d: int) -> tuple | None:
    """(first, last) kernel tap along one dim whose input positions ``o * s - pad0 + t * d`` (o < n_out) meet
    [0, n_in) for some output, or None when no tap does."""
    live = [t for t in range(k) if any(0 <= o * s - pad0 + t * d < n_in for o in range(n_out))]
    return (live[0], live[-1]) if live else None


def trim_dead_conv_taps(g: Graph) -> Graph:
    """A conv2d whose outer kernel rows / columns only ever read the zero padding (a dilated conv on a small map:
    DeepLabV3's ASPP, dilations 12 / 24 / 36 over a 14 x 14 or 28 x 28 feature map, where its 3x3 kernel is a 1x1
    but for the centre) runs on the live taps alone: the weight sliced to them (a new constant), the padding
    reduced by the dropped taps' span on each side, so every output and every sum of products over real input
    stays as it was and the dropped terms were products with zero.  Only for graphs whose constants never change
    (``g.consts_frozen``: ONNX sessions, ``nee.jit(freeze=...)``), with static sizes, and where the dropped weights
    are finite (``inf * 0`` is NaN: such a weight keeps its taps).  A padding side cannot go below zero (the
    trimmed conv's output size is the same at every input size, so a shape-polymorphic graph stays valid)."""
    if not getattr(g, "consts_frozen", False):
        return g
    for n in g.nodes:
        if n.name != "conv2d" or len(n.inputs) not in (2, 3) or n.inputs[1] not in g.consts:
            continue
        x, wv = n.inputs[0], n.inputs[1]
        out = n.outputs[0]
        if len(x.shape) != 4 or len(wv.shape) != 4 or not all(isinstance(v, int) for v in x.shape + out.shape):
            continue
        a = n.attrs
        (sh, sw), (dh, dw), pad = a.get("stride", (1, 1)), a.get("dilation", (1, 1)), a.get("padding", (0, 0, 0, 0))
        if len(pad) != 4 or not pad[0] + pad[1] + pad[2] + pad[3]:
            continue
        pt, pb, pl, pr = pad
        KH, KW = wv.shape[2:]
        H, W = x.shape[2:]
        OH, OW = out.shape[2:]
        rows, cols = _live_taps(H, OH, KH, sh, pt, dh), _live_taps(W, OW, KW, sw, pl, dw)
        if rows is None or cols is None or (rows == (0, KH - 1) and cols == (0, KW - 1)):
            continue
        (r0, r1), (c0, c1) = rows, cols
        new_pad = (pt - r0 * dh, pb - (KH - 1 - r1) * dh, pl - c0 * dw, pr - (KW - 1 - c1) * dw)
        if min(new_pad) < 0:
            continue
        t = g.consts[wv]
        w = t.numpy(force=True)
        keep = np.zeros(w.shape, bool)
        keep[:, :, r0:r1 + 1, c0:c1 + 1] = True
        if w.dtype.kind != "f" or not np.isfinite(w[~keep]).all():
            continue
        from ..tensor.creation import from_numpy
        wt = from_numpy(np.ascontiguousarray(w[:, :, r0:r1 + 1, c0:c1 + 1]))
        if str(t.device) != "cpu":
            wt = wt.to(t.device)
        wt._backend().mark_immutable(wt._data)
        n.inputs = [x, g.add_const(wt, (wv.name or "w") + ".live_taps")] + n.inputs[2:]
        n.attrs = {**a, "padding": new_pad}
    return g


PIPELINE = [
    ("fold_constants", fold_constants),
    ("merge_equal_constants", merge_equal_constants),
    ("simplify", simplify),
    ("drop_repeated_setitems", drop_repeated_setitems),
    ("cse", eliminate_common_subexpressions),
    ("trim_dead_conv_taps", trim_dead_conv_taps),
    ("dce", eliminate_dead_code),
    ("pointwise_convs_as_matmuls", pointwise_convs_as_matmuls),
    ("hoist_elementwise_over_views", hoist_elementwise_over_views),
    ("materialize_copying_reshapes", materialize_copying_reshapes),
]


def run_pipeline(g: Graph, on_stage=None) -> Graph:
    for name, p in PIPELINE:
        g = p(g)
        if on_stage is not None:
            on_stage(name, g)
    return g.validate()
