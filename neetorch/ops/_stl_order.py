"""torch's CPU orders among equal values, element for element (which index comes first among ties).

torch's CPU ``sort(stable=False)`` (SortingKernel.cpp), ``topk`` (TopKImpl.h), ``mode`` (TensorCompareKernel.cpp) and
``kthvalue`` (Sorting.cpp) run libstdc++'s ``std::sort`` / ``std::partial_sort`` / ``std::nth_element`` or TH's
quickselect on ``(value, index)`` pairs with comparators that look at the values only.  Which of several equal
values (or NaNs) they return, and where, follows from those algorithms' exact swap sequences, so they are reproduced
here step by step (GCC's ``bits/stl_algo.h`` / ``stl_heap.h``: introsort with median-of-three pivots, a 16-element
insertion-sort cut-off, introselect with a 3-element cut-off, heap select + sort_heap; TH's Sedgewick quickselect).

Every comparator torch uses except mode's is a strict weak order on the values (NaN largest, -0.0 == +0.0), so
the rows are first mapped to order-preserving int64 keys (:func:`keys_of`; descending orders: the keys
bit-inverted) and the algorithms compare keys with a plain ``<`` (kthvalue's ``gt_or_nan``: the keys' ``>``).  Only
``mode`` of rows holding NaN compares float64 values themselves (its comparator is a plain ``<``, under which NaN
is equivalent to everything).

The functions below are the reference, in plain Python (small problems run them as they are: no compile).
:func:`_render` emits the same functions line for line as LLVM IR, one kernel per key type ("i64" / "f64"),
compiled on first use by llvm_render (~0.4 s, cached on disk: ~30 ms to load in a later process) and called through
llvm_call's builtin trampolines (:func:`run_rows` chooses).  Numba is not used: its compile of the same code took
12 s.  Rows with no two equal keys have one order whatever the algorithm; the callers (kernels/indexing.py) skip
the emulation for such rows where numpy is faster.
"""
from __future__ import annotations

import hashlib
import threading

import numpy as np


# ops of :func:`rows`
SORT, TOPK_PARTIAL, TOPK_NTH, TOPK_NTH_SORTED, KTH, MODE = range(6)


def _push_heap(v, ix, first, hole, top, val, vi):
    parent = (hole - 1) // 2
    while hole > top and v[first + parent] < val:
        v[first + hole] = v[first + parent]
        ix[first + hole] = ix[first + parent]
        hole = parent
        parent = (hole - 1) // 2
    v[first + hole] = val
    ix[first + hole] = vi


def _adjust_heap(v, ix, first, hole, length, val, vi):
    top = hole
    child = hole
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if v[first + child] < v[first + child - 1]:
            child -= 1
        v[first + hole] = v[first + child]
        ix[first + hole] = ix[first + child]
        hole = child
    if (length & 1) == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        v[first + hole] = v[first + child - 1]
        ix[first + hole] = ix[first + child - 1]
        hole = child - 1
    _push_heap(v, ix, first, hole, top, val, vi)


def _heap_select(v, ix, first, middle, last):
    """std::__heap_select: make_heap(first, middle), then every smaller later element replaces the top."""
    length = middle - first
    if length >= 2:
        parent = (length - 2) // 2
        while True:
            _adjust_heap(v, ix, first, parent, length, v[first + parent], ix[first + parent])
            if parent == 0:
                break
            parent -= 1
    for i in range(middle, last):
        if v[i] < v[first]:     # __pop_heap(first, middle, i)
            val, vi = v[i], ix[i]
            v[i] = v[first]
            ix[i] = ix[first]
            _adjust_heap(v, ix, first, 0, length, val, vi)


def _partial_sort(v, ix, first, middle, last):
    """std::partial_sort: heap select, then sort_heap."""
    _heap_select(v, ix, first, middle, last)
    while middle - first > 1:
        middle -= 1
        val, vi = v[middle], ix[middle]
        v[middle] = v[first]
        ix[middle] = ix[first]
        _adjust_heap(v, ix, first, 0, middle - first, val, vi)


def _linear_insert(v, ix, last, lo):
    """std::__unguarded_linear_insert (``lo``: a bound libstdc++ does not need for a strict weak order)."""
    val, vi = v[last], ix[last]
    nxt = last - 1
    while nxt >= lo and val < v[nxt]:
        v[last] = v[nxt]
        ix[last] = ix[nxt]
        last = nxt
        nxt -= 1
    v[last] = val
    ix[last] = vi


