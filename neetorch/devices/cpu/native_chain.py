"""Bound kernels as lists of native calls: what a compiled graph's step chain replays.

A bound CPU kernel (``f(outs, ins) -> bool`` of the binders in kernels/: a compiled graph's step with its
layout analysis, metas and machine-code callers resolved once) may carry ``f.calls(outs, ins)``: the list
of native calls that ``f(outs, ins)`` makes now, each ``(fn, args, counter)``: ``fn`` an llvm_call builtin
(or the ctypes caller; a Python function where the calls depend on a value made on the way: a bound Winograd
conv, whose input transform's inf / NaN flag picks what follows; numpy's copyto: a packed product's padded copy of
its rows), ``args`` the arrays it is called with, ``counter`` None or ``(params, index)``, a
claim counter its kernel counts up and the launch sets to 0 before the call.  None where ``f`` would do
anything else (a Numba or numpy pass, the Python pool, a copy) or its path is not known yet.

Replaying the list (resetting each counter, then the call: jit/executable.py ``_chain_run``) does what ``f``
does for as long as

* the arrays are the same objects, holding what they held (a compiled graph's arena buffers, its frozen
  constants and what is derived from them: packed weights, metas, scratches, all kept alive by the list),
* the thread count and gemm_driver's state are those the list was made with (:func:`epoch`: the
  descriptors were planned for that many threads, and the driver's calls take its state array, which a
  forked child replaces).

jit/executable.py chains the lists of consecutive steps into one loop (its ``_chain``); the conditions on
the steps' arrays are its to check.  One mechanism with conv_direct's replayed launches (``bind``'s
memo), which are such lists too.
"""
from __future__ import annotations

import hashlib
import os

import numpy as np

from . import threads


def driver(caller, *args):
    """The call ``caller(*args)`` of a gemm_driver ``epilogue_caller`` as ``(entry builtin, args, None)``: its
    entry point on the driver's current state (what ``caller`` does, without its Python frame)."""
    from . import gemm_driver
    return caller.entry, (gemm_driver._state[0],) + tuple(args), None


def lower(fn, args, counter=None):
    """The call ``fn(*args)`` as a list entry: a gemm_driver caller's through its entry point (:func:`driver`)."""
    if getattr(fn, "entry", None) is not None:
        return driver(fn, *args)[:2] + (counter,)
    return fn, tuple(args), counter


def epoch():
    """What a list of calls depends on beyond its arrays: (thread count, gemm_driver's state array), compared
    by :func:`current`."""
    from . import gemm_driver
    return threads.NUM_THREADS, gemm_driver._state[0]


def current(ep) -> bool:
    """Whether lists made at epoch ``ep`` still hold (the thread count, the driver's state, no workers to
    start again after a fork)."""
    from . import gemm_driver
    return threads.NUM_THREADS == ep[0] and gemm_driver._state[0] is ep[1] and not gemm_driver._st["respawn"]


def join(*lists):
    """The concatenation of call lists, or None when one of them is None."""
    out = []
    for c in lists:
        if c is None:
            return None
        out.extend(c)
    return out


def calls_of(f, *args):
    """``f.calls(*args)``, or None when ``f`` has none."""
    c = getattr(f, "calls", None)
    return None if c is None else c(*args)


# NEE_JIT_CHAIN_NATIVE=0: a list is replayed by the Python loop (jit/executable.py ``_chain_run``); else (default) a list
# whose calls are all llvm_call trampolines on arrays runs as ONE native call (:func:`runner`): the loop, the claim
# counters' resets and each builtin's argument unpacking and GIL release / reacquire in machine code, from a table of
# kernel addresses and data pointers made once.  The Python loop's per-call cost runs cold (a conv's weights and
# activations have just streamed through the caches): light_squeezenet's 39 calls, replayed alone, min of 300
# interleaved rounds, Python loop / one native call: 1 thread 3859 / 3814 us, 2 threads 2134 / 2101 us
NATIVE = [os.environ.get("NEE_JIT_CHAIN_NATIVE", "1") not in ("0", "")]
_MAX_ARGS = 24
_TRAMP_NAME = "neetorch_llvm_kernel"       # llvm_call's trampoline builtins
_run = [None]


