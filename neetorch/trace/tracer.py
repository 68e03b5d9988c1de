"""Record a tensor program into a :class:`~neetorch.trace.ir.Graph` by running it.

Tracing executes the function once on the example tensors with a hook installed in
``ops.registry.run`` (every op application) and around the view functions (views do
not allocate and do not go through ``run``).  Tensors the function receives become
graph inputs; tensors it meets that were made outside the trace (parameters, literals)
become constants.  Python control flow is unrolled.  Reading a traced value back into
Python (``.item()``, ``.numpy()``, ``bool()``, ``.tolist()``) would freeze a
data-dependent decision into the graph, so it raises :class:`TraceError` naming the
line, with the way out.

Metadata-only tracing (the default): an op that reads a traced value is not run at all;
its outputs get their shape and dtype from the op's ``infer`` rule and a placeholder
buffer (filled with ones: no zero divisors, valid indices), so a trace compiles and
runs no kernels.  Ops on constants only still run for real (their results become
constants).  Value checks (``OpDef.check``) on placeholder data are skipped at trace
time; compiled graphs run them on every call.  If anything reads a placeholder's values
inside an op's frontend (e.g. a boolean-mask index), the trace is abandoned and run
again eagerly (``stats["eager_retraces"]``), so results never depend on placeholders.
"""
from __future__ import annotations

import operator
import os
import sys
import threading
import traceback
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from ..ops import registry
from ..ops.registry import Meta
from ..tensor import _storage
from .ir import Graph, Value

__all__ = ["TraceError", "Tracer", "ViewOp", "is_tracing", "run_graph", "stats", "trace"]

#: ``traces``: graphs recorded; ``meta_ops``: ops recorded without running them;
#: ``eager_ops``: ops run for real while tracing (on constants only, or in an eager retrace);
#: ``eager_retraces``: metadata-only traces abandoned for an eager one (a placeholder was read)
stats = {"traces": 0, "meta_ops": 0, "eager_ops": 0, "eager_retraces": 0}


class TraceError(RuntimeError):
    """The traced function did something a graph cannot represent."""


class _NeedsData(BaseException):
    """A metadata-only trace met code that reads a placeholder's values: trace eagerly.

    A BaseException (a control-flow signal, like GeneratorExit): ``except Exception``
    blocks in op frontends or importers that wrap errors must not swallow it."""


class _NeedsState(BaseException):
    """The trace wrote into tensors captured from outside the function (a module's buffers: BatchNorm's running
    statistics in training mode): trace again with them as state inputs (read live at every call, written back
    after it)."""

    def __init__(self, tensors):
        super().__init__(f"{len(tensors)} captured tensor(s) written")
        self.tensors = tensors


def _root(a):
    """The array that owns ``a``'s memory (numpy views and as_strided spans followed)."""
    while True:
        b = getattr(a, "base", None)
        if b is None:
            return a
        k = getattr(b, "_keep", None)
        a = k if k is not None else b


class ViewOp:
    """A view function recorded as a node: replayed by calling it with the same arguments."""
    kind = "view"
    __slots__ = ("fn", "name")

    def __init__(self, name: str, fn: Callable):
        self.name = name
        self.fn = fn

    def infer(self, metas, attrs):
        if len(metas) > 1:  # index tensors: shapes need their values, take the recorded ones
            raise NotImplementedError
        r = self.on_stand_in(metas[0].shape, metas[0].dtype, None, attrs)
        rs = r if isinstance(r, (tuple, list)) else (r,)
        return [Meta(tuple(x.shape), x.dtype) for x in rs]

    def on_stand_in(self, shape, dtype, strides, attrs):
        """The view applied to a storage-less stand-in of ``shape`` / ``dtype`` with ``strides`` (elements; None:
        row-major): views only compute metadata (their result's shape, and strides: jit/passes.py)."""
        from ..devices import device
        from ..tensor.tensor import Tensor
        if strides is None:
            strides, c = [], 1
            for n in reversed(shape):
                strides.append(c)
                c *= max(n, 1)
            strides = strides[::-1]
        dummy = np.lib.stride_tricks.as_strided(np.zeros(1, dtype.np), shape, [s * dtype.itemsize for s in strides])
        return self.fn(Tensor._make(dummy, device("cpu"), dtype), *attrs.get("args", ()), **dict(attrs.get("kwargs", ())))

    def __repr__(self):
        return f"ViewOp({self.name})"


_active = threading.local()


def is_tracing() -> bool:
    return getattr(_active, "tracer", None) is not None


def traced_copy(t, contiguous: bool = False):
    """``t.clone()`` while tracing: a copy node (a same-dtype cast) in the graph, so the copy
    follows the inputs on every call; None outside a trace or inside an op's own composition.
    ``contiguous``: a row-major copy (``contiguous()``), else laid out like ``t`` (preserve_format)."""
    if getattr(_active, "tracer", None) is None or registry._depth[0] != 0:
        return None
    from ..ops.elementwise import _cast
    _active.row_major = contiguous    # (contiguous(): a row-major copy; clone(): the source's layout, as eager)
    try:
        return registry.run(_cast, [t], {"dtype": t._dtype}, [registry.Meta(tuple(t._data.shape), t._dtype)])[0]
    finally:
        _active.row_major = False


def traced_assign(dst, src) -> bool:
    """``dst.copy_(src)`` / ``fill_`` / an in-place op's write-back while tracing: ``dst`` is rebound
    to ``src`` broadcast to its shape and cast to its dtype (checked like any in-place update);
    False when no trace is running or neither tensor is traced (an eager copy then)."""
    from ..tensor.tensor import Tensor
    tr = getattr(_active, "tracer", None)
    if tr is None or registry._depth[0] != 0:
        return False
    if not (tr.is_traced(dst) or (isinstance(src, Tensor) and tr.is_traced(src))):
        return False
    tr.check_inplace_target(dst, "copy_", using=[src] if isinstance(src, Tensor) else ())
    from ..tensor.creation import as_tensor_like
    r = as_tensor_like(src, dst)
    if r._device != dst._device:
        r = r.to(dst._device)
    if tuple(r.shape) != tuple(dst.shape):
        r = r.expand(tuple(dst.shape))
    if r._dtype is not dst._dtype:
        r = r.to(dst._dtype)
    if r is dst:
        return True
    const = not tr.is_traced(r)
    if const:
        r = r.clone()   # a constant source: materialize it as the new value (not an alias of the constant)
    tr.bind(dst, tr.value_of(r))
    tr.write_through(dst)
    if const and not tr.is_fake(dst) and tr.values[id(dst)][0].kind == "const":
        # dst is now a constant: ops reading it run eagerly on its data (constants fold as they are traced), so
        # its data must hold the new value (``y = x * 2; y.zero_(); y + 1`` folded the stale x * 2 + 1); a
        # constant fill is what the call writes anyway (inputs and state are written back the same values)
        dst._backend().copy_(dst._data, r._data)
    return True


def refuse_transfer(t, dev) -> None:
    """``t.to(device)`` / ``t.cpu()`` of a traced tensor inside a traced function: refused with the way
    out (placement decides devices for the whole graph; a transfer the function asks for is not a node)."""
    tr = getattr(_active, "tracer", None)
    if tr is not None and registry._depth[0] == 0 and (tr.is_traced(t) or tr.is_fake(t)):
        raise TraceError(f"moving a traced tensor from {t.device} to {dev} inside a traced function at "
                         f"{_user_frame()} is not supported: pass the inputs on the device the function should "
                         f"run on and move the results after the call")


