"""Elementwise kernels as LLVM IR, compiled with llvmlite directly (no Numba pipeline).

The Numba renderer (``elementwise.render_group``) turns an elementwise kernel into Python
source that Numba type-infers, lowers and optimizes: ~0.4-1.5 s per kernel on a cold
cache.  This renderer takes the *same pieces* (input/output dtypes, body statements,
result names; the statements are the Python expressions of ``OpDef.expr["py"]``) and
emits LLVM IR directly: ~30 ms per kernel on an idle core (parse + O2 + object code).

* Expressions are translated from their Python AST with Numba's typing rules (ints widen
  to int64, int literals are int64 and float literals float64, mixed int/float promote
  like numpy scalars), so results are the ones the Numba kernel gives.  Helper calls
  (``f_gelu32``, ``f_erf32``...) are inlined by translating the helper's own Python
  source from ``scalar.py`` / ``fastmath.py`` (straight-line code, selects, the bit-cast /
  fmuladd intrinsics), so the IR carries the same vectorizable fast math.
* libm functions are called as Numba calls them (``tanf``/``tan``, ``lgammaf``, ``atan2f``...; ``np.log2``
  and float ``**`` through the ``llvm.log2`` / ``llvm.pow`` intrinsics; float -> int casts with
  ``fptosi``/``fptoui``).  Anything outside that subset (``if`` statements, ``//``, ``%``, integer
  ``**``, other libm calls) raises :class:`NotImplementedError`; the caller then uses the Numba
  renderer.  Nothing is approximated differently.
* The loop nest is the Numba kernel's: 4 collapsed dims from the int64 meta array, the
  innermost loop either unit-stride (some inputs possibly broadcast; LLVM vectorizes it)
  or general strided.  Each layout is its own small function, compiled on the first launch
  that needs it (:class:`LLVMKernel`).  Kernels are called through ``llvm_call`` (a builtin
  trampoline that releases the GIL), so ``threads.run_parallel`` splits large launches as
  before.
* Object code is cached on disk under ``$NEE_CACHE_DIR/llvm-<llvmlite>-<cpu>-<features hash>-v<N>/``,
  named by a hash of the kernel's pieces, its layout and the source of this renderer and of
  the helpers (so a warm process renders nothing); each file carries a hash of its bytes, so
  a truncated or corrupt entry is recompiled, never loaded.  The ``.ll`` text sits beside it.
"""
from __future__ import annotations

import ast
import hashlib
import inspect
import math
import os
import sys
import textwrap
import threading
import time

import numpy as np

from ... import _env

__all__ = ["LLVMKernel", "compile_ir", "load", "render_ir", "stats"]

VERSION = "2"   # bump when the IR conventions change: old cache files are then never read

stats = {"compiled": 0, "disk_hits": 0, "compile_seconds": 0.0, "unsupported": 0}

_lock = threading.RLock()
_ir = None
_llvm = None
_state: dict = {}


def _init():
    global _ir, _llvm
    if _llvm is None:
        import llvmlite.binding as llvm
        from llvmlite import ir
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        _load_libm(llvm)
        _ir = ir
        _llvm = llvm
    return _ir, _llvm


def _load_libm(llvm):
    """Make libm's symbols resolvable by the JIT (kernels call tanf, lgamma, atan2... as Numba's do)."""
    import ctypes.util
    for name in (ctypes.util.find_library("m"), "libm.so.6"):
        if name:
            try:
                llvm.load_library_permanently(name)
                return
            except RuntimeError:
                continue


# ------------------------------------------------------------------------------------ types
class _T:
    """A scalar type of the kernel language: numpy dtype name + LLVM type."""
    __slots__ = ("bits", "kind", "lt", "name")

    def __init__(self, name, kind, bits, lt):
        self.name, self.kind, self.bits, self.lt = name, kind, bits, lt

    def __repr__(self):
        return self.name


_TYPES: dict = {}


def _types():
    if not _TYPES:
        ir, _ = _init()
        for name, kind, bits, lt in (("bool", "b", 1, ir.IntType(1)), ("uint8", "u", 8, ir.IntType(8)),
                                     ("int8", "i", 8, ir.IntType(8)), ("int16", "i", 16, ir.IntType(16)),
                                     ("int32", "i", 32, ir.IntType(32)), ("int64", "i", 64, ir.IntType(64)),
                                     ("uint64", "u", 64, ir.IntType(64)),
                                     ("float32", "f", 32, ir.FloatType()), ("float64", "f", 64, ir.DoubleType())):
            _TYPES[name] = _T(name, kind, bits, lt)
    return _TYPES


def _storage(t: _T):
    ir, _ = _init()
    return ir.IntType(8) if t.kind == "b" else t.lt


class _Unsupported(NotImplementedError):
    pass


def _unify(a: _T, b: _T) -> _T:
    """Numba's result type for a binary arithmetic/comparison on scalars a, b."""
    T = _types()
    if a is b and a.kind == "f":
        return a
    if a.kind == "f" or b.kind == "f":
        if a.kind == "b":
            return b
        if b.kind == "b":
            return a
        return T[np.promote_types(a.name, b.name).name]
    # integers and bools: Numba computes in machine ints
    if a.kind == "u" and b.kind == "u":
        return T["uint64"]
    if (a.kind == "u" and a.bits == 64) or (b.kind == "u" and b.bits == 64):
        return T["float64"]
    return T["int64"]


# ------------------------------------------------------------------------------------ values
class _V:
    __slots__ = ("lit", "t", "v")

    def __init__(self, v, t, lit=None):
        self.v, self.t, self.lit = v, t, lit


def _scalar_const(x):
    """(LLVM constant, type) for a Python / numpy scalar constant as Numba types it."""
    ir, _ = _init()
    T = _types()
    if isinstance(x, (bool, np.bool_)):
        return _V(ir.Constant(T["bool"].lt, int(bool(x))), T["bool"])
    if isinstance(x, np.generic):
        t = T.get(np.dtype(type(x)).name)
        if t is None:
            raise _Unsupported(f"constant of type {type(x).__name__}")
        return _V(ir.Constant(t.lt, float(x) if t.kind == "f" else int(x)), t, x)
    if isinstance(x, int):
        if not -(1 << 63) <= x < (1 << 63):
            raise _Unsupported("int constant out of int64 range")
        return _V(ir.Constant(T["int64"].lt, x), T["int64"], x)
    if isinstance(x, float):
        return _V(ir.Constant(T["float64"].lt, x), T["float64"], x)
    raise _Unsupported(f"constant {x!r}")


