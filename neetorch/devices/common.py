"""Helpers shared by device backends (not part of the plugin contract in ``base.py``)."""
from __future__ import annotations

import numpy as np

__all__ = ["MemberByMember"]


class MemberByMember:
    """A fused group the device cannot render as one kernel: its members run one by one
    through the dispatcher (so each unsupported member falls back visibly).

    A backend's ``compile_group`` returns one (with the reason) when rendering raises
    ``NotImplementedError``; its ``launch_group`` calls it as ``kernel(backend, outs, ins)``."""

    def __init__(self, group, why):
        self.group = group
        self.why = why

    def __call__(self, backend, outs, ins):
        from ..ops import registry
        from ..ops.registry import Meta
        from ..tensor.tensor import Tensor
        dev = backend.device
        env = {}
        for v, a in zip(self.group.inputs, ins):
            env[v] = Tensor._make(a, dev, v.dtype)
        for n in self.group.nodes:
            args = [env[v] for v in n.inputs]
            shape = tuple(np.broadcast_shapes(*[tuple(t.shape) for t in args]))
            metas = [Meta(shape, o.dtype) for o in n.outputs]
            env[n.outputs[0]] = registry.run(n.op, args, n.attrs if hasattr(n, "attrs") else {}, metas)[0]
        for o, a in zip(self.group.outputs, outs):
            backend.copy_(a, env[o]._data)