def refuse_metadata_write(t, what: str) -> None:
    """An in-place view op (``t_``, ``unsqueeze_``, ``resize_``, ...) changes a tensor's shape and strides, which a
    compiled graph cannot give back to the caller: refused (a TraceError naming it) on a graph input or a tensor
    captured from outside; a tensor the function made may change shape freely."""
    tr = getattr(_active, "tracer", None)
    if tr is None or registry._depth[0] != 0:
        return
    if id(t) in tr.input_ids or tr._captured(t):
        raise TraceError(f"{what} at {_user_frame()} changes the shape / strides of a tensor from outside the "
                         f"traced function (an input or a captured tensor); a compiled function cannot do that to "
                         f"the caller's tensor: use the out-of-place op (x = x.{what.rstrip('_')}(...))")


def is_traced_here(t) -> bool:
    """Is ``t`` a traced value of a trace running in this thread (outside an op's own work)?"""
    tr = getattr(_active, "tracer", None)
    return tr is not None and registry._depth[0] == 0 and tr.is_traced(t)


def alias(src, new) -> None:
    """``new`` shares ``src``'s storage (``detach()``, ``.data``): under a trace it is the same value."""
    tr = getattr(_active, "tracer", None)
    if tr is not None:
        e = tr.values.get(id(src))
        if e is not None and e[1] is src:
            tr.bind(new, e[0])


# the package's own folder: frames under it are neetorch's (not "/neetorch/" anywhere in the path: a user's project
# folder or a clone named neetorch would hide the user's own frames)
_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _user_frame() -> str:
    for fr in reversed(traceback.extract_stack()[:-1]):
        if not os.path.abspath(fr.filename).startswith(_PKG_DIR):
            return f'{fr.filename}:{fr.lineno} ("{(fr.line or "").strip()}")'
    return "<unknown>"


class RandomOp:
    """A sampler call recorded as a node (``nee.rand`` / ``randn`` / ``randint`` / ``randperm`` / the ``*_like``
    forms, ``bernoulli``, ``normal``, ``multinomial``, ``poisson``, ``binomial``, the in-place samplers
    ``Tensor.uniform_`` / ``normal_`` / ..., and through them dropout's masks, rrelu's slopes, alpha dropout's
    noise): replayed at every call of the compiled function by calling the sampler again with the same
    arguments, so each call draws new values from the generator, as the eager function does (a sample taken at
    trace time and kept as a constant would repeat itself at every call).  Each node has its own op object, so
    no pass merges two draws; constant folding skips ``kind == "random"``; placement keeps it on the graph's
    device (the sampler runs there as it does eagerly: host draws copied to the device).  The output's shape is
    the ``like``-th input's (``rand_like``, ``bernoulli(p)``, an in-place sampler's target: it follows a
    dynamic dim) or the traced one (then part of the node's attributes, so a size change re-specializes)."""
    kind = "random"
    name = "random"
    check = None
    nout = 1
    __slots__ = ("fn", "args", "kwargs", "meta", "like", "inplace")

    def __init__(self, fn, args, kwargs, meta, like, inplace):
        self.fn, self.args, self.kwargs, self.meta, self.like, self.inplace = fn, args, kwargs, meta, like, inplace

    def infer(self, metas, attrs):
        if self.like is not None:
            return [Meta(tuple(metas[self.like].shape), self.meta.dtype)]
        return [self.meta]

    def decompose(self, *tensors, **attrs):
        ts = list(tensors)
        if self.inplace:   # a new tensor for the in-place sampler to fill (the target's old value stays as it was)
            from ..tensor.creation import empty_like
            ts[0] = empty_like(ts[0])
        r = self.fn(*_fill(self.args, ts), **_fill(self.kwargs, ts))
        return ts[0] if self.inplace else r

    def __repr__(self):
        return f"RandomOp({self.fn.__name__})"


def _generators(args, kwargs) -> list:
    from ..tensor.creation import Generator, default_generator
    gens = [default_generator]
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, Generator) and a is not default_generator:
            gens.append(a)
    return gens


def _describe_call(fn, args, kwargs) -> str:
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    return f"{fn.__name__}({', '.join(parts)})"