class _Emitter:
    """Translates Python expressions / straight-line helper functions into IR at a builder."""

    def __init__(self, builder):
        self.b = builder
        self.fm = ("contract",)

    # ---- conversions
    def cast(self, x: _V, t: _T) -> _V:
        ir, _ = _init()
        b = self.b
        s = x.t
        if s is t:
            return x
        v = x.v
        if t.kind == "b":
            if s.kind == "f":
                return _V(b.fcmp_unordered("!=", v, ir.Constant(s.lt, 0.0)), t)
            return _V(b.icmp_unsigned("!=", v, ir.Constant(s.lt, 0)), t)
        if t.kind == "f":
            if s.kind == "f":
                return _V(b.fpext(v, t.lt) if t.bits > s.bits else b.fptrunc(v, t.lt), t)
            if s.kind in "bu":
                return _V(b.uitofp(v, t.lt), t)
            return _V(b.sitofp(v, t.lt), t)
        # integer target
        if s.kind == "f":
            # through int64 (fptosi; fptoui for uint64), then truncated: values outside the target's range
            # wrap as numpy's and the Numba kernel's scalar casts do on x86 (-3.4 -> uint8 253), rather
            # than LLVM's poison for a direct narrow conversion (vectorized to 0 / saturated)
            i64 = _types()["int64"]
            if t.bits == 64:
                return _V(b.fptoui(v, t.lt) if t.kind == "u" else b.fptosi(v, t.lt), t)
            return _V(b.trunc(b.fptosi(v, i64.lt), t.lt), t)
        if t.bits == s.bits:
            return _V(v, t)
        if t.bits < s.bits:
            return _V(b.trunc(v, t.lt), t)
        return _V(b.zext(v, t.lt) if s.kind in "bu" else b.sext(v, t.lt), t)

    def truth(self, x: _V) -> _V:
        return self.cast(x, _types()["bool"])

    # ---- expressions
    def expr(self, node, env):
        m = getattr(self, "e_" + type(node).__name__, None)
        if m is None:
            raise _Unsupported(f"{type(node).__name__} expression")
        return m(node, env)

    def e_Constant(self, node, env):
        if isinstance(node.value, (bool, int, float)):
            return _scalar_const(node.value)
        raise _Unsupported(f"constant {node.value!r}")

    def e_Name(self, node, env):
        if node.id in env.locals:
            return env.locals[node.id]
        obj = env.resolve(node.id)
        if isinstance(obj, (int, float, bool, np.generic)):
            return _scalar_const(obj)
        raise _Unsupported(f"name {node.id}")

    def e_Attribute(self, node, env):
        obj = env.resolve_attr(node)
        if isinstance(obj, (int, float, bool, np.generic)):
            return _scalar_const(obj)
        raise _Unsupported(f"attribute {ast.unparse(node)}")

    def e_Tuple(self, node, env):
        return tuple(self.expr(e, env) for e in node.elts)

    def e_UnaryOp(self, node, env):
        ir, _ = _init()
        x = self.expr(node.operand, env)
        T = _types()
        if isinstance(node.op, ast.Not):
            t = self.truth(x)
            return _V(self.b.xor(t.v, ir.Constant(t.t.lt, 1)), t.t)
        if isinstance(node.op, ast.USub):
            if x.t.kind == "f":
                return _V(self.b.fneg(x.v, flags=self.fm), x.t)
            x = self.cast(x, _unify(x.t, T["int64"]) if x.t.kind != "u" else T["uint64"])
            return _V(self.b.neg(x.v), x.t, -x.lit if isinstance(x.lit, int) else None)
        if isinstance(node.op, ast.UAdd):
            return x
        if isinstance(node.op, ast.Invert):
            if x.t.kind in "f":
                raise _Unsupported("~ on a float")
            if x.t.kind == "b":   # Numba: ~True == -2 (int)
                x = self.cast(x, T["int64"])
            else:
                x = self.cast(x, _unify(x.t, x.t))
            return _V(self.b.not_(x.v), x.t)
        raise _Unsupported(type(node.op).__name__)

    def e_BinOp(self, node, env):
        a = self.expr(node.left, env)
        c = self.expr(node.right, env)
        return self.binop(node.op, a, c)

    def binop(self, op, a: _V, c: _V) -> _V:
        b = self.b
        T = _types()
        if isinstance(op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
            if a.t.kind == "f" or c.t.kind == "f":
                raise _Unsupported("bitwise op on a float")
            t = T["bool"] if a.t.kind == "b" and c.t.kind == "b" else _unify(a.t, c.t)
            if t.kind == "f":
                raise _Unsupported("bitwise op on int64 and uint64")
            a, c = self.cast(a, t), self.cast(c, t)
            f = {ast.BitAnd: b.and_, ast.BitOr: b.or_, ast.BitXor: b.xor}[type(op)]
            return _V(f(a.v, c.v), t)
        if isinstance(op, (ast.LShift, ast.RShift)):
            if a.t.kind not in "iu" or c.t.kind not in "iu":
                raise _Unsupported("shift of a float or bool")
            t = _unify(a.t, c.t)
            if t.kind == "f":
                raise _Unsupported("shift of int64 by uint64")
            a, c = self.cast(a, t), self.cast(c, t)
            if isinstance(op, ast.LShift):
                return _V(b.shl(a.v, c.v), t)
            return _V(b.ashr(a.v, c.v) if t.kind == "i" else b.lshr(a.v, c.v), t)
        if isinstance(op, ast.Div):
            t = _unify(a.t, c.t)
            if t.kind != "f":
                t = T["float64"]
            a, c = self.cast(a, t), self.cast(c, t)
            return _V(b.fdiv(a.v, c.v, flags=self.fm), t)
        if isinstance(op, ast.Pow):
            # float ** float of one type: Numba's real_power_impl calls llvm.pow; integer or mixed
            # exponents take Numba's other power implementations (not translated)
            if not (a.t is c.t and a.t.kind == "f"):
                raise _Unsupported("** of integers or mixed types")
            return self.intrinsic("pow", a.t, a, c)
        if not isinstance(op, (ast.Add, ast.Sub, ast.Mult)):
            raise _Unsupported(type(op).__name__)
        t = _unify(a.t, c.t)
        a, c = self.cast(a, t), self.cast(c, t)
        if t.kind == "f":
            f = {ast.Add: b.fadd, ast.Sub: b.fsub, ast.Mult: b.fmul}[type(op)]
            return _V(f(a.v, c.v, flags=self.fm), t)
        f = {ast.Add: b.add, ast.Sub: b.sub, ast.Mult: b.mul}[type(op)]
        return _V(f(a.v, c.v), t)

    def e_Compare(self, node, env):
        left = self.expr(node.left, env)
        res = None
        for op, right in zip(node.ops, node.comparators):
            r = self.expr(right, env)
            v = self.compare(op, left, r)
            res = v if res is None else _V(self.b.and_(res.v, v.v), v.t)
            left = r
        return res

    def compare(self, op, a: _V, c: _V) -> _V:
        T = _types()
        sym = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}.get(type(op))
        if sym is None:
            raise _Unsupported(type(op).__name__)
        if a.t.kind == "b" and c.t.kind == "b":
            t = T["bool"]
        else:
            t = _unify(a.t, c.t)
        a, c = self.cast(a, t), self.cast(c, t)
        b = self.b
        if t.kind == "f":
            v = b.fcmp_unordered(sym, a.v, c.v) if sym == "!=" else b.fcmp_ordered(sym, a.v, c.v)
        elif t.kind in "bu":
            v = b.icmp_unsigned(sym, a.v, c.v)
        else:
            v = b.icmp_signed(sym, a.v, c.v)
        return _V(v, T["bool"])

    def e_BoolOp(self, node, env):
        vals = [self.expr(v, env) for v in node.values]
        if any(isinstance(v, tuple) or v.t.kind != "b" for v in vals):
            # Python's ``a and b`` returns an operand: only on bools is that a plain and/or
            raise _Unsupported("and/or on non-bools")
        r = vals[0]
        op = self.b.and_ if isinstance(node.op, ast.And) else self.b.or_
        for v in vals[1:]:
            r = _V(op(r.v, v.v), v.t)
        return r

    def e_IfExp(self, node, env):
        cnd = self.truth(self.expr(node.test, env))
        x = self.expr(node.body, env)
        y = self.expr(node.orelse, env)
        if isinstance(x, tuple) or isinstance(y, tuple):
            raise _Unsupported("tuple in a conditional expression")
        if x.t is not y.t:
            if x.t.kind == "b" and y.t.kind == "b":
                t = x.t
            else:
                t = _unify(x.t, y.t)
            x, y = self.cast(x, t), self.cast(y, t)
        return _V(self.b.select(cnd.v, x.v, y.v), x.t)

    def e_Call(self, node, env):
        if node.keywords:
            raise _Unsupported("keyword arguments")
        fn = env.resolve_callee(node.func)
        args = [self.expr(a, env) for a in node.args]
        return self.call(fn, args, env)

    # ---- calls
    def intrinsic(self, name, t: _T, *args):
        ir, _ = _init()
        fnty = ir.FunctionType(t.lt, [t.lt] * len(args))
        mod = self.b.module
        full = f"llvm.{name}.f{t.bits}"
        fn = mod.globals.get(full) or ir.Function(mod, fnty, full)
        return _V(self.b.call(fn, [a.v for a in args]), t)

    def call(self, fn, args, env):
        T = _types()
        b = self.b
        ir, _ = _init()
        h = _CALLS.get(_key(fn))
        if h is not None:
            return h(self, args)
        if fn is abs:
            (x,) = args
            if x.t.kind == "f":
                return self.intrinsic("fabs", x.t, x)
            if x.t.kind in "bu":
                return self.cast(x, _unify(x.t, x.t))
            x = self.cast(x, _unify(x.t, x.t))
            neg = b.icmp_signed("<", x.v, ir.Constant(x.t.lt, 0))
            return _V(b.select(neg, b.neg(x.v), x.v), x.t)
        if fn is min or fn is max:
            if len(args) != 2:
                raise _Unsupported("min/max of more than two values")
            acc, v = args
            t = _unify(acc.t, v.t) if not (acc.t.kind == v.t.kind == "b") else acc.t
            acc, v = self.cast(acc, t), self.cast(v, t)
            pred = self.compare(ast.Gt() if fn is max else ast.Lt(), v, acc)   # Numba's do_minmax
            return _V(b.select(pred.v, v.v, acc.v), t)
        if isinstance(fn, type) and issubclass(fn, np.generic):
            t = T.get(np.dtype(fn).name)
            if t is None or len(args) != 1:
                raise _Unsupported(f"cast to {fn.__name__}")
            return self.cast(args[0], t)
        py = getattr(fn, "py_func", None)
        if py is not None:      # a Numba-jitted helper: inline its Python source
            return _inline(self, py, args)
        raise _Unsupported(f"call of {getattr(fn, '__name__', fn)!r}")


