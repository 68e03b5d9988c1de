"""LLVM IR versions of reduction.py's generated reduction kernels (float32 / float64 inputs).

reduction.py plans every reduction as ``(outer, reduce, inner)`` strided loops (its meta array ``m``) and runs
one kernel per (kind, input dtype, output dtype).  Its Numba kernels cost 1-2.5 s of CPU each to compile
cold; the kernels here, rendered as LLVM IR and compiled by llvm_render (machine code cached on disk, keyed
by this file's hash), cost tens of ms.  They take the same arguments ``(x, o, oi, m)`` and do the same loops
with the same arithmetic, statement for statement:

* column mode (``xsi == 1 and ni > 1 and xsr != 1``): a row of up to BLOCK accumulators, one contiguous input
  row folded in per reduction step, in order;
* row mode (``xsr == 1``): float sums / means / nansums and count_nonzero in blocks of BLOCK elements (each
  block's float64 sum reassociated and vectorized, blocks added in order); the compare / select kinds
  (amax, amin, argmax, argmin, prod, any, all) over LANES interleaved accumulators when ``nr >= 4 * LANES``
  (lanes tree-combined; argmax / argmin lanes combined in order with the first occurrence winning), then the
  tail in order;
* a general strided loop otherwise.

Sums accumulate in float64 (``reassoc contract`` as Numba's ``fastmath`` on those kinds, so the order inside a
block is LLVM's choice in both), mean divides the float64 sum by the count, amax / amin propagate NaN
(``v > a or v != v``), argmax / argmin return the first NaN, else the first occurrence of the extreme.

The kernels check nothing: :func:`kernels`' wrappers check the arrays' types, dtypes, contiguity and every
offset and size the meta implies against the buffers before each call (an IndexError naming the reduction
otherwise).  NEE_IR_REDUCE=0 (or ``MODE[0] = "0"``) keeps reduction.py on its Numba kernels.
"""
from __future__ import annotations

import hashlib
import os

import numpy as np

VERSION = "1"
MODE = [os.environ.get("NEE_IR_REDUCE", "1")]

_FT = {"float32": "float", "float64": "double"}
_LT = {"float32": "float", "float64": "double", "int64": "i64", "bool": "i8"}
_SUM = {"sum", "mean", "nansum", "prod"}       # loads widened to the (float64) accumulator
_INF = "0x7FF0000000000000"
_NINF = "0xFFF0000000000000"
_I64 = np.dtype(np.int64)

_kernels: dict = {}


def _source_key() -> str:
    with open(__file__, "rb") as fh:
        return hashlib.sha1(fh.read()).hexdigest()[:12]


_SRC = _source_key()


