"""Lower an ONNX graph onto neetorch ops.

``OPS`` is the table ``{op_type: fn(ctx, node, *inputs) -> output(s)}``: one small
function per ONNX op, composing nee ops (the op table every traced program uses),
with ONNX's attribute defaults and per-opset semantics handled inside it.  A missing
optional input arrives as ``None``.

:class:`Program` turns a whole graph into a Python callable on nee tensors; calling it
under ``nee.jit`` records the same graph IR tracing produces, so the model goes through
the same passes, fusion, memory plan and kernel caches.  Values an op needs at lowering
time (Reshape's shape, Slice's starts, ...) are read with :meth:`Ctx.static`: they come
from initializers, Constant nodes or shape arithmetic on static shapes (computations on
constants are constants under tracing); a value that is truly data-dependent makes the
trace raise ``TraceError`` and the session runs the program eagerly instead.

Types neetorch has no dtype for are carried in a wider one (uint16 -> int32,
uint32/uint64 -> int64, bfloat16 -> float32) and cast back to the declared ONNX type on
the way out.

Strings are not a nee dtype: a string value is a numpy object array on the host, and a node
reading or writing one is a *host node* run by ``ops_string.HOST_OPS`` (eagerly, numpy);
:meth:`Program.segments` cuts such a graph into host and traceable numeric segments.
"""
from __future__ import annotations

import numpy as np

from .loader import ONNX_TO_NP, OnnxError, UnsupportedModelError

__all__ = ["OPS", "Ctx", "LoweringError", "NodeView", "Program", "Segment", "op", "unsupported_nodes"]

OPS: dict = {}


class LoweringError(OnnxError):
    """A node could not be lowered (names the node, its op type and what is wrong)."""


def op(*names):
    def deco(fn):
        for n in names:
            OPS[n] = fn
        return fn
    return deco


# numpy dtype carried for each numpy dtype neetorch lacks
_CARRY = {np.dtype(np.uint16): np.dtype(np.int32), np.dtype(np.uint32): np.dtype(np.int64),
          np.dtype(np.uint64): np.dtype(np.int64)}
_NEE_NAMES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64")


def carry_np(dt: np.dtype) -> np.dtype | None:
    """The numpy dtype neetorch holds values of ``dt`` in, or None if it cannot."""
    dt = np.dtype(dt)
    if dt.name in _NEE_NAMES:
        return dt
    if dt in _CARRY:
        return _CARRY[dt]
    if dt.name == "bfloat16" or dt.name.startswith(("float8", "float4")):
        return np.dtype(np.float32)  # exactly representable in float32
    if dt.name in ("int4", "int2"):
        return np.dtype(np.int8)
    if dt.name in ("uint4", "uint2"):
        return np.dtype(np.uint8)
    return None


def nee_dtype(dt):
    import neetorch as nee
    c = carry_np(dt)
    if c is None:
        raise UnsupportedModelError(f"tensor type {np.dtype(dt).name} is not supported by neetorch")
    return getattr(nee, {"bool": "bool"}.get(c.name, c.name))


def onnx_np(elem_type: int) -> np.dtype:
    try:
        return ONNX_TO_NP[elem_type]
    except KeyError:
        raise UnsupportedModelError(f"ONNX element type {elem_type} is not supported") from None


class _Empty:
    """The value of an empty ONNX optional."""

    def __repr__(self):
        return "<empty optional>"


EMPTY = _Empty()


class NodeView:
    """A NodeProto with its attributes decoded (``attrs``), for the op functions."""
    __slots__ = ("attrs", "host", "inputs", "key", "name", "op_type", "outputs", "proto")

    def __init__(self, proto, host=False):
        from onnx import helper
        self.proto = proto
        self.op_type = proto.op_type
        self.key = op_key(proto)
        self.host = host  # reads or writes strings: runs on the host (ops_string.HOST_OPS)
        self.name = proto.name or f"{proto.op_type}({', '.join(proto.output)})"
        self.inputs = list(proto.input)
        self.outputs = list(proto.output)
        self.attrs = {}
        for a in proto.attribute:
            if a.ref_attr_name:
                continue
            v = helper.get_attribute_value(a)
            if isinstance(v, bytes):
                v = v.decode("utf-8", "replace")
            elif isinstance(v, list) and v and isinstance(v[0], bytes):
                v = [x.decode("utf-8", "replace") for x in v]
            self.attrs[a.name] = v

    def get(self, name, default=None):
        return self.attrs.get(name, default)

    @property
    def nout(self) -> int:
        return len(self.outputs)