class Tracer:
    def __init__(self, name: str = "graph", meta: bool = False):
        self.graph = Graph(name)
        self.n_random = 0     # sampler nodes recorded so far (their ``seq`` attribute)
        from ..tensor import tensor as _tensor_mod
        _tensor_mod.TRACE_GEN[0] += 1
        self.gen = _tensor_mod.TRACE_GEN[0]   # tensors made from now on are the trace's own (Tensor._born)
        self.input_ids: set = set()           # ids of the function's own tensor arguments (_trace)
        # in-place writes into state the caller sees (see trace()): inputs of the function (and captured tensors
        # traced as state inputs) written, id -> tensor; captured tensors found written (a metadata-only trace goes
        # on with them rebound, then trace() traces again with them as state); an eager trace's snapshots of the
        # inputs it really wrote (restored when it ends)
        self.written: dict = {}
        self.collect: dict = {}
        self.snaps: dict = {}
        # buffers the function made (zeros/empty...) that an update with traced values turned into values (their
        # contents at that point: a constant), and tensors aliased by views the trace did not record (views of
        # such buffers or of constants: an update of those is refused, the aliases would not follow)
        self.temps: dict = {}
        self.aliased: dict = {}
        self.alias_base: dict = {}   # id(view) -> (weak reference to it, the tensor it views): untraced views
        self.values: dict[int, tuple[Value, Any]] = {}   # id(tensor) -> (Value, tensor kept alive)
        self.view_values: set = set()
        # functionalized views (torch.compile's functionalization): id(view) -> (the tensor it was taken of, how
        # to take it again, that tensor's Value the view's own is current with).  A view whose base was updated
        # in place since is taken again from the base's new value when next used (value_of), and an in-place
        # update of a view is written through to its base (a setitem / view-assign node, up the chain of views:
        # write_through); ``through`` holds the pending ones by id (the update's operands, read before the write)
        self.view_of: dict[int, tuple] = {}
        self.through: dict = {}
        self.deferred: set = set()   # ids of views of captured tensors written (state: the trace is done again)
        self.meta = meta
        self.fake_roots: dict[int, Any] = {}   # id(placeholder buffer) -> buffer (kept alive)
        # provenance of the tensors ops run eagerly at trace time made (their results become constants):
        # id(tensor) -> (tensor, {id(storage root): (weak reference to it, weak reference to the captured tensor
        # read)}) for the captured storages they were computed from (default mode guards these constants:
        # jit/passes.py const_guards)
        self.prov: dict[int, tuple] = {}

    # ------------------------------------------------------------ values
    def is_fake(self, t) -> bool:
        """Does ``t`` view a placeholder buffer (values meaningless) of a metadata-only trace?"""
        return bool(self.fake_roots) and id(_root(t._data)) in self.fake_roots

    def value_of(self, t) -> Value:
        e = self.values.get(id(t))
        if e is not None and e[1] is t:
            if id(t) in self.view_of:
                return self._sync(t)
            return e[0]
        if self.is_fake(t):
            raise _NeedsData(f"a placeholder tensor of shape {tuple(t.shape)} would become a constant")
        v = self.graph.add_const(t)
        self.values[id(t)] = (v, t)
        return v

    def is_traced(self, t) -> bool:
        e = self.values.get(id(t))
        return e is not None and e[1] is t and e[0].kind != "const"

    def bind(self, t, v: Value) -> None:
        self.values[id(t)] = (v, t)

    # ------------------------------------------------------------ provenance of eager results
    def provenance(self, t) -> dict:
        """{id(root): (weakref, tensor weakref)} of the captured storages ``t``'s values come from: an eager
        result's recorded set; otherwise ``t`` is captured (or made by a factory, or a view of one of those):
        its own storage root, and the tensor it was viewed from (``.data =`` on it gives it another storage)."""
        e = self.prov.get(id(t))
        if e is not None and e[0] is t:
            return e[1]
        d = getattr(t, "_data", None)
        if not isinstance(d, np.ndarray) or self.is_traced(t) or self.is_fake(t):
            return {}   # (non-CPU storages have no write counter: not guarded, see docs/JIT.md)
        r = _storage.root(d)
        if not isinstance(r, np.ndarray):
            r = d   # foreign memory: the array itself stands for it (guarded as exported: compared bitwise)
        try:
            ref = weakref.ref(r)
        except TypeError:
            ref = lambda r=r: r   # noqa: E731 - not weakly referenceable: kept
        cv = self.graph.__dict__.get("const_views") or {}
        seen = set()
        while id(t) not in seen:    # a view of a captured tensor (on_view): the tensor it was taken of
            seen.add(id(t))
            e = cv.get(id(t))
            if e is None or e[0] is not t:
                break
            t = e[1]
        try:
            tref = weakref.ref(t)
        except TypeError:
            tref = lambda: None   # noqa: E731
        return {id(r): (ref, tref)}

    def derive(self, outs, ins, keep: bool = False) -> None:
        """Record ``outs`` (eager results at trace time) as computed from ``ins`` (``keep``: also from what
        the outputs held before: an in-place write)."""
        from ..tensor.tensor import Tensor
        src: dict = {}
        for t in ins:
            if isinstance(t, Tensor):
                src.update(self.provenance(t))
        for o in outs:
            if isinstance(o, Tensor) and not self.is_traced(o):
                p = dict(self.provenance(o)) if keep else {}
                p.update(src)
                self.prov[id(o)] = (o, p)

    def const_sources(self) -> list:
        """[(storage root, captured tensor or None, its ``_data``)] the graph's derived constants were computed
        from: roots still alive (a factory's temporary that died cannot change), with the tensor read when it
        is alive too.  Captured tensors used directly (and their views) are read live: not listed."""
        out: dict = {}
        for t in self.graph.consts.values():
            e = self.prov.get(id(t))
            if e is None or e[0] is not t:
                continue
            for k, (ref, tref) in e[1].items():
                r = ref()
                if r is None or (isinstance(r, np.ndarray) and (not r.flags.writeable or _free_pool_block(r))):
                    continue    # died with the trace (a pooled block nothing uses any more: the same), or
                    # read-only (the cached scalar tensors of ``w * 2``)
                src = tref()
                key = (k, id(src))
                if key not in out:
                    out[key] = (r, src, None if src is None else src._data)
        return list(out.values())

    # ------------------------------------------------------------ hooks
    def meta_run(self, op, inputs, attrs, metas, out):
        """``registry.run`` asks this before running ``op``: placeholder outputs when an
        input is traced (nothing runs), None to run the op for real."""
        if getattr(_active, "tracer", None) is not self:
            return None   # another thread's op
        if out and registry._depth[0] == 1 and self.pre_write(out, inputs):
            # a captured tensor written (nothing runs: it is rebound to the node's value in on_op)
            stats["meta_ops"] += 1
            return out
        if not any(self.is_traced(t) or self.is_fake(t) for t in inputs) and \
                not (out and any(self.is_traced(o) for o in out)):
            # constants only: the result is a constant, computed for real
            res = _exact_reference(op, inputs, attrs, metas) if out is None else None
            stats["eager_ops"] += res is None
            return res
        dev = inputs[0]._device if inputs else out[0]._device
        for t in inputs:
            if t._device is not dev and t._device != dev:
                raise RuntimeError(f"{op.name}: expected all tensors on the same device, got {dev} and {t._device}")
        if op.check is not None and not any(self.is_fake(t) for t in inputs):
            registry._depth[0] += 1   # real values (graph inputs, constants): check them now
            try:
                op.check(inputs, attrs)
            finally:
                registry._depth[0] -= 1
        stats["meta_ops"] += 1
        if out is not None:
            for o in out:
                self.fake_roots.setdefault(id(_root(o._data)), _root(o._data))
            return out
        from ..tensor.tensor import Tensor
        res = []
        # an elementwise result gets the layout eager execution gives it (its inputs' order: a permuted input, a
        # permuted result), so that views of it are what eager's are and the graph records it (Value.strides)
        lay = _ew_layout(op, inputs, metas) if op.kind == "elementwise" and dev.type == "cpu" and \
            not getattr(_active, "row_major", False) else None
        for m in metas:
            buf = _placeholder(dev, m, lay)
            r = _root(buf)
            self.fake_roots[id(r)] = r
            res.append(Tensor._make(buf, dev, m.dtype))
        return res

    def _captured(self, o) -> bool:
        """Is ``o`` a tensor from outside the trace (made before it started, not traced, not a placeholder)?"""
        if getattr(o, "_born", -1) >= self.gen or id(o) in self.input_ids:
            return False      # (an input rebound to a constant by a fill is still the caller's input: written back)
        e = self.values.get(id(o))
        return (e is None or e[1] is not o or e[0].kind == "const") and id(o) not in self.view_values \
            and not self.is_fake(o)

    def note_view(self, view, base, regen) -> None:
        """``view`` shares ``base``'s memory (a traced value): how to take it again (``regen``, see _retake)."""
        self.view_of[id(view)] = (base, regen, self.values[id(base)][0])

    def _sync(self, t) -> Value:
        """The value of view ``t``: taken again from its base when the base was updated in place since (eager
        sees the update through the view), the base itself synced first (a view of a view)."""
        base, regen, seen = self.view_of[id(t)]
        bv = self.value_of(base)
        if bv is seen:
            return self.values[id(t)][0]
        v = self._retake(bv, regen)
        self.bind(t, v)
        self.view_of[id(t)] = (base, regen, bv)
        return v

    def _retake(self, bv: Value, regen) -> Value:
        if regen[0] == "getitem":
            _, tmpl, _tensors, idx_values, meta = regen
            node = self.graph.add_node(ViewOp("getitem", _replay_getitem), [bv] + list(idx_values),
                                       {"args": (tmpl,), "kwargs": ()}, [meta])
            return node.outputs[0]
        _, name, fn, args, kwargs, k, metas = regen
        node = self.graph.add_node(ViewOp(name, fn), [bv], {"args": tuple(args), "kwargs": tuple(kwargs.items())},
                                   list(metas))
        return node.outputs[k or 0]

    def root_of(self, o):
        """The tensor at the end of ``o``'s chain of views (``o`` itself when it is not a view)."""
        while True:
            e = self.view_of.get(id(o))
            if e is None:
                return o
            o = e[0]

    def _writable_view(self, o) -> bool:
        """Can an update of view ``o`` be written through to the tensor at the end of its chain?  Every link a
        view an assignment can go through (not expand / as_strided: several elements share memory, or the
        layout of the base matters), the root a traced value of the function (not a constant)."""
        while True:
            e = self.view_of.get(id(o))
            if e is None:
                break
            if e[1][0] != "getitem" and e[1][1] in _NOT_WRITABLE_VIEWS:
                return False
            o = e[0]
        er = self.values.get(id(o))
        return er is not None and er[1] is o and er[0].kind != "const"

    def alias(self, *ts) -> None:
        """Record tensors sharing memory through a view the trace did not record (weakly: a temporary that
        dies stays a temporary for const_sources)."""
        for t in ts:
            self.aliased[id(t)] = weakref.ref(t)

    def alias_view(self, base, view) -> None:
        """``view`` (a view the trace did not record: of a constant or a captured tensor) shares ``base``'s memory;
        the tensor at the end of the chain is kept (weakly: the views between may die, ``C[0][1:]``)."""
        self.alias(base, view)
        e = self.alias_base.get(id(base))
        root = e[1]() if e is not None and e[0]() is base else None
        self.alias_base[id(view)] = (weakref.ref(view), weakref.ref(root if root is not None else base))

    def captured_root(self, o):
        """The captured tensor an untraced view ``o`` (of a view...) was taken of, or None."""
        e = self.alias_base.get(id(o))
        r = e[1]() if e is not None and e[0]() is o else o
        return r if r is not None and self._captured(r) and not self.is_traced(r) else None

    def _state_through_view(self, o) -> bool:
        """A write into a view of a captured tensor (``self.buf[0].add_(1)``): the tensor is state, as when written
        directly (see pre_write): collected (a metadata-only trace: True) or sends the trace back at once."""
        if not self._aliased(o) or self.is_traced(o):
            return False
        c = self.captured_root(o)
        if c is None:
            return False
        if not self.meta:
            raise _NeedsState([c] + list(self.collect.values()))
        self.collect[id(c)] = c
        self.deferred.add(id(o))
        return True

    def _aliased(self, o) -> bool:
        a = self.aliased.get(id(o))
        return a is not None and a() is o

    def _is_temp(self, o) -> bool:
        """A tensor the function made (a factory's buffer, a constant computed inside) with no alias the trace
        does not follow: an in-place update with traced values traces it from its current contents."""
        if getattr(o, "_born", -1) < self.gen or self._aliased(o) or id(o) in self.view_values or self.is_fake(o):
            return False
        e = self.values.get(id(o))
        return e is None or e[1] is not o or id(o) in self.temps

    def bind_temp(self, o) -> Value:
        """``o`` (see _is_temp) as a constant holding its contents now (a copy: the tensor itself is about to be
        written), with the provenance of what it was computed from (jit/passes.py const_guards)."""
        e = self.values.get(id(o))
        if e is not None and e[1] is o:
            return e[0]
        registry._depth[0] += 1
        try:
            snap = o.clone()
        finally:
            registry._depth[0] -= 1
        p = self.prov.get(id(o))
        if p is not None and p[0] is o:   # computed from captured tensors: the same guards (a factory's: none)
            self.derive([snap], [o])
        v = self.graph.add_const(snap)
        self.values[id(o)] = (v, o)
        self.temps[id(o)] = o
        return v

    def pre_write(self, out, inputs=()) -> bool:
        """Before a top-level op writes into ``out``: an input about to be really written (an eager trace) is
        snapshotted, to be restored when the trace ends; a captured tensor is collected (a metadata-only trace:
        True, the op must not run) or sends the trace back to trace() at once (an eager one, before any write)."""
        hit = False
        for o in out:
            if not self.meta:
                o = self.root_of(o)   # (a view of an input written: the input is what an eager trace must restore)
            e = self.values.get(id(o))
            if e is not None and e[1] is o and e[0].kind == "input":
                if not self.meta and id(o) not in self.snaps:
                    self.snaps[id(o)] = (o, o.clone())
            elif self._is_temp(o) and any(self.is_traced(t) or self.is_fake(t) for t in inputs):
                self.bind_temp(o)
            elif self._state_through_view(o):
                hit = True
            elif self._captured(o):
                if self._aliased(o):
                    self.check_inplace_target(o, "in-place op")     # (raises: views of it were taken)
                if not self.meta:
                    raise _NeedsState([o] + list(self.collect.values()))
                self.collect[id(o)] = o
                hit = True
        return hit

    def on_op(self, op, inputs, attrs, metas, outputs, out):
        if out is not None and self.deferred and any(id(o) in self.deferred for o in out):
            return   # (a write into a view of a captured tensor: traced again with the tensor as state)
        if not any(self.is_traced(t) for t in inputs) and not (out and any(self.is_traced(o) for o in out)) \
                and not (out and any(id(o) in self.collect for o in out)):
            # a computation on constants only: its result is a constant too (made from what it read)
            if not any(self.is_fake(t) for t in inputs):
                self.derive(outputs, inputs, keep=out is not None)
                for o in out or ():
                    e = self.values.get(id(o))
                    if id(o) in self.input_ids and e is not None and e[1] is o:
                        # an input a fill made a constant, written again in place: its new value is the
                        # constant it now holds (written back to the caller; the old binding was the fill's)
                        registry._depth[0] += 1
                        try:
                            snap = o.clone()
                        finally:
                            registry._depth[0] -= 1
                        self.bind(o, self.graph.add_const(snap))
            return
        if out is not None:
            for o in out:
                self.check_inplace_target(o, op.name, using=inputs)
        node = self.graph.add_node(op, [self.value_of(t) for t in inputs], attrs, metas)
        for t, v in zip(outputs, node.outputs):
            self.bind(t, v)
            v.strides = _strides_of(t)
        if out is not None and self.through:
            for o in out:
                self.write_through(o)

    def check_inplace_target(self, o, what: str, using=()) -> None:
        """An in-place update is traced by rebinding the tensor to the new value: refused where that
        would differ from eager (an input the caller sees mutated, a view or a tensor with views
        sharing its memory, a tensor made outside the function)."""
        e = self.values.get(id(o))
        if id(o) in self.deferred or self._state_through_view(o):
            return
        if self._aliased(o):
            raise TraceError(f"{what}: an in-place op writes into a tensor that views were taken of at "
                             f"{_user_frame()} (the views would not see the update in the graph); take the "
                             f"views after the update or use the out-of-place op")
        if id(o) in self.collect or id(o) in self.temps:
            return
        if self._is_temp(o):      # (an assignment: copy_ / fill_ / zero_ of a buffer the function made)
            self.temps[id(o)] = o
            return
        if (e is None or e[1] is not o or e[0].kind == "const") and self._captured(o):
            # captured state written (copy_ of a traced value into a module buffer): see pre_write
            if not self.meta:
                raise _NeedsState([o] + list(self.collect.values()))
            self.collect[id(o)] = o
            return
        if id(o) in self.view_of and e is not None and e[1] is o and self._writable_view(o):
            # ``y[:, 0] += 1``, ``y.t().mul_(2)``: the view is rebound to the update and its base to the base with
            # the update assigned through the same view (write_through), up to the end of the chain
            self.through[id(o)] = list(using)     # (the update's operands: read before the write)
            return
        if e is None or e[1] is not o or id(o) in self.view_values:
            raise TraceError(f"{what}: an in-place op writes into a view or a tensor that is not a traced value "
                             f"(a view of another tensor, or a buffer other tensors view) at {_user_frame()}; "
                             f"in-place updates are traced on values the function computed, buffers it made, its "
                             f"inputs and tensors captured from outside, and through views of those (not "
                             f"expand / as_strided / unfold views, nor aliases the graph cannot follow) — use the "
                             f"out-of-place op")
        if e[0].kind == "input":
            # an input of the function (or captured state traced as one): rebound here, its final value written
            # back into the caller's tensor after every call of the compiled function (jit.api)
            self.written.setdefault(id(o), o)

    def write_through(self, o) -> None:
        """After a view ``o`` was rebound to its update (check_inplace_target allowed it): its base is rebound
        to the base with ``o`` assigned through the same view (``setitem(base, index, o)`` for a getitem view, a
        view-assign node for a view function), and so on up the chain (an input / captured state at its end is
        then written back); ``o`` is then current with its base's new value."""
        using = self.through.pop(id(o), None)
        if using is None:
            return
        base, regen, _ = self.view_of[id(o)]
        if regen[0] == "getitem":
            from ..ops.indexing import setitem
            _record_setitem(self, setitem, base, _fill(regen[1], [base] + list(regen[2])), o, using)
        else:
            _record_view_assign(self, base, regen, o, using)
        self.view_of[id(o)] = (base, regen, self.values[id(base)][0])

    def record_sampler(self, fn, args, kwargs, like, inplace):
        """A sampler called in the traced function (see :class:`RandomOp`): run it once now for the result's
        shape, dtype and device (the generators' states restored afterwards, so the compiled function's first
        call draws what the eager function's would), and record the node that draws at every call."""
        tensors: list = []
        targs, tkw = _template(tuple(args), tensors), _template(dict(kwargs), tensors)
        if inplace:
            self.check_inplace_target(args[0], fn.__name__, using=list(_tensors((args[1:], kwargs))))
        if kwargs.get("out") is not None:
            raise TraceError(f"{fn.__name__}(out=...) at {_user_frame()}: a traced function's sampler writes its own "
                             f"result; use the returned tensor")
        gens = _generators(args, kwargs)
        states = [g.get_state() for g in gens]
        registry._depth[0] += 1
        try:
            r = fn(*args, **kwargs)
        finally:
            registry._depth[0] -= 1
            for g, st in zip(gens, states):
                g.set_state(st)
        meta = Meta(tuple(r.shape), r.dtype)
        if like is not None and (like >= len(tensors) or tuple(tensors[like].shape) != meta.shape):
            like = None
        attrs = {"sampler": _describe_call(fn, targs, tkw)}
        if like is None:
            attrs["shape"] = meta.shape
        attrs["seq"] = self.n_random
        self.n_random += 1
        op = RandomOp(fn, targs, tkw, meta, like, inplace)
        node = self.graph.add_node(op, [self.value_of(t) for t in tensors], attrs, [meta])
        node.outputs[0].device = r._device
        self.bind(r, node.outputs[0])
        if inplace:
            self.write_through(r)
        return r

    def on_view(self, name, fn, base, args, kwargs, result):
        if not self.is_traced(base):
            rs = result if isinstance(result, (tuple, list)) else (result,)
            e = self.prov.get(id(base))
            if e is not None and e[0] is base:   # a view of an eager result: made from what it was
                self.derive(rs, (base,))
            elif isinstance(base._data, np.ndarray) and not self.is_fake(base):
                # a "view" function that had to copy (``w.t().reshape(-1)``): made from the captured tensor
                rb = _storage.root(base._data)
                self.derive([r for r in rs if isinstance(getattr(r, "_data", None), np.ndarray) and
                             _storage.root(r._data) is not rb], (base,))
            for r in rs:
                if r is not base and _storage.same(getattr(r, "_data", None), base._data):
                    self.alias_view(base, r)
            if hasattr(result, "_data") and result is not base:   # (a view fn may return its input itself)
                # a view of a captured tensor (``weight.t()`` in linear): how to take it again from the
                # tensor, for caches that must follow ``weight.data = ...`` (jit/passes.py memo_product_weights)
                self.graph.__dict__.setdefault("const_views", {})[id(result)] = (result, base, fn, args, kwargs)
            return
        op = ViewOp(name, fn)
        rs = result if isinstance(result, (tuple, list)) else (result,)
        metas = [Meta(tuple(r.shape), r.dtype) for r in rs]
        node = self.graph.add_node(op, [self.value_of(base)], {"args": tuple(args), "kwargs": tuple(kwargs.items())},
                                   metas)
        bd = base._data
        for k, (t, v) in enumerate(zip(rs, node.outputs)):
            if t is base:
                continue   # (a view function that returned its input itself)
            self.bind(t, v)
            if not _storage.same(t._data, bd):
                continue   # a copy (``reshape`` of a non-contiguous tensor): a value of its own, not a view
            self.view_values.add(id(t))
            self.note_view(t, base, ("view", name, fn, tuple(args), dict(kwargs),
                                     k if isinstance(result, (tuple, list)) else None, tuple(metas)))

    def on_read(self, t, what: str):
        if registry._depth[0] != 0 and self.is_fake(t):
            raise _NeedsData(f"{what} inside an op reads a placeholder's values")
        if registry._depth[0] == 0 and (self.is_traced(t) or self.is_fake(t)):
            raise TraceError(f"{what} reads a traced tensor's value into Python at {_user_frame()}: a graph cannot "
                             f"depend on data. Move this out of the traced function, or make the value a static "
                             f"input (an argument that is not a tensor).")


