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
"""
from __future__ import annotations

import numpy as np

from .loader import ONNX_TO_NP, UnsupportedModelError, OnnxError

__all__ = ["OPS", "op", "Ctx", "Program", "NodeView", "unsupported_nodes", "LoweringError"]

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
    __slots__ = ("proto", "op_type", "name", "inputs", "outputs", "attrs", "key")

    def __init__(self, proto):
        from onnx import helper
        self.proto = proto
        self.op_type = proto.op_type
        self.key = op_key(proto)
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

    def const(self, a, dtype=None):
        """A numpy array (or Python value) as a nee tensor on the session's device."""
        import neetorch as nee
        a = np.asarray(a) if dtype is None else np.asarray(a, dtype=dtype)
        c = carry_np(a.dtype)
        if c is None:
            raise UnsupportedModelError(f"tensor type {a.dtype.name} is not supported by neetorch")
        t = nee.from_numpy(np.array(a, dtype=c, order="C", copy=True))
        if str(self.device) != "cpu":
            t = t.to(self.device)
        return t


def op_key(n) -> str:
    """The OPS table key of a NodeProto: the op type, or ``domain:op_type`` outside the default domain."""
    return n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}:{n.op_type}"


def load_op_modules() -> None:
    """Import every module that fills :data:`OPS` (one list: lowering, checks and ``supported_ops``)."""
    from . import ops_control, ops_math, ops_ml, ops_nn, ops_signal, ops_tensor, ops_vision  # noqa: F401


def unsupported_nodes(graph, opset: int | None = None) -> list:
    """[(op_type, node name)] of every node (subgraphs included) with no lowering."""
    load_op_modules()
    bad = []

    def walk(g):
        for n in g.node:
            fn = OPS.get(op_key(n))
            # an op function may refuse some forms of its op up front (ops_ml: string attributes)
            why = fn.unsupported_reason(n) if fn is not None and hasattr(fn, "unsupported_reason") else None
            if fn is None or why:
                t = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
                bad.append((f"{t} with {why}" if why else t,
                            n.name or f"<unnamed {n.op_type} -> {', '.join(n.output)}>"))
            for a in n.attribute:
                if a.type == a.GRAPH:
                    walk(a.g)
                for sg in a.graphs:
                    walk(sg)
    walk(graph)
    return bad


class Program:
    """A lowered ONNX graph: ``program(*input_tensors) -> tuple of output tensors``."""

    def __init__(self, graph, initializers: dict, device, opset: int, output_types=None):
        load_op_modules()
        self.graph = graph
        self.ctx = Ctx(device, opset, self)
        self.input_names = [i.name for i in graph.input if i.name not in initializers]
        self.output_names = [o.name for o in graph.output]
        # initializers become nee tensors on the device: constants in every trace
        self.consts = {k: self.ctx.const(v) for k, v in initializers.items()}
        self.nodes = [NodeView(n) for n in graph.node]
        self.__name__ = graph.name or "onnx_graph"
        self._declared = {}
        for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
            if vi.type.WhichOneof("value") == "tensor_type" and vi.type.tensor_type.elem_type:
                self._declared[vi.name] = vi.type.tensor_type.elem_type
        for t in graph.initializer:
            self._declared[t.name] = t.data_type

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
    for n in nodes:
        ctx.scope = env
        fn = OPS.get(n.key)
        if fn is None:
            raise UnsupportedModelError(f"no lowering for op {n.op_type} (node {n.name})")
        args = [env[i] if i else None for i in n.inputs]
        for i, a in zip(n.inputs, args):
            if i and a is None:
                raise LoweringError(f"node {n.name} ({n.op_type}): input {i!r} is not defined")
        try:
            res = fn(ctx, n, *args)
        except (OnnxError,) as e:
            raise
        except Exception as e:  # noqa: BLE001
            from ..trace.tracer import TraceError
            if isinstance(e, TraceError):
                raise
            raise LoweringError(f"node {n.name} ({n.op_type}): {type(e).__name__}: {e}") from e
        if not isinstance(res, tuple):  # a list is one value: a sequence
            res = (res,)
        for name, r in zip(n.outputs, res):
            if name:
                env[name] = r
    return env
