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
* libm functions are called as Numba calls them (``tanf``/``tan``, ``lgammaf``, ``atan2f``...; ``np.log2``,
  ``math.sin``, ``np.log``... and float ``**`` through the ``llvm.*`` intrinsics; float -> int casts with
  ``fptosi``/``fptoui``).  ``//`` and ``%`` follow Numba's lowering (Python's floor rules; integer
  division by zero and INT64_MIN // -1 give 0, float ones CPython's float_divmod), ``**`` with an
  integer exponent multiplies by squaring (Numba's int_power_impl).  Helpers with ``if`` / ``while``
  statements become basic blocks with phi nodes (variable types unified as Numba unifies them).
  Anything outside that subset (other libm calls, ``for`` loops...) raises
  :class:`NotImplementedError`; the caller then uses the Numba renderer.  Nothing is approximated
  differently (tests/test_llvm_render.py compares the kernels bit for bit).
* float16 / bfloat16 operands (storage dtypes) are loaded widened to float32 (exact: ``half`` fpext,
  bfloat16 the upper half of the float32 bits), computed as the float32 kernel computes them, and each
  result is rounded once to nearest even on store (fptrunc; bfloat16: the bit rounding of ml_dtypes, a
  NaN becoming sign | 0x7fc0); fused groups round every low-float member's result the same way
  (``scalar.f_round_f16`` / ``f_round_bf16``), so a fused chain gives eager's bits.  Without F16C
  (x86) float16 kernels are not rendered (the widening path in elementwise.py runs them).
* The float constants of the loops are read once at entry from writable globals, so the vector
  loop keeps them in registers instead of reloading each through a 64-bit address per iteration
  (MCJIT's large code model); launches that write half the last-level cache or more (or
  ``NEE_CPU_NT_BYTES``) use a variant of the unit-stride loop with non-temporal stores
  (:func:`nt_threshold`).
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

try:
    # one lock for every user of LLVM in the process: Numba compiling in one thread while this module (or
    # llvm_call's trampolines) parsed, optimized or loaded in another corrupted the heap (LLVM's global state is
    # not thread-safe): this module's work takes Numba's own compiler lock (re-entrant)
    from numba.core.compiler_lock import global_compiler_lock as _lock
except Exception:  # noqa: BLE001  (no Numba: a lock of our own)
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


# float16 / bfloat16: storage-only dtypes.  A kernel loads them widened to float32 (exact), computes in
# float32 like the float32 kernel, and rounds each stored result once to nearest even: float16 through
# LLVM's ``half`` (fpext / fptrunc: F16C's vcvtph2ps / vcvtps2ph), bfloat16 as the upper half of the
# float32 bits (:func:`_bf16_bits`).  Inside fused groups ``f_round_f16`` / ``f_round_bf16`` (scalar.py)
# round a member's result the same way (:func:`_round_low`).
LOW = ("float16", "bfloat16")


def _compute_name(d: str) -> str:
    """The dtype a kernel computes an operand of storage dtype ``d`` in."""
    return "float32" if d in LOW else d


def _storage_lt(d: str):
    ir, _ = _init()
    if d == "float16":
        return ir.HalfType()
    if d == "bfloat16":
        return ir.IntType(16)
    return _storage(_types()[d])


def _storage_bytes(d: str) -> int:
    return 2 if d in LOW else max(1, _types()[d].bits // 8)


def _f16c() -> bool:
    """Whether the host converts float16 in hardware (x86 F16C; other targets: LLVM's native lowering).
    Without it, LLVM would lower fpext / fptrunc of ``half`` to compiler-rt calls the JIT may not resolve:
    float16 kernels are then not rendered here (the widening path runs them)."""
    f = _state.get("f16c")
    if f is None:
        _, llvm = _init()
        triple = llvm.get_process_triple()
        if triple.startswith(("x86_64", "i386", "i686")):
            f = "+f16c" in llvm.get_host_cpu_features().flatten().split(",")
        else:
            f = triple.startswith(("aarch64", "arm64"))
        _state["f16c"] = f
    return f


def _bf16_bits(b, x):
    """IR: the bfloat16 bits (i16) nearest float32 ``x`` (ties to even); NaN: sign | 0x7fc0 (ml_dtypes)."""
    ir, _ = _init()
    i32 = ir.IntType(32)
    u = b.bitcast(x, i32)
    lsb = b.and_(b.lshr(u, i32(16)), i32(1))
    r = b.lshr(b.add(u, b.add(lsb, i32(0x7FFF))), i32(16))
    q = b.or_(b.and_(b.lshr(u, i32(16)), i32(0x8000)), i32(0x7FC0))
    isnan = b.fcmp_unordered("uno", x, x)
    return b.trunc(b.select(isnan, q, r), ir.IntType(16))


def _load_low(b, d: str, v):
    """IR: the float32 value of storage value ``v`` of low float ``d`` (exact)."""
    ir, _ = _init()
    if d == "float16":
        return b.fpext(v, ir.FloatType())
    i32 = ir.IntType(32)
    return b.bitcast(b.shl(b.zext(v, i32), i32(16)), ir.FloatType())


def _store_low(b, d: str, x):
    """IR: float32 ``x`` rounded to low float ``d``'s storage (to nearest even)."""
    ir, _ = _init()
    if d == "float16":
        return b.fptrunc(x, ir.HalfType())
    return _bf16_bits(b, x)


def _round_low(d: str):
    """The call handler of scalar.f_round_f16 / f_round_bf16: float32 -> the nearest ``d`` -> float32."""
    def h(em, args):
        (x,) = args
        if x.t is not _types()["float32"]:
            raise _Unsupported(f"round to {d} of a {x.t.name}")
        if d == "float16" and not _f16c():
            raise _Unsupported("float16 without hardware conversions")
        st = _store_low(em.b, d, x.v)
        r = _V(_load_low(em.b, d, st), x.t)
        r.low = (d, st)     # stored as ``d`` as it is: no second rounding (a fused group's output)
        return r
    return h


class _Unsupported(NotImplementedError):
    pass


def _unify(a: _T, b: _T, arith: bool = False) -> _T:
    """Numba's result type for a binary comparison on scalars a, b, and the unified type of a
    variable assigned both; ``arith``: of an arithmetic / bitwise operation (the same, except
    int64 with uint64: int64, where a comparison or a variable takes float64)."""
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
    if not arith and ((a.kind == "u" and a.bits == 64) or (b.kind == "u" and b.bits == 64)):
        return T["float64"]
    return T["int64"]


# ------------------------------------------------------------------------------------ values
class _V:
    __slots__ = ("lit", "low", "t", "v")

    def __init__(self, v, t, lit=None):
        self.v, self.t, self.lit = v, t, lit
        self.low = None     # (low float name, storage value) of a float32 value rounded to it (_round_low)


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
            t = T["bool"] if a.t.kind == "b" and c.t.kind == "b" else _unify(a.t, c.t, arith=True)
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
            return self.power(a, c)
        if isinstance(op, (ast.FloorDiv, ast.Mod)):
            t = _unify(a.t, c.t, arith=True)
            a, c = self.cast(a, t), self.cast(c, t)
            q, r = self.real_divmod(a, c) if t.kind == "f" else self.int_divmod(a, c)
            return q if isinstance(op, ast.FloorDiv) else r
        if not isinstance(op, (ast.Add, ast.Sub, ast.Mult)):
            raise _Unsupported(type(op).__name__)
        t = _unify(a.t, c.t, arith=True)
        a, c = self.cast(a, t), self.cast(c, t)
        if t.kind == "f":
            f = {ast.Add: b.fadd, ast.Sub: b.fsub, ast.Mult: b.fmul}[type(op)]
            return _V(f(a.v, c.v, flags=self.fm), t)
        f = {ast.Add: b.add, ast.Sub: b.sub, ast.Mult: b.mul}[type(op)]
        return _V(f(a.v, c.v), t)

    # ---- Python's // and % (Numba's lowering: numba/cpython/numbers.py), ** (int_power_impl)
    def int_divmod(self, a: _V, c: _V):
        """Floor quotient and remainder of integers of one type (Numba's _int_divmod_impl under
        error_model="numpy"): the remainder takes the divisor's sign; division by zero gives 0 and 0,
        and so does INT64_MIN // -1 (the one quotient that overflows).  The division itself never
        sees those divisors (no trap), so it can be computed unconditionally."""
        ir, _ = _init()
        b = self.b
        t = a.t
        zero, one = ir.Constant(t.lt, 0), ir.Constant(t.lt, 1)
        bad = b.icmp_unsigned("==", c.v, zero)
        if t.kind == "i":
            ovf = b.and_(b.icmp_signed("==", a.v, ir.Constant(t.lt, -(1 << (t.bits - 1)))),
                         b.icmp_signed("==", c.v, ir.Constant(t.lt, -1)))
            bad = b.or_(bad, ovf)
        d = b.select(bad, one, c.v)
        if t.kind == "i":
            q, r = b.sdiv(a.v, d), b.srem(a.v, d)
            fix = b.and_(b.icmp_signed("!=", r, zero), b.icmp_signed("<", b.xor(d, r), zero))
            q = b.select(fix, b.sub(q, one), q)
            r = b.select(fix, b.add(r, d), r)
        else:
            q, r = b.udiv(a.v, d), b.urem(a.v, d)
        return _V(b.select(bad, zero, q), t), _V(b.select(bad, zero, r), t)

    def real_divmod(self, x: _V, y: _V):
        """Python's float floor division and modulo (Numba's real_divmod_func_body, CPython's
        float_divmod): fmod, the quotient snapped to an integer, the remainder with the divisor's sign
        (signed zeros included); a zero divisor gives x / y and fmod(x, y) (inf / nan)."""
        ir, _ = _init()
        b, fm = self.b, self.fm
        t = x.t
        zero, nzero, one, half = (ir.Constant(t.lt, v) for v in (0.0, -0.0, 1.0, 0.5))
        mod = b.frem(x.v, y.v, flags=fm)
        div = b.fdiv(b.fsub(x.v, mod, flags=fm), y.v, flags=fm)
        mod_true = b.fcmp_unordered("!=", mod, zero, flags=fm)
        y_neg = b.fcmp_ordered("<", y.v, zero, flags=fm)
        flip = b.and_(mod_true, b.icmp_unsigned("!=", y_neg, b.fcmp_ordered("<", mod, zero, flags=fm)))
        div = b.select(flip, b.fsub(div, one, flags=fm), div)
        mod = b.select(mod_true, b.select(flip, b.fadd(mod, y.v, flags=fm), mod), b.select(y_neg, nzero, zero))
        div_true = b.fcmp_ordered("!=", div, zero, flags=fm)
        fl = self.intrinsic("floor", t, _V(div, t)).v
        snapped = b.select(b.fcmp_ordered(">", b.fsub(div, fl, flags=fm), half, flags=fm),
                           b.fadd(fl, one, flags=fm), fl)
        dd = b.fmul(div, div, flags=fm)
        signed_zero = b.fdiv(b.fmul(dd, x.v, flags=fm), y.v, flags=fm)
        q = b.select(div_true, snapped, signed_zero)
        y_zero = b.fcmp_ordered("==", y.v, zero, flags=fm)
        q = b.select(y_zero, b.fdiv(x.v, y.v, flags=fm), q)
        mod = b.select(y_zero, b.frem(x.v, y.v, flags=fm), mod)
        return _V(q, t), _V(mod, t)

    def power(self, a: _V, c: _V) -> _V:
        """``a ** c`` with Numba's typing and lowering: float ** float (one type; mixed and
        int ** float promote) calls llvm.pow; float ** int and int ** int multiply by squaring
        (int_power_impl: a negative exponent inverts, through float64; int ** negative is 0 except
        for bases +-1, and INT_MIN for base 0; exponents over 0x10000 go through llvm.pow)."""
        T = _types()
        if c.t.kind == "f":
            t = _unify(a.t, c.t)
            if t.kind != "f":
                t = T["float64"]
            return self.intrinsic("pow", t, self.cast(a, t), self.cast(c, t))
        # integer (or bool) exponent
        if a.t.kind == "f":
            tp = a.t
        else:
            tp = T["uint64"] if a.t.kind == "u" and c.t.kind == "u" else T["int64"]
        ce = self.cast(c, T["uint64"] if c.t.kind == "u" else T["int64"])
        return self._int_power(self.cast(a, tp), ce, tp)

    def _int_power(self, a: _V, e: _V, tp: _T) -> _V:
        ir, _ = _init()
        T = _types()
        b, fm = self.b, self.fm
        i64 = ir.IntType(64)
        signed = e.t.kind == "i"
        neg = b.icmp_signed("<", e.v, i64(0)) if signed else ir.Constant(ir.IntType(1), 0)
        ex = b.select(neg, b.neg(e.v), e.v) if signed else e.v
        is_f = tp.kind == "f"
        mul = (lambda x, y: b.fmul(x, y, flags=fm)) if is_f else b.mul
        # while exp != 0: if exp & 1: r *= a; exp >>= 1; a *= a   (logical shift: terminates for INT64_MIN)
        fn = b.function
        pre = b.block
        head = fn.append_basic_block("pow.loop")
        done = fn.append_basic_block("pow.done")
        one = ir.Constant(tp.lt, 1.0 if is_f else 1)
        b.cbranch(b.icmp_unsigned("!=", ex, i64(0)), head, done)
        b.position_at_end(head)
        r = b.phi(tp.lt)
        base = b.phi(tp.lt)
        k = b.phi(i64)
        r2 = b.select(b.icmp_unsigned("!=", b.and_(k, i64(1)), i64(0)), mul(r, base), r)
        k2 = b.lshr(k, i64(1))
        base2 = mul(base, base)
        end = b.block
        b.cbranch(b.icmp_unsigned("!=", k2, i64(0)), head, done)
        r.add_incoming(one, pre)
        r.add_incoming(r2, end)
        base.add_incoming(a.v, pre)
        base.add_incoming(base2, end)
        k.add_incoming(ex, pre)
        k.add_incoming(k2, end)
        b.position_at_end(done)
        res = b.phi(tp.lt)
        res.add_incoming(one, pre)
        res.add_incoming(r2, end)
        out = res
        f64 = T["float64"]
        # exponents over 0x10000: math.pow(a, float(b)) (llvm.pow.f64), cast back; checked after the
        # integer early returns, before the float inversion (int_power's order)
        big = b.icmp_signed(">", ex, i64(0x10000)) if signed else b.icmp_unsigned(">", ex, i64(0x10000))
        pw = self.cast(self.intrinsic("pow", f64, self.cast(a, f64), self.cast(e, f64)), tp).v
        if is_f:
            inv = self.cast(_V(b.fdiv(ir.Constant(f64.lt, 1.0), self.cast(_V(out, tp), f64).v, flags=fm), f64), tp)
            return _V(b.select(big, pw, b.select(neg, inv.v, out)), tp)
        # integers: a negative exponent gives 1 / r (exact for bases +-1), 0 for other bases, INT_MIN for 0
        zero = ir.Constant(tp.lt, 0)
        v = b.select(big, pw, out)
        unit = b.or_(b.icmp_signed("==", a.v, ir.Constant(tp.lt, 1)), b.icmp_signed("==", a.v, ir.Constant(tp.lt, -1)))
        v = b.select(b.and_(neg, b.not_(unit)), zero, v)
        v = b.select(b.and_(neg, b.icmp_signed("==", a.v, zero)), ir.Constant(tp.lt, -(1 << (tp.bits - 1))), v)
        return _V(v, tp)

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

    def condition(self, node, env) -> _V:
        """The truth of a test (``if`` / ``while`` / conditional expression): ``a and b`` / ``a or b``
        of any operands is the and / or of their truths there (all operands evaluated: they have
        no side effects, and the divisions translated here never trap)."""
        if isinstance(node, ast.BoolOp):
            vals = [self.condition(v, env) for v in node.values]
            op = self.b.and_ if isinstance(node.op, ast.And) else self.b.or_
            r = vals[0]
            for v in vals[1:]:
                r = _V(op(r.v, v.v), r.t)
            return r
        return self.truth(self.expr(node, env))

    def e_IfExp(self, node, env):
        cnd = self.condition(node.test, env)
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


def _fmod(em, args):
    """np.fmod of floats: Numba's np_real_fmod_impl is a plain frem (libm fmod) in the common type."""
    a, c = args
    t = _unify(a.t, c.t)
    if t.kind != "f":
        raise _Unsupported("np.fmod of integers")
    a, c = em.cast(a, t), em.cast(c, t)
    return _V(em.b.frem(a.v, c.v, flags=em.fm), t)


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
    from . import fastmath as fm, scalar
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
        # Numba's unary_math_intr / np_real_*_impl: the llvm.sin / cos / log / exp / exp2 intrinsics
        _key(math.sin): _float_unary("sin"), _key(math.cos): _float_unary("cos"),
        _key(np.log): _float_unary("log"), _key(math.log): _float_unary("log"),
        _key(np.exp): _float_unary("exp"), _key(math.exp): _float_unary("exp"), _key(np.exp2): _float_unary("exp2"),
        _key(np.fmod): _fmod,
        _key(scalar.f_round_f16): _round_low("float16"), _key(scalar.f_round_bf16): _round_low("bfloat16"),
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
    """Translate a helper's body; returns its value.  Straight-line bodies return at their first
    ``return``; bodies with ``if`` / ``while`` statements become basic blocks, their variables and
    return values merged by phi nodes (types unified like Numba unifies a variable's types)."""
    if not any(isinstance(n, (ast.If, ast.While)) for st in body for n in ast.walk(st)):
        for st in body:
            if _simple_statement(em, st, env, where):
                continue
            if isinstance(st, ast.Return):
                if st.value is None:
                    raise _Unsupported("return without a value")
                return em.expr(st.value, env)
            raise _Unsupported(f"{type(st).__name__} statement in {where}")
        raise _Unsupported(f"{where} has no return")
    flow = _Flow(em, where)
    if not flow.block(body, env):
        raise _Unsupported(f"{where} can reach its end without a return")
    return flow.finish()


def _simple_statement(em, st, env, where) -> bool:
    """Docstrings, ``pass``, assignments: translated; False for anything else."""
    if isinstance(st, ast.Pass) or (isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant)):
        return True
    if isinstance(st, ast.Assign) and len(st.targets) == 1:
        _bind(st.targets[0], em.expr(st.value, env), env)
        return True
    if isinstance(st, ast.AugAssign) and isinstance(st.target, ast.Name):
        if st.target.id not in env.locals:
            raise _Unsupported(f"{st.target.id} used before assignment in {where}")
        env.locals[st.target.id] = em.binop(st.op, env.locals[st.target.id], em.expr(st.value, env))
        return True
    return False


def _merge_type(vals):
    t = vals[0].t
    for v in vals[1:]:
        if v.t is not t:
            t = v.t if (t.kind == "b" and v.t.kind == "b") else _unify(t, v.t)
    return t


def _assigned(stmts) -> set:
    names = set()
    for st in stmts:
        for n in ast.walk(st):
            if isinstance(n, (ast.Assign, ast.AugAssign)):
                for tgt in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                    names.update(x.id for x in ast.walk(tgt) if isinstance(x, ast.Name))
    return names


class _Flow:
    """The control flow of one inlined helper: ``if`` / ``while`` statements as basic blocks.
    Blocks that end in a ``return`` (or join an ``if``) are left open and branched when the
    merge's phi nodes are made, so the casts that unify the incoming types go before the branch."""

    def __init__(self, em, where):
        self.em = em
        self.where = where
        self.returns = []        # (block, value)

    def block(self, stmts, env) -> bool:
        """Translate ``stmts`` at the builder; True if every path returned."""
        em = self.em
        for st in stmts:
            if _simple_statement(em, st, env, self.where):
                continue
            if isinstance(st, ast.Return):
                if st.value is None:
                    raise _Unsupported("return without a value")
                self.returns.append((em.b.block, em.expr(st.value, env)))
                return True
            if isinstance(st, ast.If):
                if self.if_(st, env):
                    return True
                continue
            if isinstance(st, ast.While):
                self.while_(st, env)
                continue
            raise _Unsupported(f"{type(st).__name__} statement in {self.where}")
        return False

    def _join_values(self, preds):
        t = _merge_type([v for _, v in preds])
        out = []
        for blk, v in preds:
            self.em.b.position_at_end(blk)
            out.append((blk, self.em.cast(v, t).v))
        return t, out

    def finish(self):
        b = self.em.b
        fn = b.function
        exit_bb = fn.append_basic_block("ret")
        vals = [v for _, v in self.returns]
        tup = isinstance(vals[0], tuple)
        cols = [[(blk, v[k]) for blk, v in self.returns] for k in range(len(vals[0]))] if tup else [self.returns]
        if tup and not all(isinstance(v, tuple) and len(v) == len(vals[0]) for v in vals):
            raise _Unsupported(f"returns of {self.where} differ")
        if not tup and any(isinstance(v, tuple) for v in vals):
            raise _Unsupported(f"returns of {self.where} differ")
        merged = [self._join_values(col) for col in cols]
        for blk, _ in self.returns:
            b.position_at_end(blk)
            b.branch(exit_bb)
        b.position_at_end(exit_bb)
        res = []
        for t, inc in merged:
            phi = b.phi(t.lt)
            for blk, v in inc:
                phi.add_incoming(v, blk)
            res.append(_V(phi, t))
        return tuple(res) if tup else res[0]

    def if_(self, st, env) -> bool:
        em = self.em
        b = em.b
        fn = b.function
        cond = em.condition(st.test, env)
        then_bb, else_bb = fn.append_basic_block("if.then"), fn.append_basic_block("if.else")
        b.cbranch(cond.v, then_bb, else_bb)
        open_ = []
        for bb, stmts in ((then_bb, st.body), (else_bb, st.orelse)):
            b.position_at_end(bb)
            e2 = _Env(env.globs, env.locals)
            if not self.block(stmts, e2):
                open_.append((b.block, e2))
        if not open_:
            return True
        names = [n for n in open_[0][1].locals if all(n in e.locals for _, e in open_)]
        joins = {}
        for n in names:
            vals = [e.locals[n] for _, e in open_]
            if all(v is vals[0] for v in vals):
                joins[n] = vals[0]
            elif any(isinstance(v, tuple) for v in vals):
                raise _Unsupported(f"tuple variable {n} assigned in a branch of {self.where}")
            else:
                joins[n] = self._join_values([(blk, e.locals[n]) for blk, e in open_])
        merge = fn.append_basic_block("if.end")
        for blk, _ in open_:
            b.position_at_end(blk)
            b.branch(merge)
        b.position_at_end(merge)
        env.locals = {}
        for n, j in joins.items():
            if isinstance(j, _V):
                env.locals[n] = j
                continue
            t, inc = j
            phi = b.phi(t.lt)
            for blk, v in inc:
                phi.add_incoming(v, blk)
            env.locals[n] = _V(phi, t)
        return False

    def while_(self, st, env) -> None:
        if st.orelse:
            raise _Unsupported(f"while/else in {self.where}")
        em = self.em
        b = em.b
        fn = b.function
        carried = [n for n in sorted(_assigned(st.body)) if n in env.locals]
        if any(isinstance(env.locals[n], tuple) for n in carried):
            raise _Unsupported(f"tuple variable in a loop of {self.where}")
        types = self._loop_types(st, env, carried)
        for n in carried:     # Numba gives a variable one (unified) type: widen before the loop
            env.locals[n] = em.cast(env.locals[n], types[n])
        pre = b.block
        head, body_bb, after = (fn.append_basic_block(x) for x in ("while", "while.body", "while.end"))
        b.branch(head)
        b.position_at_end(head)
        phis = {}
        for n in carried:
            v = env.locals[n]
            phi = b.phi(v.t.lt)
            phi.add_incoming(v.v, pre)
            phis[n] = phi
            env.locals[n] = _V(phi, v.t)
        cond = em.condition(st.test, env)
        b.cbranch(cond.v, body_bb, after)
        b.position_at_end(body_bb)
        e2 = _Env(env.globs, env.locals)
        if not self.block(st.body, e2):
            for n in carried:
                v, t = e2.locals[n], env.locals[n].t
                if isinstance(v, tuple) or (v.t is not t and _merge_type([env.locals[n], v]) is not t):
                    # Numba would give the variable the wider type for the whole loop
                    raise _Unsupported(f"{n} changes type in a loop of {self.where}")
                phis[n].add_incoming(em.cast(v, t).v, b.block)
            b.branch(head)
        b.position_at_end(after)

    def _loop_types(self, st, env, carried) -> dict:
        """The unified types of the variables a loop reassigns: its body translated into a scratch
        function (discarded) with the variables at their current types, widened until stable."""
        ir, _ = _init()
        types = {n: env.locals[n].t for n in carried}
        for _ in range(4):
            mod = ir.Module(name="nee_scratch")
            fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [types[n].lt for n in carried]), "scratch")
            em = _Emitter(ir.IRBuilder(fn.append_basic_block("entry")))
            e2 = _Env(env.globs, env.locals)
            for n, a in zip(carried, fn.args):
                e2.locals[n] = _V(a, types[n])
            em.condition(st.test, e2)
            flow = _Flow(em, self.where)
            if flow.block(st.body, e2):
                return types
            new = {n: _merge_type([_V(None, types[n]), e2.locals[n]]) if not isinstance(e2.locals[n], tuple)
                   else None for n in carried}
            if any(t is None for t in new.values()):
                raise _Unsupported(f"tuple variable in a loop of {self.where}")
            if all(new[n] is types[n] for n in carried):
                return types
            types = new
        raise _Unsupported(f"variable types of a loop of {self.where} do not settle")