def _free_pool_block(r) -> bool:
    """Is ``r`` a block of the CPU buffer pool (devices/cpu: large outputs are carved from pooled blocks) that
    no tensor uses any more (a factory's temporary of the trace: it cannot change what the trace computed)?"""
    if r.ndim != 1 or r.dtype != np.uint8:
        return False
    from ..devices import cpu as _cpu
    pool = getattr(_cpu, "_pool", None)
    bufs = pool.get(r.size) if pool is not None else None
    if not bufs:
        return False
    found = False
    for b in bufs:
        if b is r:
            found = True
            break
    b = None
    # references: the pool's list, the caller's variable, this argument, getrefcount's argument
    return found and sys.getrefcount(r) <= 4


class _Slot:
    """Stands for the ``i``-th tensor input of a recorded Python-level call."""
    __slots__ = ("i",)

    def __init__(self, i):
        self.i = i

    def __repr__(self):
        return f"<input {self.i}>"

    def __eq__(self, other):
        return isinstance(other, _Slot) and other.i == self.i

    def __hash__(self):
        return hash(("slot", self.i))


def _template(obj, tensors: list):
    """``obj`` (an index expression) with every tensor replaced by a :class:`_Slot`."""
    from ..tensor.tensor import Tensor
    if isinstance(obj, Tensor):
        tensors.append(obj)
        return _Slot(len(tensors) - 1)
    if isinstance(obj, tuple):
        return _same_tuple(obj, [_template(x, tensors) for x in obj])
    if isinstance(obj, list):
        return [_template(x, tensors) for x in obj]
    if isinstance(obj, dict):
        slots = {k: _template(obj[k], tensors) for k in _dict_keys(obj)}   # (visited in key order: _tensors')
        return {k: slots[k] for k in obj}
    return obj