# ------------------------------------------------------------------------------------ a tiny IR emitter
class _E:
    """IR text with every variable an alloca (promoted to registers by the optimizer's SROA / mem2reg)."""

    def __init__(self):
        self.body: list = []
        self.allocas: list = []
        self.meta: list = []
        self.n = 0

    def _id(self) -> int:
        self.n += 1
        return self.n

    def op(self, s: str) -> str:
        t = f"%t{self._id()}"
        self.body.append(f"  {t} = {s}")
        return t

    def emit(self, s: str) -> None:
        self.body.append("  " + s)

    def label(self, lab: str) -> None:
        self.body.append(f"{lab}:")

    def var(self, ty: str, init=None) -> str:
        v = f"%v{self._id()}"
        self.allocas.append(f"  {v} = alloca {ty}")
        if init is not None:
            self.st(ty, init, v)
        return v

    def arr(self, ty: str, n: int) -> str:
        v = f"%a{self._id()}"
        self.allocas.append(f"  {v} = alloca {ty}, i64 {n}, align 32")
        return v

    def ld(self, ty: str, p: str) -> str:
        return self.op(f"load {ty}, {ty}* {p}")

    def st(self, ty: str, val: str, p: str) -> None:
        self.emit(f"store {ty} {val}, {ty}* {p}")

    def gep(self, ty: str, base: str, idx: str) -> str:
        return self.op(f"getelementptr {ty}, {ty}* {base}, i64 {idx}")

    def loop(self, start, end, fn, step=1, novec=False) -> None:
        """``for i in range(start, end, step): fn(i)`` (i64 values or constants); ``novec``: not for the loop
        vectorizer (a short tail or a strided run: its vector versions are dead code that costs compile time)."""
        iv = self.var("i64", start)
        k = self._id()
        c, b, x = f"lc{k}", f"lb{k}", f"lx{k}"
        self.emit(f"br label %{c}")
        self.label(c)
        i = self.ld("i64", iv)
        cc = self.op(f"icmp slt i64 {i}, {end}")
        self.emit(f"br i1 {cc}, label %{b}, label %{x}")
        self.label(b)
        fn(i)
        self.st("i64", self.op(f"add i64 {i}, {step}"), iv)
        if novec:
            md = len(self.meta)
            self.meta.append(f"!{md} = distinct !{{!{md}, !{md + 1}}}")
            self.meta.append(f'!{md + 1} = !{{!"llvm.loop.vectorize.enable", i1 false}}')
            self.emit(f"br label %{c}, !llvm.loop !{md}")
        else:
            self.emit(f"br label %{c}")
        self.label(x)

    def if_(self, cond: str, then, els=None) -> None:
        k = self._id()
        t, e, j = f"it{k}", f"ie{k}", f"ij{k}"
        self.emit(f"br i1 {cond}, label %{t}, label %{e if els else j}")
        self.label(t)
        then()
        self.emit(f"br label %{j}")
        if els:
            self.label(e)
            els()
            self.emit(f"br label %{j}")
        self.label(j)

    def text(self, header: str, ret: str = "ret void") -> str:
        return "\n".join([header, "entry:"] + self.allocas + self.body + ["  " + ret, "}"] + self.meta) + "\n"


def acc_dtype(kind: str, dt: str) -> str:
    """reduction._acc_dtype for float inputs."""
    if kind in _SUM:
        return "float64"
    if kind == "cnz":
        return "int64"
    if kind in ("any", "all"):
        return "bool"
    return dt