class Ctx:
    """What op functions may use besides their inputs: the device, the opset, helpers."""

    def __init__(self, device, opset: int, program=None):
        self.device = device
        self.opset = opset
        self.program = program

    # ------------------------------------------------------------ values known at lowering time
    def static(self, t, what="value"):
        """``t``'s value as numpy (raises TraceError under tracing if it depends on inputs)."""
        if t is None:
            return None
        return np.array(t.numpy(force=True), copy=True)

    def ints(self, t):
        return None if t is None else [int(v) for v in self.static(t).reshape(-1)]

    def scalar(self, t, default=None):
        if t is None:
            return default
        a = self.static(t).reshape(-1)
        if a.size == 0:
            return default
        return a[0].item()

    def const(self, a, dtype=None, own=False):
        """A numpy array (or Python value) as a nee tensor on the session's device (``own``: ``a`` is a fresh array
        nothing else holds, taken over without a copy when its layout and dtype allow)."""
        import neetorch as nee
        a = np.asarray(a) if dtype is None else np.asarray(a, dtype=dtype)
        c = carry_np(a.dtype)
        if c is None:
            raise UnsupportedModelError(f"tensor type {a.dtype.name} is not supported by neetorch")
        fresh = own and a.dtype == c and a.flags.c_contiguous and a.flags.writeable and a.flags.owndata
        t = nee.from_numpy(a if fresh else np.array(a, dtype=c, order="C", copy=True))
        if str(self.device) != "cpu":
            t = t.to(self.device)
        return t


def op_key(n) -> str:
    """The OPS table key of a NodeProto: the op type, or ``domain:op_type`` outside the default domain."""
    return n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}:{n.op_type}"


def load_op_modules() -> None:
    """Import every module that fills :data:`OPS` (one list: lowering, checks and ``supported_ops``)."""
    from . import (  # noqa: F401
        ops_contrib,
        ops_control,
        ops_map,
        ops_math,
        ops_ml,
        ops_nn,
        ops_random,
        ops_signal,
        ops_string,
        ops_tensor,
        ops_text,
        ops_vision,
    )


def unsupported_nodes(graph, opset: int | None = None) -> list:
    """[(op_type, node name)] of every node (subgraphs included) with no lowering."""
    load_op_modules()
    from .ops_ml import expand_nodes  # string class labels / SVM probabilities: + host nodes
    from .ops_string import HOST_OPS, is_host_node, string_values
    bad = []

    from .ops_map import map_problems

    def walk(g, nested=False):
        strings = string_values(g)
        bad.extend(map_problems(g))  # DictVectorizer / CastMap fed a sequence of maps or a tensor
        for n in expand_nodes(g.node):
            if is_host_node(n, strings):
                # a node on strings runs on the host: it needs a HOST_OPS entry, and no subgraph around or in it
                fn = HOST_OPS.get(op_key(n))
                sub = any(a.type == a.GRAPH or len(a.graphs) for a in n.attribute)
                if sub and fn is not None and getattr(fn, "host_subgraphs", False) and nested != "traced":
                    # a host op running its bodies eagerly (ops_string: Scan over strings): their nodes may
                    # be host nodes too
                    for a in n.attribute:
                        if a.type == a.GRAPH:
                            walk(a.g, "host")
                        for sg in a.graphs:
                            walk(sg, "host")
                    continue
                if fn is None or sub or nested == "traced":
                    t = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
                    where = " inside a control-flow subgraph" if nested == "traced" and fn is not None and not sub else ""
                    num = OPS.get(op_key(n))  # the numeric op's own refusal says more (ops_ml: string labels)
                    why = num.unsupported_reason(n) if fn is None and hasattr(num, "unsupported_reason") else None
                    bad.append((f"{t} with {why}" if why else f"{t} on string tensors{where}",
                                n.name or f"<unnamed {n.op_type} -> {', '.join(n.output)}>"))
                continue
            fn = OPS.get(op_key(n))
            # an op function may refuse some forms of its op up front (ops_ml: string attributes)
            why = fn.unsupported_reason(n) if fn is not None and hasattr(fn, "unsupported_reason") else None
            if fn is None or why:
                t = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
                bad.append((f"{t} with {why}" if why else t,
                            n.name or f"<unnamed {n.op_type} -> {', '.join(n.output)}>"))
            for a in n.attribute:
                if a.type == a.GRAPH:
                    walk(a.g, nested or "traced")
                for sg in a.graphs:
                    walk(sg, nested or "traced")
    walk(graph)
    return bad