def _dict_keys(d: dict) -> list:
    """``d``'s keys in the order its tensors become graph inputs: sorted (the guard key sorts them too), so that
    ``f(x, a=a, b=b)`` and ``f(x, b=b, a=a)`` feed each keyword's tensor to its own input."""
    try:
        return sorted(d)
    except TypeError:
        return sorted(d, key=repr)


def _same_tuple(obj: tuple, items: list) -> tuple:
    """``items`` as a tuple of ``obj``'s type where that is a named tuple (``max(dim)``'s (values, indices), a user's
    namedtuple: a compiled function returns what the eager one does, as torch.compile keeps torch.return_types), else
    a plain tuple."""
    if type(obj) is not tuple and hasattr(type(obj), "_make"):
        return type(obj)._make(items)
    return tuple(items)


def _fill(obj, tensors: list):
    if isinstance(obj, _Slot):
        return tensors[obj.i]
    if isinstance(obj, tuple):
        return _same_tuple(obj, [_fill(x, tensors) for x in obj])
    if isinstance(obj, list):
        return [_fill(x, tensors) for x in obj]
    if isinstance(obj, dict):
        return {k: _fill(v, tensors) for k, v in obj.items()}
    return obj


def pack_outputs(graph, outs):
    """The traced function's result from the graph's flat outputs: one tensor, a tuple of them, or
    the nested tuples/lists/dicts (with non-tensor leaves such as None) the function returned."""
    tree = getattr(graph, "_tree", None)
    if tree is not None:
        return _fill(tree, list(outs))
    return outs[0] if getattr(graph, "_single", False) and len(outs) == 1 else tuple(outs)


def _traced_getitem(fn):
    """``Tensor.__getitem__`` recorded as one node (index tensors become node inputs)."""
    def getitem(self, index):
        tr = getattr(_active, "tracer", None)
        if tr is None or registry._depth[0] != 0:
            return fn(self, index)
        tensors: list = [self]
        tmpl = _template(index, tensors)
        registry._depth[0] += 1   # the ops getitem runs inside are part of this node
        try:
            r = fn(self, index)
        finally:
            registry._depth[0] -= 1
        if any(tr.is_traced(t) for t in tensors):
            op = ViewOp("getitem", _replay_getitem)
            ins = [tr.value_of(t) for t in tensors]
            meta = Meta(tuple(r.shape), r.dtype)
            node = tr.graph.add_node(op, ins, {"args": (tmpl,), "kwargs": ()}, [meta])
            tr.bind(r, node.outputs[0])
            tr.view_values.add(id(r))
            if _storage.same(getattr(r, "_data", None), getattr(self, "_data", None)):
                # a view (basic indexing): taken again when ``self`` is updated in place, and an update of it is
                # written through to ``self`` (a setitem node)
                tr.note_view(r, self, ("getitem", tmpl, tuple(tensors[1:]), tuple(ins[1:]), meta))
        elif not any(tr.is_fake(t) for t in tensors):
            e = tr.prov.get(id(self))
            d = getattr(r, "_data", None)
            if _storage.same(d, self._data):
                tr.alias_view(self, r)
                cv = tr.graph.__dict__.setdefault("const_views", {})
                ce = cv.get(id(self))
                if tr._captured(self) or (ce is not None and ce[0] is self):
                    # a view of a captured tensor (``W[0]``, ``W[0][1:]``): how to take it again (see on_view's
                    # const_views; not for a factory's temporary, which the entry would keep alive)
                    cv[id(r)] = (r, self, operator.getitem, (index,), {})
            if (e is not None and e[0] is self) or len(tensors) > 1 or not isinstance(d, np.ndarray) or \
                    _storage.root(d) is not _storage.root(self._data):
                tr.derive((r,), tensors)   # a copy (or a view of an eager result): made from what it read
        return r
    getitem.__wrapped__ = fn
    return getitem


