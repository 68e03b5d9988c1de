"""Record a tensor program into a :class:`~neetorch.trace.ir.Graph` by running it.

Tracing executes the function once on real example tensors with a hook installed in
``ops.registry.run`` (every op application) and around the view functions (views do
not allocate and do not go through ``run``).  Tensors the function receives become
graph inputs; tensors it meets that were made outside the trace (parameters, literals)
become constants.  Python control flow is unrolled.  Reading a traced value back into
Python (``.item()``, ``.numpy()``, ``bool()``, ``.tolist()``) would freeze a
data-dependent decision into the graph, so it raises :class:`TraceError` naming the
line, with the way out.
"""
from __future__ import annotations

import sys
import threading
import traceback
from typing import Any, Callable

from ..ops import registry
from ..ops.registry import Meta
from .ir import Graph, Value

__all__ = ["trace", "TraceError", "Tracer", "ViewOp", "run_graph", "is_tracing"]


class TraceError(RuntimeError):
    """The traced function did something a graph cannot represent."""


class ViewOp:
    """A view function recorded as a node: replayed by calling it with the same arguments."""
    kind = "view"
    __slots__ = ("name", "fn")

    def __init__(self, name: str, fn: Callable):
        self.name = name
        self.fn = fn

    def infer(self, metas, attrs):
        import numpy as np
        from ..tensor.tensor import Tensor
        from ..devices import device
        m = metas[0]
        # views only compute metadata: apply the view to a storage-less stand-in
        st, c = [], 1
        for s in reversed(m.shape):
            st.append(c * m.dtype.itemsize)
            c *= max(s, 1)
        dummy = np.lib.stride_tricks.as_strided(np.zeros(1, m.dtype.np), m.shape, st[::-1])
        if len(metas) > 1:  # index tensors: shapes need their values, take the recorded ones
            raise NotImplementedError
        r = self.fn(Tensor._make(dummy, device("cpu"), m.dtype), *attrs.get("args", ()), **dict(attrs.get("kwargs", ())))
        rs = r if isinstance(r, (tuple, list)) else (r,)
        return [Meta(tuple(x.shape), x.dtype) for x in rs]

    def __repr__(self):
        return f"ViewOp({self.name})"


_active = threading.local()


def is_tracing() -> bool:
    return getattr(_active, "tracer", None) is not None


def _user_frame() -> str:
    for fr in reversed(traceback.extract_stack()[:-1]):
        if "/neetorch/" not in fr.filename.replace("\\", "/"):
            return f'{fr.filename}:{fr.lineno} ("{(fr.line or "").strip()}")'
    return "<unknown>"


class Tracer:
    def __init__(self, name: str = "graph"):
        self.graph = Graph(name)
        self.values: dict[int, tuple[Value, Any]] = {}   # id(tensor) -> (Value, tensor kept alive)
        self.view_values: set = set()

    # ------------------------------------------------------------ values
    def value_of(self, t) -> Value:
        e = self.values.get(id(t))
        if e is not None and e[1] is t:
            return e[0]
        v = self.graph.add_const(t)
        self.values[id(t)] = (v, t)
        return v

    def is_traced(self, t) -> bool:
        e = self.values.get(id(t))
        return e is not None and e[1] is t and e[0].kind != "const"

    def bind(self, t, v: Value) -> None:
        self.values[id(t)] = (v, t)

    # ------------------------------------------------------------ hooks
    def on_op(self, op, inputs, attrs, metas, outputs, out):
        if not any(self.is_traced(t) for t in inputs) and not (out and any(self.is_traced(o) for o in out)):
            return  # a computation on constants only: its result is a constant too
        if out is not None:
            for o in out:
                if id(o) in self.view_values or (self.values.get(id(o)) or (None, None))[1] is not o:
                    raise TraceError(f"{op.name}: an in-place op writes into a view or a tensor made outside the "
                                     f"traced function at {_user_frame()}; in-place updates are traced only on "
                                     f"tensors the function itself created — use the out-of-place op")
        node = self.graph.add_node(op, [self.value_of(t) for t in inputs], attrs, metas)
        for t, v in zip(outputs, node.outputs):
            self.bind(t, v)

    def on_view(self, name, fn, base, args, kwargs, result):
        if not self.is_traced(base):
            return
        op = ViewOp(name, fn)
        rs = result if isinstance(result, (tuple, list)) else (result,)
        metas = [Meta(tuple(r.shape), r.dtype) for r in rs]
        node = self.graph.add_node(op, [self.value_of(base)], {"args": tuple(args), "kwargs": tuple(kwargs.items())},
                                   metas)
        for t, v in zip(rs, node.outputs):
            self.bind(t, v)
            self.view_values.add(id(t))

    def on_read(self, t, what: str):
        if registry._depth[0] == 0 and self.is_traced(t):
            raise TraceError(f"{what} reads a traced tensor's value into Python at {_user_frame()}: a graph cannot "
                             f"depend on data. Move this out of the traced function, or make the value a static "
                             f"input (an argument that is not a tensor).")


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
        return tuple(_template(x, tensors) for x in obj)
    if isinstance(obj, list):
        return [_template(x, tensors) for x in obj]
    return obj