#: ops whose output shape depends on the values of their (non-constant) inputs: no graph can hold them
DATA_DEPENDENT_OPS = frozenset({"NonZero", "NonMaxSuppression", "Unique", "Compress"})


class Program:
    """A lowered ONNX graph: ``program(*input_tensors) -> tuple of output tensors``.

    String values (``ops_string``) are numpy object arrays on the host: string initializers stay numpy,
    and every node reading or writing a string is a host node (``NodeView.host``), run by
    ``ops_string.HOST_OPS``.  :meth:`segments` splits such a graph into host and traceable parts."""

    def __init__(self, graph, initializers: dict, device, opset: int, output_types=None):
        load_op_modules()
        from .ops_string import as_strings, is_host_node, string_values
        self.graph = graph
        self.ctx = Ctx(device, opset, self)
        self.input_names = [i.name for i in graph.input if i.name not in initializers]
        self.output_names = [o.name for o in graph.output]
        self.strings = string_values(graph)
        # initializers become nee tensors on the device: constants in every trace (strings stay numpy)
        self.consts = {k: (as_strings(v, f"initializer {k!r}") if v.dtype.kind in "OSU" else self.ctx.const(v))
                       for k, v in initializers.items()}
        from .ops_ml import expand_nodes  # string class labels / SVM probabilities: + host nodes
        self.nodes = [NodeView(n, is_host_node(n, self.strings)) for n in expand_nodes(graph.node)]
        self.__name__ = graph.name or "onnx_graph"
        self._declared = {}
        for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
            if vi.type.WhichOneof("value") == "tensor_type" and vi.type.tensor_type.elem_type:
                self._declared[vi.name] = vi.type.tensor_type.elem_type
        for t in graph.initializer:
            self._declared[t.name] = t.data_type

    @property
    def host_nodes(self) -> list:
        """The names of the nodes that run on the host (they read or write strings)."""
        return [n.name for n in self.nodes if n.host]

    def data_dependent_nodes(self) -> list:
        """Names of the nodes whose output shapes depend on their input values whatever the inputs are
        (:data:`DATA_DEPENDENT_OPS`): graph breaks from the start, without a failed trace first.  Others
        (an If on a computed condition, a Reshape to a shape computed from values) are found when the trace
        meets them (``TraceError.onnx_node``)."""
        return [n.name for n in self.nodes if n.key in DATA_DEPENDENT_OPS]

    def declared_np(self, name):
        """The declared ONNX element type of a value, as numpy (None if unknown)."""
        et = self._declared.get(name)
        return ONNX_TO_NP.get(et) if et else None

    def __call__(self, *inputs):
        env = dict(self.consts)
        for name, t in zip(self.input_names, inputs):
            env[name] = t
        run_nodes(self.ctx, self.nodes, env)
        return tuple(env[n] for n in self.output_names)

    def segments(self, breaks=()) -> list | None:
        """None for a graph without host nodes or ``breaks``; else the graph as a list of :class:`Segment`, in
        run order, alternating untraced segments (``"host"`` when they hold string nodes, run on numpy, else
        ``"eager"``: the nodes named in ``breaks``, whose output shapes or control flow depend on values -
        NonZero, NonMaxSuppression, an If on a computed condition - run as eager nee ops) and ``"nee"``
        (numeric nodes: one traceable function each, for ``nee.jit``).  Nodes computing only constants
        (Constant, shape arithmetic on initializers, string constants) are evaluated here, once, into
        :attr:`consts`, so they split nothing.  Each node goes to the earliest segment of its kind after the
        segments of its producers: a model whose strings are only at its start and/or end (string inputs
        mapped to numbers, class labels mapped back to strings) becomes host / nee / host; a detector's
        backbone and heads compile as one segment before its first NonZero / NonMaxSuppression."""
        breaks = set(breaks)
        if not any(n.host or n.name in breaks for n in self.nodes):
            return None
        static = set(self.consts)
        pre, rest = [], []
        for n in self.nodes:
            if n.outputs and all(o in self.consts for o in n.outputs if o) and any(n.outputs):
                continue   # (evaluated by an earlier call)
            refs = [i for i in n.inputs if i] + sorted(_outer_refs(n.proto))
            if (all(i in static for i in refs) and not _has_subgraph(n.proto)
                    and not n.op_type.startswith(("Random", "Bernoulli", "Multinomial", "Dropout"))):
                pre.append(n)
                static.update(o for o in n.outputs if o)
            else:
                rest.append(n)
        if pre:
            env = run_nodes(self.ctx, pre, dict(self.consts))
            for n in pre:
                for o in n.outputs:
                    if o:
                        self.consts[o] = env[o]
        seg_of, placed = {}, []
        for n in rest:
            kind = 0 if n.host or n.name in breaks else 1  # segment k runs untraced nodes when k is even
            lo = 0
            for i in [i for i in n.inputs if i] + sorted(_outer_refs(n.proto)):
                if i in seg_of:
                    p = seg_of[i]
                    lo = max(lo, p if p % 2 == kind else p + 1)
            k = lo if lo % 2 == kind else lo + 1
            placed.append((k, n))
            for o in n.outputs:
                if o:
                    seg_of[o] = k
        groups: dict = {}
        for k, n in placed:
            groups.setdefault(k, []).append(n)
        order = sorted(groups)
        uses: dict = {}  # value -> segments reading it
        for k, n in placed:
            for i in [i for i in n.inputs if i] + sorted(_outer_refs(n.proto)):
                uses.setdefault(i, set()).add(k)
        out = []
        for k in order:
            nodes = groups[k]
            made = {o for n in nodes for o in n.outputs if o}
            ins = []
            for n in nodes:
                for i in [i for i in n.inputs if i] + sorted(_outer_refs(n.proto)):
                    if i not in made and i not in self.consts and i not in ins:
                        ins.append(i)
            outs = [o for n in nodes for o in n.outputs
                    if o and (o in self.output_names or any(u != k for u in uses.get(o, ())))]
            kind = "nee" if k % 2 else "host" if any(n.host for n in nodes) else "eager"
            out.append(Segment(self, kind, nodes, ins, outs, len(out)))
        return out


