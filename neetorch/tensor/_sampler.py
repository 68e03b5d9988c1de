"""``@sampler``: marks a random sampler so that a traced function (``nee.jit``) records it as a node that draws
anew at every call (``trace.tracer.RandomOp``) instead of a constant sampled once at trace time.  Outside a
trace the wrapper costs one list lookup."""
from __future__ import annotations

import functools

from .tensor import _READ_HOOK


def sampler(like: int | None = None, inplace: bool = False):
    """``like``: the tensor argument (by position among the call's tensors) whose shape the result has, so the
    node's shape follows it (a dynamic dim); ``inplace``: the sampler fills its first argument."""
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if _READ_HOOK[0] is None:      # no trace in this process right now
                return fn(*args, **kwargs)
            from ..ops import registry
            from ..trace import tracer
            tr = getattr(tracer._active, "tracer", None)
            if tr is None or registry._depth[0] != 0:   # another thread's trace, or inside an op
                return fn(*args, **kwargs)
            return tr.record_sampler(fn, args, kwargs, like, inplace)
        return wrapper
    return deco
