"""``@nee.jit``: trace once per input signature, optimize, fuse, run the executable.

A call's *guard key* is the (shape, strides, dtype, device) of every tensor argument plus
the value of every other argument (strides: outputs get the memory layout eager execution
gives them, which follows the inputs' layouts, as torch.compile's do).  A new key traces
the function (running it once eagerly), runs the pass pipeline and fusion, and builds an
:class:`Executable`; its generated kernels are cached in memory and on disk by their source, and are
shape-generic (sizes are runtime arguments), so new shapes of the same program
re-trace cheaply and compile nothing.  ``stats`` counts traces, cache hits and kernels
compiled; ``NEE_DEBUG>=1`` prints each specialization.
"""
from __future__ import annotations

import functools
import math
import sys
import threading
import time
from operator import is_ as _is

import numpy as np

from .. import _env, profiler
from .. import amp as _amp
from ..devices.cpu import codegen
from ..nn.modules.module import STATE_EPOCH as _STATE_EPOCH
from ..tensor import _storage
from ..tensor.tensor import Tensor
from ..trace import tracer
from . import passes
from . import placement as _placement
from .executable import Executable
from .fusion import fuse_elementwise

__all__ = ["jit", "JitFunction", "set_enabled"]

_enabled = [True]


def set_enabled(flag: bool) -> None:
    """Globally run every ``@nee.jit`` function eagerly (debugging switch)."""
    _enabled[0] = bool(flag)


def _key_of(x):
    if isinstance(x, _Key):
        return x.marker
    if isinstance(x, Tensor):
        # (the layout too: eager lays results out like their inputs, the compiled graph's outputs follow it)
        return ("T", tuple(x.shape), x.dtype, x.device, getattr(x._data, "strides", None))
    if isinstance(x, (list, tuple)):
        return (type(x).__name__,) + tuple(_key_of(v) for v in x)
    if isinstance(x, dict):
        return ("dict",) + tuple((k, _key_of(x[k])) for k in tracer._dict_keys(x))
    if isinstance(x, float):
        # -0.0 == 0.0 and hash alike, but a traced constant keeps its sign (x / -0.0); NaN != NaN would
        # never hit the cache: its bits are its key
        return ("V", "float", math.copysign(1.0, x) < 0, x if x == x else "nan")
    try:
        hash(x)
        return ("V", type(x).__name__, x)
    except TypeError:
        return ("id", id(x))


def _layout_class(t):
    """A bucketed guard key's layout of tensor ``t``: None for row-major, else its dims ordered by decreasing
    stride (outermost first; what the traced output layouts depend on, whatever the sizes)."""
    d = t._data
    st = getattr(d, "strides", None)
    if st is None or getattr(getattr(d, "flags", None), "c_contiguous", False):
        return None
    return tuple(sorted(range(len(st)), key=lambda k: (-st[k], k)))