def _bind(target, v, env):
    if isinstance(target, ast.Name):
        env.locals[target.id] = v
    elif isinstance(target, ast.Tuple) and isinstance(v, tuple) and len(v) == len(target.elts):
        for t, x in zip(target.elts, v):
            _bind(t, x, env)
    else:
        raise _Unsupported("assignment target")


# ------------------------------------------------------------------------------------ kernel IR
def render_ir(name: str, in_dt: list, out_dt: list, body: list, results: list, variant=(), nt: bool = False) -> str:
    """LLVM IR (text) of the kernel ``render_group`` writes as Numba source for the same pieces,
    for one innermost-loop layout: ``variant`` = the inputs broadcast (stride 0) in the innermost
    dim with every other operand unit-stride, or None for any strides.  ``nt``: the unit-stride
    loop writes its outputs with non-temporal stores (see :func:`nt_eligible`).  Raises
    NotImplementedError for what this renderer does not cover."""
    ir, llvm = _init()
    _register_calls()
    T = _types()
    from . import scalar
    globs = dict(vars(scalar))
    body_ast = [ast.parse(s).body[0] for s in body]
    res_ast = [ast.parse(r, mode="eval").body for r in results]
    nin, nout = len(in_dt), len(out_dt)
    if "float16" in list(in_dt) + list(out_dt) and not _f16c():
        raise _Unsupported("float16 without hardware conversions")
    tin = [T[_compute_name(d)] for d in in_dt]
    tout = [T[_compute_name(d)] for d in out_dt]
    i64 = ir.IntType(64)
    mod = ir.Module(name="nee_kernel")
    mod.triple = llvm.get_process_triple()
    ptys = [ir.PointerType(_storage_lt(d)) for d in list(out_dt) + list(in_dt)]
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
    loop_ids = [md_par, md_seq]
    # costly bodies (erf, gelu...): the unit-stride loop interleaved (see _IL_MIN_COST), its tail apart
    heavy = variant is not None and not nt and _IL_COUNT > 1 and body_cost(in_dt, out_dt, body, results) >= _IL_MIN_COST
    if heavy:
        md_il = mod.add_metadata([md_par.operands[0],
                                  mod.add_metadata([ir.MetaDataString(mod, "llvm.loop.interleave.count"),
                                                    ir.Constant(ir.IntType(32), _IL_COUNT)])])
        md_tail = mod.add_metadata([md_par.operands[0],
                                    mod.add_metadata([ir.MetaDataString(mod, "llvm.loop.vectorize.predicate.enable"),
                                                      ir.Constant(ir.IntType(1), 1)]),
                                    mod.add_metadata([ir.MetaDataString(mod, "llvm.loop.vectorize.enable"),
                                                      ir.Constant(ir.IntType(1), 1)])])
        loop_ids += [md_il, md_tail]
    immediate = set()   # blocks whose float constants stay immediate operands (_hoist_float_constants)
    if nt:
        if variant is None or not nt_eligible(out_dt):
            raise ValueError(f"llvm_render: no non-temporal variant for outputs {out_dt} / layout {variant}")
        osz = tout[0].bits // 8
        lanes = _NT_LINE // osz
        # the streaming loop: parallel, and vectors of exactly one cache line, so that every vector
        # store of the loop (64-byte aligned start, a multiple of ``lanes`` iterations) is aligned
        md_nt = mod.add_metadata([md_par.operands[0],
                                  mod.add_metadata([ir.MetaDataString(mod, "llvm.loop.vectorize.width"),
                                                    ir.Constant(ir.IntType(32), lanes)]),
                                  mod.add_metadata([ir.MetaDataString(mod, "llvm.loop.vectorize.enable"),
                                                    ir.Constant(ir.IntType(1), 1)])])
        md_ntstore = mod.add_metadata([ir.Constant(ir.IntType(32), 1)])
        # head and tail (under a line each): one masked vector iteration (tail folding), not up to
        # 15 scalar ones (a scalar gelu costs ~16 vector lanes)
        md_edge = mod.add_metadata([md_par.operands[0],
                                    mod.add_metadata([ir.MetaDataString(mod, "llvm.loop.vectorize.width"),
                                                      ir.Constant(ir.IntType(32), lanes)]),
                                    mod.add_metadata([ir.MetaDataString(mod, "llvm.loop.vectorize.predicate.enable"),
                                                      ir.Constant(ir.IntType(1), 1)]),
                                    mod.add_metadata([ir.MetaDataString(mod, "llvm.loop.vectorize.enable"),
                                                      ir.Constant(ir.IntType(1), 1)])])
        loop_ids += [md_nt, md_edge]

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
    streaming = [False]   # the loop being emitted stores non-temporally

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
        elif in_dt[k] in LOW:
            v = _load_low(bd, in_dt[k], v)
        return _V(v, t)

    def store(j, idx, v):
        x = v.v
        if tout[j].kind == "b":
            x = bd.zext(x, ir.IntType(8))
        elif out_dt[j] in LOW:
            x = v.low[1] if v.low is not None and v.low[0] == out_dt[j] else _store_low(bd, out_dt[j], x)
        if streaming[0]:
            # only ever executed at 64-byte aligned vector positions (see the streaming loop)
            st = mark(bd.store(x, bd.gep(bufs[j], [idx]), align=_NT_LINE))
            st.set_metadata("nontemporal", md_ntstore)
        else:
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

            def contiguous(i3, start=None):
                if start is not None:
                    i3 = bd.add(i3, start)
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
                sz = _storage_bytes(out_dt[k] if k < nout else in_dt[k - nout])
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
                    if nt:
                        streaming_rows(ptr, contiguous)
                    elif heavy:
                        interleaved_row(contiguous)
                    else:
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

    def interleaved_row(contiguous):
        """The row as a loop over whole multiples of _IL_BLOCK elements, vectorized and interleaved
        _IL_COUNT times (independent vectors side by side: their long erf/exp dependency chains overlap),
        then the rest (under _IL_BLOCK) as masked vector iterations, not LLVM's scalar remainder loop.
        The interleaved loop keeps its float constants immediate (broadcast loads from the constant
        pool, no registers held): with the splats read once at entry, 4 interleaved vectors spill them
        and their temporaries to the stack."""
        main = bd.and_(n[3], i64(-_IL_BLOCK))
        first = len(fn.blocks)
        loop(main, contiguous, md_il)
        immediate.update(blk for blk in fn.blocks[first:] if blk is not bd.block)   # not where code continues
        loop(bd.sub(n[3], main), lambda i: contiguous(i, main), md_tail)

    def streaming_rows(ptr, contiguous):
        """The row as a head loop up to the first 64-byte boundary of the outputs, a streaming loop
        over whole cache lines (non-temporal vector stores: no read of the lines for ownership)
        and a tail loop; rows whose outputs are not equally aligned stream nothing."""
        addr = [bd.ptrtoint(bd.gep(bufs[j], [ptr[j]]), i64) for j in range(nout)]
        mis = bd.and_(addr[0], i64(_NT_LINE - 1))
        head = bd.select(bd.icmp_unsigned("==", mis, i64(0)), i64(0),
                         bd.udiv(bd.sub(i64(_NT_LINE), mis), i64(osz)))
        head = bd.select(bd.icmp_signed("<", n[3], head), n[3], head)
        body_n = bd.shl(bd.lshr(bd.sub(n[3], head), i64(lanes.bit_length() - 1)), i64(lanes.bit_length() - 1))
        aligned = bd.icmp_signed(">", body_n, i64(0))
        for j in range(nout):
            a = bd.add(addr[j], bd.mul(head, i64(osz)))
            aligned = bd.and_(aligned, bd.icmp_unsigned("==", bd.and_(a, i64(_NT_LINE - 1)), i64(0)))
        with bd.if_else(aligned) as (yes, no):
            with yes:
                loop(head, contiguous, md_edge)
                streaming[0] = True
                loop(body_n, lambda i: contiguous(i, head), md_nt)
                streaming[0] = False
                done = bd.add(head, body_n)
                loop(bd.sub(n[3], done), lambda i: contiguous(i, done), md_edge)
            with no:
                loop(n[3], contiguous, md_par)

    loop(n[0], lambda i0: loop(n[1], lambda i1: loop(n[2], lambda i2: inner(i0, i1, i2))))
    if nt:
        # non-temporal stores are weakly ordered: drain them before the launch reports completion
        bd.fence("seq_cst")
    bd.ret_void()
    if _HOIST_CONSTANTS:
        _hoist_float_constants(mod, fn, bd, immediate)
    lay = "any strides" if variant is None else ("unit stride" + (f", inputs {list(variant)} broadcast" if variant else ""))
    if nt:
        lay += ", non-temporal stores"
    if heavy:
        lay += f", interleaved x{_IL_COUNT}"
    return (f"; neetorch elementwise kernel {name}({', '.join(in_dt)}) -> ({', '.join(out_dt)}); {lay}\n" +
            _distinct(str(mod), group, *loop_ids))