def _insertion_sort(v, ix, first, last):
    for i in range(first + 1, last):
        if v[i] < v[first]:
            val, vi = v[i], ix[i]
            for j in range(i, first, -1):
                v[j] = v[j - 1]
                ix[j] = ix[j - 1]
            v[first] = val
            ix[first] = vi
        else:
            _linear_insert(v, ix, i, first)


def _swap(v, ix, i, j):
    t = v[i]
    v[i] = v[j]
    v[j] = t
    u = ix[i]
    ix[i] = ix[j]
    ix[j] = u


def _partition_pivot(v, ix, first, last):
    """std::__unguarded_partition_pivot: median of (first + 1, mid, last - 1) moved to first, then Hoare's
    partition around it (bounded scans: libstdc++'s unguarded ones never pass them for a strict weak order)."""
    a, b, c = first + 1, first + (last - first) // 2, last - 1
    if v[a] < v[b]:
        if v[b] < v[c]:
            m = b
        elif v[a] < v[c]:
            m = c
        else:
            m = a
    elif v[a] < v[c]:
        m = a
    elif v[b] < v[c]:
        m = c
    else:
        m = b
    _swap(v, ix, first, m)
    lo, hi = first + 1, last
    while True:
        while lo < last and v[lo] < v[first]:
            lo += 1
        hi -= 1
        while hi > first and v[first] < v[hi]:
            hi -= 1
        if not lo < hi:
            return lo
        _swap(v, ix, lo, hi)
        lo += 1


def _lg2(n):
    r = 0
    while n > 1:
        n >>= 1
        r += 1
    return r


def _sort(v, ix, first, last, stack):
    """std::sort(first, last): introsort loop down to 16-element pieces, then the final insertion sort."""
    if last - first < 2:
        return
    stack[0, 0], stack[0, 1], stack[0, 2] = first, last, 2 * _lg2(last - first)
    sp = 1
    while sp > 0:
        sp -= 1
        lo, hi, depth = stack[sp, 0], stack[sp, 1], stack[sp, 2]
        while hi - lo > 16:
            if depth == 0:
                _partial_sort(v, ix, lo, hi, hi)
                break
            depth -= 1
            cut = _partition_pivot(v, ix, lo, hi)
            stack[sp, 0], stack[sp, 1], stack[sp, 2] = cut, hi, depth
            sp += 1
            hi = cut
    if last - first > 16:
        _insertion_sort(v, ix, first, first + 16)
        for i in range(first + 16, last):
            _linear_insert(v, ix, i, first)
    else:
        _insertion_sort(v, ix, first, last)


def _nth_element(v, ix, first, nth, last):
    """std::nth_element(first, nth, last): introselect down to 3 elements, then insertion sort."""
    if first == last or nth == last:
        return
    depth = 2 * _lg2(last - first)
    while last - first > 3:
        if depth == 0:
            _heap_select(v, ix, first, nth + 1, last)
            _swap(v, ix, first, nth)
            return
        depth -= 1
        cut = _partition_pivot(v, ix, first, last)
        if cut <= nth:
            first = cut
        else:
            last = cut
    _insertion_sort(v, ix, first, last)


def _quickselect(v, ix, kk, n):
    """Sorting.cpp's quick_select_template with ``gt_or_nan`` (here: the keys' ``>``): ``v[kk]`` the kk-th."""
    L, R = 0, n - 1
    while R > L:
        if R == L + 1:
            if v[R] < v[L]:
                _swap(v, ix, L, R)
            break
        _swap(v, ix, (L + R) >> 1, L + 1)
        if v[R] < v[L + 1]:
            _swap(v, ix, L + 1, R)
        if v[R] < v[L]:
            _swap(v, ix, L, R)
        if v[L] < v[L + 1]:
            _swap(v, ix, L + 1, L)
        i, j = L + 1, R
        piv = v[L]
        while True:
            i += 1
            while i < R and v[i] < piv:
                i += 1
            j -= 1
            while j > L and piv < v[j]:
                j -= 1
            if j < i:
                break
            _swap(v, ix, i, j)
        _swap(v, ix, L, j)
        if j <= kk:
            L = i
        if j >= kk:
            R = j - 1