def _fill(obj, tensors: list):
    if isinstance(obj, _Slot):
        return tensors[obj.i]
    if isinstance(obj, tuple):
        return tuple(_fill(x, tensors) for x in obj)
    if isinstance(obj, list):
        return [_fill(x, tensors) for x in obj]
    return obj


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
            node = tr.graph.add_node(op, [tr.value_of(t) for t in tensors], {"args": (tmpl,), "kwargs": ()},
                                     [Meta(tuple(r.shape), r.dtype)])
            tr.bind(r, node.outputs[0])
            tr.view_values.add(id(r))
        return r
    getitem.__wrapped__ = fn
    return getitem


def _replay_getitem(base, tmpl, *index_tensors):
    return base[_fill(tmpl, [base] + list(index_tensors))]


def _guard_mutation(fn, what):
    def mutate(self, *args, **kwargs):
        tr = getattr(_active, "tracer", None)
        if tr is not None and registry._depth[0] == 0 and tr.is_traced(self):
            raise TraceError(f"{what} writes into a traced tensor at {_user_frame()}: in-place assignment is not "
                             f"traced; use an out-of-place op (nee.where, masked_fill, index_put, scatter) instead")
        return fn(self, *args, **kwargs)
    mutate.__wrapped__ = fn
    mutate.__name__ = getattr(fn, "__name__", what)
    return mutate


def _traced_view(name, fn):
    def wrapper(base, *args, **kwargs):
        r = fn(base, *args, **kwargs)
        tr = getattr(_active, "tracer", None)
        if tr is not None and registry._depth[0] == 0:
            tr.on_view(name, fn, base, args, kwargs, r)
        return r
    wrapper.__name__ = name
    wrapper.__doc__ = fn.__doc__
    wrapper.__wrapped__ = fn
    return wrapper


def on_read(t, what: str) -> None:
    """Called by Tensor methods that read values into Python."""
    tr = getattr(_active, "tracer", None)
    if tr is not None:
        tr.on_read(t, what)


def trace(fn: Callable, *example_args, name: str | None = None, **example_kwargs) -> Graph:
    """Run ``fn`` once on the example arguments and return the recorded, validated graph.

    Tensor arguments (also inside lists/tuples/dicts) become graph inputs in order of
    appearance; outputs are the tensors ``fn`` returns (a tensor, or a tuple/list of them).
    """
    from ..tensor.tensor import Tensor
    if getattr(_active, "tracer", None) is not None:
        raise TraceError("trace() called while another trace is running")
    tr = Tracer(name or getattr(fn, "__name__", "graph"))
    for t in _tensors((example_args, example_kwargs)):
        if not tr.is_traced(t):
            tr.bind(t, tr.graph.add_input(tuple(t.shape), t.dtype, t.device))
    from ..tensor import tensor as _tensor_mod
    _active.tracer = tr
    prev = registry._trace_hook[0]
    registry._trace_hook[0] = tr.on_op
    _tensor_mod._READ_HOOK[0] = tr.on_read
    try:
        result = fn(*example_args, **example_kwargs)
    finally:
        registry._trace_hook[0] = prev
        _tensor_mod._READ_HOOK[0] = None
        _active.tracer = None
    outs = result if isinstance(result, (tuple, list)) else (result,)
    for o in outs:
        if not isinstance(o, Tensor):
            raise TraceError(f"traced function returned {type(o).__name__}; only tensors (or tuples of them) can be "
                             f"graph outputs")
        tr.graph.outputs.append(tr.value_of(o))
    tr.graph._single = not isinstance(result, (tuple, list))
    return tr.graph.validate()


def _tensors(obj):
    from ..tensor.tensor import Tensor
    if isinstance(obj, Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            yield from _tensors(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from _tensors(x)


def run_graph(graph: Graph, *inputs):
    """Interpret ``graph`` eagerly on ``inputs`` (the reference every compiled form must match)."""
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
    return outs[0] if getattr(graph, "_single", False) and len(outs) == 1 else tuple(outs)