def _key(fn):
    try:
        hash(fn)
        return fn
    except TypeError:
        return id(fn)


def _float_unary(name):
    def h(em, args):
        (x,) = args
        if x.t.kind != "f":
            raise _Unsupported(f"{name} of an integer")
        return em.intrinsic(name, x.t, x)
    return h


def _bits(fn_name, to, from_bits=None):
    """Bit casts of fastmath.py (f32_as_i32 ...)."""
    def h(em, args):
        T = _types()
        (x,) = args
        if from_bits is None:     # float -> same-width int
            if x.t.kind != "f":
                raise _Unsupported(fn_name)
            return _V(em.b.bitcast(x.v, T[to].lt), T[to])
        x = em.cast(x, T[from_bits]) if x.t.kind != "f" else None
        if x is None:
            raise _Unsupported(fn_name)
        return _V(em.b.bitcast(x.v, T[to].lt), T[to])
    return h


def _i2f(to):
    def h(em, args):
        T = _types()
        (x,) = args
        if x.t.kind == "f":
            raise _Unsupported("_i2f of a float")
        x = em.cast(x, T["int32"])
        return _V(em.b.sitofp(x.v, T[to].lt), T[to])
    return h


def _i32op(op):
    def h(em, args):
        T = _types()
        a, c = (em.cast(x, T["int32"]) if x.t.kind != "f" else None for x in args)
        if a is None or c is None:
            raise _Unsupported("int32 op on a float")
        return _V(getattr(em.b, op)(a.v, c.v), T["int32"])
    return h


def _fmuladd(em, args):
    a, b, c = args
    if not (a.t is b.t is c.t and a.t.kind == "f"):
        raise _Unsupported("fmuladd of mixed types")
    return em.intrinsic("fmuladd", a.t, a, b, c)


def _fdiv(em, args):
    a, c = args
    if not (a.t is c.t and a.t.kind == "f"):
        raise _Unsupported("fdiv of mixed types")
    return _V(em.b.fdiv(a.v, c.v, flags=em.fm), a.t)


def _copysign(em, args):
    a, c = args
    T = _types()
    t = _unify(a.t, c.t)
    if t.kind != "f":
        t = T["float64"]
    return em.intrinsic("copysign", t, em.cast(a, t), em.cast(c, t))


def _sqrt(em, args):
    (x,) = args
    if x.t.kind != "f":
        x = em.cast(x, _types()["float64"])
    return em.intrinsic("sqrt", x.t, x)


def _libm(name32, name64, nargs=1):
    """A call of libm's ``name32`` / ``name64`` on float32 / float64 arguments of one type: what Numba's
    ``unary_math_extern`` (math.tan, math.lgamma, np.tan...) and the float atan2 lower to."""
    def h(em, args):
        ir, _ = _init()
        if len(args) != nargs or any(a.t is not args[0].t for a in args) or args[0].t.kind != "f":
            raise _Unsupported(f"{name64} of integers or mixed types")
        t = args[0].t
        name = name32 if t.bits == 32 else name64
        mod = em.b.module
        fn = mod.globals.get(name) or ir.Function(mod, ir.FunctionType(t.lt, [t.lt] * nargs), name)
        return _V(em.b.call(fn, [a.v for a in args]), t)
    return h


_CALLS: dict = {}