def rows(keys, op, k):
    """Indices (rows, m) of torch's CPU order on each row of the 2-D ``keys`` (compared with ``<``): ``op`` SORT
    (m = n), TOPK_PARTIAL / TOPK_NTH / TOPK_NTH_SORTED (m = k: the first k after std::partial_sort(0, k, n) or
    std::nth_element(0, k - 1, n) [+ std::sort(0, k - 1)]), KTH (m = 1: the quickselect's k-th, 1-based),
    MODE (m = 1: std::sort, then the last element of the first longest run of equal keys)."""
    nr, n = keys.shape
    m = n if op == SORT else (k if op < KTH else 1)
    out = np.empty((nr, m), np.int64)
    stack = np.empty((2 * 64 + 8, 3), np.int64)
    for r in range(nr):
        v, ix = keys[r].tolist(), list(range(n))      # (Python lists: the fastest plain-Python indexing)
        if op == SORT or op == MODE:
            _sort(v, ix, 0, n, stack)
        elif op == TOPK_PARTIAL:
            _partial_sort(v, ix, 0, k, n)
        elif op == KTH:
            _quickselect(v, ix, k - 1, n)
            out[r, 0] = ix[k - 1]
            continue
        else:
            _nth_element(v, ix, 0, k - 1, n)
            if op == TOPK_NTH_SORTED:
                _sort(v, ix, 0, k - 1, stack)
        if op == MODE:
            best, freq, maxf = 0, 0, 0
            for i in range(n):
                freq += 1
                if i == n - 1 or v[i] != v[i + 1]:
                    if freq > maxf:
                        best, maxf = ix[i], freq
                    freq = 0
            out[r, 0] = best
        else:
            out[r] = ix[:m]
    return out


# ---------------------------------------------------------------- keys
def keys_of(a: np.ndarray, descending: bool = False) -> np.ndarray:
    """int64 keys whose ``<`` is torch's ascending comparator on ``a``'s values (NaN largest and all NaNs equal,
    -0.0 == +0.0), bit-inverted for the descending one (NaN first); same shape."""
    kind = a.dtype.kind
    if kind == "f" or a.dtype.name == "bfloat16":
        if a.dtype.itemsize not in (2, 4, 8) or a.dtype.name == "bfloat16":
            a = a.astype(np.float32)        # (exact)
        it = np.dtype(f"i{a.dtype.itemsize}").type
        flip = it(np.iinfo(it).max)
        f = a + a.dtype.type(0)             # (-0.0 + 0.0 is +0.0; a new array, changed in place below)
        nan = np.isnan(f)
        keys = f.view(it)                   # (the sign-magnitude bits, in the float's own width)
        np.bitwise_xor(keys, flip, out=keys, where=keys < 0)
        keys[nan] = flip
    elif kind == "u" and a.dtype.itemsize == 8:
        keys = (a ^ np.uint64(1 << 63)).view(np.int64)
    elif kind in "iub":
        keys = a
    else:
        raise TypeError(f"_stl_order.keys_of: dtype {a.dtype} has no order")
    if descending:
        if keys.dtype.kind in "ub":
            keys = keys.astype(np.int64)
        keys = ~keys if keys is a else np.invert(keys, out=keys)      # (the input itself stays as it is)
    return keys.astype(np.int64, copy=False)


