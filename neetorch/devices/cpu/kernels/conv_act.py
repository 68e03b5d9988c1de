"""Activations a conv kernel applies in its stores: a short list of steps on each output value.

A JIT epilogue after a conv2d (kernels/conv_epilogue.py) is a bias / residual add, then an activation.  ReLU
was the only activation the conv kernels took (a flag, ``relu``); the others (clip / relu6 / hardtanh,
hardswish, hardsigmoid, and ONNX's forms of them: ``Max`` / ``Min`` by constants, ``x * clip(x / 6 + 0.5, 0, 1)``)
ran as a second pass over the conv's output: 25-35% of a depthwise conv's time on MobileNet's large planes.

An activation here is a tuple of steps ``(kind, constant)``, applied in order to ``v`` (the value after the bias
and residual; ``x`` is that value before the first step):

* ``("relu", None)``: ``0 if v < 0 else v`` (torch's: NaN and -0.0 kept);
* ``("max", c)`` / ``("min", c)``: ``scalar.f_maximum(v, c)`` / ``f_minimum(v, c)`` (NaN from either, ``v`` when
  equal: clamp's and torch's maximum's semantics);
* ``("add", c)``, ``("sub", c)``, ``("mul", c)``, ``("div", c)``: ``v + c``, ``v - c``, ``v * c``, ``v / c``;
* ``("mulx", None)``: ``x * v``;
* ``("leaky", c)``: ``v if v > 0 else v * c`` (leaky_relu's expression; NaN stays NaN).

Every step is one IEEE operation in the value's dtype, in the order of the graph's nodes, with the ``contract``
flag llvm_render's elementwise kernels put on theirs (a multiply then an add may become one fma, as there: the
conv's own sums carry no flag, so they are not fused with a step), so the stores give the bits the epilogue's
own kernel gives.  ``act`` arguments in the kernels are False (none),
True (relu, the old flag) or such a tuple; :func:`norm` makes one form of them (``(("relu", None),)`` is True:
the same kernel, key and IR as before).
"""
from __future__ import annotations

import hashlib
import math
import struct

import numpy as np

KINDS = ("relu", "max", "min", "add", "sub", "mul", "div", "mulx", "leaky")
_RELU = (("relu", None),)


def norm(act):
    """One form of an activation argument: False (none), True (relu alone: the kernels' old flag, so their cache
    keys and IR for it stay what they were), or the steps' tuple with float constants."""
    if act is None or isinstance(act, (bool, int, np.bool_)):
        return bool(act)
    out = []
    for kind, c in act:
        if kind not in KINDS:
            raise ValueError(f"conv activation: unknown step {kind!r}")
        out.append((kind, None if c is None else float(c)))
    out = tuple(out)
    return True if out == _RELU else (out or False)


def steps(act) -> tuple:
    """The activation's steps (relu's included); () for none."""
    a = norm(act)
    return _RELU if a is True else (a or ())


def is_relu(act) -> bool:
    return norm(act) is True


def tag(act) -> str:
    """A short name part for a kernel: '' (none), 'r' (relu), 'a' + a hash of the steps."""
    a = norm(act)
    if a is False or a is True:
        return "r" if a else ""
    return "a" + hashlib.sha1(repr(a).encode()).hexdigest()[:10]


def _const(c: float, tname: str) -> str:
    """LLVM's literal for ``c`` rounded to ``tname`` (float constants are written as the double of their value)."""
    if tname == "float":
        c = float(np.float32(c))
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", c))[0]


def apply_ir(a, act, V: int, tname: str, val: str, pfx: str) -> str:
    """Emit (through ``a``) the steps of ``act`` on ``val`` (a ``<V x tname>`` value); the result's name.
    Names made start with ``%{pfx}``."""
    act = steps(act)
    if not act:
        return val
    v = f"<{V} x {tname}>"
    m = f"<{V} x i1>"
    x = cur = val
    for i, (kind, c) in enumerate(act):
        nm = f"%{pfx}act{i}"
        if c is not None:
            k = _const(c, tname)
            cv = f"<{', '.join([f'{tname} {k}'] * V)}>"
        if kind == "relu":
            a(f'  {nm}.lt = fcmp olt {v} {cur}, zeroinitializer')
            a(f'  {nm} = select {m} {nm}.lt, {v} zeroinitializer, {v} {cur}')
        elif kind in ("max", "min"):
            if math.isnan(c):           # f_maximum / f_minimum with a NaN bound: NaN
                a(f'  {nm} = fadd {v} {cur}, {cv}')
            else:                       # v unordered-or-(>= / <=) c keeps v (NaN v, or v on its side), else c
                a(f'  {nm}.k = fcmp {"uge" if kind == "max" else "ule"} {v} {cur}, {cv}')
                a(f'  {nm} = select {m} {nm}.k, {v} {cur}, {v} {cv}')
        elif kind == "mulx":
            a(f'  {nm} = fmul contract {v} {x}, {cur}')
        elif kind == "leaky":
            a(f'  {nm}.gt = fcmp ogt {v} {cur}, zeroinitializer')
            a(f'  {nm}.m = fmul contract {v} {cur}, {cv}')
            a(f'  {nm} = select {m} {nm}.gt, {v} {cur}, {v} {nm}.m')
        else:
            a(f'  {nm} = f{kind} contract {v} {cur}, {cv}')
        cur = nm
    return cur


def expr(act, t: str, ctor: str, sfx: str) -> list[str]:
    """The steps as llvm_render body lines over the scalar named ``t`` (an elementwise kernel's body, as
    conv.py's epilogue kernel writes it); each line ``name = ...``; the last line's name is the result."""
    lines, x, cur = [], t, t
    for i, (kind, c) in enumerate(steps(act)):
        nm = f"{t}_a{i}"
        cc = f"{ctor}({c!r})" if c is not None else None
        if kind == "relu":
            e = f"f_relu{sfx}({cur})"
        elif kind == "max":
            e = f"f_maximum({cur}, {cc})"
        elif kind == "min":
            e = f"f_minimum({cur}, {cc})"
        elif kind == "mulx":
            e = f"{x} * {cur}"
        elif kind == "leaky":
            e = f"{cur} if {cur} > 0 else {cur} * {cc}"
        else:
            e = f"{cur} {dict(add='+', sub='-', mul='*', div='/')[kind]} {cc}"
        lines.append(f"{nm} = {ctor}({e})")
        cur = nm
    return lines