def _replay_getitem(base, tmpl, *index_tensors):
    return base[_fill(tmpl, [base] + list(index_tensors))]


class ReplayOp:
    """``tensor[index] = value`` recorded functionally: the node's value is a copy of the tensor with the
    assignment applied (the eager setitem, replayed on the copy at every call), and the tensor is rebound to it.
    ``kind = "replay"``: placement keeps it on the graph's device (the eager setitem runs there)."""
    kind = "replay"
    check = None
    nout = 1
    __slots__ = ("name", "fn", "tmpl", "contiguous")

    def __init__(self, name, fn, tmpl, contiguous=False):
        self.name, self.fn, self.tmpl, self.contiguous = name, fn, tmpl, contiguous

    def infer(self, metas, attrs):
        return [Meta(tuple(metas[0].shape), metas[0].dtype)]

    def decompose(self, *tensors, **attrs):
        if self.contiguous:
            from ..tensor.tensor import contiguous_format
            r = tensors[0].clone(memory_format=contiguous_format)
        else:
            r = tensors[0].clone()
        index, value = _fill(self.tmpl, [r] + list(tensors[1:]))
        self.fn(r, index, value)
        return r

    def __repr__(self):
        return f"ReplayOp({self.name})"


def _record_setitem(tr, fn, t, index, value, using=()) -> None:
    tensors: list = [t]
    tmpl = _template((index, value), tensors)
    tr.check_inplace_target(t, "tensor[...] = value", using=tensors[1:] + list(using))
    base = tr.bind_temp(t) if id(t) in tr.temps else tr.value_of(t)
    ins = [base] + [tr.value_of(x) for x in tensors[1:]]
    if tr.meta:
        tr.fake_roots.setdefault(id(_root(t._data)), _root(t._data))   # (its contents are stale now)
    else:   # an eager trace keeps real values: write them (an input's are restored when the trace ends)
        w = tr.root_of(t)      # (a view of an input written: the input is restored)
        e = tr.values.get(id(w))
        if e is not None and e[1] is w and e[0].kind == "input" and id(w) not in tr.snaps:
            tr.snaps[id(w)] = (w, w.clone())
        registry._depth[0] += 1
        try:
            fn(t, index, value)
        finally:
            registry._depth[0] -= 1
    node = tr.graph.add_node(ReplayOp("setitem", fn, tmpl), ins, {"index": tmpl}, [Meta(tuple(t.shape), t.dtype)])
    tr.bind(t, node.outputs[0])
    tr.write_through(t)


def _view_assign(r, spec, value) -> None:
    """``fn(r, *args, **kwargs)[k].copy_(value)``: an update of a view assigned through the same view of a copy of
    its base (ReplayOp ``view_assign``; ``r`` is a contiguous copy, so reshape / view / flatten give views)."""
    fn, args, kwargs, k = spec
    v = fn(r, *args, **dict(kwargs))
    if k is not None:
        v = v[k]
    if not _storage.same(v._data, r._data):
        raise RuntimeError(f"{getattr(fn, '__name__', fn)}: the traced view is a copy when replayed; cannot write "
                           f"an update through it")
    v.copy_(value)


#: views an update is not written through (several elements share memory, or the base's strides matter)
_NOT_WRITABLE_VIEWS = frozenset({"expand", "expand_as", "broadcast_to", "as_strided", "unfold"})


def _record_view_assign(tr, base, regen, value, using=()) -> None:
    """``base`` rebound to ``base`` with ``value`` assigned through the view ``regen`` describes (a view function's
    update written through: see Tracer.write_through)."""
    _, name, fn, args, kwargs, k, _metas = regen
    tensors: list = [base]
    tmpl = _template(((fn, args, tuple(kwargs.items()), k), value), tensors)
    tr.check_inplace_target(base, f"{name}(...) update", using=tensors[1:] + list(using))
    bv = tr.bind_temp(base) if id(base) in tr.temps else tr.value_of(base)
    ins = [bv] + [tr.value_of(x) for x in tensors[1:]]
    if tr.meta:
        tr.fake_roots.setdefault(id(_root(base._data)), _root(base._data))
    else:   # (an eager trace wrote through the real view already; an input at the chain's end is restored)
        w = tr.root_of(base)
        e = tr.values.get(id(w))
        if e is not None and e[1] is w and e[0].kind == "input" and id(w) not in tr.snaps:
            tr.snaps[id(w)] = (w, w.clone())
    node = tr.graph.add_node(ReplayOp("view_assign", _view_assign, tmpl, contiguous=True), ins,
                             {"view": name, "args": tuple(args), "kwargs": tuple(kwargs.items())},
                             [Meta(tuple(base.shape), base.dtype)])
    tr.bind(base, node.outputs[0])
    tr.write_through(base)


def _guard_mutation(fn, what):
    def mutate(self, *args, **kwargs):
        tr = getattr(_active, "tracer", None)
        if tr is not None and registry._depth[0] == 0 and what == "tensor[...] = value" and len(args) == 2 \
                and not kwargs:
            if tr.is_traced(self) or id(self) in tr.temps or \
                    any(tr.is_traced(x) or tr.is_fake(x) for x in _tensors(args)):
                # a traced tensor written, or traced values written into one: recorded functionally (checked
                # like any in-place update: an input / captured state is written back, a view is refused)
                _record_setitem(tr, fn, self, args[0], args[1])
                return None
        if tr is not None and registry._depth[0] == 0 and what in _ASSIGNS and \
                traced_assign(self, 0 if what == "zero_" else args[0] if args else kwargs.get("src", kwargs.get("value"))):
            return self
        if tr is not None and registry._depth[0] == 0 and tr.is_traced(self):
            raise TraceError(f"{what} writes into a traced tensor at {_user_frame()}: in-place assignment is not "
                             f"traced; use an out-of-place op (nee.where, masked_fill, index_put, scatter) instead")
        if tr is not None and registry._depth[0] == 0 and not tr.is_traced(self) and tr.pre_write([self]):
            # a captured tensor (or a view of one) written with constant values: state, traced again
            return None if what == "tensor[...] = value" else self
        r = fn(self, *args, **kwargs)
        if tr is not None and registry._depth[0] == 0:
            tr.derive((self,), _tensors((args, kwargs)), keep=True)   # an eager write into a constant
        return r
    mutate.__wrapped__ = fn
    mutate.__name__ = getattr(fn, "__name__", what)
    return mutate


_ASSIGNS = frozenset({"copy_", "fill_", "zero_"})


#: torch's keyword names that differ from the neetorch view function's own
_VIEW_KW_RENAMES = {"swapaxes": {"axis0": "dim0", "axis1": "dim1"}, "broadcast_to": {"size": "shape"},
                    "split": {"split_size": "split_size_or_sections"}}