# ---------------------------------------------------------------- the same functions in LLVM IR
def _render(fkind: str) -> str:
    """LLVM IR of ``void kernel(i8* keys, i8* out, i8* prm, i8* scratch)``: :func:`rows` line for line, on keys of
    ``fkind`` ("i64": int64 compared signed; "f64": float64 with C's ``<`` / ``!=``); ``prm`` = (rows, n, op, k, m)
    int64, ``scratch`` 2 n + 3 * _STACK int64 (the row's keys, its indices, the introsort stack)."""
    from llvmlite import ir
    i64, i1 = ir.IntType(64), ir.IntType(1)
    KT = i64 if fkind == "i64" else ir.DoubleType()
    KP, IP, BP = KT.as_pointer(), i64.as_pointer(), ir.IntType(8).as_pointer()
    mod = ir.Module(name="stl_order")

    def C(x):
        return ir.Constant(i64, x)

    class F:
        """One function being emitted: locals as entry-block allocas (promoted by mem2reg), structured control
        flow (while / if / short-circuit and-or, break, return)."""

        def __init__(self, name, args, ret=ir.VoidType()):
            self.fn = ir.Function(mod, ir.FunctionType(ret, [a for a, _ in args]), name=name)
            if name != "kernel":
                self.fn.linkage = "internal"
            self.ret_ty = ret
            entry = self.fn.append_basic_block("entry")
            self.ab = ir.IRBuilder(entry)
            self.b = ir.IRBuilder(self.fn.append_basic_block("body"))
            self.a = {n: arg for (_, n), arg in zip(args, self.fn.args)}
            self.loops = []

        def done(self):
            self.ab.branch(self.fn.blocks[1])
            if not self.b.block.is_terminated:
                if isinstance(self.ret_ty, ir.VoidType):
                    self.b.ret_void()
                else:
                    self.b.unreachable()
            return self.fn

        def _block(self):
            return self.fn.append_basic_block()

        def var(self, init=None, ty=i64):
            p = self.ab.alloca(ty)
            if init is not None:
                self.b.store(init, p)
            return p

        def get(self, p):
            return self.b.load(p)

        def set(self, p, x):
            self.b.store(x, p)

        def inc(self, p, d=1):
            self.b.store(self.b.add(self.b.load(p), C(d)), p)

        def ld(self, arr, i):
            return self.b.load(self.b.gep(arr, [i]))

        def st(self, arr, i, x):
            self.b.store(x, self.b.gep(arr, [i]))

        def lt(self, x, y):
            return self.b.icmp_signed("<", x, y) if fkind == "i64" else self.b.fcmp_ordered("<", x, y)

        def ne(self, x, y):
            return self.b.icmp_signed("!=", x, y) if fkind == "i64" else self.b.fcmp_unordered("!=", x, y)

        def icmp(self, op, x, y):
            return self.b.icmp_signed(op, x, y)

        def add(self, x, y):
            return self.b.add(x, y if isinstance(y, ir.Value) else C(y))

        def sub(self, x, y):
            return self.b.sub(x, y if isinstance(y, ir.Value) else C(y))

        def half(self, x):      # x // 2 (floor, as Python's)
            return self.b.ashr(x, C(1))

        def swap(self, v, ix, i, j):
            b = self.b
            pi, pj = b.gep(v, [i]), b.gep(v, [j])
            t, u = b.load(pi), b.load(pj)
            b.store(u, pi)
            b.store(t, pj)
            qi, qj = b.gep(ix, [i]), b.gep(ix, [j])
            t, u = b.load(qi), b.load(qj)
            b.store(u, qi)
            b.store(t, qj)

        def logic(self, f1, f2, is_and):
            c1 = f1()
            b1 = self.b.block
            rhs, join = self._block(), self._block()
            if is_and:
                self.b.cbranch(c1, rhs, join)
            else:
                self.b.cbranch(c1, join, rhs)
            self.b.position_at_end(rhs)
            c2 = f2()
            b2 = self.b.block
            self.b.branch(join)
            self.b.position_at_end(join)
            phi = self.b.phi(i1)
            phi.add_incoming(ir.Constant(i1, 0 if is_and else 1), b1)
            phi.add_incoming(c2, b2)
            return phi

        def while_(self, cond, body):
            hdr, bod, end = self._block(), self._block(), self._block()
            self.b.branch(hdr)
            self.b.position_at_end(hdr)
            self.b.cbranch(cond() if cond is not None else ir.Constant(i1, 1), bod, end)
            self.b.position_at_end(bod)
            self.loops.append(end)
            body()
            self.loops.pop()
            if not self.b.block.is_terminated:
                self.b.branch(hdr)
            self.b.position_at_end(end)

        def for_(self, lo, hi, body):
            i = self.var(lo)

            def step():
                body(self.get(i))
                self.inc(i)
            self.while_(lambda: self.icmp("<", self.get(i), hi), step)

        def brk(self):
            self.b.branch(self.loops[-1])
            self.b.position_at_end(self._block())

        def ret(self, x=None):
            if x is None:
                self.b.ret_void()
            else:
                self.b.ret(x)
            self.b.position_at_end(self._block())

        def if_(self, c, then, other=None):
            t, j = self._block(), self._block()
            e = self._block() if other is not None else j
            self.b.cbranch(c, t, e)
            for blk, fn in ((t, then), (e, other)):
                if fn is None:
                    continue
                self.b.position_at_end(blk)
                fn()
                if not self.b.block.is_terminated:
                    self.b.branch(j)
            self.b.position_at_end(j)

    VI = [(KP, "v"), (IP, "ix")]

    # _adjust_heap (with _push_heap)
    f = F("kernel.adjust_heap", VI + [(i64, "first"), (i64, "hole"), (i64, "length"), (KT, "val"), (i64, "vi")])
    v, ix, first, length, val, vi = (f.a[n] for n in ("v", "ix", "first", "length", "val", "vi"))
    top = f.a["hole"]
    hole, child = f.var(top), f.var(top)

    def _down():
        c = f.b.mul(f.add(f.get(child), 1), C(2))
        f.set(child, c)
        f.if_(f.lt(f.ld(v, f.add(first, c)), f.ld(v, f.sub(f.add(first, c), 1))), lambda: f.inc(child, -1))
        c = f.get(child)
        h = f.add(first, f.get(hole))
        f.st(v, h, f.ld(v, f.add(first, c)))
        f.st(ix, h, f.ld(ix, f.add(first, c)))
        f.set(hole, c)
    f.while_(lambda: f.icmp("<", f.get(child), f.half(f.sub(length, 1))), _down)

    def _odd():
        c = f.b.mul(f.add(f.get(child), 1), C(2))
        h = f.add(first, f.get(hole))
        f.st(v, h, f.ld(v, f.sub(f.add(first, c), 1)))
        f.st(ix, h, f.ld(ix, f.sub(f.add(first, c), 1)))
        f.set(hole, f.sub(c, 1))
    f.if_(f.b.and_(f.icmp("==", f.b.and_(length, C(1)), C(0)),
                   f.icmp("==", f.get(child), f.half(f.sub(length, 2)))), _odd)
    parent = f.var(f.half(f.sub(f.get(hole), 1)))

    def _up():
        p, h = f.add(first, f.get(parent)), f.add(first, f.get(hole))
        f.st(v, h, f.ld(v, p))
        f.st(ix, h, f.ld(ix, p))
        f.set(hole, f.get(parent))
        f.set(parent, f.half(f.sub(f.get(hole), 1)))
    f.while_(lambda: f.logic(lambda: f.icmp(">", f.get(hole), top),
                             lambda: f.lt(f.ld(v, f.add(first, f.get(parent))), val), True), _up)
    f.st(v, f.add(first, f.get(hole)), val)
    f.st(ix, f.add(first, f.get(hole)), vi)
    adjust_heap = f.done()

    # _heap_select
    f = F("kernel.heap_select", VI + [(i64, "first"), (i64, "middle"), (i64, "last")])
    v, ix, first, middle, last = (f.a[n] for n in ("v", "ix", "first", "middle", "last"))
    length = f.sub(middle, first)

    def _make():
        parent = f.var(f.half(f.sub(length, 2)))

        def _one():
            p = f.get(parent)
            q = f.add(first, p)
            f.b.call(adjust_heap, [v, ix, first, p, length, f.ld(v, q), f.ld(ix, q)])
            f.if_(f.icmp("==", p, C(0)), f.brk)
            f.inc(parent, -1)
        f.while_(None, _one)
    f.if_(f.icmp(">=", length, C(2)), _make)

    def _pop(i):
        def _do():
            val, vi = f.ld(v, i), f.ld(ix, i)
            f.st(v, i, f.ld(v, first))
            f.st(ix, i, f.ld(ix, first))
            f.b.call(adjust_heap, [v, ix, first, C(0), length, val, vi])
        f.if_(f.lt(f.ld(v, i), f.ld(v, first)), _do)
    f.for_(middle, last, _pop)
    heap_select = f.done()

    # _partial_sort
    f = F("kernel.partial_sort", VI + [(i64, "first"), (i64, "middle"), (i64, "last")])
    v, ix, first = f.a["v"], f.a["ix"], f.a["first"]
    f.b.call(heap_select, [v, ix, first, f.a["middle"], f.a["last"]])
    mid = f.var(f.a["middle"])

    def _sortheap():
        f.inc(mid, -1)
        m = f.get(mid)
        val, vi = f.ld(v, m), f.ld(ix, m)
        f.st(v, m, f.ld(v, first))
        f.st(ix, m, f.ld(ix, first))
        f.b.call(adjust_heap, [v, ix, first, C(0), f.sub(m, first), val, vi])
    f.while_(lambda: f.icmp(">", f.sub(f.get(mid), first), C(1)), _sortheap)
    partial_sort = f.done()

    # _linear_insert
    f = F("kernel.linear_insert", VI + [(i64, "last"), (i64, "lo")])
    v, ix, lo = f.a["v"], f.a["ix"], f.a["lo"]
    val, vi = f.ld(v, f.a["last"]), f.ld(ix, f.a["last"])
    lst, nxt = f.var(f.a["last"]), f.var(f.sub(f.a["last"], 1))

    def _shift():
        n_, l_ = f.get(nxt), f.get(lst)
        f.st(v, l_, f.ld(v, n_))
        f.st(ix, l_, f.ld(ix, n_))
        f.set(lst, n_)
        f.set(nxt, f.sub(n_, 1))
    f.while_(lambda: f.logic(lambda: f.icmp(">=", f.get(nxt), lo), lambda: f.lt(val, f.ld(v, f.get(nxt))), True),
             _shift)
    f.st(v, f.get(lst), val)
    f.st(ix, f.get(lst), vi)
    linear_insert = f.done()

    # _insertion_sort
    f = F("kernel.insertion_sort", VI + [(i64, "first"), (i64, "last")])
    v, ix, first = f.a["v"], f.a["ix"], f.a["first"]

    def _ins(i):
        def _front():
            val, vi = f.ld(v, i), f.ld(ix, i)
            j = f.var(i)

            def _mv():
                jj = f.get(j)
                f.st(v, jj, f.ld(v, f.sub(jj, 1)))
                f.st(ix, jj, f.ld(ix, f.sub(jj, 1)))
                f.set(j, f.sub(jj, 1))
            f.while_(lambda: f.icmp(">", f.get(j), first), _mv)
            f.st(v, first, val)
            f.st(ix, first, vi)
        f.if_(f.lt(f.ld(v, i), f.ld(v, first)), _front, lambda: f.b.call(linear_insert, [v, ix, i, first]))
    f.for_(f.add(first, 1), f.a["last"], _ins)
    insertion_sort = f.done()

    # _partition_pivot
    f = F("kernel.partition_pivot", VI + [(i64, "first"), (i64, "last")], ret=i64)
    v, ix, first, last = f.a["v"], f.a["ix"], f.a["first"], f.a["last"]
    a, bb, c = f.add(first, 1), f.add(first, f.half(f.sub(last, first))), f.sub(last, 1)
    va, vb, vc = f.ld(v, a), f.ld(v, bb), f.ld(v, c)
    ab, bc, ac = f.lt(va, vb), f.lt(vb, vc), f.lt(va, vc)
    sel = f.b.select
    m = sel(ab, sel(bc, bb, sel(ac, c, a)), sel(ac, a, sel(bc, c, bb)))
    f.swap(v, ix, first, m)
    lo, hi = f.var(f.add(first, 1)), f.var(last)

    def _part():
        f.while_(lambda: f.logic(lambda: f.icmp("<", f.get(lo), last),
                                 lambda: f.lt(f.ld(v, f.get(lo)), f.ld(v, first)), True), lambda: f.inc(lo))
        f.inc(hi, -1)
        f.while_(lambda: f.logic(lambda: f.icmp(">", f.get(hi), first),
                                 lambda: f.lt(f.ld(v, first), f.ld(v, f.get(hi))), True), lambda: f.inc(hi, -1))
        f.if_(f.icmp(">=", f.get(lo), f.get(hi)), lambda: f.ret(f.get(lo)))
        f.swap(v, ix, f.get(lo), f.get(hi))
        f.inc(lo)
    f.while_(None, _part)
    partition_pivot = f.done()

    def lg2(f, n):      # floor(log2(n)), n > 0
        return f.b.sub(C(63), f.b.ctlz(n, ir.Constant(i1, 0)))

    # _sort
    f = F("kernel.sort", VI + [(i64, "first"), (i64, "last"), (IP, "stack")])
    v, ix, first, last, stack = (f.a[n] for n in ("v", "ix", "first", "last", "stack"))

    def _intro():
        f.st(stack, C(0), first)
        f.st(stack, C(1), last)
        f.st(stack, C(2), f.b.mul(C(2), lg2(f, f.sub(last, first))))
        sp = f.var(C(1))
        lo, hi, depth = f.var(), f.var(), f.var()

        def _seg():
            f.inc(sp, -1)
            s3 = f.b.mul(f.get(sp), C(3))
            f.set(lo, f.ld(stack, s3))
            f.set(hi, f.ld(stack, f.add(s3, 1)))
            f.set(depth, f.ld(stack, f.add(s3, 2)))

            def _cut():
                def _heap():
                    f.b.call(partial_sort, [v, ix, f.get(lo), f.get(hi), f.get(hi)])
                    f.brk()
                f.if_(f.icmp("==", f.get(depth), C(0)), _heap)
                f.inc(depth, -1)
                cut = f.b.call(partition_pivot, [v, ix, f.get(lo), f.get(hi)])
                t3 = f.b.mul(f.get(sp), C(3))
                f.st(stack, t3, cut)
                f.st(stack, f.add(t3, 1), f.get(hi))
                f.st(stack, f.add(t3, 2), f.get(depth))
                f.inc(sp)
                f.set(hi, cut)
            f.while_(lambda: f.icmp(">", f.sub(f.get(hi), f.get(lo)), C(16)), _cut)
        f.while_(lambda: f.icmp(">", f.get(sp), C(0)), _seg)

        def _final_big():
            f.b.call(insertion_sort, [v, ix, first, f.add(first, 16)])
            f.for_(f.add(first, 16), last, lambda i: f.b.call(linear_insert, [v, ix, i, first]))
        f.if_(f.icmp(">", f.sub(last, first), C(16)), _final_big,
              lambda: f.b.call(insertion_sort, [v, ix, first, last]))
    f.if_(f.icmp(">=", f.sub(last, first), C(2)), _intro)
    sort = f.done()

    # _nth_element
    f = F("kernel.nth_element", VI + [(i64, "first"), (i64, "nth"), (i64, "last")])
    v, ix, nth = f.a["v"], f.a["ix"], f.a["nth"]

    def _select():
        fst, lst = f.var(f.a["first"]), f.var(f.a["last"])
        depth = f.var(f.b.mul(C(2), lg2(f, f.sub(f.a["last"], f.a["first"]))))

        def _step():
            def _heap():
                f.b.call(heap_select, [v, ix, f.get(fst), f.add(nth, 1), f.get(lst)])
                f.swap(v, ix, f.get(fst), nth)
                f.ret()
            f.if_(f.icmp("==", f.get(depth), C(0)), _heap)
            f.inc(depth, -1)
            cut = f.b.call(partition_pivot, [v, ix, f.get(fst), f.get(lst)])
            f.if_(f.icmp("<=", cut, nth), lambda: f.set(fst, cut), lambda: f.set(lst, cut))
        f.while_(lambda: f.icmp(">", f.sub(f.get(lst), f.get(fst)), C(3)), _step)
        f.b.call(insertion_sort, [v, ix, f.get(fst), f.get(lst)])
    f.if_(f.b.or_(f.icmp("==", f.a["first"], f.a["last"]), f.icmp("==", nth, f.a["last"])), f.ret, _select)
    nth_element = f.done()

    # _quickselect
    f = F("kernel.quickselect", VI + [(i64, "kk"), (i64, "n")])
    v, ix, kk = f.a["v"], f.a["ix"], f.a["kk"]
    L, R = f.var(C(0)), f.var(f.sub(f.a["n"], 1))

    def _qs():
        def _two():
            f.if_(f.lt(f.ld(v, f.get(R)), f.ld(v, f.get(L))), lambda: f.swap(v, ix, f.get(L), f.get(R)))
            f.brk()
        f.if_(f.icmp("==", f.get(R), f.add(f.get(L), 1)), _two)
        l_, r_ = f.get(L), f.get(R)
        l1 = f.add(l_, 1)
        f.swap(v, ix, f.half(f.add(l_, r_)), l1)
        f.if_(f.lt(f.ld(v, r_), f.ld(v, l1)), lambda: f.swap(v, ix, l1, r_))
        f.if_(f.lt(f.ld(v, r_), f.ld(v, l_)), lambda: f.swap(v, ix, l_, r_))
        f.if_(f.lt(f.ld(v, l_), f.ld(v, l1)), lambda: f.swap(v, ix, l1, l_))
        i, j = f.var(l1), f.var(r_)
        piv = f.ld(v, l_)

        def _scan():
            f.inc(i)
            f.while_(lambda: f.logic(lambda: f.icmp("<", f.get(i), r_), lambda: f.lt(f.ld(v, f.get(i)), piv), True),
                     lambda: f.inc(i))
            f.inc(j, -1)
            f.while_(lambda: f.logic(lambda: f.icmp(">", f.get(j), l_), lambda: f.lt(piv, f.ld(v, f.get(j))), True),
                     lambda: f.inc(j, -1))
            f.if_(f.icmp("<", f.get(j), f.get(i)), f.brk)
            f.swap(v, ix, f.get(i), f.get(j))
        f.while_(None, _scan)
        jj = f.get(j)
        f.swap(v, ix, l_, jj)
        f.if_(f.icmp("<=", jj, kk), lambda: f.set(L, f.get(i)))
        f.if_(f.icmp(">=", jj, kk), lambda: f.set(R, f.sub(jj, 1)))
    f.while_(lambda: f.icmp(">", f.get(R), f.get(L)), _qs)
    quickselect = f.done()

    # the kernel: rows
    f = F("kernel", [(BP, "keys"), (BP, "out"), (BP, "prm"), (BP, "scr")])
    b = f.b
    keys, out, prm = b.bitcast(f.a["keys"], KP), b.bitcast(f.a["out"], IP), b.bitcast(f.a["prm"], IP)
    scr = b.bitcast(f.a["scr"], IP)
    nr, n, op, k, m = (f.ld(prm, C(t)) for t in range(5))
    v, ix, stack = b.bitcast(scr, KP), b.gep(scr, [n]), b.gep(scr, [b.mul(n, C(2))])
    km1 = f.sub(k, 1)

    def is_op(o):
        return f.icmp("==", op, C(o))

    def _row(r):
        base = f.b.mul(r, n)

        def _load(j):
            f.st(v, j, f.ld(keys, f.add(base, j)))
            f.st(ix, j, j)
        f.for_(C(0), n, _load)

        def _nth():
            f.b.call(nth_element, [v, ix, C(0), km1, n])
            f.if_(is_op(TOPK_NTH_SORTED), lambda: f.b.call(sort, [v, ix, C(0), km1, stack]))
        f.if_(f.b.or_(is_op(SORT), is_op(MODE)), lambda: f.b.call(sort, [v, ix, C(0), n, stack]),
              lambda: f.if_(is_op(TOPK_PARTIAL), lambda: f.b.call(partial_sort, [v, ix, C(0), k, n]),
                            lambda: f.if_(is_op(KTH), lambda: f.b.call(quickselect, [v, ix, km1, n]), _nth)))

        def _mode():
            best, freq, maxf = f.var(C(0)), f.var(C(0)), f.var(C(0))

            def _run(i):
                f.inc(freq)

                def _end():
                    def _better():
                        f.set(best, f.ld(ix, i))
                        f.set(maxf, f.get(freq))
                    f.if_(f.icmp(">", f.get(freq), f.get(maxf)), _better)
                    f.set(freq, C(0))
                f.if_(f.logic(lambda: f.icmp("==", i, f.sub(n, 1)),
                              lambda: f.ne(f.ld(v, i), f.ld(v, f.add(i, 1))), False), _end)
            f.for_(C(0), n, _run)
            f.st(out, r, f.get(best))

        def _copy():
            rm = f.b.mul(r, m)
            f.for_(C(0), m, lambda j: f.st(out, f.add(rm, j), f.ld(ix, j)))
        f.if_(is_op(MODE), _mode,
              lambda: f.if_(is_op(KTH), lambda: f.st(out, r, f.ld(ix, km1)), _copy))
    f.for_(C(0), nr, _row)
    f.done()
    return str(mod)


