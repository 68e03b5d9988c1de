"""Helpers shared by device backends (not part of the plugin contract in ``base.py``)."""
from __future__ import annotations

import numpy as np

__all__ = ["MemberByMember", "PreparedLayout", "prepared_layout"]


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


class PreparedLayout:
    """What a device's prepared eager launch (``Backend.prepare_elementwise``) works out once per
    layout, shared by the OpenCL and CUDA renderers: the output's shape, element count and contiguous
    strides, the inputs' storages, the collapsed iteration space, which arguments are Python scalars
    (their cached 0-d tensor's dtype, else None) and the output's layout id."""
    __slots__ = ("contig", "cshape", "cstrides", "datas", "kinds", "n", "out_sig", "shape")


def prepared_layout(device, args, ins, meta, broadcast):
    """A :class:`PreparedLayout`, or None when the launch is left to the general path (an empty
    output, or more dims than the kernels' 4 after collapsing).  ``broadcast(shape, a)``: the
    device's element strides of storage ``a`` broadcast to ``shape``."""
    from ..ops.elementwise import _layout_ids
    from ..tensor.tensor import Tensor
    from .cpu import layout
    p = PreparedLayout()
    p.shape = shape = tuple(meta.shape)
    n = 1
    for d in shape:
        n *= d
    if n == 0:
        return None
    p.n = n
    contig, c = [], 1
    for d in reversed(shape):
        contig.append(c)
        c *= max(d, 1)
    p.contig = tuple(reversed(contig))
    p.datas = [t._data for t in ins]
    p.cshape, p.cstrides = layout.collapse(shape, [list(p.contig)] + [broadcast(shape, a) for a in p.datas])
    if len(p.cshape) > layout.MAX_RANK:
        return None
    p.kinds = [None if isinstance(a, Tensor) else t._dtype for a, t in zip(args, ins)]
    odt = meta.dtype
    out_key = (odt, device, shape, tuple(s * odt.itemsize for s in p.contig), True)
    p.out_sig = _layout_ids.setdefault(out_key, len(_layout_ids))
    return p