class _K:
    """The per-(kind, dtype, out) pieces: init constant, update, final value, store conversion."""

    def __init__(self, kind: str, dt: str, out: str):
        self.kind = kind
        self.T = _FT[dt]
        self.acc = acc_dtype(kind, dt)
        self.A = _LT[self.acc]
        self.O = _LT[out]
        self.arg = kind in ("argmax", "argmin")
        self.blocked = kind in ("sum", "mean", "nansum", "cnz")
        fl = self.A in ("float", "double")
        self.fm = "reassoc contract " if (self.blocked or kind == "prod") and fl else ""
        if kind in ("sum", "mean", "nansum"):
            self.init = "0.0"
        elif kind == "prod":
            self.init = "1.0"
        elif kind == "cnz":
            self.init = "0"
        elif kind in ("amax", "argmax"):
            self.init = _NINF
        elif kind in ("amin", "argmin"):
            self.init = _INF
        elif kind == "any":
            self.init = "0"
        elif kind == "all":
            self.init = "1"
        else:
            raise NotImplementedError(kind)
        conv = {("double", "float"): "fptrunc", ("float", "double"): "fpext"}
        if self.A != self.O and (self.A, self.O) not in conv:
            raise NotImplementedError(f"reduce_ir: {kind} accumulator {self.acc} into {out}")
        self.conv = conv.get((self.A, self.O))

    def load(self, E: _E, p: str) -> str:
        v = E.ld(self.T, p)
        if self.kind in _SUM and self.T != self.A:
            v = E.op(f"fpext {self.T} {v} to {self.A}")
        return v

    def upd(self, E: _E, a: str, v: str, ai=None, r=None, vacc=False):
        """(new a, new ai): reduction._spec's update statement (``vacc``: v is an accumulator, not an input)."""
        k, A, fm = self.kind, self.A, self.fm
        if k in ("sum", "mean"):
            return E.op(f"fadd {fm}{A} {a}, {v}"), ai
        if k == "nansum":
            o = E.op(f"fcmp ord {A} {v}, {v}")
            s = E.op(f"select i1 {o}, {A} {v}, {A} 0.0")
            return E.op(f"fadd {fm}{A} {a}, {s}"), ai
        if k == "prod":
            return E.op(f"fmul {fm}{A} {a}, {v}"), ai
        if k in ("cnz", "any", "all"):
            c = E.op(f"icmp ne {A} {v}, 0" if vacc else f"fcmp une {self.T} {v}, 0.0")
            z = E.op(f"zext i1 {c} to {A}")
            return E.op(f"{ {'cnz': 'add', 'any': 'or', 'all': 'and'}[k]} {A} {a}, {z}"), ai
        cmp = "ogt" if k in ("amax", "argmax") else "olt"
        g = E.op(f"fcmp {cmp} {A} {v}, {a}")
        vn = E.op(f"fcmp uno {A} {v}, {v}")
        if not self.arg:
            c = E.op(f"or i1 {g}, {vn}")
            return E.op(f"select i1 {c}, {A} {v}, {A} {a}"), ai
        # branches as Numba's short-circuit ``or`` makes them (predictable on most data: the loop-carried
        # select chain measured 1.5x slower in the scalar loops; the vectorizer still if-converts them)
        ta, tai = E.var(A, a), E.var("i64", ai)
        k = E._id()
        take, chk, join = f"at{k}", f"ac{k}", f"aj{k}"
        E.emit(f"br i1 {g}, label %{take}, label %{chk}")
        E.label(chk)
        ao = E.op(f"fcmp ord {A} {a}, {a}")
        nn = E.op(f"and i1 {vn}, {ao}")
        E.emit(f"br i1 {nn}, label %{take}, label %{join}")
        E.label(take)
        E.st(A, v, ta)
        E.st("i64", r, tai)
        E.emit(f"br label %{join}")
        E.label(join)
        return E.ld(A, ta), E.ld("i64", tai)

    def fin_store(self, E: _E, a: str, nrf: str, optr: str) -> None:
        if self.kind == "mean":
            a = E.op(f"fdiv {self.fm}double {a}, {nrf}")
        if self.conv:
            a = E.op(f"{self.conv} {self.A} {a} to {self.O}")
        E.st(self.O, a, optr)


def _blocked_run(K: _K, E: _E, x: str, q: str, nr: str, av: str, block: int) -> None:
    """av (+)= x[q : q + nr] summed in blocks of ``block`` (each block's sum from init, added to av in order)."""
    A = K.A

    def blk(r0):
        e0 = E.op(f"add i64 {r0}, {block}")
        lt = E.op(f"icmp slt i64 {e0}, {nr}")
        e = E.op(f"select i1 {lt}, i64 {e0}, i64 {nr}")
        bv = E.var(A, K.init)

        def inner(r):
            v = K.load(E, E.gep(K.T, x, E.op(f"add i64 {q}, {r}")))
            E.st(A, K.upd(E, E.ld(A, bv), v)[0], bv)
        E.loop(r0, e, inner)
        b, a = E.ld(A, bv), E.ld(A, av)
        E.st(A, E.op(f"fadd {K.fm}{A} {a}, {b}") if A in ("float", "double") else E.op(f"add {A} {a}, {b}"), av)
    E.loop("0", nr, blk, step=block)