def _has_subgraph(proto) -> bool:
    return any(a.type == a.GRAPH or len(a.graphs) for a in proto.attribute)


def _outer_refs(proto) -> set:
    """Names a node's subgraphs read from the enclosing scopes (used there, defined nowhere inside)."""
    if not _has_subgraph(proto):
        return set()
    used, defined = set(), set()

    def walk(g):
        defined.update(i.name for i in g.input)
        defined.update(t.name for t in g.initializer)
        for n in g.node:
            used.update(i for i in n.input if i)
            defined.update(o for o in n.output if o)
            for a in n.attribute:
                if a.type == a.GRAPH:
                    walk(a.g)
                for sg in a.graphs:
                    walk(sg)
    for a in proto.attribute:
        if a.type == a.GRAPH:
            walk(a.g)
        for sg in a.graphs:
            walk(sg)
    return used - defined


class Segment:
    """Consecutive nodes of one kind of a split graph (:meth:`Program.segments`): ``kind`` is ``"host"``
    (string nodes, eager on numpy), ``"eager"`` (nodes that cannot be traced, run as eager nee ops) or
    ``"nee"`` (numeric nodes); ``segment(*values)`` runs its nodes on
    the values named ``inputs`` (plus the program's constants) and returns those named ``outputs``
    (what later segments and the graph's outputs read).  A ``"nee"`` segment is what ``nee.jit`` traces."""

    def __init__(self, program, kind, nodes, inputs, outputs, index):
        self.program, self.kind, self.nodes = program, kind, nodes
        self.inputs, self.outputs = inputs, outputs
        self.__name__ = f"{program.__name__}_{kind}{index}"

    def __call__(self, *values):
        env = dict(self.program.consts)
        env.update(zip(self.inputs, values))
        run_nodes(self.program.ctx, self.nodes, env)
        return tuple(env[n] for n in self.outputs)

    def __repr__(self):
        return f"<Segment {self.__name__}: {len(self.nodes)} node(s), {len(self.inputs)} in, {len(self.outputs)} out>"