_NT_LINE = 64     # bytes: the cache line, and the vector width of the streaming loop
_NT_MAX_COST = 16  # IR instructions per element (body_cost) up to which a kernel may stream
_costs: dict = {}


def body_cost(in_dt, out_dt, body, results) -> int:
    """IR instructions (phis and branches aside) that one element of the kernel computes: its
    statements and results translated into a scratch function.  x*w+b: 3, gelu: ~60."""
    key = (tuple(in_dt), tuple(out_dt), tuple(body), tuple(results))
    c = _costs.get(key)
    if c is None:
        ir, _ = _init()
        _register_calls()
        T = _types()
        from . import scalar
        tin, tout = [T[_compute_name(d)] for d in in_dt], [T[_compute_name(d)] for d in out_dt]
        mod = ir.Module(name="nee_cost")
        fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [t.lt for t in tin]), "cost")
        em = _Emitter(ir.IRBuilder(fn.append_basic_block("entry")))
        env = _Env(dict(vars(scalar)), {f"v{i}": _V(a, t) for i, (a, t) in enumerate(zip(fn.args, tin))})
        for st in body:
            st = ast.parse(st).body[0]
            env.locals[st.targets[0].id] = em.expr(st.value, env)
        for r, t in zip(results, tout):
            em.cast(em.expr(ast.parse(r, mode="eval").body, env), t)
        insts = [ins for blk in fn.blocks for ins in blk.instructions
                 if not isinstance(ins, (ir.PhiInstr, ir.Branch, ir.ConditionalBranch))]
        calls = sum(1 for ins in insts if isinstance(ins, ir.CallInstr) and not _inline_call(ins))
        c = _costs[key] = len(insts)
        _call_counts[key] = calls
    return c