def _register_calls():
    if _CALLS:
        return
    from . import fastmath as fm
    _CALLS.update({
        _key(fm.fmuladd): _fmuladd, _key(fm.fdiv): _fdiv,
        _key(fm.f32_as_i32): _bits("f32_as_i32", "int32"), _key(fm.f64_as_i64): _bits("f64_as_i64", "int64"),
        _key(fm.i32_as_f32): _bits("i32_as_f32", "float32", "int32"),
        _key(fm.i64_as_f64): _bits("i64_as_f64", "float64", "int64"),
        _key(fm._i2f32): _i2f("float32"), _key(fm._i2f64): _i2f("float64"),
        _key(fm._add32): _i32op("add"), _key(fm._sub32): _i32op("sub"), _key(fm._and32): _i32op("and_"),
        _key(fm._shl32): _i32op("shl"), _key(fm._sar32): _i32op("ashr"),
        _key(math.copysign): _copysign, _key(np.copysign): _copysign,
        _key(np.sqrt): _sqrt, _key(math.sqrt): _sqrt,
        _key(np.floor): _float_unary("floor"), _key(np.ceil): _float_unary("ceil"),
        _key(np.trunc): _float_unary("trunc"), _key(np.rint): _float_unary("rint"),
        _key(np.log2): _float_unary("log2"),          # Numba's np_real_log2_impl: the llvm.log2 intrinsic
        _key(np.tan): _libm("tanf", "tan"), _key(math.tan): _libm("tanf", "tan"),
        _key(math.lgamma): _libm("lgammaf", "lgamma"),
        _key(np.arctan2): _libm("atan2f", "atan2", 2), _key(math.atan2): _libm("atan2f", "atan2", 2),
        _key(np.log10): _float_unary("log10"), _key(math.log10): _float_unary("log10"),   # llvm.log10
    })
    # the rest of Numba's unary_math_extern family: numpy's and math's spelling call the same libm symbol
    for npf, mf, base in ((np.arcsin, math.asin, "asin"), (np.arccos, math.acos, "acos"),
                          (np.arctan, math.atan, "atan"), (np.sinh, math.sinh, "sinh"), (np.cosh, math.cosh, "cosh"),
                          (np.arcsinh, math.asinh, "asinh"), (np.arccosh, math.acosh, "acosh"),
                          (np.arctanh, math.atanh, "atanh"), (np.expm1, math.expm1, "expm1"),
                          (np.log1p, math.log1p, "log1p"), (None, math.erf, "erf"), (None, math.erfc, "erfc")):
        h = _libm(base + "f", base)
        _CALLS[_key(mf)] = h
        if npf is not None:
            _CALLS[_key(npf)] = h


class _Env:
    def __init__(self, globs, locals_=None):
        self.globs = globs
        self.locals = dict(locals_ or {})

    def resolve(self, name):
        if name in self.globs:
            return self.globs[name]
        import builtins
        if hasattr(builtins, name):
            return getattr(builtins, name)
        raise _Unsupported(f"unknown name {name}")

    def resolve_attr(self, node):
        if isinstance(node, ast.Name):
            return self.resolve(node.id)
        if isinstance(node, ast.Attribute):
            base = self.resolve_attr(node.value)
            if not (inspect.ismodule(base) or isinstance(base, type)):
                raise _Unsupported(f"attribute of {type(base).__name__}")
            return getattr(base, node.attr)
        raise _Unsupported(ast.unparse(node))

    def resolve_callee(self, node):
        if isinstance(node, ast.Name) and node.id in self.locals:
            raise _Unsupported("call of a local")
        return self.resolve_attr(node)


_FUNCS: dict = {}


def _function_ast(py):
    f = _FUNCS.get(py)
    if f is None:
        try:
            src = textwrap.dedent(inspect.getsource(py))
        except (OSError, TypeError) as e:
            raise _Unsupported(f"no source for {py}") from e
        tree = ast.parse(src)
        f = tree.body[0]
        if isinstance(f, ast.Assign) and isinstance(f.value, ast.Lambda):   # _Libm lambdas etc.
            raise _Unsupported("lambda helper")
        if not isinstance(f, ast.FunctionDef):
            raise _Unsupported(f"helper {py}")
        _FUNCS[py] = f
    return f


def _inline(em: _Emitter, py, args):
    f = _function_ast(py)
    params = [a.arg for a in f.args.args]
    if len(params) != len(args) or f.args.vararg or f.args.kwonlyargs or f.args.defaults:
        raise _Unsupported(f"call of {f.name}")
    env = _Env(py.__globals__, dict(zip(params, args)))
    return _run_body(em, f.body, env, f.name)


def _run_body(em, body, env, where):
    for st in body:
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant):
            continue  # docstring
        if isinstance(st, ast.Return):
            if st.value is None:
                raise _Unsupported("return without a value")
            return em.expr(st.value, env)
        if isinstance(st, ast.Assign) and len(st.targets) == 1:
            v = em.expr(st.value, env)
            _bind(st.targets[0], v, env)
            continue
        if isinstance(st, ast.AugAssign) and isinstance(st.target, ast.Name):
            env.locals[st.target.id] = em.binop(st.op, env.locals[st.target.id], em.expr(st.value, env))
            continue
        raise _Unsupported(f"{type(st).__name__} statement in {where}")
    raise _Unsupported(f"{where} has no return")


def _bind(target, v, env):
    if isinstance(target, ast.Name):
        env.locals[target.id] = v
    elif isinstance(target, ast.Tuple) and isinstance(v, tuple) and len(v) == len(target.elts):
        for t, x in zip(target.elts, v):
            _bind(t, x, env)
    else:
        raise _Unsupported("assignment target")