def run_nodes(ctx, nodes, env):
    from ..tensor.creation import default_device_scope
    prev = getattr(ctx, "scope", None)
    # tensors the op functions create (nee.zeros, full, arange, tensor, ...) live on the session's device,
    # as its inputs and initializers do: no op mixes a CPU constant into device tensors (per thread: two
    # sessions on different devices may lower at the same time)
    try:
        with default_device_scope(ctx.device):
            return _run_nodes(ctx, nodes, env)
    finally:
        ctx.scope = prev


def _run_nodes(ctx, nodes, env):
    from .ops_string import HOST_OPS, has_strings
    from .ops_uint64 import UINT64_OPS
    from .ops_uint64 import applies as applies_uint64
    for n in nodes:
        ctx.scope = env
        args = [env[i] if i else None for i in n.inputs]
        host = n.host
        if not host and any(has_strings(a) for a in args):
            # a string value the declared types did not announce (no value_info): a host op if one exists
            if n.key not in HOST_OPS:
                which = [i for i, a in zip(n.inputs, args) if has_strings(a)]
                raise LoweringError(f"node {n.name} ({n.op_type}): input(s) {which} are string tensors; "
                                    f"{n.op_type} on strings is not supported")
            host = True
        fn = (HOST_OPS if host else OPS).get(n.key)
        if fn is None:
            raise UnsupportedModelError(f"no lowering for op {n.op_type}{' on strings' if host else ''} "
                                        f"(node {n.name})")
        for i, a in zip(n.inputs, args):
            if i and a is None:
                raise LoweringError(f"node {n.name} ({n.op_type}): input {i!r} is not defined")
        try:
            if not host and n.key in UINT64_OPS and applies_uint64(ctx, n):
                res = UINT64_OPS[n.key](ctx, n, fn, *args)
            else:
                res = fn(ctx, n, *args)
        except OnnxError:
            raise
        except Exception as e:
            from ..trace.tracer import TraceError
            if isinstance(e, TraceError):
                # ``onnx_node``: the outermost node of this graph that could not be traced (a node inside a
                # Loop / If body names its enclosing node here, once the error leaves the body): the session
                # runs that node eagerly and compiles the rest (InferenceSession's graph breaks)
                if str(e).startswith("node "):
                    e.onnx_node = n.name
                    raise
                # the session's fallback reason then names the node (NonZero's data-dependent shape, ...), not
                # only the caller's frame the tracer saw
                err = TraceError(f"node {n.name} ({n.op_type}): {e}")
                err.onnx_node = n.name
                raise err from e
            raise LoweringError(f"node {n.name} ({n.op_type}): {type(e).__name__}: {e}") from e
        if not isinstance(res, tuple):  # a list is one value: a sequence
            res = (res,)
        for name, r in zip(n.outputs, res):
            if name:
                env[name] = r
    return env