_call_counts: dict = {}
# intrinsics that are instructions (or a few) in the vector loop; any other call (llvm.pow / llvm.exp /
# llvm.sin..., libm's tanf, lgammaf...) is a scalar library call per element: the loop does not vectorize
_INLINE_INTRINSICS = ("llvm.fmuladd", "llvm.fma", "llvm.fabs", "llvm.floor", "llvm.ceil", "llvm.trunc",
                      "llvm.rint", "llvm.nearbyint", "llvm.round", "llvm.sqrt", "llvm.copysign", "llvm.minnum",
                      "llvm.maxnum", "llvm.minimum", "llvm.maximum", "llvm.ctpop", "llvm.ctlz", "llvm.cttz",
                      "llvm.smin", "llvm.smax", "llvm.umin", "llvm.umax", "llvm.abs")


def _inline_call(ins) -> bool:
    name = getattr(ins.callee, "name", "") or ""
    return name.startswith(_INLINE_INTRINSICS)


# split_weight: a scalar library call counts as this many IR instructions (llvm.pow.f32 -> powf: ~7 ns an
# element on the AVX2 host, against ~0.05 ns per vectorized instruction), and every _SPLIT_COST_UNIT of
# the total as one element of a plain launch
_CALL_COST = 120
_SPLIT_COST_UNIT = 8


