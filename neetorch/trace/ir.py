"""The graph IR: typed values, nodes that name ops from the op table, and graphs.

A :class:`Graph` is an SSA listing: graph inputs, constants (tensors captured at
trace time: parameters, literals), one :class:`Node` per op application and the
outputs.  Every :class:`Value` carries its shape (ints, or strings for symbolic
dims), dtype and device.  ``str(graph)`` prints one line per node;
``graph.to_dot()`` renders Graphviz; ``graph.validate()`` checks that every value is
defined before use, that types agree with the op's shape/dtype rule, and that
nothing dangles.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Value", "Node", "Graph", "GraphError"]


class GraphError(ValueError):
    """The graph is malformed (names the node and what is wrong)."""


@dataclass(eq=False)
class Value:
    id: int
    shape: tuple
    dtype: Any
    device: Any
    producer: "Node | None" = None
    kind: str = "node"          # "input" | "const" | "node"
    name: str = ""
    # element strides the tensor bound to this value had in the trace (a node's output: the layout eager execution
    # gives it, trace.tracer._ew_layout); None: unknown.  jit/executable.py gives returned values these strides
    strides: Any = None

    def __repr__(self) -> str:
        return f"%{self.id}"

    @property
    def type_str(self) -> str:
        dims = ", ".join(str(d) for d in self.shape)
        return f"{self.dtype.name}[{dims}]" + ("" if str(self.device) == "cpu" else f"@{self.device}")


@dataclass(eq=False)
class Node:
    op: Any                      # an OpDef, or a view op (see trace.tracer.VIEW_OPS)
    inputs: list
    attrs: dict
    outputs: list = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.op.name

    def __repr__(self) -> str:
        return f"Node({self.name})"


def _fmt_attr(v) -> str:
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (tuple, list)):
        return "(" + ", ".join(_fmt_attr(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    if hasattr(v, "name") and type(v).__name__ == "DType":
        return v.name
    return repr(v)


class Graph:
    # in-place writes the caller sees (trace.tracer.trace): (input index, output index) pairs whose output's value
    # is copied into the input after a call; ``state``: captured tensors the function writes, traced as the inputs
    # after the function's own (read live at every call)
    state: tuple = ()
    writebacks: tuple = ()

    def __init__(self, name: str = "graph"):
        self.name = name
        self.inputs: list[Value] = []
        self.consts: dict[Value, Any] = {}     # Value -> Tensor captured at trace time
        self.nodes: list[Node] = []
        self.outputs: list[Value] = []
        self._next = 0

    # ------------------------------------------------------------ building
    def _value(self, shape, dtype, device, kind, name="") -> Value:
        v = Value(self._next, tuple(shape), dtype, device, kind=kind, name=name)
        self._next += 1
        return v

    def add_input(self, shape, dtype, device, name="") -> Value:
        v = self._value(shape, dtype, device, "input", name or f"in{len(self.inputs)}")
        self.inputs.append(v)
        return v

    def add_const(self, tensor, name="") -> Value:
        v = self._value(tuple(tensor.shape), tensor.dtype, tensor.device, "const", name)
        self.consts[v] = tensor
        return v

    def add_node(self, op, inputs, attrs, metas) -> Node:
        n = Node(op, list(inputs), dict(attrs))
        for m in metas:
            v = self._value(m.shape, m.dtype, inputs[0].device if inputs else "cpu", "node")
            v.producer = n
            n.outputs.append(v)
        self.nodes.append(n)
        return n

    # ------------------------------------------------------------ inspection
    def __str__(self) -> str:
        lines = [f"graph {self.name}(" + ", ".join(f"{v!r}: {v.type_str}" for v in self.inputs) + "):"]
        for v, t in self.consts.items():
            shown = f" {t.numpy(force=True).tolist()!r}" if t.numel() <= 4 else ""
            lines.append(f"  {v!r}: {v.type_str} = const{(' ' + v.name) if v.name else ''}{shown}")
        for n in self.nodes:
            outs = ", ".join(f"{o!r}: {o.type_str}" for o in n.outputs)
            args = ", ".join(repr(i) for i in n.inputs)
            attrs = ", ".join(f"{k}={_fmt_attr(v)}" for k, v in n.attrs.items())
            lines.append(f"  {outs} = {n.name}({args}{', ' if args and attrs else ''}{attrs})")
        wb = getattr(self, "writebacks", None)
        n = getattr(self, "n_user_outputs", len(self.outputs)) if wb else len(self.outputs)
        lines.append("  return " + ", ".join(repr(o) for o in self.outputs[:n]))
        if wb:   # inputs / captured state written in place: final values copied back after each call
            lines.append("  write back " + ", ".join(f"{self.outputs[j]!r} -> {self.inputs[k]!r}" for k, j in wb))
        return "\n".join(lines)

    __repr__ = __str__

    def to_dot(self) -> str:
        """Graphviz DOT source (``dot -Tsvg``)."""
        out = [f'digraph "{self.name}" {{', "  rankdir=TB; node [fontname=monospace, fontsize=10];"]
        for v in self.inputs:
            out.append(f'  v{v.id} [shape=box, style=rounded, label="{v.name}\\n{v.type_str}"];')
        for v in self.consts:
            out.append(f'  v{v.id} [shape=box, style=dashed, label="const {v.name}\\n{v.type_str}"];')
        for i, n in enumerate(self.nodes):
            out.append(f'  n{i} [shape=ellipse, label="{n.name}"];')
            for a in n.inputs:
                src = f"v{a.id}" if a.producer is None else f"n{self.nodes.index(a.producer)}"
                out.append(f'  {src} -> n{i} [label="{a.type_str}"];')
        for k, o in enumerate(self.outputs):
            out.append(f'  out{k} [shape=box, style=bold, label="output {k}\\n{o.type_str}"];')
            src = f"v{o.id}" if o.producer is None else f"n{self.nodes.index(o.producer)}"
            out.append(f"  {src} -> out{k};")
        out.append("}")
        return "\n".join(out)

    def fingerprint(self) -> str:
        """A hash of the graph's structure, types and attributes (not of constant values' identity)."""
        h = hashlib.sha256()
        h.update(str(self).encode())
        return h.hexdigest()[:24]

    def validate(self) -> "Graph":
        """Raise :class:`GraphError` unless the graph is well formed and well typed."""
        from ..ops.registry import Meta
        defined = set(self.inputs) | set(self.consts)
        for v in self.inputs:
            if v.kind != "input":
                raise GraphError(f"{v!r} is listed as an input but is a {v.kind}")
        for i, n in enumerate(self.nodes):
            for a in n.inputs:
                if a not in defined:
                    raise GraphError(f"node {i} ({n.name}) uses {a!r} before it is defined")
            infer = getattr(n.op, "infer", None)
            if infer is not None and not (n.op.kind == "view" and len(n.inputs) > 1):
                try:
                    metas = infer([Meta(a.shape, a.dtype) for a in n.inputs], n.attrs)
                except Exception as e:
                    raise GraphError(f"node {i} ({n.name}): its op's shape/dtype rule rejects the inputs "
                                     f"({', '.join(a.type_str for a in n.inputs)}): {e}") from e
                if len(metas) != len(n.outputs):
                    raise GraphError(f"node {i} ({n.name}) has {len(n.outputs)} outputs, its op infers {len(metas)}")
                for m, o in zip(metas, n.outputs):
                    if tuple(m.shape) != tuple(o.shape) or m.dtype is not o.dtype:
                        raise GraphError(f"node {i} ({n.name}) output {o!r} is typed {o.type_str} but its op infers "
                                         f"{m.dtype.name}{list(m.shape)}")
            for o in n.outputs:
                if o in defined:
                    raise GraphError(f"node {i} ({n.name}) redefines {o!r}")
                if o.producer is not n:
                    raise GraphError(f"{o!r} does not point back to its producer node {i} ({n.name})")
                defined.add(o)
        for o in self.outputs:
            if o not in defined:
                raise GraphError(f"output {o!r} is never defined")
        return self

    # ------------------------------------------------------------ utilities
    def users(self) -> dict:
        u: dict = {}
        for n in self.nodes:
            for a in n.inputs:
                u.setdefault(a, []).append(n)
        return u
