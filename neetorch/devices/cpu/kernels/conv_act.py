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
* ``("leaky", c)``: ``v if v > 0 else v * c`` (leaky_relu's expression; NaN stays NaN);
* ``("ew", template)``: a unary elementwise op's expression (ops/elementwise.py's template for the value's dtype,
  e.g. ``"f_sigmoid32({0})"``: sigmoid, tanh, silu, gelu, erf ... , :data:`EW_OPS`), as the fused group's kernel
  writes it.  An activation with such a step is :func:`heavy`: kernels written as vector IR apply all of it after
  each unit of output they write, while it is in cache (:func:`unit_ir`: llvm_render's elementwise kernel of
  :func:`expr`'s lines, added to the kernel's IR by :func:`link`), not in their stores.

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
import re
import struct

import numpy as np

KINDS = ("relu", "max", "min", "add", "sub", "mul", "div", "mulx", "leaky", "ew")
# unary elementwise ops taken as an ``ew`` step (conv_epilogue reads them; each is one op of ops/elementwise.py
# whose template the LLVM renderer covers)
EW_OPS = ("sigmoid", "tanh", "silu", "gelu", "gelu_tanh", "mish", "erf", "exp", "softsign", "selu")
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
        out.append((kind, c if c is None or kind == "ew" else float(c)))
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


def key(act) -> str:
    """The activation's part of a kernel's disk-cache key: its steps, and with an ``ew`` step the sources of the
    code it is rendered from (llvm_render, scalar, fastmath)."""
    a = norm(act)
    if any(kind == "ew" for kind, _ in steps(a)):
        from .. import llvm_render
        return f"{a!r}|{llvm_render._SOURCES}"
    return repr(a)


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
        if kind == "ew":
            raise ValueError("conv activation: an 'ew' step is applied per unit (unit_ir), not in the stores")
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
        if kind == "ew":
            e = c.format(cur)
        elif kind == "relu":
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


# ---- activations with an ``ew`` step in kernels written as vector IR: a pass over each unit of output, in cache
_ROWS: dict = {}       # function name -> (steps, tname)
_TNAMES = {"float": "float32", "double": "float64"}


def heavy(act) -> bool:
    """Whether ``act`` has an ``ew`` step: a long per-element computation (exp, erf, a division...).  In a
    conv kernel's stores its dependency chains stall the conv's loops (measured: EfficientNet-B0's depthwise
    convs with SiLU in their stores took 1.5-2x the conv and the separate pass together), so vector-IR kernels
    apply such an activation with :func:`unit_ir` after each unit of output instead of :func:`apply_ir`."""
    return any(kind == "ew" for kind, _ in steps(act))


def in_stores(act):
    """The activation a vector-IR kernel applies in its stores: ``act``, or False where it is :func:`heavy`."""
    return False if heavy(act) else act


def unit_ir(a, act, tname: str, base: str, start: str, end: str, go: str) -> None:
    """Emit (through ``a``) the call applying the whole of ``act`` in place to the ``tname`` values [start, end)
    of ``base`` where the i1 ``go`` is true (IR values): the elementwise kernel of :func:`expr`'s lines, rendered
    by llvm_render as a fused group's kernel is (unit stride, interleaved where the body is costly), so the
    same bits as the epilogue's own kernel.  Its definition is added to the kernel's IR by :func:`link`."""
    if not heavy(act):
        return
    st = steps(act)
    name = "nee_ewrow_" + hashlib.sha1(f"{st!r}|{tname}".encode()).hexdigest()[:12]
    _ROWS[name] = (st, tname)
    a(f'  call void @"{name}"({tname}* {base}, i64 {start}, i64 {end}, i1 {go})')


_REF = re.compile(r'@"(nee_ewrow_[0-9a-f]{12})"\(')
_DECL = re.compile(r'^(?:declare|define)\b[^@]*@"?([\w.$]+)"?\(', re.M)
_MD = re.compile(r"!(\d+)\b")


def _render_row(name: str, act, tname: str) -> str:
    """``define internal void @name(tname* %b, i64 %s, i64 %e, i1 %go)``: llvm_render's elementwise kernel of the
    steps (one operand in place, unit stride) renamed internal, and the wrapper launching it on [s, e) of b."""
    from .. import llvm_render
    dt = _TNAMES[tname]
    body = ["a0 = v0"] + expr(act, "a0", f"np.{dt}", dt[-2:])
    text = llvm_render.render_ir(name, [dt], [dt], body, [body[-1].split(" = ")[0]], variant=())
    text = text.replace('define void @"kernel"(', f'define internal void @"{name}.k"(')
    text = re.sub(r'^@"kernel\.', f'@"{name}.', text, flags=re.M).replace('@"kernel.', f'@"{name}.')
    text = re.sub(rf'^(@"{name}\.c\d+" = )global ', r"\1internal constant ", text, flags=re.M)
    # meta: dims (1, 1, 1, n), then per operand (out, in) four strides and an offset
    m = ["1", "1", "1", "%n"] + ["0", "0", "0", "1", "0"] * 2
    w = [f'define internal void @"{name}"({tname}* %b, i64 %s, i64 %e, i1 %go) alwaysinline {{', "entry:",
         f"  %m = alloca [{len(m)} x i64]", "  br i1 %go, label %do, label %skip", "do:", "  %n = sub i64 %e, %s",
         f"  %p = getelementptr {tname}, {tname}* %b, i64 %s"]
    for i, v in enumerate(m):
        w.append(f"  %m{i} = getelementptr [{len(m)} x i64], [{len(m)} x i64]* %m, i64 0, i64 {i}")
        w.append(f"  store i64 {v}, i64* %m{i}")
    w += [f'  call void @"{name}.k"({tname}* %p, {tname}* %p, i64* %m0)', "  br label %skip", "skip:", "  ret void",
          "}"]
    return text + "\n" + "\n".join(w) + "\n"


def link(text: str) -> str:
    """``text`` (a kernel's IR) with the definitions of the activation passes it calls (:func:`unit_ir`)
    appended: their declarations of intrinsics not already in ``text``, their metadata renumbered past its own."""
    need = sorted(set(_REF.findall(text)))
    if not need:
        return text
    have = set(_DECL.findall(text))
    nmd = max((int(m) for m in _MD.findall(text)), default=-1) + 1
    parts = [text]
    for name in need:
        lines = []
        for ln in _render_row(name, *_ROWS[name]).splitlines():
            if ln.startswith(("; ModuleID", "target triple", "target datalayout")):
                continue
            m = _DECL.match(ln)
            if m is not None and ln.startswith("declare"):
                if m.group(1) in have:
                    continue
                have.add(m.group(1))
            lines.append(ln)
        body = "\n".join(lines)
        ids = [int(m) for m in _MD.findall(body)]
        parts.append(_MD.sub(lambda m, b=nmd: f"!{int(m.group(1)) + b}", body))
        nmd += max(ids, default=-1) + 1
    return "\n".join(parts) + "\n"