def _strided_run(K: _K, E: _E, x: str, q: str, r_lo, nr: str, sr: str, av: str, aiv) -> None:
    """for r in range(r_lo, nr): update (av, aiv) with x[q + r * sr]."""
    A = K.A

    def body(r):
        off = E.op(f"add i64 {q}, {E.op(f'mul i64 {r}, {sr}')}") if sr != "1" else E.op(f"add i64 {q}, {r}")
        v = K.load(E, E.gep(K.T, x, off))
        a, ai = K.upd(E, E.ld(A, av), v, E.ld("i64", aiv) if K.arg else None, r)
        E.st(A, a, av)
        if K.arg:
            E.st("i64", ai, aiv)
    E.loop(r_lo, nr, body, novec=True)


def render_kernel(kind: str, dt: str, out: str, block: int, lanes: int) -> str:
    """``kernel(x, o, oi, m)``: reduction.render_reduce's kernel in IR (see the module doc)."""
    K = _K(kind, dt, out)
    T, A, O = K.T, K.A, K.O
    E = _E()
    names = ("no", "nr", "ni", "xso", "xsr", "xsi", "xoff", "oso", "osi", "ooff")
    m = {}
    for j, nm in enumerate(names):
        m[nm] = E.ld("i64", E.gep("i64", "%m", str(j)))
    no, nr, ni = m["no"], m["nr"], m["ni"]
    xso, xsr, xsi, xoff, oso, osi, ooff = (m[k] for k in names[3:])
    nrf = E.op(f"sitofp i64 {nr} to double")
    c1 = E.op(f"icmp eq i64 {xsi}, 1")
    c2 = E.op(f"icmp sgt i64 {ni}, 1")
    c3 = E.op(f"icmp ne i64 {xsr}, 1")
    col = E.op(f"and i1 {E.op(f'and i1 {c1}, {c2}')}, {c3}")

    def column():
        buf = E.arr(A, block)
        ibuf = E.arr("i64", block) if K.arg else None

        def per_o(io):
            qo = E.op(f"add i64 {xoff}, {E.op(f'mul i64 {io}, {xso}')}")
            po = E.op(f"add i64 {ooff}, {E.op(f'mul i64 {io}, {oso}')}")

            def per_blk(i0):
                rem = E.op(f"sub i64 {ni}, {i0}")
                lt = E.op(f"icmp slt i64 {rem}, {block}")
                nb = E.op(f"select i1 {lt}, i64 {rem}, i64 {block}")

                def zero(i):
                    E.st(A, K.init, E.gep(A, buf, i))
                    if K.arg:
                        E.st("i64", "0", E.gep("i64", ibuf, i))
                E.loop("0", nb, zero)
                q0 = E.op(f"add i64 {qo}, {i0}")

                def per_r(r):
                    y = E.gep(T, "%x", E.op(f"add i64 {q0}, {E.op(f'mul i64 {r}, {xsr}')}"))

                    def el(i):
                        bp = E.gep(A, buf, i)
                        v = K.load(E, E.gep(T, y, i))
                        if K.arg:
                            ip = E.gep("i64", ibuf, i)
                            a, ai = K.upd(E, E.ld(A, bp), v, E.ld("i64", ip), r)
                            E.st(A, a, bp)
                            E.st("i64", ai, ip)
                        else:
                            E.st(A, K.upd(E, E.ld(A, bp), v)[0], bp)
                    E.loop(_vec_update(K, E, buf, ibuf, y, nb, r, False), nb, el, novec=K.kind in _VEC_KINDS)
                E.loop("0", nr, per_r)
                p = E.op(f"add i64 {po}, {E.op(f'mul i64 {i0}, {osi}')}")

                def outp(i):
                    pi = E.op(f"add i64 {p}, {E.op(f'mul i64 {i}, {osi}')}")
                    K.fin_store(E, E.ld(A, E.gep(A, buf, i)), nrf, E.gep(O, "%o", pi))
                    if K.arg:
                        E.st("i64", E.ld("i64", E.gep("i64", ibuf, i)), E.gep("i64", "%oi", pi))
                E.loop("0", nb, outp)
            E.loop("0", ni, per_blk, step=block)
        E.loop("0", no, per_o)

    def rows():
        lv = li = None
        if not K.blocked:
            lv = E.arr(A, lanes)
            li = E.arr("i64", lanes) if K.arg else None

        def per_o(io):
            qo = E.op(f"add i64 {xoff}, {E.op(f'mul i64 {io}, {xso}')}")
            po = E.op(f"add i64 {ooff}, {E.op(f'mul i64 {io}, {oso}')}")

            def per_i(ii):
                q = E.op(f"add i64 {qo}, {E.op(f'mul i64 {ii}, {xsi}')}")
                av = E.var(A, K.init)
                aiv = E.var("i64", "0") if K.arg else None
                unit = E.op(f"icmp eq i64 {xsr}, 1")

                def unit_run():
                    if K.blocked:
                        _blocked_run(K, E, "%x", q, nr, av, block)
                        return
                    big = E.op(f"icmp sge i64 {nr}, {4 * lanes}")
                    nfr = E.op(f"mul i64 {E.op(f'sdiv i64 {nr}, {lanes}')}, {lanes}")
                    nf = E.op(f"select i1 {big}, i64 {nfr}, i64 0")
                    E.if_(E.op(f"icmp sgt i64 {nf}, 0"), lambda: _lanes(K, E, q, nf, lv, li, av, aiv, lanes))
                    _strided_run(K, E, "%x", q, nf, nr, "1", av, aiv)
                E.if_(unit, unit_run, lambda: _strided_run(K, E, "%x", q, "0", nr, m["xsr"], av, aiv))
                p = E.op(f"add i64 {po}, {E.op(f'mul i64 {ii}, {osi}')}")
                K.fin_store(E, E.ld(A, av), nrf, E.gep(O, "%o", p))
                if K.arg:
                    E.st("i64", E.ld("i64", aiv), E.gep("i64", "%oi", p))
            E.loop("0", ni, per_i)
        E.loop("0", no, per_o)

    E.if_(col, column, rows)
    hdr = f'define void @"kernel"({T}* %x, {O}* %o, i64* %oi, i64* noalias %m) {{'
    return E.text(hdr)