# ------------------------------------------------------------------------------------ kernel IR
def render_ir(name: str, in_dt: list, out_dt: list, body: list, results: list, variant=()) -> str:
    """LLVM IR (text) of the kernel ``render_group`` writes as Numba source for the same pieces,
    for one innermost-loop layout: ``variant`` = the inputs broadcast (stride 0) in the innermost
    dim with every other operand unit-stride, or None for any strides.  Raises
    NotImplementedError for what this renderer does not cover."""
    ir, llvm = _init()
    _register_calls()
    T = _types()
    from . import scalar
    globs = dict(vars(scalar))
    body_ast = [ast.parse(s).body[0] for s in body]
    res_ast = [ast.parse(r, mode="eval").body for r in results]
    nin, nout = len(in_dt), len(out_dt)
    tin = [T[d] for d in in_dt]
    tout = [T[d] for d in out_dt]
    i64 = ir.IntType(64)
    mod = ir.Module(name="nee_kernel")
    mod.triple = llvm.get_process_triple()
    ptys = [ir.PointerType(_storage(t)) for t in tout + tin]
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), ptys + [ir.PointerType(i64)]), "kernel")
    *bufs, m = fn.args
    bd = ir.IRBuilder(fn.append_basic_block("entry"))

    def ld(i):
        return bd.load(bd.gep(m, [i64(i)]))

    n = [ld(i) for i in range(4)]
    ops = []
    for k in range(nout + nin):
        base = 4 + 5 * k
        ops.append(([ld(base + j) for j in range(4)], ld(base + 4)))

    em = _Emitter(bd)
    # loop metadata: the parallel (vectorized, no alias check) and the scalar inner loops
    group = mod.add_metadata([])
    md_par = mod.add_metadata([mod.add_metadata([ir.MetaDataString(mod, "llvm.loop.parallel_accesses"), group])])
    md_seq = mod.add_metadata([mod.add_metadata([ir.MetaDataString(mod, "llvm.loop.vectorize.enable"),
                                                 ir.Constant(ir.IntType(1), 0)])])

    def compute(vals):
        env = _Env(globs, {f"v{i}": v for i, v in enumerate(vals)})
        for st in body_ast:
            if not (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)):
                raise _Unsupported("kernel body statement")
            env.locals[st.targets[0].id] = em.expr(st.value, env)
        outs = []
        for r, t in zip(res_ast, tout):
            v = em.expr(r, env)
            if isinstance(v, tuple):
                raise _Unsupported("tuple result")
            outs.append(em.cast(v, t))
        return outs

    par = [None]     # the access group of the loop being emitted, if it is annotated parallel

    def mark(instr):
        if par[0] is not None:
            instr.set_metadata("llvm.access.group", par[0])
        return instr

    def load(k, idx):
        t = tin[k]
        p = bd.gep(bufs[nout + k], [idx])
        v = mark(bd.load(p))
        if t.kind == "b":
            v = bd.icmp_unsigned("!=", v, ir.Constant(ir.IntType(8), 0))
        return _V(v, t)

    def store(j, idx, v):
        x = v.v
        if tout[j].kind == "b":
            x = bd.zext(x, ir.IntType(8))
        mark(bd.store(x, bd.gep(bufs[j], [idx])))

    def loop(count, body_fn, md=None):
        pre = bd.block
        lp = fn.append_basic_block("loop")
        after = fn.append_basic_block("after")
        bd.cbranch(bd.icmp_signed(">", count, i64(0)), lp, after)
        bd.position_at_end(lp)
        i = bd.phi(i64)
        i.add_incoming(i64(0), pre)
        body_fn(i)
        i2 = bd.add(i, i64(1))
        i.add_incoming(i2, bd.block)
        br = bd.cbranch(bd.icmp_signed("<", i2, count), lp, after)
        if md is not None:
            br.set_metadata("llvm.loop", md)
        bd.position_at_end(after)

    def inner(i0, i1, i2):
        ptr = []
        for (st, base) in ops:
            ptr.append(bd.add(bd.add(bd.add(base, bd.mul(i0, st[0])), bd.mul(i1, st[1])), bd.mul(i2, st[2])))
        if variant is not None:
            # unit stride innermost, inputs in ``variant`` broadcast (stride 0): LLVM vectorizes this
            fixed = {k: load(k, ptr[nout + k]) for k in variant}

            def contiguous(i3):
                vals = [fixed[k] if k in fixed else load(k, bd.add(ptr[nout + k], i3)) for k in range(nin)]
                for j, v in enumerate(compute(vals)):
                    store(j, bd.add(ptr[j], i3), v)
            # In-place launches (``x += y``: an output is an input, same memory and layout) fail
            # LLVM's runtime alias check (it wants disjoint ranges) and ran the scalar loop.  Each
            # element reads its inputs then writes its outputs, so operands that are the same
            # memory element for element, or disjoint, carry no dependence between iterations:
            # checked here, the loop is then annotated parallel (vectorized without a check);
            # partial overlaps keep the sequential scalar loop.
            ranges = []
            for k in range(nout + nin):
                if k >= nout and (k - nout) in fixed:
                    continue
                t = tout[k] if k < nout else tin[k - nout]
                sz = max(1, t.bits // 8)
                lo = bd.ptrtoint(bd.gep(bufs[k], [ptr[k]]), i64)
                ranges.append((k, sz, lo, bd.add(lo, bd.mul(n[3], i64(sz)))))
            ok = ir.Constant(ir.IntType(1), 1)
            for (k1, s1, lo1, hi1) in ranges[:]:
                for (k2, s2, lo2, hi2) in ranges:
                    if k2 <= k1 or (k1 >= nout and k2 >= nout):
                        continue   # pairs with an output only: reads do not conflict
                    disj = bd.or_(bd.icmp_unsigned("<=", hi1, lo2), bd.icmp_unsigned("<=", hi2, lo1))
                    c = bd.or_(bd.icmp_unsigned("==", lo1, lo2), disj) if s1 == s2 else disj
                    ok = bd.and_(ok, c)
            with bd.if_else(ok) as (then, other):
                with then:
                    par[0] = group
                    loop(n[3], contiguous, md_par)
                    par[0] = None
                with other:
                    loop(n[3], contiguous, md_seq)
            return

        def general(i3):
            vals = [load(k, bd.add(ptr[nout + k], bd.mul(i3, ops[nout + k][0][3]))) for k in range(nin)]
            for j, v in enumerate(compute(vals)):
                store(j, bd.add(ptr[j], bd.mul(i3, ops[j][0][3])), v)
        loop(n[3], general)

    loop(n[0], lambda i0: loop(n[1], lambda i1: loop(n[2], lambda i2: inner(i0, i1, i2))))
    bd.ret_void()
    lay = "any strides" if variant is None else ("unit stride" + (f", inputs {list(variant)} broadcast" if variant else ""))
    return (f"; neetorch elementwise kernel {name}({', '.join(in_dt)}) -> ({', '.join(out_dt)}); {lay}\n" +
            _distinct(str(mod), group, md_par, md_seq))


def _distinct(text: str, group, *loop_ids) -> str:
    """Make the access group and the loop IDs distinct, self-referential nodes (llvmlite writes
    uniqued ones)."""
    g = group.get_reference()
    text = text.replace(f"{g} = !{{  }}", f"{g} = distinct !{{}}")
    for md in loop_ids:
        r = md.get_reference()
        old = f"{r} = !{{ {md.operands[0].get_reference()} }}"
        if old not in text:
            raise RuntimeError(f"llvm_render: loop metadata {old!r} not found")
        text = text.replace(old, f"{r} = distinct !{{ {r}, {md.operands[0].get_reference()} }}")
    return text


# ------------------------------------------------------------------------------------ compile / cache
def _machine():
    tm = _state.get("tm")
    if tm is None:
        # once, under the lock: threads making their first kernels at once each made an engine, and
        # the one replaced was freed with the machine code loaded into it (segfaults, std::bad_alloc)
        with _lock:
            tm = _state.get("tm")
            if tm is None:
                _, llvm = _init()
                cpu = llvm.get_host_cpu_name()
                feats = llvm.get_host_cpu_features().flatten()
                tm = llvm.Target.from_default_triple().create_target_machine(cpu=cpu, features=feats, opt=3,
                                                                             codemodel="jitdefault")
                _state["cpu_key"] = hashlib.sha1(f"{cpu}|{feats}".encode()).hexdigest()[:12]
                _state["cpu"] = cpu
                _state["engine"] = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
                _state["tm"] = tm      # last: a thread seeing it finds the engine
    return tm


def cache_dir() -> str:
    import llvmlite
    _machine()
    d = os.path.join(_env.CACHE_DIR, f"llvm-{llvmlite.__version__}-{_state['cpu']}-{_state['cpu_key']}-v{VERSION}")
    os.makedirs(d, exist_ok=True)
    return d


def _optimize_and_emit(ir_text: str, interleave: bool = False) -> bytes:
    _, llvm = _init()
    tm = _machine()
    mod = llvm.parse_assembly(ir_text)
    mod.verify()
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    # O2 without interleaving/unrolling: half the compile time of O3 and the same GB/s on
    # these memory-bound loops (measured, see docs/JIT.md)
    pto = llvm.create_pipeline_tuning_options(speed_level=2)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_interleaving = interleave    # row kernels: their reductions' add chains need it
    pto.loop_unrolling = False
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return bytes(tm.emit_object(mod))


_HDR = 40  # sha1 hex of the object bytes, written before them


def _read_cached(path: str):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    obj = data[_HDR:]
    if len(data) <= _HDR or hashlib.sha1(obj).hexdigest().encode() != data[:_HDR]:
        return None   # truncated / corrupt: rebuilt by the caller
    return obj


def _write_cached(path: str, obj: bytes, ir_text: str) -> None:
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(hashlib.sha1(obj).hexdigest().encode() + obj)
        os.replace(tmp, path)
        with open(path[:-2] + ".ll", "w", encoding="utf-8") as f:
            f.write(ir_text)
    except OSError:   # a read-only cache dir only costs the next process a compile
        pass


class LLVMKernel:
    """An elementwise kernel: ``kernel(*outputs, *inputs, meta)`` with contiguous numpy arrays
    of the right dtypes and the int64 meta array (what the Numba kernels take).

    One machine-code function per innermost-loop layout, compiled (or loaded from the disk
    cache) on the first launch that needs it: a jitted group usually meets one layout, so
    it compiles one small loop nest instead of every variant."""

    def __init__(self, prefix: str, name: str, pieces: tuple, source: str, ir_unit):
        self.prefix = prefix
        self.name = name
        self.pieces = pieces            # (in_dt, out_dt, body, results)
        self.source = source
        self.nout = len(pieces[1])
        self.nin = len(pieces[0])
        self._ir = {(): ir_unit}
        self._by_layout: dict = {}      # innermost strides (bytes) -> caller
        self._by_meta: dict = {}        # id(meta array) -> (meta array, caller)
        self._by_variant: dict = {}

    def __call__(self, *arrays):
        m = arrays[-1]
        e = self._by_meta.get(id(m))
        if e is not None and e[0] is m:
            e[1](*arrays)
            return
        self._specialize(m)(*arrays)

    def _specialize(self, m):
        lay = m[7::5].tobytes()   # the innermost stride of every operand
        f = self._by_layout.get(lay)
        if f is None:
            st = m[7::5].tolist()
            outs, ins = st[:self.nout], st[self.nout:]
            if all(s == 1 for s in outs) and all(s in (0, 1) for s in ins):
                variant = tuple(k for k, s in enumerate(ins) if s == 0)
            else:
                variant = None
            with _lock:
                f = self._by_variant.get(variant)
                if f is None:
                    def render():
                        text = self._ir.get(variant)
                        return text if text is not None else render_ir(self.name, *self.pieces, variant=variant)
                    addr = compile_ir(kernel_key(self.prefix, self.pieces, variant), render)
                    from . import llvm_call
                    f = self._by_variant[variant] = llvm_call.make(addr, self.nout + self.nin + 1)
                self._by_layout[lay] = f
        if len(self._by_meta) < 1024:
            # launches reuse their meta arrays (cached per layout by the callers): one dict hit
            self._by_meta[id(m)] = (m, f)
        return f

    def __repr__(self):
        return f"<LLVMKernel {self.name}>"


def _source_hash() -> str:
    # editing the renderer or the helpers it translates invalidates every cached kernel
    here = os.path.dirname(__file__)
    h = hashlib.sha1()
    for f in ("llvm_render.py", "scalar.py", "fastmath.py"):
        try:
            with open(os.path.join(here, f), "rb") as fh:
                h.update(fh.read())
        except OSError:
            pass
    return h.hexdigest()[:12]


_SOURCES = _source_hash()


def kernel_key(name: str, pieces: tuple, variant) -> str:
    """Cache name of one layout of a kernel: hash of everything its IR is made from (so a warm
    process finds the machine code without rendering anything)."""
    h = hashlib.sha1(repr((VERSION, _SOURCES, pieces, variant)).encode()).hexdigest()[:16]
    return f"{name}_{h}"


_addresses: dict = {}


def compile_ir(key: str, render, interleave: bool = False) -> int:
    """Address of kernel ``key``: from memory, the disk cache, or ``render()``'s IR compiled."""
    addr = _addresses.get(key)
    if addr is not None:
        return addr
    with _lock:
        addr = _addresses.get(key)
        if addr is not None:
            return addr
        _, llvm = _init()
        _machine()
        sym = "nee_" + key.rsplit("_", 1)[-1]
        path = os.path.join(cache_dir(), f"{key}.o")
        t0 = time.perf_counter()
        obj = _read_cached(path)
        hit = obj is not None
        if obj is None:
            ir_text = render()
            obj = _optimize_and_emit(ir_text.replace('@"kernel"', f'@"{sym}"'), interleave)
            _write_cached(path, obj, ir_text)
            if _env.DEBUG >= 4:
                print(f"[neetorch] generated kernel {key}:\n{ir_text}", file=sys.stderr)
        eng = _state["engine"]
        eng.add_object_file(llvm.ObjectFileRef.from_data(obj))
        eng.finalize_object()
        addr = eng.get_function_address(sym)
        if not addr:
            raise RuntimeError(f"llvm kernel {key}: symbol {sym} not found after loading")
        _addresses[key] = addr
        _note(key, hit, t0)
        return addr


def cached_ir(key: str):
    """The IR text beside cached machine code ``key`` (None if there is no valid entry)."""
    path = os.path.join(cache_dir(), f"{key}.o")
    if _read_cached(path) is None:
        return None
    try:
        with open(path[:-2] + ".ll", encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def _note(key: str, hit: bool, t0: float) -> None:
    from ... import profiler
    from . import codegen
    dt = time.perf_counter() - t0
    codegen.stats["kernels_loaded"] += 1
    if hit:
        stats["disk_hits"] += 1
        codegen.stats["disk_hits"] += 1
        profiler.record(key, "cache_hit", "cpu", t0, dt, detail="disk")
    else:
        stats["compiled"] += 1
        stats["compile_seconds"] += dt
        codegen.stats["compiled"] += 1
        codegen.stats["compile_seconds"] += dt
        profiler.record(key, "compile", "cpu", t0, dt)
    if _env.DEBUG >= 1:
        print(f"[neetorch] kernel {key} (llvm) {'loaded from disk cache' if hit else 'compiled'} in "
              f"{dt * 1e3:.1f} ms", file=sys.stderr)


def load(prefix: str, name: str, in_dt: list, out_dt: list, body: list, results: list, py_source: str):
    """(kernel, source) for these pieces, or raise NotImplementedError (use the Numba renderer).

    The unit-stride IR is rendered here (unless the disk cache holds it: then it was rendered
    before), so anything the renderer does not cover is known before a kernel is handed out;
    machine code is made per layout on its first launch."""
    pieces = (list(in_dt), list(out_dt), list(body), list(results))
    if any(d not in _KNOWN for d in pieces[0] + pieces[1]):
        stats["unsupported"] += 1
        raise _Unsupported("dtype")
    _machine()
    unit = cached_ir(kernel_key(prefix, pieces, ()))
    if unit is None:
        try:
            unit = render_ir(name, *pieces, variant=())
        except _Unsupported:
            stats["unsupported"] += 1
            raise
    src = ("# rendered as LLVM IR by devices/cpu/llvm_render.py (unit-stride loop below; other layouts get\n"
           "# their own loop on first launch); the same kernel as Numba source:\n" + py_source + "\n" + unit)
    return LLVMKernel(prefix, name, pieces, src, unit), src


_KNOWN = frozenset({"bool", "uint8", "int8", "int16", "int32", "int64", "float32", "float64"})


# ------------------------------------------------------------------------------------ row kernels
# softmax / log_softmax / layer_norm / rms_norm over unit-stride rows, optionally after a fused
# elementwise prologue (the same pieces and expression translator as the elementwise kernels).
#
#   kernel(outs..., ins..., dst, w, b, tmp, meta)
#
# outs/ins: the prologue's outputs and inputs (no prologue: no outputs, one input, the row
# source); dst: the normalized result; w, b: per-element affine weight/bias (norms; length N);
# tmp: a row scratch of N elements (the prologue's normalized value when nothing else needs
# it); meta (int64): r0, r1, B, N, eps (float64 bits), then per operand (outs, ins, dst):
# stride of a, stride of b, (unused), offset -- row r = a*B + b starts at off + a*sa + b*sb;
# every operand is unit-stride along the row, or (``bcast``) constant along it.
ROW_MODES = ("softmax", "log_softmax", "layer_norm", "rms_norm")
_RFM = ("reassoc", "nsz", "arcp", "contract")    # the Numba row kernels' fastmath set


def render_rows_ir(mode: str, dt: str, safe: bool, pro=None) -> str:
    """LLVM IR of a row kernel (see above).  ``pro``: None, or the prologue
    ``(in_dt, out_dt, body, results, bcast, src_k, src_ext)``."""
    if mode not in ROW_MODES or dt not in ("float32", "float64"):
        raise _Unsupported(f"row kernel {mode} {dt}")
    ir, llvm = _init()
    _register_calls()
    T = _types()
    from . import scalar
    globs = dict(vars(scalar))
    if pro is None:
        in_dt, out_dt, body, results, bcast, src_k, src_ext = [dt], [], [], [], [False], None, False
    else:
        in_dt, out_dt, body, results, bcast, src_k, src_ext = pro
        if out_dt[src_k] != dt:
            raise _Unsupported("prologue source dtype")
    tin = [T[d] for d in in_dt]
    tout = [T[d] for d in out_dt]
    nin, nout = len(tin), len(tout)
    td = T[dt]
    f = td.lt
    i64 = ir.IntType(64)
    f64 = ir.DoubleType()
    ity = ir.IntType(td.bits)
    mod = ir.Module(name="nee_rows")
    mod.triple = llvm.get_process_triple()
    fp = ir.PointerType(f)
    ptys = [ir.PointerType(_storage(t)) for t in tout + tin] + [fp, fp, fp, fp, ir.PointerType(i64)]
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), ptys), "kernel")
    args = list(fn.args)
    bufs = args[:nout + nin]
    dst, wp, bp, tmp, m = args[nout + nin:]
    bd = ir.IRBuilder(fn.append_basic_block("entry"))
    em = _Emitter(bd)

    def ld(i):
        return bd.load(bd.gep(m, [i64(i)]))

    r0, r1, B, N = ld(0), ld(1), ld(2), ld(3)
    eps = bd.bitcast(ld(4), f64)
    nops = nout + nin + 1
    lay = [(ld(5 + 4 * k), ld(6 + 4 * k), ld(8 + 4 * k)) for k in range(nops)]
    body_ast = [ast.parse(s).body[0] for s in body]
    res_ast = [ast.parse(r, mode="eval").body for r in results]

    def loop(count, init, step):
        """for i in range(count) with loop-carried values ``init``; returns their final values."""
        pre = bd.block
        lp = fn.append_basic_block("loop")
        after = fn.append_basic_block("after")
        bd.cbranch(bd.icmp_signed(">", count, i64(0)), lp, after)
        bd.position_at_end(lp)
        i = bd.phi(i64)
        i.add_incoming(i64(0), pre)
        phis = []
        for v in init:
            p = bd.phi(v.type)
            p.add_incoming(v, pre)
            phis.append(p)
        new = step(i, phis) or []
        i2 = bd.add(i, i64(1))
        end = bd.block
        i.add_incoming(i2, end)
        for p, v in zip(phis, new):
            p.add_incoming(v, end)
        bd.cbranch(bd.icmp_signed("<", i2, count), lp, after)
        bd.position_at_end(after)
        out = []
        for v, nv in zip(init, new):
            p = bd.phi(v.type)
            p.add_incoming(v, pre)
            p.add_incoming(nv, end)
            out.append(p)
        return out

    def fconst(x, t=None):
        return ir.Constant(t or f, x)

    def exp(x):
        return em.call(scalar.f_exp32 if dt == "float32" else scalar.f_exp64, [_V(x, td)], None).v

    def log(x):
        return em.call(scalar.f_log32 if dt == "float32" else scalar.f_log64, [_V(x, td)], None).v

    def row(j, _):
        r = bd.add(r0, j)
        a = bd.sdiv(r, B)
        b = bd.sub(r, bd.mul(a, B))
        ptr = []
        for k in range(nops):
            sa, sb, off = lay[k]
            ptr.append(bd.add(off, bd.add(bd.mul(a, sa), bd.mul(b, sb))))
        base = [bd.gep(bufs[k], [ptr[k]]) for k in range(nout + nin)]
        drow = bd.gep(dst, [ptr[-1]])
        # ---- the prologue over the row
        if pro is None:
            src = base[0]
        else:
            fixed = {}
            for k in range(nin):
                if bcast[k]:
                    v = bd.load(base[nout + k])
                    if tin[k].kind == "b":
                        v = bd.icmp_unsigned("!=", v, ir.Constant(ir.IntType(8), 0))
                    fixed[k] = _V(v, tin[k])
            rows_out = [tmp if (j2 == src_k and not src_ext) else base[j2] for j2 in range(nout)]

            def pstep(i, _):
                vals = []
                for k in range(nin):
                    if k in fixed:
                        vals.append(fixed[k])
                        continue
                    v = bd.load(bd.gep(base[nout + k], [i]))
                    if tin[k].kind == "b":
                        v = bd.icmp_unsigned("!=", v, ir.Constant(ir.IntType(8), 0))
                    vals.append(_V(v, tin[k]))
                env = _Env(globs, {f"v{q}": v for q, v in enumerate(vals)})
                for st in body_ast:
                    if not (isinstance(st, ast.Assign) and len(st.targets) == 1 and
                            isinstance(st.targets[0], ast.Name)):
                        raise _Unsupported("kernel body statement")
                    env.locals[st.targets[0].id] = em.expr(st.value, env)
                for j2, (rr, t) in enumerate(zip(res_ast, tout)):
                    v = em.expr(rr, env)
                    if isinstance(v, tuple):
                        raise _Unsupported("tuple result")
                    x = em.cast(v, t).v
                    if t.kind == "b":
                        x = bd.zext(x, ir.IntType(8))
                    bd.store(x, bd.gep(rows_out[j2], [i]))
                return []
            loop(N, [], pstep)
            src = rows_out[src_k]

        def xat(i):
            return bd.load(bd.gep(src, [i]))
        if mode in ("softmax", "log_softmax"):
            # max through order-preserving integer keys (integer max reductions vectorize; a
            # positive NaN wins, like the Numba kernel)
            srci = bd.bitcast(src, ir.PointerType(ity))
            lo = ir.Constant(ity, -(1 << (td.bits - 1)))
            mask = ir.Constant(ity, (1 << (td.bits - 1)) - 1)
            sh = ir.Constant(ity, td.bits - 1)

            def kmax(i, acc):
                v = bd.load(bd.gep(srci, [i]))
                k = bd.xor(v, bd.and_(bd.ashr(v, sh), mask))
                return [bd.select(bd.icmp_signed(">", k, acc[0]), k, acc[0])]
            (km,) = loop(N, [lo], kmax)
            mx = bd.bitcast(bd.xor(km, bd.and_(bd.ashr(km, sh), mask)), f)

            def softmax_body():
                if mode == "log_softmax":
                    def ssum(i, acc):
                        return [bd.fadd(acc[0], exp(bd.fsub(xat(i), mx, flags=_RFM)), flags=_RFM)]
                    (s,) = loop(N, [fconst(0.0)], ssum)
                    ls = log(s)

                    def wr(i, _):
                        bd.store(bd.fsub(bd.fsub(xat(i), mx, flags=_RFM), ls, flags=_RFM), bd.gep(drow, [i]))
                    loop(N, [], wr)
                    return
                lo_e = fconst(-87.33 if dt == "float32" else -708.39)
                tiny = fconst(float(np.finfo(dt).tiny))

                def esum(i, acc):
                    d = bd.fsub(xat(i), mx, flags=_RFM)
                    e = bd.select(bd.fcmp_ordered("<", d, lo_e), fconst(0.0), exp(d))
                    bd.store(e, bd.gep(drow, [i]))
                    return [bd.fadd(acc[0], e, flags=_RFM)]
                (s,) = loop(N, [fconst(0.0)], esum)
                inv = bd.fdiv(fconst(1.0), s, flags=_RFM)

                def scale(i, _):
                    p = bd.gep(drow, [i])
                    v = bd.fmul(bd.load(p), inv, flags=_RFM)
                    bd.store(bd.select(bd.fcmp_ordered("<", v, tiny), fconst(0.0), v), p)
                loop(N, [], scale)

            if safe:
                ninf = bd.fcmp_ordered("==", mx, fconst(float("-inf")))
                with bd.if_else(ninf) as (then, other):
                    with then:
                        def zero(i, _):
                            bd.store(fconst(0.0), bd.gep(drow, [i]))
                        loop(N, [], zero)
                    with other:
                        softmax_body()
            else:
                softmax_body()
            return []
        # ---- layer_norm / rms_norm: float64 moments (two-pass variance), then the affine write
        nd = bd.sitofp(N, f64)

        def x64(i):
            v = xat(i)
            return v if dt == "float64" else bd.fpext(v, f64)
        if mode == "rms_norm":
            def sq(i, acc):
                v = x64(i)
                return [bd.fadd(acc[0], bd.fmul(v, v, flags=_RFM), flags=_RFM)]
            (q,) = loop(N, [fconst(0.0, f64)], sq)
            mean = fconst(0.0, f64)
        else:
            def s1(i, acc):
                return [bd.fadd(acc[0], x64(i), flags=_RFM)]
            (s,) = loop(N, [fconst(0.0, f64)], s1)
            mean = bd.fdiv(s, nd, flags=_RFM)

            def s2(i, acc):
                d = bd.fsub(x64(i), mean, flags=_RFM)
                return [bd.fadd(acc[0], bd.fmul(d, d, flags=_RFM), flags=_RFM)]
            (q,) = loop(N, [fconst(0.0, f64)], s2)
        var = bd.fdiv(q, nd, flags=_RFM)
        sqrt = em.intrinsic("sqrt", T["float64"], _V(bd.fadd(var, eps, flags=_RFM), T["float64"])).v
        rstd = bd.fdiv(fconst(1.0, f64), sqrt, flags=_RFM)
        mc = mean if dt == "float64" else bd.fptrunc(mean, f)
        rc = rstd if dt == "float64" else bd.fptrunc(rstd, f)

        def aff(i, _):
            v = bd.fmul(bd.fmul(bd.fsub(xat(i), mc, flags=_RFM), rc, flags=_RFM),
                        bd.load(bd.gep(wp, [i])), flags=_RFM)
            bd.store(bd.fadd(v, bd.load(bd.gep(bp, [i])), flags=_RFM), bd.gep(drow, [i]))
        loop(N, [], aff)
        return []

    loop(bd.sub(r1, r0), [], row)
    bd.ret_void()
    what = mode + (" (safe)" if safe else "") + (f" after a prologue ({', '.join(in_dt)})" if pro else "")
    return f"; neetorch row kernel {what}, {dt}\n" + str(mod)