_STACK = 2 * 64 + 8
_kernels: dict = {}
_klock = threading.Lock()


def _source_key() -> str:
    with open(__file__, "rb") as fh:
        return hashlib.sha1(fh.read()).hexdigest()[:16]


def _kernel(fkind: str):
    """The compiled :func:`_render` kernel (once per process; machine code cached on disk by llvm_render),
    or None where llvmlite has no native target."""
    f = _kernels.get(fkind)
    if f is None:
        with _klock:
            f = _kernels.get(fkind)
            if f is None:
                try:
                    from ..devices.cpu import llvm_call, llvm_render
                    llvm_render._init()
                except Exception:   # noqa: BLE001 - no llvmlite / native target: the plain Python path runs
                    f = False
                else:
                    key = "stl_order_" + hashlib.sha1(f"{_source_key()}|{fkind}".encode()).hexdigest()[:16]
                    f = llvm_call.make(llvm_render.compile_ir(key, lambda: _render(fkind)), 4)
                _kernels[fkind] = f
    return f or None


_PY_WORK = 640      # rows * n * log2(n) up to which plain Python runs (<~1 ms; no compile, no machine code load)


def small(nr: int, n: int) -> bool:
    """Whether :func:`run_rows` of ``nr`` rows of ``n`` runs as plain Python."""
    return nr * n * max(1, n.bit_length()) <= _PY_WORK