_VEC_KINDS = {"amax", "amin", "argmax", "argmin"}


def _vec_update(K: _K, E: _E, accp: str, idxp, yp: str, n: str, r: str, lanes: bool) -> str:
    """acc[j] (idx[j]) updated with y[j] for j < n rounded down to the vector width, in explicit 256-bit vectors
    (full loads, selects, full stores: the loop vectorizer made masked stores of these compare / select
    updates, microcoded on AMD); returns where the scalar loop continues ("0": not done here).  The index
    of element j is ``r`` (column mode) or ``r + j`` (``lanes``).  The same update as :meth:`_K.upd`, lane
    by lane (each lane is its own accumulator)."""
    if K.kind not in _VEC_KINDS:
        return "0"
    A, T = K.A, K.T
    V = 8 if T == "float" else 4
    VT, VI, VB = f"<{V} x {T}>", f"<{V} x i64>", f"<{V} x i1>"
    zero = "zeroinitializer"
    nv = E.op(f"and i64 {n}, {-V}")
    iota = "<" + ", ".join(f"i64 {k}" for k in range(V)) + ">"

    def splat(ty, vty, val):
        ins = E.op(f"insertelement {vty} undef, {ty} {val}, i32 0")
        return E.op(f"shufflevector {vty} {ins}, {vty} undef, <{V} x i32> {zero}")
    rv = splat("i64", VI, r) if K.arg else None

    def body(j):
        ap = E.op(f"bitcast {A}* {E.gep(A, accp, j)} to {VT}*")
        a = E.op(f"load {VT}, {VT}* {ap}, align 4")
        vp = E.op(f"bitcast {T}* {E.gep(T, yp, j)} to {VT}*")
        v = E.op(f"load {VT}, {VT}* {vp}, align 4")
        # keep = not (v > a or (v != v [and a == a])), written with the complementary compares: a select
        # whose true operand is the loaded accumulator stays a blend (store(select(m, x, load p), p) with the
        # load second is made a masked store, microcoded and slow on AMD)
        ncmp = "ule" if K.kind in ("amax", "argmax") else "uge"
        ng = E.op(f"fcmp {ncmp} {VT} {v}, {a}")
        vo = E.op(f"fcmp ord {VT} {v}, {zero}")
        if K.arg:
            an = E.op(f"fcmp uno {VT} {a}, {zero}")
            keep = E.op(f"and {VB} {ng}, {E.op(f'or {VB} {vo}, {an}')}")
        else:
            keep = E.op(f"and {VB} {ng}, {vo}")
        af = E.op(f"freeze {VT} {a}")     # (no masked store: see above)
        E.emit(f"store {VT} {E.op(f'select {VB} {keep}, {VT} {af}, {VT} {v}')}, {VT}* {ap}, align 4")
        if K.arg:
            ip = E.op(f"bitcast i64* {E.gep('i64', idxp, j)} to {VI}*")
            ai = E.op(f"load {VI}, {VI}* {ip}, align 8")
            ri = E.op(f"add {VI} {E.op(f'add {VI} {rv}, {iota}')}, {splat('i64', VI, j)}") if lanes else rv
            aif = E.op(f"freeze {VI} {ai}")
            E.emit(f"store {VI} {E.op(f'select {VB} {keep}, {VI} {aif}, {VI} {ri}')}, {VI}* {ip}, align 8")
    E.loop("0", nv, body, step=V)
    return nv