class ShapeBuckets:
    """Maps a dynamic dimension's size to a bucket ``(lo, hi)``.

    ``"pow2"`` (default): ``(2^(k-1), 2^k]``; a sorted list of upper bounds:
    ``(previous bound, bound]``; sizes past the last bound get a bucket of their own.
    """

    def __init__(self, policy="pow2"):
        self.policy = policy if policy == "pow2" else sorted(int(b) for b in policy)

    def __call__(self, n: int) -> tuple:
        if n <= 1:
            return (n, n)
        if self.policy == "pow2":
            hi = 1 << (n - 1).bit_length()
            return (hi // 2 + 1, hi)
        prev = 0
        for b in self.policy:
            if n <= b:
                return (prev + 1, b)
            prev = b
        return (n, n)


def _structure(g) -> tuple:
    """Everything about a graph except the sizes of its values (for polymorphism checks)."""
    num = {}
    for v in g.inputs:
        num[v] = len(num)
    consts = []
    for v, t in g.consts.items():
        num[v] = len(num)
        consts.append((v.dtype, len(v.shape), t.numpy(force=True).tolist() if t.numel() <= 4 else v.shape))
    nodes = []
    for n in g.nodes:
        for o in n.outputs:
            num[o] = len(num)
        nodes.append((n.name, tuple(num[a] for a in n.inputs), repr(sorted(n.attrs.items())), _inner(n.op)))
    # (constant leaves of the result, x.shape[0] returned beside a tensor, differ between sizes too)
    return (len(g.inputs), tuple(consts), tuple(nodes), tuple(num[o] for o in g.outputs), repr(getattr(g, "_tree", None)))


def _inner(op) -> tuple:
    """The attributes of the nodes inside a fused op (a layer_norm's size ``n`` over a dynamic
    axis lives there, not on the fused node): part of the structure a polymorphism check compares."""
    parts = getattr(op, "nodes", None) or getattr(op, "parts", None)
    if not parts:
        return ()
    return tuple((p.name, repr(sorted(p.attrs.items())), _inner(p.op)) for p in parts)


class JitFunction:
    def __init__(self, fn, dynamic=None, name=None, buckets="pow2", freeze=False, auto=False):
        if freeze not in (False, True, "views"):
            raise ValueError(f"jit: freeze must be False, True or 'views', got {freeze!r}")
        self.fn = fn
        self.freeze = freeze
        self._frozen: dict = {}    # passes.freeze_constants' memo: captured tensor -> its frozen copy
        self._state: list = []     # captured tensors the function writes in place (trace(): state inputs)
        # a module's Python-side state (training flags, scalar attributes, which tensors its parameters and
        # buffers are) is read at trace time: a change re-specializes (see _check_modules)
        from ..nn.modules.module import Module
        self._Module = Module
        self._root = fn if isinstance(fn, Module) else getattr(fn, "__self__", None)
        if not isinstance(self._root, Module):
            self._root = None
        self._mod_epoch = -1
        self._mod_sigs: dict = {}
        # {argument position or keyword: dim or tuple of dims} declared dynamic; True: every dim of every tensor
        # argument (sizes 0 and 1 excepted, as torch); "auto": a dim becomes dynamic when a call brings a second
        # size for it (torch.compile's automatic dynamic shapes); ``auto=True`` with a dict: those dims, and
        # the others automatically
        if dynamic is not None and not isinstance(dynamic, dict) and dynamic not in (True, False, "auto"):
            raise ValueError(f"jit: dynamic must be a dict {{argument: dims}}, True, False, 'auto' or None, got "
                             f"{dynamic!r}")
        self._all_dynamic = dynamic is True
        self._auto = dynamic == "auto" or bool(auto) and dynamic is not True
        self._seen: dict = {}      # "auto": argument -> the shape its first call had
        self.dynamic = {k: ((d,) if isinstance(d, int) else tuple(d))
                        for k, d in (dynamic if isinstance(dynamic, dict) else {}).items()}
        self.buckets = ShapeBuckets(buckets)
        self.name = name or getattr(fn, "__name__", "fn")
        self._cache: dict = {}
        self._fast: dict = {}      # all-tensor positional calls: flat key -> entry (see __call__)
        self._lock = threading.Lock()
        self._frozen_lock = threading.Lock()
        self.stats = {"calls": 0, "traces": 0, "cache_hits": 0, "kernels_compiled": 0, "trace_seconds": 0.0,
                      "specializations": 0, "bucket_specializations": 0,
                      "bucket_probe_failures": 0}
        functools.update_wrapper(self, fn, updated=())

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return functools.partial(self.__call__, obj)

    def eager(self, *args, **kwargs):
        """Run the original function, uncompiled."""
        return self.fn(*args, **kwargs)

    def _optimize(self, args, kwargs, on_stage=None):
        g = tracer.trace(self.fn, *args, name=self.name, state=self._state, **kwargs)
        self._state = g.state     # captured tensors the function writes (found once, not again per trace)
        self.stats["traces"] += 1
        # default mode: constants the trace computed from captured tensors (``w * 2``) are guarded by those
        # tensors' write counters; a write re-traces (freeze=True snapshots on purpose: no guards)
        guards = None if self.freeze else passes.const_guards(g)
        vguards = None
        if on_stage:
            on_stage("traced", g)
        if self.freeze:
            with self._frozen_lock:
                g = passes.freeze_constants(g, self.freeze, self._frozen)
            for t in g.consts.values():   # frozen: never written again (True: our snapshots; "views": owners' promise)
                t._backend().mark_immutable(t._data)
            g.consts_frozen = True        # passes.merge_equal_constants may merge equal ones
            memos = ()
        else:
            # the layouts freezing gives products (row-major weights for GEMMs), as guarded copies kept in
            # step with the captured tensors (passes.memo_product_weights; checked every call)
            memos = passes.memo_product_weights(g, self._frozen, self._frozen_lock)
            # the other constants that are views of captured tensors (a memo follows ``.data =`` itself)
            vguards = passes.view_guards(g)
        # (the tracer's record of the views taken of captured tensors, read above: not kept with the graph, whose
        # cache would hold those views, intermediate ones included, until the function dies)
        g.__dict__.pop("const_views", None)
        g = passes.run_pipeline(g, on_stage)
        g = _placement.place(g)   # nodes a non-CPU input device does not claim go to the CPU, transfers explicit
        if on_stage and g.placement.transfers:
            on_stage("placement", g)
        g = fuse_elementwise(g)
        if on_stage:
            on_stage("fused", g)
        if memos:
            held = {id(t) for t in g.consts.values()}
            g.weight_memos = [e for e in memos if id(e.holder) in held] or None
        g.const_guards = guards
        g.view_guards = vguards
        return g

    def _dyn_dims(self, args, kwargs):
        """[(arg key, dim, size)] for every declared dynamic dim of a tensor argument."""
        out = []
        if self._all_dynamic:
            for k, t in list(enumerate(args)) + list(kwargs.items()):
                if isinstance(t, Tensor):
                    out.extend((k, d, n) for d, n in enumerate(t.shape) if n > 1)
            return out
        for k, dims in self.dynamic.items():
            t = args[k] if isinstance(k, int) and k < len(args) else kwargs.get(k)
            if isinstance(t, Tensor):
                for d in dims:
                    if not -t.ndim <= d < t.ndim:
                        raise IndexError(f"jit {self.name}: dynamic dim {d} of argument {k!r} is out of range for "
                                         f"its shape {list(t.shape)} ({t.ndim} dims)")
                    out.append((k, d % max(t.ndim, 1), t.shape[d]))
        return out

    def _note_sizes(self, args, kwargs) -> None:
        """``dynamic="auto"``: a tensor argument's dim whose size differs from the first call's becomes dynamic."""
        for k, t in list(enumerate(args)) + list(kwargs.items()):
            if not isinstance(t, Tensor):
                continue
            first = self._seen.setdefault(k, tuple(t.shape))
            if len(first) != t.ndim:
                continue
            new = [d for d, (a, b) in enumerate(zip(first, t.shape)) if a != b and d not in self.dynamic.get(k, ())]
            if new:
                self.dynamic[k] = tuple(sorted(self.dynamic.get(k, ()) + tuple(new)))

    def _with_sizes(self, args, kwargs, sizes: dict):
        """Stand-in arguments with dynamic dims resized (ones: valid indices, no zero divisors)."""
        from ..tensor.creation import ones
        args, kwargs = list(args), dict(kwargs)
        for k in {k for k, _ in sizes}:
            t = args[k] if isinstance(k, int) else kwargs[k]
            shape = list(t.shape)
            for (kk, d), n in sizes.items():
                if kk == k:
                    shape[d] = n
            order = _layout_class(t)
            if order is None:
                new = ones(tuple(shape), dtype=t.dtype, device=t.device)
            else:   # (laid out in the argument's dim order: the trace records eager's output layouts)
                inv = [0] * len(order)
                for j, d in enumerate(order):
                    inv[d] = j
                new = ones(tuple(shape[d] for d in order), dtype=t.dtype, device=t.device).permute(*inv)
            if isinstance(k, int):
                args[k] = new
            else:
                kwargs[k] = new
        return tuple(args), kwargs

    def _specialize(self, args, kwargs, on_stage=None, try_bucket=True):
        c0 = codegen.stats["compiled"]
        t0 = time.perf_counter()
        dyn = self._dyn_dims(args, kwargs)
        polymorphic = False
        g = self._optimize(args, kwargs, on_stage)
        wide = {(k, d): self.buckets(n) for k, d, n in dyn}
        if try_bucket and any(lo < hi for lo, hi in wide.values()):
            # trace again at the bucket's ends: if nothing but sizes changed, one executable,
            # planned at the bucket's largest sizes, serves the whole bucket.  Both ends: Python
            # control flow on a size (``if x.shape[0] <= x.shape[1]``) that flips inside the bucket
            # differs between them (a probe at one other size missed a flip below the call's size)
            base = _structure(g)
            top = g
            polymorphic = True
            for end in (0, 1):
                probe = {kd: b[end] for kd, b in wide.items()}
                if all(probe[(k, d)] == n for k, d, n in dyn):
                    continue    # the call's own sizes
                a2, k2 = self._with_sizes(args, kwargs, probe)
                try:
                    g2 = self._optimize(a2, k2)
                except Exception as e:
                    # the function does not run at the bucket's other sizes (a size baked in: e.g. an
                    # exported model reshaping to a constant sequence length); the call's own sizes
                    # traced fine, so it specializes per exact shape instead of failing the call
                    self.stats["bucket_probe_failures"] += 1
                    if _env.DEBUG >= 1:
                        print(f"[neetorch] jit {self.name}: not shape-polymorphic (trace at sizes {probe} "
                              f"failed: {type(e).__name__}: {e}); specializing per exact shape", file=sys.stderr)
                    polymorphic = False
                    break
                if _structure(g2) != base:
                    polymorphic = False
                    break
                if end == 1:
                    top = g2
            if polymorphic:
                g = top
        devs = {t.device for t in tracer._tensors((args, kwargs))} or {None}
        from ..devices import device
        dev = next(iter(devs)) or device(_env.DEFAULT_DEVICE)
        exe = Executable(g, dev, dynamic=polymorphic)
        exe.polymorphic = polymorphic
        root = self._root_of(args)
        if root is not None:   # the modules' state as the trace left it (lazy modules materialize in the trace)
            self._mod_sigs[id(root)] = _module_signature(root)
            self._mod_epoch = _STATE_EPOCH[0]
        self.stats["specializations"] += 1
        self.stats["bucket_specializations"] += polymorphic
        self.stats["trace_seconds"] += time.perf_counter() - t0
        self.stats["kernels_compiled"] += codegen.stats["compiled"] - c0
        if _env.DEBUG >= 1:
            print(f"[neetorch] jit {self.name}: specialized for {[tuple(t.shape) for t in tracer._tensors(args)]} "
                  f"-> {exe.num_kernels} kernels ({len(exe.kernels)} fused), {exe.plan}", file=sys.stderr)
        if _env.DEBUG >= 3:
            for name, _ in exe.kernels:
                print(f"[neetorch]   fused group {name}", file=sys.stderr)
        return exe, g

    def _key(self, args, kwargs, bucketed: bool):
        amp = _amp.state()     # (nee.autocast changes the ops' dtypes: a traced graph holds its casts)
        if amp is not None:
            return (("autocast",) + amp,) + self._key_noamp(args, kwargs, bucketed)
        return self._key_noamp(args, kwargs, bucketed)

    def _key_noamp(self, args, kwargs, bucketed: bool):
        if not bucketed or not (self.dynamic or self._all_dynamic):
            return (_key_of(args), _key_of(kwargs))
        a, kw = list(args), dict(kwargs)
        shapes: dict = {}
        for k, d, n in self._dyn_dims(args, kwargs):
            t = args[k] if isinstance(k, int) else kwargs[k]
            shape = shapes.setdefault(k, list(t.shape))
            shape[d] = ("bucket",) + self.buckets(n)
        for k, shape in shapes.items():
            t = args[k] if isinstance(k, int) else kwargs[k]
            marker = _Key(("T", tuple(shape), t.dtype, t.device, _layout_class(t)))
            if isinstance(k, int):
                a[k] = marker
            else:
                kw[k] = marker
        return (_key_of(tuple(a)), _key_of(kw), "bucketed")

    def _lookup(self, args, kwargs):
        """(key, entry or None, exact): a bucket known not to be shape-polymorphic sends the
        lookup to the exact-shape key."""
        key = self._key(args, kwargs, True)
        entry = self._cache.get(key)
        exact = entry is _NOT_POLYMORPHIC
        if exact:
            key = self._key(args, kwargs, False)
            entry = self._cache.get(key)
        return key, entry, exact

    def _executable(self, args, kwargs):
        if self._auto:
            self._note_sizes(args, kwargs)
        key, entry, exact = self._lookup(args, kwargs)
        if entry is not None:
            self.stats["cache_hits"] += 1
            if profiler._active[0] is not None:
                profiler.record(self.name, "cache_hit", str(entry[0].device), time.perf_counter(), 0.0, detail="jit")
            return entry
        with self._lock:
            key, entry, exact = self._lookup(args, kwargs)  # another thread may have specialized meanwhile
            if entry is None:
                entry = self._specialize(args, kwargs, try_bucket=not exact)
                if key[-1] == "bucketed" and not entry[0].polymorphic:
                    # sizes are baked into the graph (e.g. a reshape to a computed size):
                    # this function specializes per exact shape instead
                    self._cache[key] = _NOT_POLYMORPHIC
                    key = self._key(args, kwargs, False)
                self._cache[key] = entry
        return entry

    def __call__(self, *args, **kwargs):
        if not _enabled[0] or tracer.is_tracing():
            return self.fn(*args, **kwargs)
        self.stats["calls"] += 1
        if _STATE_EPOCH[0] != self._mod_epoch:
            root = self._root_of(args)
            if root is not None:
                self._check_modules(root)
            else:
                self._mod_epoch = _STATE_EPOCH[0]
        if not kwargs and not _amp._ACTIVE[0]:
            # the common call, all positional tensors: a flat key of (shape, dtype, device) per
            # argument maps to the entry the full guard key found the first time (the full key,
            # bucketed or exact, is a function of exactly these); inside nee.autocast the full key
            # (which holds the autocast state) is used
            fk = []
            for a in args:
                if not isinstance(a, Tensor):
                    break
                d = a._data
                try:   # (the layout too: eager lays results out like their inputs, the graph's outputs follow it)
                    st = d.strides
                except AttributeError:   # (a device array without strides: the full key)
                    break
                fk.append((d.shape, st, a._dtype, a._device))
            else:
                fk = tuple(fk)
                entry = self._fast.get(fk)
                if entry is None:
                    if len(self._fast) >= 4096:   # many distinct sizes of a dynamic dim: start over
                        self._fast.clear()
                    entry = self._fast[fk] = self._executable(args, kwargs)
                else:
                    self.stats["cache_hits"] += 1
                    if profiler._active[0] is not None:
                        profiler.record(self.name, "cache_hit", str(entry[0].device), time.perf_counter(), 0.0,
                                        detail="jit")
                exe, g = entry
                if self._stale(g):
                    return self(*args)
                if g.writebacks and _aliased_writes(g, list(args) + list(g.state)):
                    return self._eager_aliased(args, kwargs)
                outs = exe(*args, *g.state) if g.state else exe(*args)
                if _const_outputs(g):
                    outs = _fresh_consts(g, outs)
                if g.writebacks:
                    outs = _write_back(g, list(args) + list(g.state), outs)
                if getattr(g, "_tree", None) is None:
                    return outs[0] if getattr(g, "_single", False) and len(outs) == 1 else tuple(outs)
                return tracer.pack_outputs(g, outs)
        exe, g = self._executable(args, kwargs)
        if self._stale(g):
            return self(*args, **kwargs)
        ins = list(tracer._tensors((args, kwargs))) + list(g.state)
        if g.writebacks and _aliased_writes(g, ins):
            return self._eager_aliased(args, kwargs)
        outs = exe(*ins)
        if _const_outputs(g):
            outs = _fresh_consts(g, outs)
        if g.writebacks:
            outs = _write_back(g, ins, outs)
        return tracer.pack_outputs(g, outs)

    def _eager_aliased(self, args, kwargs):
        """A call whose tensors alias what it writes in place (:func:`_aliased_writes`): the function runs eagerly
        (counted in ``stats["aliased_eager_calls"]``), as torch.compile guards on inputs' aliasing."""
        self.stats["aliased_eager_calls"] = self.stats.get("aliased_eager_calls", 0) + 1
        if _env.DEBUG >= 1:
            print(f"[neetorch] jit {self.name}: a tensor the function writes in place shares memory with another of "
                  f"its inputs or captured tensors: this call runs eagerly", file=sys.stderr)
        return self.fn(*args, **kwargs)

    def _root_of(self, args):
        """The module whose state the traces read: the jitted module (or bound method's module), or the module
        a jitted method is called on (__get__)."""
        if self._root is not None:
            return self._root
        return args[0] if args and isinstance(args[0], self._Module) else None

    def _check_modules(self, root) -> None:
        """Some module's attributes were written since the last check (``STATE_EPOCH``): if ``root``'s state
        differs from what the compiled specializations were traced with (``train()`` / ``eval()``, a scalar
        attribute such as a scale or ``p``, a parameter / buffer / child reassigned), they are dropped and the
        function is traced again at this call (torch.compile guards on the same)."""
        sig = _module_signature(root)
        old = self._mod_sigs.get(id(root))
        if old is not None and old != sig:
            self._state = []          # (a training-mode trace's state inputs need not be an eval trace's)
            self._respecialize()
        self._mod_sigs[id(root)] = sig
        self._mod_epoch = _STATE_EPOCH[0]

    def _stale(self, g) -> bool:
        """Per call: has a captured tensor the graph's guarded copies (passes.check_weights), constant views
        (passes.check_view_guards) or trace-time constants (passes.check_const_guards) rest on changed?  Then
        the function was re-specialized."""
        memos, vguards = getattr(g, "weight_memos", None), getattr(g, "view_guards", None)
        if memos is not None or vguards is not None:
            try:
                if memos is not None:
                    passes.check_weights(memos)
                if vguards is not None:
                    passes.check_view_guards(vguards)
            except passes.WeightsChanged:
                self._respecialize()
                return True
        guards = getattr(g, "const_guards", None)
        if guards is not None:
            try:
                passes.check_const_guards(guards)
            except passes.WeightsChanged:
                self._respecialize(guards)
                return True
        return False

    def _respecialize(self, guards=None) -> None:
        """A captured weight changed shape, dtype or device (``weight.data = other``), or a tensor a trace-time
        constant was computed from was written (``guards``: that graph's): every specialization is dropped and
        the function is traced again at the next call (as torch.compile recompiles)."""
        with self._lock:
            if guards is not None and not any(getattr(e[1], "const_guards", None) is guards
                                              for e in self._cache.values() if isinstance(e, tuple)):
                return   # another thread re-specialized meanwhile
            self._cache.clear()
            self._fast.clear()
            with self._frozen_lock:
                self._frozen.clear()

    def graph(self, *args, **kwargs):
        """The optimized, fused graph for these arguments."""
        return self._executable(args, kwargs)[1]

    def explain(self, *args, **kwargs) -> str:
        """The graph after tracing, after each pass and after fusion, the kernels and the memory plan
        (with the cats it eliminated: executable.plan_cats)."""
        parts = []
        exe, g = self._specialize(args, kwargs, on_stage=lambda name, g: parts.append(f"== after {name}\n{g}"))
        parts.append(f"== {exe.num_kernels} kernel launches, {len(exe.kernels)} fused kernels")
        for name, src in exe.kernels:
            parts.append(f"-- {name}\n{src}")
        parts.append(f"== {exe.plan}")
        parts.append(f"== {g.placement}")
        return "\n".join(parts)

    def placement(self, *args, **kwargs):
        """Where each op of the compiled graph for these arguments runs: a
        :class:`~neetorch.jit.placement.PlacementSummary` (ops per device, transfers, fallbacks)."""
        return self._executable(args, kwargs)[1].placement

    def __repr__(self):
        return f"<neetorch.jit {self.name}: {len(self._cache)} specialization(s)>"


_SCALARS = (bool, int, float, complex, str, type(None))


def _module_signature(root) -> tuple:
    """What the traces of ``root`` read from its modules besides tensor values: each module's training flag,
    its public scalar attributes (and tuples of scalars), and which tensors / children it holds."""
    sig = []
    for m in root.modules():
        d = m.__dict__
        attrs = tuple((k, v) for k, v in d.items() if k[:1] != "_" and
                      (isinstance(v, _SCALARS) or (type(v) is tuple and all(isinstance(x, _SCALARS) for x in v))))
        sig.append((id(m), attrs, tuple((k, id(v)) for k, v in d.get("_parameters", {}).items()),
                    tuple((k, id(v)) for k, v in d.get("_buffers", {}).items()),
                    tuple((k, id(v)) for k, v in d.get("_modules", {}).items())))
    return tuple(sig)


def _const_outputs(g) -> tuple:
    """Positions of ``g``'s outputs that are a constant or a view of one (``nee.zeros(3)``, ``W * 2`` folded):
    the same storage at every call, and read by the graph's other steps (cached on ``g``)."""
    co = getattr(g, "_const_outs", None)
    if co is None:
        from ..trace.tracer import ViewOp
        roots: dict = {}
        for n in g.nodes:
            if isinstance(n.op, ViewOp):
                for o in n.outputs:
                    roots[o] = roots.get(n.inputs[0], n.inputs[0])
        co = g._const_outs = tuple(k for k, o in enumerate(g.outputs) if roots.get(o, o) in g.consts)
    return co


def _aliased_writes(g, ins) -> bool:
    """Whether a tensor the call writes in place (``g.writebacks``: an input, captured state) shares memory with
    another of its tensors (the same tensor twice, overlapping views, an input that is a view of written state) or
    with a constant the graph reads or computed at trace time: the trace took them as distinct values, so a read of
    the other after the write would see the old values (eager sees the new).  What depends only on the state
    tensors' and the constants' storages is worked out once per set of storages (:func:`_alias_static`); per call,
    the caller's tensors (few) are each looked up by their memory's owner.  Non-CPU tensors are not checked."""
    na = len(ins) - len(g.state)
    c = g.__dict__.get("_alias")
    now = [t._data for t in g.state] + [t._data for t in g.consts.values()]   # (``.data =`` replaces them)
    if c is None or not all(map(_is, now, c[0])):
        c = g._alias = (now, _alias_static(g, ins, na))
    static, wstate, sroots, croots, wargs = c[1]
    if static:
        return True
    if not wstate and not wargs:
        return False
    roots = []
    for i in range(na):
        d = ins[i]._data
        if type(d) is not np.ndarray:
            roots.append(None)
            continue
        r = id(_storage.root(d))
        roots.append(r)
        if any(np.may_share_memory(d, dk) for dk in wstate.get(r, ())):
            return True
    for k in wargs:
        d, r = ins[k]._data, roots[k]
        if r is None:
            continue
        if any(np.may_share_memory(d, x) for x in croots.get(r, ())) or \
                any(np.may_share_memory(d, x) for x in sroots.get(r, ())):
            return True
        for i in range(na):
            if i != k and roots[i] == r and np.may_share_memory(d, ins[i]._data):
                return True
    return False


def _alias_static(g, ins, na) -> tuple:
    """(state aliases a constant or other state: always, {owner id: written state arrays}, {owner id: state
    arrays}, {owner id: constants' arrays and the captured arrays trace-time constants came from}, indices of
    the written caller's tensors) for :func:`_aliased_writes`."""
    croots: dict = {}
    for d in [t._data for t in g.consts.values()] + [gd.root for gd in (getattr(g, "const_guards", None) or ())]:
        if type(d) is np.ndarray:
            croots.setdefault(id(_storage.root(d)), []).append(d)
    written = {k for k, _ in g.writebacks}
    wstate: dict = {}
    sroots: dict = {}
    static = False
    for k in range(na, len(ins)):
        d = ins[k]._data
        if type(d) is not np.ndarray:
            continue
        r = id(_storage.root(d))
        if k in written:
            static = static or any(np.may_share_memory(d, x) for x in croots.get(r, ())) or \
                any(np.may_share_memory(d, x) for x in sroots.get(r, ()))
            wstate.setdefault(r, []).append(d)
        elif any(np.may_share_memory(d, x) for x in wstate.get(r, ())):
            static = True
        sroots.setdefault(r, []).append(d)
    return static, wstate, sroots, croots, sorted(k for k in written if k < na)


def _fresh_consts(g, outs) -> list:
    """``outs`` with the constant ones (:func:`_const_outputs`) copied: each call returns tensors of its own, as
    the eager function's factories and ops do (a caller accumulating into one must not change the next call's
    results, nor the constant the graph reads)."""
    outs = list(outs)
    for k in g._const_outs:
        outs[k] = outs[k].clone()
    return outs


def _write_back(g, ins, outs) -> list:
    """After a call: the inputs and captured state the function wrote in place get their final values
    (``g.writebacks``: (input index, output index), trace.tracer.trace); the function's own outputs are
    returned, a written input's final value as the caller's tensor itself (what the eager function returns)."""
    n = g.n_user_outputs
    user = list(outs[:n])
    for k, j in g.writebacks:
        t, r = ins[k], outs[j]
        if t._device.type == "cpu" and r._device.type == "cpu" and type(t._data) is np.ndarray:
            np.copyto(t._data, r._data, casting="unsafe")
            if _storage.WATCH:
                _storage.bump_all([t._data])
        else:
            t.copy_(r)
        v = g.outputs[j]
        for i in range(n):
            if g.outputs[i] is v:
                user[i] = t
    return user


class _Key:
    """Stands for a tensor argument in a bucketed guard key."""
    __slots__ = ("marker",)

    def __init__(self, marker):
        self.marker = marker


_NOT_POLYMORPHIC = object()


def jit(fn=None, *, dynamic=None, buckets="pow2", name=None, freeze=False):
    """Compile a tensor function: ``@nee.jit``, or ``@nee.jit(dynamic={0: 0})`` to declare
    dim 0 of argument 0 dynamic (shape buckets by ``buckets``: ``"pow2"`` or a list of
    upper bounds); see the module docs.

    ``freeze=True``: tensors the function captures (parameters, weights) are constants of the
    compiled program, snapshotted at its first call: later in-place changes to them are not seen
    (``torch.jit.freeze`` / inductor's ``freezing``).  The compiler may then re-lay them out
    (a transposed weight becomes row-major: faster products).  Default: captured tensors are read
    live on every call."""
    if fn is None:
        return lambda f: JitFunction(f, dynamic=dynamic, name=name, buckets=buckets, freeze=freeze)
    return JitFunction(fn, dynamic=dynamic, name=name, buckets=buckets, freeze=freeze)