def _traced_view(name, fn):
    import inspect
    try:
        first = next(iter(inspect.signature(fn).parameters))
    except (TypeError, ValueError, StopIteration):
        first = "input"
    renames = _VIEW_KW_RENAMES.get(name)

    def wrapper(*args, **kwargs):
        if args:
            base, args = args[0], args[1:]
        else:   # torch's keyword for the tensor: input= (split: tensor=), or neetorch's own name
            for k in (first, "input", "tensor", "self"):
                if k in kwargs:
                    base = kwargs.pop(k)
                    break
            else:
                raise TypeError(f"{name}() missing 1 required positional argument: 'input'")
        if renames and kwargs:
            kwargs = {renames.get(k, k): v for k, v in kwargs.items()}
        r = fn(base, *args, **kwargs)
        tr = getattr(_active, "tracer", None)
        if tr is not None and registry._depth[0] == 0:
            tr.on_view(name, fn, base, args, kwargs, r)
        return r
    wrapper.__name__ = name
    wrapper.__doc__ = fn.__doc__
    wrapper.__wrapped__ = fn
    return wrapper


# elementwise ops whose numpy reference gives bit-identical results to the CPU kernels
# (correctly rounded IEEE arithmetic, selects); any op with a bool result is exact too
_EXACT_REFERENCE = frozenset({"add", "sub", "mul", "neg", "abs", "where", "true_divide"})


def _exact_reference(op, inputs, attrs, metas):
    """Outputs of a constants-only elementwise op computed by its numpy reference when that
    is exact (e.g. the comparisons building a causal mask), so no eager kernel is compiled
    for it; None to run the op's kernel."""
    import numpy as np
    if op.kind != "elementwise" or op.reference is None or not inputs or len(metas) != 1:
        return None
    m = metas[0]
    if op.name not in _EXACT_REFERENCE and m.dtype.name != "bool":
        return None
    dev = inputs[0]._device
    if dev.type != "cpu" or any(t._device is not dev and t._device != dev for t in inputs):
        return None
    spec = getattr(op, "ew", None)
    if spec is None or attrs:
        return None
    from ..ops.elementwise import ew_dtypes
    comp, _ = ew_dtypes(spec, [t._dtype for t in inputs])
    if any(c.name == "float16" for c in comp):
        return None
    try:
        with np.errstate(all="ignore"):
            r = op.reference(*[t._data.astype(c.np, copy=False) for t, c in zip(inputs, comp)])
    except Exception:   # noqa: BLE001 - the kernel path then runs and raises the proper error
        return None
    r = r[0] if isinstance(r, (list, tuple)) else r
    r = np.asarray(r)
    if r.shape != tuple(m.shape) or r.dtype != m.dtype.np:
        return None
    from ..tensor.tensor import Tensor
    return [Tensor._make(np.array(r, order="C"), dev, m.dtype)]   # (ascontiguousarray makes 0-d 1-d)


