"""uint64 values are carried in int64 (lowering._CARRY): the same 64 bits, so addition, subtraction,
multiplication, bitwise ops, left shifts, equality, gathers and truncating casts are already right; the ops
whose result depends on reading the bits as unsigned get these lowerings when an input is declared uint64
(values from 2**63 read as negative otherwise: ``2**63 + 5 < 3`` was True, their float casts negative):

* order (Less, Greater, LessOrEqual, GreaterOrEqual, Max, Min, Clip, ReduceMax / ReduceMin, ArgMax / ArgMin,
  TopK): the top bit flipped turns unsigned order into signed order (``x ^ 2**63``), and back on the values;
* Div / Mod: unsigned division from signed ops (Hacker's Delight's ``divlu``: halve, divide, correct by one);
* BitShift RIGHT: a logical shift; Abs is the identity, Sign is ``x != 0``;
* Cast from uint64 to a float type: the high and low 32 bits through float64 (one rounding); Cast from a float
  to uint64: values from 2**63 through ``v - 2**63``.

:data:`UINT64_OPS` maps an op type to ``fn(ctx, node, base, *inputs)`` (``base``: the op's own lowering);
lowering._run_nodes calls it for nodes with a uint64 input (Cast: also a uint64 ``to``).
"""
from __future__ import annotations

import numpy as np

import neetorch as nee

UINT64_OPS: dict = {}
_U64 = np.dtype(np.uint64)
_TOP = -(1 << 63)


def _on(*names):
    def deco(fn):
        for n in names:
            UINT64_OPS[n] = fn
        return fn
    return deco


def _i64(v):
    return nee.full((), v, dtype=nee.int64)


def _flip(x):
    """The unsigned order as signed order (and back): the top bit toggled."""
    return nee.bitwise_xor(x, _i64(_TOP))


def _uge(a, b):
    return _flip(a) >= _flip(b)


def _lsr1(x):
    """x >> 1, logically (the top bit cleared)."""
    return nee.bitwise_and(nee.bitwise_right_shift(x, _i64(1)), _i64((1 << 63) - 1))


def _udiv(a, b):
    # b from 2**63: the quotient is 0 or 1; else halve a (now non-negative), divide, double, correct by one
    q = nee.bitwise_left_shift(nee.div(_lsr1(a), b, rounding_mode="trunc"), _i64(1))
    q = q + _uge(a - q * b, b).to(nee.int64)
    return nee.where(b < 0, _uge(a, b).to(nee.int64), q)


def is_uint64(ctx, names) -> bool:
    prog = getattr(ctx, "program", None)
    return prog is not None and any(n and prog.declared_np(n) == _U64 for n in names)


@_on("Less", "Greater", "LessOrEqual", "GreaterOrEqual")
def _compare(ctx, node, base, a, b):
    return base(ctx, node, _flip(a), _flip(b))


@_on("Max", "Min")
def _extreme(ctx, node, base, *xs):
    return _flip(base(ctx, node, *[None if x is None else _flip(x) for x in xs]))


@_on("Clip")
def _clip(ctx, node, base, x, lo=None, hi=None):
    return _flip(base(ctx, node, _flip(x), None if lo is None else _flip(lo), None if hi is None else _flip(hi)))


@_on("ReduceMax", "ReduceMin")
def _reduce(ctx, node, base, x, *rest):
    return _flip(base(ctx, node, _flip(x), *rest))


@_on("ArgMax", "ArgMin")
def _arg(ctx, node, base, x, *rest):
    return base(ctx, node, _flip(x), *rest)


@_on("TopK")
def _topk(ctx, node, base, x, *rest):
    values, indices = base(ctx, node, _flip(x), *rest)
    return _flip(values), indices


@_on("Div")
def _div(ctx, node, base, a, b):
    return _udiv(a, b)


@_on("Mod")
def _mod(ctx, node, base, a, b):
    return a - _udiv(a, b) * b


@_on("BitShift")
def _shift(ctx, node, base, a, s):
    if node.get("direction") == "LEFT":
        return base(ctx, node, a, s)
    # a logical shift: by one (the top bit cleared), then the rest arithmetically (shift counts past 63 give 0)
    rest = nee.clamp(s - 1, min=0, max=63)
    return nee.where(s == 0, a, nee.bitwise_right_shift(_lsr1(a), rest))


@_on("Abs")
def _abs(ctx, node, base, x):
    return x


@_on("Sign")
def _sign(ctx, node, base, x):
    return (x != 0).to(nee.int64)


@_on("Cast")
def _cast(ctx, node, base, x):
    from .lowering import onnx_np
    from .ops_math import _cast_to
    to = onnx_np(node.get("to"))
    if is_uint64(ctx, node.inputs[:1]) and (to.kind == "f" or to.name == "bfloat16"):
        mask = _i64(0xFFFFFFFF)
        hi = nee.bitwise_and(nee.bitwise_right_shift(x, _i64(32)), mask).to(nee.float64)
        v = hi * 4294967296.0 + nee.bitwise_and(x, mask).to(nee.float64)
        return _cast_to(v, to, node.get("saturate", 1))
    if to == _U64 and x.dtype.is_floating_point:
        big = x >= 2.0 ** 63
        zero = nee.zeros((), dtype=x.dtype)
        low = nee.where(big, zero, x).to(nee.int64)
        high = nee.bitwise_xor(nee.where(big, x - 2.0 ** 63, zero).to(nee.int64), _i64(_TOP))
        return nee.where(big, high, low)
    return base(ctx, node, x)


def applies(ctx, node) -> bool:
    """Whether ``node`` needs its uint64 lowering: an op of :data:`UINT64_OPS` with an input declared uint64
    (Cast: also a cast to uint64)."""
    if node.key not in UINT64_OPS:
        return False
    if node.key == "Cast" and node.get("to") == 13:      # TensorProto.UINT64
        return True
    return is_uint64(ctx, node.inputs)
