"""conv2d's elementwise epilogues run inside the conv kernel (kernels/fused.py's ``matmul_epilogue`` with a
conv2d producer).

The JIT fuses a conv2d and the elementwise group reading its output (``jit/fusion.MatmulEpilogue``).  Its
generic run is the conv kernel into a scratch, then the group's kernel from the scratch into the output:
one more pass over the output (the ONNX CNNs: ~0.4 ns per element, 5-10% of SqueezeNet's time).  The
groups these models give are a chain over the product of

* ``add`` of a per-output-channel bias (a (O, 1, 1) / (1, O, 1, 1) operand: BatchNormalization folded
  into the weights and a shift),
* ``add`` of a tensor of the output's shape (a residual),
* ``relu``,

in that order (any subset).  :func:`plan` recognizes such a chain and returns a runner that hands it to
``conv.conv2d_into``: the bias summed into the conv's own bias (every conv path starts its sums from it or
adds it in a pass it makes anyway), relu and the residual applied where each path writes its output
(the direct kernels' stores, the Winograd output transform, the GEMM paths' bias pass) or, where a path
has no such place, in one in-place pass over its output.  Summation order: the conv's sums start from
(or are followed by) bias + shift, then the residual; the group adds the shift after the sums, so the
results differ from the generic run by float rounding only.

The runner declines (returns False: the generic run follows) when the output shares memory with an
operand (the conv writes the output while it reads its input; the group's generic run reads a scratch),
for dtypes other than the output's, or bias operands of another size.
"""
from __future__ import annotations

import numpy as np

_FLOATS = ("float32", "float64")
# (numpy's dtype.name is computed in Python: ~3 us, per conv call)
_FLOAT_DTYPES = frozenset((np.dtype(np.float32), np.dtype(np.float64)))
_conv = [None]      # kernels/conv.py, imported on the first run (a function-level import: ~0.7 us a call)


def _chain(epi_op, acc):
    """[(kind, value)] for the group's nodes ('bias' / 'res' with the other operand, 'relu' with None) when it
    is a chain of bias-add, residual-add, relu over ``acc`` (in that order, each at most once), else None."""
    nodes = getattr(epi_op, "nodes", None)
    outs = getattr(epi_op, "outputs", None)
    if not nodes or not outs or len(outs) != 1 or outs[0] is not nodes[-1].outputs[0]:
        return None
    O = acc.shape[1] if len(acc.shape) == 4 else None
    if O is None or getattr(acc.dtype, "name", None) not in _FLOATS:
        return None
    steps = []
    prev = acc
    rank = {"bias": 0, "res": 1, "relu": 2}
    for n in nodes:
        if len(n.outputs) != 1 or n.attrs or n.outputs[0].shape != acc.shape or n.outputs[0].dtype != acc.dtype:
            return None
        nm = n.op.name
        if nm == "relu" and len(n.inputs) == 1 and n.inputs[0] is prev:
            step = ("relu", None)
        elif nm == "add" and len(n.inputs) == 2 and (n.inputs[0] is prev) != (n.inputs[1] is prev):
            other = n.inputs[1] if n.inputs[0] is prev else n.inputs[0]
            if other.dtype != acc.dtype:
                return None
            shp = tuple(other.shape)
            if shp == tuple(acc.shape):
                step = ("res", other)
            elif len(shp) in (3, 4) and shp[-3:] == (O, 1, 1) and all(d == 1 for d in shp[:-3]):
                step = ("bias", other)
            else:
                return None
        else:
            return None
        if steps and rank[step[0]] <= rank[steps[-1][0]]:
            return None
        steps.append(step)
        prev = n.outputs[0]
    return steps


def plan(prod, epi, acc, einputs):
    """A runner ``f(outs, ins) -> bool`` doing ``prod`` (a conv2d node) and its epilogue ``epi`` in the conv
    kernel (``ins``: the conv's operands, then the epilogue's inputs other than ``acc`` in ``einputs``
    order), or None when the epilogue is not such a chain."""
    steps = _chain(epi.op, acc)
    if steps is None:
        return None
    npin = len(prod.inputs)
    pos = {}
    j = npin
    for v in einputs:
        if v is acc:
            continue
        for kind, val in steps:
            if val is v:
                pos[kind] = j
        j += 1
    kinds = [k for k, _ in steps]
    if ("bias" in kinds and "bias" not in pos) or ("res" in kinds and "res" not in pos):
        return None
    relu = "relu" in kinds
    ib, ir = pos.get("bias"), pos.get("res")
    attrs = prod.attrs

    def operands(outs, ins):
        """(conv.py, out, b2 as an (O,) view or None, residual or None) when the runner takes these arrays, else
        None (the generic run follows): float output, no operand sharing its memory, epilogue operands of its
        dtype and sizes."""
        conv = _conv[0]
        if conv is None:
            from . import conv
            _conv[0] = conv
        out = outs[0]
        if out.dtype not in _FLOAT_DTYPES:
            return None
        for a in ins:
            if not isinstance(a, np.ndarray) or np.may_share_memory(out, a):
                return None
        O = out.shape[1]
        b2 = res = None
        if ib is not None:
            b2 = ins[ib]
            if b2.dtype != out.dtype or b2.size != O:
                return None
            b2 = b2.reshape(O)
        if ir is not None:
            res = ins[ir]
            if res.dtype != out.dtype or res.shape != out.shape:
                return None
        return conv, out, b2, res

    def run(outs, ins) -> bool:
        ops = operands(outs, ins)
        if ops is None:
            return False
        conv, out, b2, res = ops
        conv.conv2d_into(out, ins[:npin], attrs, b2, res, relu)
        return True

    def bind(outs, ins):
        """``f(outs, ins) -> bool``: ``run`` for arrays of these layouts where conv.bind_into binds the conv
        (the direct kernel's launch looked up once), or None.  A second bias given as the same array as here
        is passed as the same (O,) view, so the summed bias of frozen ones is reused."""
        ops = operands(outs, ins) if len(outs) == 1 else None
        if ops is None:
            return None
        conv, out, b2view, res = ops
        O = out.shape[1]
        b2src = None if ib is None else ins[ib]
        g = conv.bind_into(out, ins[:npin], attrs, b2view, res, relu)
        if g is None:
            return None

        def f(outs, ins) -> bool:
            if ib is None:
                b2 = None
            else:
                s = ins[ib]
                b2 = b2view if s is b2src else s.reshape(O)
            return g(outs[0], ins, b2, None if ir is None else ins[ir])
        return f

    run.bind = bind
    return run