_rows: dict = {}
_ROW_INTERLEAVE = True


def row_kernel(mode: str, dt: str, safe: bool = False, pro=None):
    """``kernel(outs..., ins..., dst, w, b, tmp, meta)`` for a row kernel (see render_rows_ir):
    compiled now (or loaded from the disk cache); raises NotImplementedError for what the IR
    renderer does not cover (the caller then uses the Numba kernels)."""
    if pro is not None:
        in_dt, out_dt, body, results, bcast, src_k, src_ext = pro
        if any(d not in _KNOWN for d in list(in_dt) + list(out_dt)):
            raise _Unsupported("dtype")
        pro = (tuple(in_dt), tuple(out_dt), tuple(body), tuple(results), tuple(bool(x) for x in bcast),
               int(src_k), bool(src_ext))
    spec = (mode, dt, bool(safe), pro)
    k = _rows.get(spec)
    if k is not None:
        return k
    key = kernel_key("rows_" + mode, spec, "rows")
    # rendered only on a cache miss; NotImplementedError propagates before anything is compiled
    addr = compile_ir(key, lambda: render_rows_ir(*spec), _ROW_INTERLEAVE)
    from . import llvm_call
    nargs = (0 if pro is None else len(pro[0]) + len(pro[1])) + (1 if pro is None else 0) + 5
    k = _rows[spec] = llvm_call.make(addr, nargs)
    return k


def row_ir_text(mode: str, dt: str, safe: bool = False, pro=None) -> str:
    """The IR of a row kernel (for explain()): the ``.ll`` beside its cached object code, else rendered."""
    if pro is not None:
        in_dt, out_dt, body, results, bcast, src_k, src_ext = pro
        pro = (tuple(in_dt), tuple(out_dt), tuple(body), tuple(results), tuple(bool(x) for x in bcast),
               int(src_k), bool(src_ext))
    spec = (mode, dt, bool(safe), pro)
    text = cached_ir(kernel_key("rows_" + mode, spec, "rows"))
    return text if text is not None else render_rows_ir(*spec)


def row_meta(r0, r1, B, N, eps, lays) -> np.ndarray:
    """The meta array of a row kernel launch: ``lays`` = (sa, sb, off) per operand (outs, ins, dst)."""
    m = np.empty(5 + 4 * len(lays), np.int64)
    m[0], m[1], m[2], m[3] = r0, r1, B, N
    m[4:5].view(np.float64)[0] = eps
    for k, (sa, sb, off) in enumerate(lays):
        m[5 + 4 * k:9 + 4 * k] = (sa, sb, 1, off)
    return m