def split_weight(in_dt, out_dt, body, results) -> int:
    """How many elements of a plain (copy-like) launch one element of this kernel is worth, for the
    parallel split (elementwise.chunk_metas: threads.PARALLEL_THRESHOLD weighted elements and up are split
    over the threads): 1 up to _NT_MAX_COST IR instructions per element (the cheap, memory-bound kernels:
    the threshold was measured on them), else (instructions + _CALL_COST per library call) /
    _SPLIT_COST_UNIT.  LRN's ``x / pow(bias + k * sum of 5 squares, beta)`` (a powf per element): 16, so
    its 192 x 55 x 55 launch (4 ms on one thread) splits; gelu ~7."""
    c = body_cost(in_dt, out_dt, body, results)
    calls = _call_counts.get((tuple(in_dt), tuple(out_dt), tuple(body), tuple(results)), 0)
    if c <= _NT_MAX_COST and not calls:
        return 1
    return max(1, (c + (_CALL_COST - 1) * calls) // _SPLIT_COST_UNIT)
_nt_limit: list = []


def _last_level_cache_bytes() -> int:
    """Size of the largest CPU cache (Linux sysfs), or 32 MiB where it cannot be read."""
    import glob
    best = 0
    for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        try:
            with open(path) as f:
                t = f.read().strip().upper()
        except OSError:
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
        try:
            best = max(best, int(t.rstrip("KMG")) * mult)
        except ValueError:
            continue
    return best or 32 << 20


def nt_threshold() -> int:
    """Output bytes of one launch from which elementwise and row kernels (layer_norm, rms_norm,
    log_softmax: their single write pass) write with non-temporal stores (0: never).
    ``NEE_CPU_NT_BYTES`` if set, else half the last-level cache.  Below that the written lines are
    still cached for the kernel that reads them next and normal stores are as fast or faster; from
    it, streaming them saves reading every output line in before it is overwritten and keeps the
    inputs cached.  Measured on a 32 MiB-L3 EPYC (2 threads, float32 rows of 1024, min of
    interleaved repeats, ms normal vs streaming): x*w+b then a kernel reading its output: 4 MiB
    0.29-0.46 vs 0.40-0.71, 8 MiB 0.77-0.79 vs 0.79, 12 MiB 1.43 vs 1.26, 16 MiB 2.21 vs 1.77,
    32 MiB 4.8 vs 3.7; x*w+b alone 16 MiB 0.86-1.35 vs 0.73, 64 MiB 5.9-6.0 vs 4.0-4.2; layer_norm
    16 MiB 1.81-1.86 vs 1.12-1.14, 64 MiB 6.6 vs 5.4.  Compute-bound elementwise kernels never
    stream (``_NT_MAX_COST``); softmax rescales the row its exp pass wrote in place (lines already
    owned): it never streams (measured 2.04 vs 2.34)."""
    if not _nt_limit:
        v = os.environ.get("NEE_CPU_NT_BYTES", "").strip()
        _nt_limit.append(int(float(v)) if v else _last_level_cache_bytes() // 2)
    return _nt_limit[0]


def nt_eligible(out_dt) -> bool:
    """Whether a kernel with these outputs has a non-temporal variant: outputs of one element size
    of 4 or 8 bytes (a cache line is then a whole number of elements of each)."""
    sizes = {_storage_bytes(d) for d in out_dt}
    return len(sizes) == 1 and sizes <= {4, 8} and all(d != "bool" for d in out_dt)


_HOIST_CONSTANTS = True    # False: constants stay immediate operands (to compare; part of the cache key)
# Unit-stride loops of bodies costing _IL_MIN_COST IR instructions or more per element (body_cost: tanh 28,
# exp 35, tanh-gelu 36, erf 40, log 40, sigmoid 41, gelu 44) run _IL_COUNT vectors per iteration.  Such a
# body is a long dependency chain (gelu: ~80 cycles of FMA latency per 8-lane vector) and with one vector per
# iteration the out-of-order window overlaps only a few: gelu(x*w+b) ran at ~4 cycles per element, ~2.5x
# what its FMA count needs.  One thread, AVX2 Zen 3, process CPU time, min of 12-15 interleaved repeats,
# load 7-10, ns/element 1 -> 4 vectors (same bits): gelu(x*w+b), rows of 1024 in L1, 1.25 -> 0.99 (with
# session 13's erf_f32, whose polynomial tails are shorter chains: 0.83), 4M elements 1.33 -> 1.07 (0.97);
# with that erf, in L1: gelu 1.17 -> 0.82, erf 0.95 -> 0.74, tanh-gelu 1.03 -> 0.74, tanh 0.70 -> 0.55,
# exp 0.65 -> 0.45, sigmoid 0.85 -> 0.61, log 0.83 -> 0.63.  4 vectors with the splats hoisted to entry
# (spilled): 1.17-1.31 for gelu(x*w+b); 3 or 6 vectors: 1.6 (1024 is no multiple of 24 or 48: the rest
# ran scalar).
_IL_MIN_COST = 24
_IL_COUNT = 4
_IL_BLOCK = 32     # the interleaved loop's trip is a multiple of this many elements (8 float32 lanes x 4)


def _hoist_float_constants(mod, fn, bd, immediate=()) -> None:
    """Read the float constants of the loops once, at entry, from (writable, so never folded)
    globals.  Vector code on x86-64 otherwise reloads every constant from the constant pool on
    every iteration, each through a 64-bit ``movabs`` of its address (MCJIT's large code model):
    20 of the 75 instructions of gelu's 16-lane loop.  Read once, the splats stay in registers
    (or stack slots: one folded operand).  The values are the same bits, so results are too; only
    arithmetic / comparison / select operands and fmuladd's are moved (calls like llvm.pow keep
    theirs, which LLVM specializes on)."""
    ir, _ = _init()
    entry = fn.entry_basic_block
    slots: dict = {}
    for blk in fn.blocks:
        if blk is entry or blk in immediate:
            continue
        for ins in blk.instructions:
            if isinstance(ins, ir.PhiInstr):
                continue
            call = isinstance(ins, ir.CallInstr)
            if call and not getattr(ins.callee, "name", "").startswith(("llvm.fmuladd.", "llvm.fma.")):
                # calls keep their constants: LLVM rewrites pow(x, 0.5), pow(x, 2)... from the
                # constant (as it does in the Numba kernel: same results, NaN signs included)
                continue
            ops = list(ins.args if call else ins.operands)
            changed = False
            for k, op in enumerate(ops):
                if isinstance(op, ir.Constant) and isinstance(op.type, (ir.FloatType, ir.DoubleType)):
                    key = (str(op.type), op.get_reference())
                    slot = slots.get(key)
                    if slot is None:
                        g = ir.GlobalVariable(mod, op.type, f"kernel.c{len(slots)}")
                        g.initializer = op
                        slot = slots[key] = [g, None]
                    ops[k] = slot
                    changed = True
            if changed:
                ins._nee_ops = (call, ops)
    if not slots:
        return
    bd.position_at_start(entry)
    for slot in slots.values():
        slot[1] = bd.load(slot[0])
    for blk in fn.blocks:
        for ins in blk.instructions:
            pending = getattr(ins, "_nee_ops", None)
            if pending is None:
                continue
            call, ops = pending
            ops = [o[1] if isinstance(o, list) else o for o in ops]
            if call:
                ins.operands = [ins.callee] + ops     # CallInstr.args is operands[1:]
            else:
                ins.operands = tuple(ops)
            ins._clear_string_cache()
            del ins._nee_ops


def _distinct(text: str, group, *loop_ids) -> str:
    """Make the access group and the loop IDs distinct, self-referential nodes (llvmlite writes
    uniqued ones)."""
    g = group.get_reference()
    text = text.replace(f"{g} = !{{  }}", f"{g} = distinct !{{}}")
    for md in loop_ids:
        r = md.get_reference()
        ops = ", ".join(o.get_reference() for o in md.operands)
        old = f"{r} = !{{ {ops} }}"
        if old not in text:
            raise RuntimeError(f"llvm_render: loop metadata {old!r} not found")
        text = text.replace(old, f"{r} = distinct !{{ {r}, {ops} }}")
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
    tm, mod = _optimized(ir_text, interleave)
    return bytes(tm.emit_object(mod))


def assembly(ir_text: str, interleave: bool = False) -> str:
    """The host's assembly of ``ir_text`` as compiled for the kernel cache (the same passes): for tests and tools
    reading the machine code (tests/test_conv_tiles_s23.py: register spills in the K loops)."""
    tm, mod = _optimized(ir_text, interleave)
    return tm.emit_assembly(mod)


def _optimized(ir_text: str, interleave: bool):
    """(target machine, module): ``ir_text`` parsed, verified and run through the kernels' pass pipeline."""
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
    return tm, mod


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
        # streaming pays on memory-bound loops only: the masked head / tail and the setup it adds per
        # row cost 10-20% on compute-bound ones (16 MiB, 2 threads: gelu, cost 49: 3.25 vs 2.94 ms;
        # tanh, 30: 1.97 vs 1.64), while x*w+b (2) and relu(x*w+b) (5) gain 1.2-1.7x (nt_threshold)
        self._nt_bytes = (nt_eligible(pieces[1]) and body_cost(*pieces) <= _NT_MAX_COST and
                          sum(_storage_bytes(d) for d in pieces[1]))

    def __call__(self, *arrays):
        m = arrays[-1]
        e = self._by_meta.get(id(m))
        if e is not None and e[0] is m:
            e[1](*arrays)
            return
        self._specialize(m)(*arrays)

    def _streams(self, m) -> bool:
        """Whether the launch this meta array is a chunk of writes enough to stream its outputs
        past the caches (see :func:`nt_threshold`): a chunk of a launch split across the thread
        pool (elementwise.chunk_metas: one chunk per thread from PARALLEL_THRESHOLD elements) is
        counted as that many chunks of its size."""
        limit = nt_threshold()
        if not self._nt_bytes or not limit:
            return False
        from . import threads
        elems = int(m[0]) * int(m[1]) * int(m[2]) * int(m[3])
        nbytes = elems * self._nt_bytes
        nt = threads.NUM_THREADS
        if nt > 1 and elems * nt >= threads.PARALLEL_THRESHOLD:
            nbytes *= nt
        return nbytes >= limit

    def _specialize(self, m):
        streams = self._streams(m)
        lay = m[7::5].tobytes() + (b"nt" if streams else b"")   # the innermost stride of every operand
        f = self._by_layout.get(lay)
        if f is None:
            st = m[7::5].tolist()
            outs, ins = st[:self.nout], st[self.nout:]
            if all(s == 1 for s in outs) and all(s in (0, 1) for s in ins):
                variant = tuple(k for k, s in enumerate(ins) if s == 0)
            else:
                variant = None
                streams = False
            with _lock:
                vkey = ("nt", variant) if streams else variant
                f = self._by_variant.get(vkey)
                if f is None:
                    def render():
                        text = None if streams else self._ir.get(variant)
                        return text if text is not None else render_ir(self.name, *self.pieces, variant=variant,
                                                                       nt=streams)
                    addr = compile_ir(kernel_key(self.prefix, self.pieces, vkey), render)
                    from . import llvm_call
                    f = self._by_variant[vkey] = llvm_call.make(addr, self.nout + self.nin + 1)
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
    h = hashlib.sha1(repr((VERSION, _SOURCES, pieces, variant) + (() if _HOIST_CONSTANTS else ("immediate",))
                          ).encode()).hexdigest()[:16]
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
            # the kernel and its globals (kernel.c0...): renamed per kernel (one engine holds them all)
            text = ir_text.replace('@"kernel"', f'@"{sym}"').replace('@"kernel.', f'@"{sym}.')
            obj = _optimize_and_emit(text, interleave)
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


_rendered: dict = {}   # kernel_key -> unit-stride IR text rendered in this process


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
    key = kernel_key(prefix, pieces, ())
    # identical groups (an unrolled recurrence: one per time step) render their IR once per process, not
    # once each before the first launch writes the disk cache (a 130-step GRU: ~600 renders, ~25 s)
    unit = _rendered.get(key) or cached_ir(key)
    if unit is None:
        try:
            unit = render_ir(name, *pieces, variant=())
        except _Unsupported:
            stats["unsupported"] += 1
            raise
    if len(_rendered) < 4096:
        _rendered[key] = unit
    src = ("# rendered as LLVM IR by devices/cpu/llvm_render.py (unit-stride loop below; other layouts get\n"
           "# their own loop on first launch); the same kernel as Numba source:\n" + py_source + "\n" + unit)
    return LLVMKernel(prefix, name, pieces, src, unit), src


_KNOWN = frozenset({"bool", "uint8", "int8", "int16", "int32", "int64", "float32", "float64", "float16",
                    "bfloat16"})


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
# every operand is unit-stride along the row, or (``bcast``) constant along it; then the elements
# the whole launch writes (an estimate, see row_meta) and the streaming threshold in bytes: the
# final pass writes dst with non-temporal stores when they are reached (0: never).
#
# softmax's passes over a row: the max (through order-preserving integer keys; after a prologue, taken in the
# prologue's own pass as its value is stored), exp(x - max) into dst with the sum (float32: exp_sm), then dst
# scaled by 1 / sum in place -- the row is read twice after the prologue (before: a separate max pass, 3), each
# exp computed once (an online max + rescaled sum would compute two per element).
ROW_MODES = ("softmax", "log_softmax", "layer_norm", "rms_norm")
# the softmax exp pass (float32 on AVX2: 2 copies of the 8-lane loop; the default 4 spilled the sum's accumulators
# and the exp's constants to the stack) with its constants left immediate (_hoist_float_constants: held in 13
# registers they were reloaded from stack slots; immediate: broadcast from the constant pool, and 0 selects fold
# into and-masks).  Measured on (12288, 128) rows, x * s then softmax, one 64 KB matrix at a time (as in the batched
# product's epilogue), one thread, process CPU time, min of 40-60 alternating in-process rounds (load 7): 0.70-0.82x
# the time of the kernel before (max, exp, scale passes after the prologue's own) -- interleave 1 / 2 / 4,
# hoisted or immediate, all within that noise.  Both are part of the renderer's source (cache keys).
SOFTMAX_EXP_INTERLEAVE = 2
SOFTMAX_EXP_IMMEDIATE = [True]
_RFM = ("reassoc", "nsz", "arcp", "contract")    # the Numba row kernels' fastmath set
# log_softmax's final (x - max) - log(sum): no reassoc, which would fold it into x - (max + log(sum)) and
# lose the result's digits at large |x| (logits ~1e4: 5e-4); as kernels/nn.py's _sub_exact
_RFM_EXACT = ("nsz", "arcp", "contract")


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
    thr = ld(6 + 4 * nops)
    stream = bd.and_(bd.icmp_signed(">", thr, i64(0)),
                     bd.icmp_signed(">=", bd.mul(ld(5 + 4 * nops), i64(td.bits // 8)), thr))
    lanes = _NT_LINE // (td.bits // 8)
    md_ntstore = mod.add_metadata([ir.Constant(ir.IntType(32), 1)])
    md_nt = mod.add_metadata([mod.add_metadata([ir.MetaDataString(mod, "llvm.loop.vectorize.width"),
                                                ir.Constant(ir.IntType(32), lanes)]),
                              mod.add_metadata([ir.MetaDataString(mod, "llvm.loop.interleave.count"),
                                                ir.Constant(ir.IntType(32), 1)]),
                              mod.add_metadata([ir.MetaDataString(mod, "llvm.loop.vectorize.enable"),
                                                ir.Constant(ir.IntType(1), 1)])])
    nt_loops = []
    # the softmax's exp pass: vectorized, interleaved SOFTMAX_EXP_INTERLEAVE times (the default 4 copies of
    # the exp's ~20 vector values spilled its sum accumulators and constants to the stack on AVX2)
    md_ex = mod.add_metadata([mod.add_metadata([ir.MetaDataString(mod, "llvm.loop.interleave.count"),
                                                ir.Constant(ir.IntType(32), SOFTMAX_EXP_INTERLEAVE)]),
                              mod.add_metadata([ir.MetaDataString(mod, "llvm.loop.vectorize.enable"),
                                                ir.Constant(ir.IntType(1), 1)])])
    ex_loops = []
    imm_blocks = []
    streaming = [False]

    def dstore(v, p):
        """A store of the final pass into dst: non-temporal inside the streaming loop (where every
        vector store is a whole, aligned cache line)."""
        if streaming[0]:
            st = bd.store(v, p, align=_NT_LINE)
            st.set_metadata("nontemporal", md_ntstore)
        else:
            bd.store(v, p)
    body_ast = [ast.parse(s).body[0] for s in body]
    res_ast = [ast.parse(r, mode="eval").body for r in results]

    def loop(count, init, step, md=None):
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
        br = bd.cbranch(bd.icmp_signed("<", i2, count), lp, after)
        if md is not None:
            br.set_metadata("llvm.loop", md)
            (ex_loops if md is md_ex else nt_loops).append(md)
            if md is md_ex and SOFTMAX_EXP_IMMEDIATE[0]:
                imm_blocks.append(lp)
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

    def exp_sm(d):
        """exp(d) for the softmax's d = x - max: d <= 0 or NaN; where d < ``lo_e`` (-inf included) the
        caller selects 0 instead, so no range clamp here.  float32: fastmath.exp_f32's reduction with the
        shifter 1.5 * 2^23 + 127, whose bits shifted left by 23 are 2^k's (k in [-126, 0] for d >= lo_e: one
        normal scale), expm1's Taylor polynomial to degree 7 (the r^8 term, < 5.2e-9 relative, dropped) and
        e = q * 2^k + 2^k in one fma; float64: exp_f64."""
        if dt != "float32":
            return exp(d)
        from . import fastmath as fm
        c = lambda v: fconst(float(v))      # noqa: E731
        fma = lambda a, b, c_: em.intrinsic("fmuladd", td, _V(a, td), _V(b, td), _V(c_, td)).v   # noqa: E731
        rnd = c(float(fm._RND_F) + 127.0)
        t = fma(d, c(fm._LOG2E_F), rnd)
        k = bd.fsub(t, rnd)
        r = fma(k, c(fm._NLN2HI_F), d)
        r = fma(k, c(fm._NLN2LO_F), r)
        p = fma(c(fm._E7_F), r, c(fm._E6_F))
        for e_ in (fm._E5_F, fm._E4_F, fm._E3_F, fm._E2_F):
            p = fma(p, r, c(e_))
        q = fma(p, bd.fmul(r, r), r)                  # expm1(r)
        i32 = ir.IntType(32)
        sc = bd.bitcast(bd.shl(bd.bitcast(t, i32), i32(23)), f)
        return fma(q, sc, sc)

    def log(x):
        return em.call(scalar.f_log32 if dt == "float32" else scalar.f_log64, [_V(x, td)], None).v

    def final_pass(drow, body):
        """``loop(N, [], body)`` for the pass that writes dst: when the launch streams, as a head loop
        to dst's first 64-byte boundary, whole cache lines with non-temporal stores, and a tail
        (rows whose start is not element-aligned keep the plain loop)."""
        sz = td.bits // 8
        lg = lanes.bit_length() - 1
        mis = bd.and_(bd.ptrtoint(drow, i64), i64(_NT_LINE - 1))
        head = bd.select(bd.icmp_unsigned("==", mis, i64(0)), i64(0), bd.udiv(bd.sub(i64(_NT_LINE), mis), i64(sz)))
        head = bd.select(bd.icmp_signed("<", N, head), N, head)
        body_n = bd.shl(bd.lshr(bd.sub(N, head), i64(lg)), i64(lg))
        ok = bd.and_(stream, bd.icmp_signed(">", body_n, i64(0)))
        ok = bd.and_(ok, bd.icmp_unsigned("==", bd.and_(bd.add(mis, bd.mul(head, i64(sz))), i64(_NT_LINE - 1)),
                                          i64(0)))
        with bd.if_else(ok) as (yes, no):
            with yes:
                loop(head, [], body)
                streaming[0] = True
                loop(body_n, [], lambda i, acc: body(bd.add(i, head), acc), md_nt)
                streaming[0] = False
                done = bd.add(head, body_n)
                loop(bd.sub(N, done), [], lambda i, acc: body(bd.add(i, done), acc))
            with no:
                loop(N, [], body)

    def kmax_of(v, acc):
        """max of ``acc`` and the order-preserving integer key of float bits ``v`` (a positive NaN wins)"""
        mask = ir.Constant(ity, (1 << (td.bits - 1)) - 1)
        k = bd.xor(v, bd.and_(bd.ashr(v, ir.Constant(ity, td.bits - 1)), mask))
        return bd.select(bd.icmp_signed(">", k, acc), k, acc)

    def row(a, b):
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
            pkey = [None]

            def pstep(i, acc):
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
                    if j2 == src_k and acc:
                        pkey[0] = kmax_of(bd.bitcast(x, ity), acc[0])
                return [pkey[0]] if acc else []
            if mode in ("softmax", "log_softmax"):
                # the softmax's max pass fused in: the prologue's value is max-reduced as it is stored
                (pro_km,) = loop(N, [ir.Constant(ity, -(1 << (td.bits - 1)))], pstep)
            else:
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
                return [kmax_of(bd.load(bd.gep(srci, [i])), acc[0])]
            if pro is None:
                (km,) = loop(N, [lo], kmax)
            else:
                km = pro_km
            mx = bd.bitcast(bd.xor(km, bd.and_(bd.ashr(km, sh), mask)), f)

            def softmax_body():
                if mode == "log_softmax":
                    def ssum(i, acc):
                        return [bd.fadd(acc[0], exp(bd.fsub(xat(i), mx, flags=_RFM)), flags=_RFM)]
                    (s,) = loop(N, [fconst(0.0)], ssum)
                    ls = log(s)

                    def wr(i, _):
                        dstore(bd.fsub(bd.fsub(xat(i), mx, flags=_RFM_EXACT), ls, flags=_RFM_EXACT), bd.gep(drow, [i]))
                    final_pass(drow, wr)
                    return
                lo_e = fconst(-87.33 if dt == "float32" else -708.39)
                tiny = fconst(float(np.finfo(dt).tiny))

                def esum(i, acc):
                    d = bd.fsub(xat(i), mx, flags=_RFM)
                    e = bd.select(bd.fcmp_ordered("<", d, lo_e), fconst(0.0), exp_sm(d))
                    bd.store(e, bd.gep(drow, [i]))
                    return [bd.fadd(acc[0], e, flags=_RFM)]
                (s,) = loop(N, [fconst(0.0)], esum, md_ex)
                # (no fast-math flags: with them LLVM kept a 1.0 * x in the scale loop)
                inv = bd.fdiv(fconst(1.0), s)

                def scale(i, _):
                    # in place over the row the exp pass just wrote (its lines are owned already:
                    # streaming stores measured 15-20% slower here)
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
            dstore(bd.fadd(v, bd.load(bd.gep(bp, [i])), flags=_RFM), bd.gep(drow, [i]))
        final_pass(drow, aff)
        return []

    def row_step(j, ab):
        # row r = a*B + b: (a, b) carried from row to row (an integer division per row was ~40 cycles)
        a, b = ab
        row(a, b)
        b1 = bd.add(b, i64(1))
        wrap = bd.icmp_signed(">=", b1, B)
        return [bd.select(wrap, bd.add(a, i64(1)), a), bd.select(wrap, i64(0), b1)]
    a0 = bd.sdiv(r0, B)
    loop(bd.sub(r1, r0), [a0, bd.sub(r0, bd.mul(a0, B))], row_step)
    with bd.if_then(stream):
        bd.fence("seq_cst")      # non-temporal stores are weakly ordered: drained before returning
    bd.ret_void()
    if _HOIST_CONSTANTS:
        _hoist_float_constants(mod, fn, bd, imm_blocks)
    what = mode + (" (safe)" if safe else "") + (f" after a prologue ({', '.join(in_dt)})" if pro else "")
    text = str(mod)
    for used, md in ((nt_loops, md_nt), (ex_loops, md_ex)):
        if not used:
            continue
        # one distinct, self-referential loop ID per kind of loop (the streaming loops, the exp pass)
        r = md.get_reference()
        ops = ", ".join(o.get_reference() for o in md.operands)
        old_def = f"{r} = !{{ {ops} }}"
        if old_def not in text:
            raise RuntimeError(f"llvm_render: loop metadata {old_def!r} not found")
        text = text.replace(old_def, f"{r} = distinct !{{ {r}, {ops} }}")
    return f"; neetorch row kernel {what}, {dt}\n" + text


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
    """The meta array of a row kernel launch: ``lays`` = (sa, sb, off) per operand (outs, ins, dst).
    The elements the launch writes are estimated from this chunk's rows: a chunk of a launch split
    across the thread pool (nn.run_rows: one chunk per thread from PARALLEL_THRESHOLD elements)
    counts as that many chunks of its size."""
    from . import threads
    m = np.empty(7 + 4 * len(lays), np.int64)
    m[0], m[1], m[2], m[3] = r0, r1, B, N
    m[4:5].view(np.float64)[0] = eps
    for k, (sa, sb, off) in enumerate(lays):
        m[5 + 4 * k:9 + 4 * k] = (sa, sb, 1, off)
    elems = max(0, int(r1) - int(r0)) * int(N)
    nt = threads.NUM_THREADS
    if nt > 1 and elems * nt >= threads.PARALLEL_THRESHOLD:
        elems *= nt
    m[-2], m[-1] = elems, nt_threshold()
    return m
