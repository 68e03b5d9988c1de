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