def _lanes(K: _K, E: _E, q: str, nf: str, lv: str, li, av: str, aiv, W: int) -> None:
    """reduction.py's LANES interleaved accumulators over x[q : q + nf], combined into (av, aiv)."""
    A = K.A

    def init(j):
        E.st(A, K.init, E.gep(A, lv, j))
        if K.arg:
            E.st("i64", j, E.gep("i64", li, j))
    E.loop("0", str(W), init)

    def step(r0):
        y = E.gep(K.T, "%x", E.op(f"add i64 {q}, {r0}"))

        def el(j):
            lp = E.gep(A, lv, j)
            v = K.load(E, E.gep(K.T, y, j))
            if K.arg:
                ip = E.gep("i64", li, j)
                a, ai = K.upd(E, E.ld(A, lp), v, E.ld("i64", ip), E.op(f"add i64 {r0}, {j}"))
                E.st(A, a, lp)
                E.st("i64", ai, ip)
            else:
                E.st(A, K.upd(E, E.ld(A, lp), v)[0], lp)
        E.loop(_vec_update(K, E, lv, li, y, str(W), r0, True), str(W), el, novec=K.kind in _VEC_KINDS)
    E.loop("0", nf, step, step=W)
    if K.arg:
        # first occurrence among equal lane winners; the first NaN wins
        E.st(A, K.init, av)
        E.st("i64", "0", aiv)
        cmp = "ogt" if K.kind == "argmax" else "olt"

        def comb(j):
            v = E.ld(A, E.gep(A, lv, j))
            r = E.ld("i64", E.gep("i64", li, j))
            a, ai = E.ld(A, av), E.ld("i64", aiv)
            g = E.op(f"fcmp {cmp} {A} {v}, {a}")
            vn = E.op(f"fcmp uno {A} {v}, {v}")
            ao = E.op(f"fcmp ord {A} {a}, {a}")
            an = E.op(f"fcmp uno {A} {a}, {a}")
            eq = E.op(f"fcmp oeq {A} {v}, {a}")
            both = E.op(f"and i1 {vn}, {an}")
            tie = E.op(f"and i1 {E.op(f'or i1 {eq}, {both}')}, {E.op(f'icmp slt i64 {r}, {ai}')}")
            nn = E.op(f"and i1 {vn}, {ao}")
            c = E.op(f"or i1 {E.op(f'or i1 {g}, {nn}')}, {tie}")
            E.st(A, E.op(f"select i1 {c}, {A} {v}, {A} {a}"), av)
            E.st("i64", E.op(f"select i1 {c}, i64 {r}, i64 {ai}"), aiv)
        E.loop("0", str(W), comb)
        return
    # tree-combine the lanes (each halving step an elementwise loop)
    h = W // 2
    while h >= 1:
        def half(j, h=h):
            p = E.gep(A, lv, j)
            E.st(A, K.upd(E, E.ld(A, p), E.ld(A, E.gep(A, lv, E.op(f"add i64 {j}, {h}"))), vacc=True)[0], p)
        E.loop("0", str(h), half)
        h //= 2
    E.st(A, E.ld(A, lv), av)