def run_rows(keys: np.ndarray, op: int, k: int = 0) -> np.ndarray:
    """:func:`rows` of 2-D keys (int64, or float64 for MODE's NaN rows): the compiled kernel, or plain Python for
    small problems (or where there is no LLVM target)."""
    keys = np.ascontiguousarray(keys)
    if keys.ndim != 2 or keys.dtype not in (np.int64, np.float64):      # (the kernels read exactly these)
        raise TypeError(f"_stl_order.run_rows: 2-D int64 or float64 keys expected, got {keys.dtype} {keys.shape}")
    nr, n = keys.shape
    if op not in (SORT, MODE) and not (op in (TOPK_PARTIAL, TOPK_NTH, TOPK_NTH_SORTED, KTH) and 0 <= k <= n
                                       and (k or op != KTH)):
        raise ValueError(f"_stl_order.run_rows: op {op} with k={k} on rows of {n}")
    kern = None
    if not small(nr, n):
        kern = _kernel("i64" if keys.dtype == np.int64 else "f64")
    if kern is None:
        return rows(keys, op, k)
    m = n if op == SORT else (k if op < KTH else 1)
    out = np.empty((nr, m), np.int64)
    if nr == 0 or n == 0 or m == 0:
        return out
    kern(keys, out, np.array([nr, n, op, k, m], np.int64), np.empty(2 * n + 3 * _STACK, np.int64))
    return out