def _strides_of(t):
    """Element strides of trace-time tensor ``t`` (None where its array has none)."""
    d = getattr(t, "_data", None)
    st = getattr(d, "strides", None)
    if st is None:
        return None
    isz = d.dtype.itemsize if hasattr(d, "dtype") else 1
    try:
        return tuple(int(s) // isz for s in st)
    except TypeError:
        return None


def _ew_layout(op, inputs, metas):
    """The element strides eager execution gives the result of elementwise ``op`` on ``inputs``
    (ops/elementwise.py apply: torch's TensorIterator layout, tensor._layout.iter_strides), None: row-major."""
    if len(metas) != 1 or len(metas[0].shape) < 2 or not inputs or \
            not all(type(t._data) is np.ndarray for t in inputs) or \
            not any(t._data.ndim >= 2 and (not t._data.flags.c_contiguous or 1 in t._data.shape) for t in inputs):
        return None
    from ..tensor._layout import iter_strides
    return iter_strides(metas[0].shape, [(t._data.shape, t.stride(), t._dtype.itemsize) for t in inputs])


def _placeholder(dev, m, strides=None):
    """A buffer with ``m``'s shape and dtype on ``dev`` (values never used: an op reading them makes
    the trace run eagerly).  Integer and bool placeholders hold ones (a frontend's zero-divisor or index
    check that reads the buffer directly passes); floating ones on the CPU hold zeros from calloc, whose
    pages are never touched, so a large placeholder costs nothing (filling them with ones took seconds
    for a tree ensemble's tables)."""
    import numpy as np
    if dev.type == "cpu":
        fill = np.zeros if m.dtype.category == 2 else np.ones
        if strides is not None:   # (eager's layout: a permuted result of a permuted input, _ew_layout)
            from ..tensor._layout import dense_order
            order = dense_order(m.shape, strides)
            if order is not None:
                inv = [0] * len(order)
                for j, d in enumerate(order):
                    inv[d] = j
                return fill(tuple(m.shape[d] for d in order), m.dtype.np).transpose(inv)
            from ..tensor._layout import alloc
            a = alloc(m.shape, strides, m.dtype.np)
            a[...] = fill((), m.dtype.np)
            return a
        return fill(m.shape, m.dtype.np)
    from ..devices import get_backend
    b = get_backend(dev)
    a = b.empty(m.shape, m.dtype)
    b.fill_(a, 1)
    return a


def on_read(t, what: str) -> None:
    """Called by Tensor methods that read values into Python."""
    tr = getattr(_active, "tracer", None)
    if tr is not None:
        tr.on_read(t, what)


def trace(fn: Callable, *example_args, name: str | None = None, meta: bool = True, state=(),
          **example_kwargs) -> Graph:
    """Run ``fn`` once on the example arguments and return the recorded, validated graph.

    Tensor arguments (also inside lists/tuples/dicts) become graph inputs in order of
    appearance; outputs are the tensors ``fn`` returns (a tensor, or a tuple/list of them).
    ``meta=True`` (default) records ops from their shape/dtype rules without running them
    (see the module docs); ``meta=False`` runs every op eagerly while recording.

    In-place writes the caller would see are kept: an input written in place (``x.add_(1)``), or a tensor
    captured from outside that the function writes (a module's buffers: BatchNorm's running statistics and
    ``num_batches_tracked`` in training mode) gets its final value as an extra graph output, listed in
    ``graph.writebacks`` as ``(input index, output index)``; captured tensors written become extra inputs after
    the function's own (``graph.state``, read live at every call), found by a first trace and traced again
    (``state``: the ones already known).  ``jit`` writes them back after every call; :func:`run_graph` too.
    Writes through views are functionalized (Tracer.write_through: the base is updated through the same view, up
    the chain of views) and views of an updated tensor are taken again from its new value (Tracer.value_of)."""
    state = list(state)
    for _ in range(64):
        try:
            if meta:
                try:
                    return _trace(fn, example_args, example_kwargs, name, True, state)
                except _NeedsData as e:
                    stats["eager_retraces"] += 1
                    from .. import _env
                    if _env.DEBUG >= 1:
                        print(f"[neetorch] trace {name or getattr(fn, '__name__', 'graph')}: metadata-only trace "
                              f"abandoned ({e}); tracing eagerly", file=sys.stderr)
                    meta = False
            return _trace(fn, example_args, example_kwargs, name, False, state)
        except _NeedsState as e:
            known = {id(t) for t in state}
            state += [t for t in e.tensors if id(t) not in known]
    raise TraceError(f"trace of {name or getattr(fn, '__name__', 'graph')}: the captured tensors it writes keep "
                     f"changing between traces")


def _trace(fn, example_args, example_kwargs, name, meta, state=()) -> Graph:
    from ..tensor.tensor import Tensor
    if getattr(_active, "tracer", None) is not None:
        raise TraceError("trace() called while another trace is running")
    stats["traces"] += 1
    tr = Tracer(name or getattr(fn, "__name__", "graph"), meta=meta)
    user = list(_tensors((example_args, example_kwargs)))
    if len({id(t) for t in user}) != len(user):
        # the same tensor passed twice (f(x, x, y)): each position its own input (a second Tensor over the same
        # memory), so that the graph serves calls with distinct tensors there too (one input for both took the
        # last binding for both positions: f(x, x, y) then computed with y in x's second place)
        seen: set = set()
        for k, t in enumerate(user):
            if id(t) in seen:
                user[k] = Tensor._make(t._data, t._device, t._dtype)
            seen.add(id(t))
        example_args, example_kwargs = _fill(_template((example_args, example_kwargs), []), user)
    tr.input_ids = {id(t) for t in user}
    for t in user:
        if not tr.is_traced(t):
            tr.bind(t, tr.graph.add_input(tuple(t.shape), t.dtype, t.device))
    inputs = [t for t in user]
    n_user = len(tr.graph.inputs)
    for t in state:
        if not tr.is_traced(t):
            tr.bind(t, tr.graph.add_input(tuple(t.shape), t.dtype, t.device, name=f"state{len(tr.graph.inputs) - n_user}"))
    _active.tracer = tr
    _install_hooks()
    try:
        result = fn(*example_args, **example_kwargs)
        if tr.collect:
            raise _NeedsState(list(tr.collect.values()))
        outs: list = []
        tree = _template(result, outs)
        if not outs or not _only_tensors_and_none(tree):
            raise TraceError(f"traced function returned {_describe(result)}; graph outputs are tensors, or "
                             f"tuples/lists/dicts of tensors with Python scalars, strings, None, sizes, dtypes "
                             f"or devices beside them (at least one tensor)")
        for o in outs:
            tr.graph.outputs.append(tr.value_of(o))
        tr.graph.const_sources = tr.const_sources()
        # inputs and state written in place: their final values are extra outputs, written back by the caller
        wb = []
        if tr.written:
            pos = {id(t): k for k, t in enumerate(inputs)}
            pos.update({id(t): n_user + k for k, t in enumerate(state)})
            for k, t in enumerate(user + list(state)):
                if id(t) in tr.written and k == pos.get(id(t)):
                    wb.append((k, len(tr.graph.outputs)))
                    tr.graph.outputs.append(tr.values[id(t)][0])
    finally:
        _active.tracer = None
        _uninstall_hooks()
        for o, snap in tr.snaps.values():   # an eager trace really wrote these inputs: undo it
            o.copy_(snap)
    tr.graph.writebacks = wb
    tr.graph.state = list(state)
    tr.graph.n_user_outputs = len(tr.graph.outputs) - len(wb)
    tr.graph._single = not isinstance(result, (tuple, list))
    flat = type(result) is tuple and all(isinstance(x, Tensor) for x in result)
    tr.graph._tree = None if isinstance(result, Tensor) or flat else tree
    return tr.graph.validate()


# The registry's and Tensor's hooks are process-wide; traces are per thread.  While any thread
# traces, the hooks installed are these dispatchers, which hand each event to the calling thread's
# own tracer (none: the op runs eagerly, unrecorded).  Installed by the first trace to start and
# removed by the last to finish (a trace once restored the hooks it found on entry: with traces in
# two threads, the first to finish unhooked the other mid-trace, whose graph then silently kept
# placeholder values).
_hook_lock = threading.Lock()
_hook_users = [0]


def _dispatch_on_op(op, inputs, attrs, metas, outputs, out):
    tr = getattr(_active, "tracer", None)
    if tr is not None:
        tr.on_op(op, inputs, attrs, metas, outputs, out)


def _dispatch_meta_run(op, inputs, attrs, metas, out):
    tr = getattr(_active, "tracer", None)
    if tr is None:
        return None
    if not tr.meta:
        if out and registry._depth[0] == 1:
            tr.pre_write(out, inputs)   # (an eager trace: snapshots the inputs it is about to write, or starts over)
        if out is None and op.kind == "elementwise" and inputs and inputs[0]._device.type == "cpu" and \
                not getattr(_active, "row_major", False):
            # (the frontend lays results out row-major while a trace runs: eager's layout here, as meta_run's)
            lay = _ew_layout(op, inputs, metas)
            if lay is not None:
                from ..tensor._layout import alloc
                from ..tensor.tensor import Tensor
                dev = inputs[0]._device
                return registry._run(op, inputs, attrs, metas,
                                     [Tensor._make(alloc(m.shape, lay, m.dtype.np), dev, m.dtype) for m in metas])
        return None
    return tr.meta_run(op, inputs, attrs, metas, out)


def _dispatch_on_read(t, what):
    tr = getattr(_active, "tracer", None)
    if tr is not None:
        tr.on_read(t, what)


def _install_hooks() -> None:
    from ..tensor import tensor as _tensor_mod
    with _hook_lock:
        if _hook_users[0] == 0:
            registry._trace_hook[0] = _dispatch_on_op
            registry._meta_run[0] = _dispatch_meta_run
            _tensor_mod._READ_HOOK[0] = _dispatch_on_read
        _hook_users[0] += 1


def _uninstall_hooks() -> None:
    from ..tensor import tensor as _tensor_mod
    with _hook_lock:
        _hook_users[0] -= 1
        if _hook_users[0] == 0:
            registry._trace_hook[0] = None
            registry._meta_run[0] = None
            _tensor_mod._READ_HOOK[0] = None


def _only_tensors_and_none(tree) -> bool:
    """Tensors (slots) and constant leaves returned as they are at every call: Python scalars, strings, None,
    sizes, dtypes, devices (values of the trace: part of the specialization, api._structure compares them)."""
    if isinstance(tree, (tuple, list)):     # (a Size is a tuple of ints)
        return all(_only_tensors_and_none(x) for x in tree)
    if isinstance(tree, dict):
        return all(_only_tensors_and_none(x) for x in tree.values())
    from ..devices import device
    from ..tensor.dtypes import DType
    return tree is None or isinstance(tree, (_Slot, bool, int, float, complex, str, DType, device))


def _describe(obj) -> str:
    if isinstance(obj, (tuple, list)):
        return f"{type(obj).__name__}({', '.join(_describe(x) for x in obj)})"
    if isinstance(obj, dict):
        return "dict(" + ", ".join(f"{k}={_describe(v)}" for k, v in obj.items()) + ")"
    return type(obj).__name__


def _tensors(obj):
    from ..tensor.tensor import Tensor
    if isinstance(obj, Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            yield from _tensors(x)
    elif isinstance(obj, dict):
        for k in _dict_keys(obj):
            yield from _tensors(obj[k])


def run_graph(graph: Graph, *inputs):
    """Interpret ``graph`` eagerly on ``inputs`` (the reference every compiled form must match); the inputs and
    captured state the traced function wrote in place get their final values (``graph.writebacks``)."""
    if graph.state and len(inputs) == len(graph.inputs) - len(graph.state):
        inputs = tuple(inputs) + tuple(graph.state)
    if len(inputs) != len(graph.inputs):
        raise TypeError(f"graph {graph.name} takes {len(graph.inputs)} inputs, got {len(inputs)}")
    env: dict = {}
    for v, t in zip(graph.inputs, inputs):
        if tuple(t.shape) != v.shape or t.dtype is not v.dtype:
            raise TypeError(f"graph {graph.name}: input {v.name} expects {v.type_str}, got "
                            f"{t.dtype.name}{list(t.shape)}")
        env[v] = t
    env.update(graph.consts)
    for n in graph.nodes:
        args = [env[a] for a in n.inputs]
        if isinstance(n.op, ViewOp):
            r = n.op.fn(args[0], *n.attrs["args"], *args[1:], **dict(n.attrs["kwargs"]))
            rs = r if isinstance(r, (tuple, list)) else (r,)
        else:
            rs = registry.run(n.op, args, n.attrs)
        for v, t in zip(n.outputs, rs):
            env[v] = t
    outs = [env[o] for o in graph.outputs]
    if graph.writebacks:
        for k, j in graph.writebacks:
            inputs[k].copy_(outs[j])
        outs = outs[:graph.n_user_outputs]
    return pack_outputs(graph, outs)