def render_partial(kind: str, dt: str, block: int) -> str:
    """``partial(x, res, prm)``: res[prm[3]] = the raw accumulator of the run x[prm[0] + r * prm[2]], r < prm[1]
    (reduction.render_reduce's ``partial``: blocked kinds only)."""
    K = _K(kind, dt, acc_dtype(kind, dt))
    if not K.blocked:
        raise NotImplementedError(kind)
    E = _E()
    q, nr, sr, k = (E.ld("i64", E.gep("i64", "%prm", str(j))) for j in range(4))
    av = E.var(K.A, K.init)
    E.if_(E.op(f"icmp eq i64 {sr}, 1"), lambda: _blocked_run(K, E, "%x", q, nr, av, block),
          lambda: _strided_run(K, E, "%x", q, "0", nr, sr, av, None))
    E.st(K.A, E.ld(K.A, av), E.gep(K.A, "%res", k))
    return E.text(f'define void @"kernel"({K.T}* %x, {K.A}* %res, i64* noalias %prm) {{')


# ------------------------------------------------------------------------------------ Python side
def available() -> bool:
    """llvmlite with a native target and MODE not "0"."""
    if MODE[0] == "0":
        return False
    from . import pool_native
    return pool_native.available()


def supported(kind: str, dt: str, out: str) -> bool:
    if dt not in _FT or out not in _LT:
        return False
    try:
        _K(kind, dt, out)
    except NotImplementedError:
        return False
    return True


def _builtin(k, name: str, render, nargs: int, interleave: bool):
    from . import conv_direct
    return conv_direct.builtin(_kernels, k, name, f"reduce_ir|{VERSION}|{_SRC}|{k!r}", render, nargs, interleave)


def _span_ok(off: int, n1: int, s1: int, n2: int, s2: int, n3: int, s3: int, size: int) -> bool:
    lo = hi = off
    for n, s in ((n1, s1), (n2, s2), (n3, s3)):
        d = (n - 1) * s
        if d < 0:
            lo += d
        else:
            hi += d
    return lo >= 0 and hi < size


def _bad(what: str, kind: str, detail: str):
    raise IndexError(f"reduction {kind} (LLVM IR kernel): {what}: {detail}")