def _runner_ir() -> str:
    """``kernel(table)``: table = [n, then n rows of (kernel address, argument count k, counter address or 0, k data
    pointers)]; each row: the counter (an int64) set to 0, then ``kernel(pointers)``."""
    L = []
    a = L.append
    a('define void @"kernel"(i8* %tab) {')
    a('entry:')
    a('  %t = bitcast i8* %tab to i64*')
    a('  %n = load i64, i64* %t')
    a('  br label %loop')
    a('loop:')
    a('  %i = phi i64 [0, %entry], [%i1, %next]')
    a('  %pos = phi i64 [1, %entry], [%pos1, %next]')
    a('  %fin = icmp sge i64 %i, %n')
    a('  br i1 %fin, label %exit, label %body')
    a('body:')
    a('  %fp = getelementptr i64, i64* %t, i64 %pos')
    a('  %f = load i64, i64* %fp')
    a('  %nap = getelementptr i64, i64* %fp, i64 1')
    a('  %na = load i64, i64* %nap')
    a('  %cp = getelementptr i64, i64* %fp, i64 2')
    a('  %c = load i64, i64* %cp')
    a('  %hasc = icmp ne i64 %c, 0')
    a('  br i1 %hasc, label %reset, label %dispatch')
    a('reset:')
    a('  %cq = inttoptr i64 %c to i64*')
    a('  store volatile i64 0, i64* %cq')
    a('  br label %dispatch')
    a('dispatch:')
    a('  %ap = getelementptr i64, i64* %fp, i64 3')
    cases = " ".join(f"i64 {k}, label %c{k}" for k in range(1, _MAX_ARGS + 1))
    a(f'  switch i64 %na, label %next [ {cases} ]')
    for k in range(1, _MAX_ARGS + 1):
        a(f'c{k}:')
        for j in range(k):
            a(f'  %a{k}_{j}p = getelementptr i64, i64* %ap, i64 {j}')
            a(f'  %a{k}_{j}i = load i64, i64* %a{k}_{j}p')
            a(f'  %a{k}_{j} = inttoptr i64 %a{k}_{j}i to i8*')
        sig = ", ".join(["i8*"] * k)
        a(f'  %f{k} = inttoptr i64 %f to void ({sig})*')
        a(f'  call void %f{k}({", ".join(f"i8* %a{k}_{j}" for j in range(k))})')
        a('  br label %next')
    a('next:')
    a('  %i1 = add i64 %i, 1')
    a('  %pos0 = add i64 %pos, %na')
    a('  %pos1 = add i64 %pos0, 3')
    a('  br label %loop')
    a('exit:')
    a('  ret void')
    a('}')
    return "\n".join(L) + "\n"


def _runner_fn():
    if _run[0] is None:
        from . import llvm_call, llvm_render
        text = _runner_ir()
        addr = llvm_render.compile_ir("chainrun_" + hashlib.sha1(text.encode()).hexdigest()[:16], lambda: text)
        f = llvm_call.make(addr, 1)
        _run[0] = f if getattr(f, "__name__", "") == _TRAMP_NAME else False
    return _run[0] or None


def _kernel_addr(fn):
    """The kernel address of an llvm_call trampoline builtin (its ``self``), else None."""
    if getattr(fn, "__name__", None) != _TRAMP_NAME or type(fn).__name__ != "builtin_function_or_method":
        return None
    a = getattr(fn, "__self__", None)
    return a if type(a) is int and a else None


class NativeList(list):
    """A chain's list of native calls (its items, as the list was) run as one native call: ``item(env)``
    (jit/executable.py's _chain_run calls items that are not plain lists).  Holds the calls, so their arrays, whose
    data pointers its table holds."""
    __slots__ = ("run", "table")

    def __call__(self, env=None):
        self.run(self.table)


def runner(calls):
    """A :class:`NativeList` doing what replaying ``calls`` (a chain's list: ``(fn, args, counter)``) does, as one
    native call (see NATIVE); None where a call is not an llvm_call trampoline on arrays (the ctypes fallback, numpy,
    a Python function), NATIVE is off or the runner does not compile."""
    if not NATIVE[0] or not calls:
        return None
    rows = [len(calls)]
    for fn, args, ctr in calls:
        addr = _kernel_addr(fn)
        if addr is None or not 1 <= len(args) <= _MAX_ARGS or not all(type(x) is np.ndarray for x in args):
            return None
        c = 0
        if ctr is not None:
            p, k = ctr
            if type(p) is not np.ndarray or p.dtype != np.int64 or p.ndim != 1 or not 0 <= k < p.shape[0]:
                return None
            c = p.ctypes.data + p.strides[0] * int(k)
        rows += [addr, len(args), c] + [x.ctypes.data for x in args]
    run = _runner_fn()
    if run is None:
        return None
    nl = NativeList(calls)
    nl.run, nl.table = run, np.array(rows, np.int64)
    return nl