def kernels(kind: str, dt: str, out: str, block: int, lanes: int):
    """(kern, part) with reduction._get's signatures (``kern(x, o, oi, m)``, ``part(x, q, nr, xsr, res, k)``,
    part None unless a blocked kind) on the IR kernels, or None (not available / a dtype or kind left to the
    Numba kernels).  The kernels compile on first use."""
    if not available() or not supported(kind, dt, out):
        return None
    xdt, odt = np.dtype(dt), np.dtype(out)
    adt = np.dtype(np.bool_) if acc_dtype(kind, dt) == "bool" else np.dtype(acc_dtype(kind, dt))
    isarg = kind in ("argmax", "argmin")
    K = _K(kind, dt, out)
    key = ("red", kind, dt, out, block, lanes)
    name = f"red{kind}{K.T[0]}{K.O[0]}"
    cell = []

    nd = np.ndarray
    seen: dict = {}     # (meta bytes, buffer sizes) found in bounds -> True, or False: nothing to do

    def kern(x, o, oi, m):
        if not (type(x) is nd and type(o) is nd and type(oi) is nd and type(m) is nd
                and (x.dtype is xdt or x.dtype == xdt) and (o.dtype is odt or o.dtype == odt)
                and (oi.dtype is _I64 or oi.dtype == _I64) and (m.dtype is _I64 or m.dtype == _I64)
                and x.flags.c_contiguous and o.flags.c_contiguous and oi.flags.c_contiguous
                and m.flags.c_contiguous and o.flags.writeable and (not isarg or oi.flags.writeable)
                and m.size >= 11):
            _bad("arguments", kind, f"expected C-contiguous {dt} input, writable {out} output, int64 indices "
                 f"and meta, got {getattr(x, 'dtype', type(x))}, {getattr(o, 'dtype', type(o))}, "
                 f"{getattr(oi, 'dtype', type(oi))}, {getattr(m, 'dtype', type(m))}")
        ck = (m.tobytes(), x.size, o.size, oi.size)
        go = seen.get(ck)
        if go is None:
            go = _check(m, x.size, o.size, oi.size)
            if len(seen) > 4096:
                seen.clear()
            seen[ck] = go
        if go:
            f = cell[0] if cell else None
            if f is None:
                f = _builtin(key, name, lambda: render_kernel(kind, dt, out, block, lanes), 4, True)
                cell.append(f)
            f(x, o, oi, m)

    def _check(m, nx, no_, nix):
        """Every element the kernel reads or writes for meta ``m`` lies in the buffers (IndexError otherwise);
        False: the launch has nothing to do."""
        ml = m.tolist()
        no, nr, ni, xso, xsr, xsi, xoff, oso, osi, ooff, w = ml[:11]
        if no < 0 or nr < 0 or ni < 0 or w != lanes:
            _bad("meta", kind, f"{ml}")
        if not (no and ni):
            return False
        if nr and not _span_ok(xoff, no, xso, nr, xsr, ni, xsi, nx):
            _bad("input offsets", kind, f"meta {ml} past an input of {nx} elements")
        if not _span_ok(ooff, no, oso, ni, osi, 1, 0, no_):
            _bad("output offsets", kind, f"meta {ml} past an output of {no_} elements")
        if isarg and not _span_ok(ooff, no, oso, ni, osi, 1, 0, nix):
            _bad("index offsets", kind, f"meta {ml} past an index output of {nix} elements")
        return True

    part = None
    if K.blocked:
        pkey = ("redpart", kind, dt, block)
        pcell = []

        def part(x, q, nr, xsr, res, k):
            q, nr, xsr, k = int(q), int(nr), int(xsr), int(k)
            if not (type(x) is np.ndarray and type(res) is np.ndarray and x.dtype == xdt and res.dtype == adt
                    and x.ndim == 1 and res.ndim == 1 and x.flags.c_contiguous and res.flags.c_contiguous
                    and res.flags.writeable):
                _bad("partial arguments", kind, f"{getattr(x, 'dtype', type(x))}, {getattr(res, 'dtype', None)}")
            if nr < 0 or not 0 <= k < res.shape[0] or (nr and not _span_ok(q, nr, xsr, 1, 0, 1, 0, x.shape[0])):
                _bad("partial offsets", kind, f"run ({q}, {nr}, {xsr}) into slot {k} of {res.shape[0]}, input "
                     f"of {x.shape[0]} elements")
            f = pcell[0] if pcell else None
            if f is None:
                f = _builtin(pkey, f"redp{kind}{K.T[0]}", lambda: render_partial(kind, dt, block), 3, True)
                pcell.append(f)
            f(x, res, np.array((q, nr, xsr, k), np.int64))
    return kern, part
