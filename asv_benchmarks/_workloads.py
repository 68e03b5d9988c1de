"""Workload definitions shared by the asv suite, ``bench/compare.py`` and the smoke test.

Every workload is built per library (``"neetorch"``, ``"numpy"``, ``"torch"``) from the same
seeded numpy data and returns a zero-argument callable that runs the op once and returns its
result.  Building raises ``NotImplementedError`` (asv's way to skip) when the library is not
installed, when numpy has no equivalent, or when neetorch does not have the op yet
(:class:`Missing`, whose message names the missing ``nee.X``).

Sizes: the issue's sizes by default; ``TINY = True`` (set by the smoke test) shrinks every
workload to a few elements so that every benchmark can be run once in seconds.

Speed ratios are always "higher = neetorch faster": ``t_other / t_neetorch``.
"""
from __future__ import annotations

import importlib
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

LIBS = ("neetorch", "numpy", "torch")
TINY = os.environ.get("NEE_BENCH_TINY", "0") not in ("", "0")


def tiny(full, small):
    return small if TINY else full


class Missing(NotImplementedError):
    """neetorch lacks an op (not implemented yet): the benchmark is skipped, compare.py prints n/a."""

    def __init__(self, what: str):
        super().__init__(f"missing: {what}")
        self.what = what


# ----------------------------------------------------------------------------------- libraries
def nee():
    import neetorch
    return neetorch


def torch():
    try:
        import torch as _t
    except ImportError:
        raise NotImplementedError("torch is not installed") from None
    return _t


def scipy_erf():
    try:
        from scipy.special import erf
    except ImportError:
        raise NotImplementedError("numpy has no erf and scipy is not installed") from None
    return erf


def nee_fn(*paths: str):
    """The first of ``paths`` ("softmax", "nn.functional.softmax", "Tensor.softmax") neetorch has.

    Raises :class:`Missing` naming the first path when none exists (op not implemented yet).
    """
    mod = nee()
    for p in paths:
        parts = p.split(".")
        obj = mod
        ok = True
        for i, part in enumerate(parts):
            nxt = getattr(obj, part, None)
            if nxt is None and obj is not None and hasattr(obj, "__path__"):
                # a not-yet-imported subpackage (neetorch.nn.functional)
                try:
                    nxt = importlib.import_module(f"{obj.__name__}.{part}")
                except Exception:
                    nxt = None
            if nxt is None:
                ok = False
                break
            obj = nxt
        if ok and callable(obj):
            return obj
    raise Missing("nee." + paths[0])


def to_lib(lib: str, a: np.ndarray):
    if lib == "numpy":
        return a
    if lib == "neetorch":
        return nee().from_numpy(a)
    if lib == "torch":
        return torch().from_numpy(a)
    raise ValueError(f"unknown library {lib!r}")


def to_numpy(x) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "numpy"):
        return np.asarray(x.numpy())
    return np.asarray(x)


def data(lib: str, *shapes):
    """Seeded float32 inputs (one per shape) converted to ``lib``; different arrays per shape slot."""
    out = []
    for i, s in enumerate(shapes):
        rng = np.random.default_rng(1000 + i)
        out.append(to_lib(lib, rng.standard_normal(s, dtype=np.float32)))
    return out


# ----------------------------------------------------------------------------------- targets
@dataclass(frozen=True)
class Target:
    """``kind``: "vs" (speed ratio vs ``ref`` library >= ``value``), "copy" (GB/s >= value x copy
    bandwidth), "info" (no target)."""
    kind: str
    ref: str = ""
    value: float = 1.0

    def describe(self) -> str:
        if self.kind == "vs":
            return f">= {self.value:g}x {self.ref}"
        if self.kind == "copy":
            return f">= {self.value:g}x copy BW"
        return "(info)"


@dataclass
class Workload:
    name: str                                   # "ew.add" - stable key
    label: str                                  # table label
    build: Callable[[str], Callable[[], Any]]   # lib -> fn() (raises NotImplementedError)
    target: Target = field(default_factory=lambda: Target("info"))
    nbytes: Callable[[], int] | None = None     # minimal DRAM traffic of one call (memory-bound ones)
    flops: Callable[[], float] | None = None
    check: bool = True                          # compare results against numpy's / torch's


WORKLOADS: dict[str, Workload] = {}


def add(w: Workload) -> Workload:
    WORKLOADS[w.name] = w
    return w


def build(name: str, lib: str, warmup: bool = True):
    """Build workload ``name`` for ``lib`` and run it once (compile / first-touch excluded)."""
    fn = WORKLOADS[name].build(lib)
    if warmup:
        fn()
    return fn


F32 = 4

# ----------------------------------------------------------------------------------- per-op overhead
SMALL_N = 8


def _small(op):
    def b(lib):
        a, c = data(lib, (SMALL_N,), (SMALL_N,))
        if op == "add":
            if lib == "neetorch":
                f = nee_fn("add")
                return lambda: f(a, c)
            if lib == "torch":
                f = torch().add
                return lambda: f(a, c)
            return lambda: np.add(a, c)
        # unary: exp
        if lib == "neetorch":
            f = nee_fn("exp")
            return lambda: f(a)
        if lib == "torch":
            f = torch().exp
            return lambda: f(a)
        return lambda: np.exp(a)
    return b


add(Workload("overhead.add", "overhead: add 8 f32", _small("add"), Target("vs", "torch", 1.0)))
add(Workload("overhead.exp", "overhead: exp 8 f32", _small("exp"), Target("vs", "torch", 1.0)))

# ----------------------------------------------------------------------------------- elementwise, 16M f32
def EW_N():
    return tiny(1 << 24, 1000)


def _np_gelu(x):
    erf = scipy_erf()
    return x * np.float32(0.5) * (np.float32(1.0) + erf(x * np.float32(0.7071067811865476)))


def _np_sigmoid(x):
    return np.float32(1.0) / (np.float32(1.0) + np.exp(-x))


# name: (number of inputs, neetorch candidates, numpy fn, torch fn name(s))
_EW = {
    "add": (2, None, lambda a, b: a + b, None),
    "muladd": (3, None, lambda a, b, c: a * b + c, None),
    "exp": (1, ("exp",), np.exp, "exp"),
    "tanh": (1, ("tanh",), np.tanh, "tanh"),
    "gelu": (1, ("nn.functional.gelu", "gelu"), _np_gelu, "nn.functional.gelu"),
    "sigmoid": (1, ("sigmoid",), _np_sigmoid, "sigmoid"),
    "erf": (1, ("erf",), lambda x: scipy_erf()(x), "erf"),
}
EW_OPS = tuple(_EW)


def _torch_attr(path):
    obj = torch()
    for p in path.split("."):
        obj = getattr(obj, p)
    return obj


def _ew(op):
    nin, nee_paths, np_fn, torch_path = _EW[op]

    def b(lib):
        xs = data(lib, *[(EW_N(),)] * nin)
        if op == "add":
            a, c = xs
            return lambda: a + c
        if op == "muladd":
            a, c, d = xs
            return lambda: a * c + d
        (x,) = xs
        if lib == "neetorch":
            f = nee_fn(*nee_paths)
        elif lib == "torch":
            f = _torch_attr(torch_path)
        else:
            f = np_fn
            if op in ("gelu", "erf"):
                scipy_erf()  # skip (NotImplementedError) without scipy
        return lambda: f(x)
    return b


for _op in EW_OPS:
    _nin = _EW[_op][0]
    # issue targets: add >= 0.9x copy bandwidth; transcendentals >= numpy; mul-add has none (info)
    if _op == "add":
        _t = Target("copy", value=0.9)
    elif _op == "muladd":
        _t = Target("info")
    else:
        _t = Target("vs", "numpy", 1.0)
    add(Workload(f"ew.{_op}", f"{_op} 16M f32", _ew(_op), _t,
                 nbytes=(lambda k=_nin: (k + 1) * EW_N() * F32)))

# ----------------------------------------------------------------------------------- eager chains
def CHAIN_SHAPE():
    return tiny((4096, 4096), (16, 32))


def _chain(kind):
    def b(lib):
        r, c = CHAIN_SHAPE()
        x, w, bb = data(lib, (r, c), (c,), (c,))
        if kind == "bias_gelu":
            if lib == "neetorch":
                g = nee_fn("nn.functional.gelu", "gelu")
            elif lib == "torch":
                g = torch().nn.functional.gelu
            else:
                scipy_erf()
                g = _np_gelu
            return lambda: g(x * w + bb)
        # silu written out: sigmoid(x) * x
        if lib == "neetorch":
            s = nee_fn("sigmoid")
        elif lib == "torch":
            s = torch().sigmoid
        else:
            s = _np_sigmoid
        return lambda: s(x) * x
    return b


def _chain_bytes():
    r, c = CHAIN_SHAPE()
    return 2 * r * c * F32  # what a fused kernel would move: read x, write out


# no target in the issue: tracked to show what fusion (JIT) would gain over eager
add(Workload("chain.bias_gelu", "chain: gelu(x*w+b) 16M", _chain("bias_gelu"), nbytes=_chain_bytes))
add(Workload("chain.silu", "chain: sigmoid(x)*x 16M", _chain("silu"), nbytes=_chain_bytes))

# ----------------------------------------------------------------------------------- reductions
def RED_2D():
    return tiny((4096, 1024), (64, 48))


# name: (op, shape fn, dim)
_RED = {
    "sum_flat": ("sum", lambda: (EW_N(),), None),
    "mean_flat": ("mean", lambda: (EW_N(),), None),
    "sum_dim-1": ("sum", RED_2D, -1),
    "sum_dim0": ("sum", RED_2D, 0),
    "mean_dim-1": ("mean", RED_2D, -1),
    "mean_dim0": ("mean", RED_2D, 0),
}
RED_OPS = tuple(_RED)


def _red(name):
    op, shape, dim = _RED[name]

    def b(lib):
        (x,) = data(lib, shape())
        if lib == "neetorch":
            f = nee_fn(op, "Tensor." + op)
            return (lambda: f(x)) if dim is None else (lambda: f(x, dim))
        if lib == "torch":
            f = getattr(torch(), op)
            return (lambda: f(x)) if dim is None else (lambda: f(x, dim))
        f = getattr(np, op)
        return (lambda: f(x)) if dim is None else (lambda: f(x, axis=dim))
    return b


for _n in RED_OPS:
    _shape = _RED[_n][1]
    _lab = f"{_n} " + ("16M" if _RED[_n][2] is None else "4096x1024")
    add(Workload(f"red.{_n}", _lab, _red(_n), Target("vs", "numpy", 1.0),
                 nbytes=(lambda s=_shape: int(np.prod(s())) * F32)))

# ----------------------------------------------------------------------------------- softmax / layer_norm
def NN_SHAPE():
    return tiny((4096, 1024), (64, 48))


def _np_softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    e /= e.sum(axis=-1, keepdims=True)
    return e


def _np_layer_norm(x, w, b, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    xc = x - mu
    var = (xc * xc).mean(axis=-1, keepdims=True)
    return xc * (np.float32(1.0) / np.sqrt(var + np.float32(eps))) * w + b


def _softmax(lib):
    (x,) = data(lib, NN_SHAPE())
    if lib == "neetorch":
        f = nee_fn("nn.functional.softmax", "softmax", "Tensor.softmax")
        return lambda: f(x, dim=-1)
    if lib == "torch":
        f = torch().softmax
        return lambda: f(x, dim=-1)
    return lambda: _np_softmax(x)


def _layer_norm(lib):
    r, c = NN_SHAPE()
    x, w, b = data(lib, (r, c), (c,), (c,))
    if lib == "neetorch":
        f = nee_fn("nn.functional.layer_norm", "layer_norm")
        return lambda: f(x, (c,), w, b, 1e-5)
    if lib == "torch":
        f = torch().nn.functional.layer_norm
        return lambda: f(x, (c,), w, b, 1e-5)
    return lambda: _np_layer_norm(x, w, b)


def _nn_bytes():
    return 2 * int(np.prod(NN_SHAPE())) * F32


add(Workload("nn.softmax", "softmax 4096x1024 dim-1", _softmax, Target("vs", "torch", 1.0), nbytes=_nn_bytes))
add(Workload("nn.layer_norm", "layer_norm 4096x1024", _layer_norm, Target("vs", "torch", 1.0), nbytes=_nn_bytes))

# ----------------------------------------------------------------------------------- matmul
MATMUL_SIZES = (256, 1024, 2048)


def mm_n(n):
    return tiny(n, max(4, n // 64))


def _matmul(n):
    def b(lib):
        m = mm_n(n)
        a, c = data(lib, (m, m), (m, m))
        if lib == "neetorch":
            f = nee_fn("matmul")
            return lambda: f(a, c)
        if lib == "torch":
            f = torch().matmul
            return lambda: f(a, c)
        return lambda: np.matmul(a, c)
    return b


for _n in MATMUL_SIZES:
    add(Workload(f"matmul.{_n}", f"matmul {_n}^2 f32", _matmul(_n), Target("vs", "numpy", 0.95),
                 flops=(lambda n=_n: 2.0 * mm_n(n) ** 3)))

# ----------------------------------------------------------------------------------- conv2d
def CONV():
    # N, C_in, C_out, H, W, K
    return tiny((1, 64, 64, 56, 56, 3), (1, 4, 4, 8, 8, 3))


def _np_conv2d(x, w, b, pad):
    """im2col with numpy: sliding windows + one BLAS matmul (NCHW, stride 1)."""
    n, c, h, wd = x.shape
    co, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))  # n,c,h,w,kh,kw
    cols = np.ascontiguousarray(win.transpose(0, 1, 4, 5, 2, 3)).reshape(n, c * kh * kw, h * wd)
    out = np.matmul(w.reshape(co, c * kh * kw), cols)
    out += b[None, :, None]
    return out.reshape(n, co, h, wd)


def _conv2d(lib):
    n, ci, co, h, w_, k = CONV()
    x, w, b = data(lib, (n, ci, h, w_), (co, ci, k, k), (co,))
    if lib == "neetorch":
        f = nee_fn("nn.functional.conv2d", "conv2d")
        return lambda: f(x, w, b, 1, 1)
    if lib == "torch":
        f = torch().nn.functional.conv2d
        return lambda: f(x, w, b, 1, 1)
    return lambda: _np_conv2d(x, w, b, 1)


def _conv_flops():
    n, ci, co, h, w_, k = CONV()
    return 2.0 * n * ci * co * h * w_ * k * k


add(Workload("conv.conv2d", "conv2d 1x64->64 56^2 3x3", _conv2d, Target("vs", "torch", 0.5), flops=_conv_flops))

# ----------------------------------------------------------------------------------- timing
def measure(fn: Callable[[], Any], repeats: int = 7, min_time: float = 0.02, warmup: bool = True) -> float:
    """Median seconds per call over ``repeats`` samples; each sample loops until >= ``min_time``."""
    if TINY:
        repeats, min_time = 1, 0.0
    if warmup:
        fn()
    loops = 1
    while True:  # autorange, like timeit
        t0 = time.perf_counter()
        for _ in range(loops):
            fn()
        dt = time.perf_counter() - t0
        if dt >= min_time or loops >= 1 << 20:
            break
        loops *= 10 if dt < min_time / 10 else 2
    samples = [dt / loops]
    for _ in range(repeats - 1):
        t0 = time.perf_counter()
        for _ in range(loops):
            fn()
        samples.append((time.perf_counter() - t0) / loops)
    return statistics.median(samples)


def _autorange(fn, min_time: float) -> int:
    loops = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(loops):
            fn()
        dt = time.perf_counter() - t0
        if dt >= min_time or loops >= 1 << 20:
            return loops
        loops *= 10 if dt < min_time / 10 else 2


def measure_interleaved(fns: dict, repeats: int = 7, min_time: float = 0.02, stat: str = "median") -> dict:
    """Median seconds per call of each fn, sampling them round-robin (A B C, B C A, C A B ...) so that load
    from other processes on a shared machine hits every library alike and ratios stay meaningful.
    The fns must already be warmed up."""
    if TINY:
        repeats, min_time = 1, 0.0
    loops = {k: _autorange(f, min_time) for k, f in fns.items()}
    samples: dict = {k: [] for k in fns}
    keys = list(fns)
    for r in range(repeats):
        # the order rotates every round: the library timed right after another one is charged for its
        # leftovers (onnxruntime's and torch's worker threads spin after a call), so each takes every slot
        for k in keys[r % len(keys):] + keys[:r % len(keys)]:
            f = fns[k]
            n = loops[k]
            t0 = time.perf_counter()
            for _ in range(n):
                f()
            samples[k].append((time.perf_counter() - t0) / n)
    agg = min if stat == "min" else statistics.median
    return {k: agg(v) for k, v in samples.items()}


def results_match(got, ref) -> bool:
    g = to_numpy(got).astype(np.float64)
    r = to_numpy(ref).astype(np.float64)
    if g.shape != r.shape:
        return False
    scale = max(1.0, float(np.max(np.abs(r))) if r.size else 1.0)
    return bool(np.all(np.abs(g - r) <= 2e-3 * scale))


# ----------------------------------------------------------------------------------- copy bandwidth
def COPY_N():
    return tiny(1 << 24, 4096)


_prange_copy = None


def numba_prange_copy():
    global _prange_copy
    if _prange_copy is None:
        from numba import njit, prange

        @njit(parallel=True, nogil=True, cache=True)
        def pcopy(dst, src):
            for i in prange(src.shape[0]):
                dst[i] = src[i]

        _prange_copy = pcopy
    return _prange_copy


def _nthreads() -> int:
    try:
        return max(1, int(nee().get_num_threads()))
    except Exception:
        return os.cpu_count() or 1


def threaded_copyto(dst, src, nthreads=None):
    """np.copyto split over threads (numpy releases the GIL for plain copies)."""
    nt = nthreads or _nthreads()
    n = src.shape[0]
    bounds = [(n * i // nt, n * (i + 1) // nt) for i in range(nt)]
    ts = [threading.Thread(target=np.copyto, args=(dst[s:e], src[s:e])) for s, e in bounds[1:]]
    for t in ts:
        t.start()
    s, e = bounds[0]
    np.copyto(dst[s:e], src[s:e])
    for t in ts:
        t.join()


COPY_METHODS = ("np.copyto", "threaded np.copyto", "numba prange", "neetorch clone", "numpy copy (alloc)")


def copy_fn(method: str):
    """fn() doing one copy of COPY_N float32 (read + write = 2 x 4 x N bytes)."""
    n = COPY_N()
    src = np.random.default_rng(7).standard_normal(n, dtype=np.float32)
    dst = np.empty_like(src)
    dst.fill(0)  # first touch outside the timing
    if method == "np.copyto":
        return lambda: np.copyto(dst, src)
    if method == "threaded np.copyto":
        return lambda: threaded_copyto(dst, src)
    if method == "numba prange":
        f = numba_prange_copy()
        return lambda: f(dst, src)
    if method == "neetorch clone":
        x = nee().from_numpy(src)
        return lambda: x.clone()
    if method == "numpy copy (alloc)":
        return lambda: src.copy()
    raise ValueError(method)


def copy_bytes() -> int:
    return 2 * COPY_N() * F32


def copy_gbps(method: str, repeats: int = 7) -> float:
    return copy_bytes() / measure(copy_fn(method), repeats=repeats, min_time=0.02) / 1e9


def machine_copy_bandwidth(repeats: int = 7, methods=COPY_METHODS) -> dict:
    """GB/s of every copy method, plus "best" over the in-place (preallocated) ones."""
    out = {}
    for m in methods:
        try:
            out[m] = copy_gbps(m, repeats)
        except NotImplementedError:
            out[m] = None
    inplace = [out[m] for m in ("np.copyto", "threaded np.copyto", "numba prange") if out.get(m)]
    out["best"] = max(inplace)
    return out


# ----------------------------------------------------------------------------------- cold start
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def demo_path() -> str:
    """examples/demo.py of the commit asv built (ASV_BUILD_DIR) or else of this checkout."""
    for root in (os.environ.get("ASV_BUILD_DIR"), REPO_ROOT):
        if root:
            p = os.path.join(root, "examples", "demo.py")
            if os.path.exists(p):
                return p
    raise NotImplementedError("examples/demo.py does not exist yet")


def _subprocess_env():
    env = dict(os.environ)
    # the benchmark process may have found neetorch through sys.path only (asv --python=same)
    try:
        pkg_parent = os.path.dirname(os.path.dirname(nee().__file__))
        env["PYTHONPATH"] = os.pathsep.join([pkg_parent] + [p for p in [env.get("PYTHONPATH")] if p])
    except Exception:
        pass
    return env


_IMPORT_CODE = ("import time; t0 = time.perf_counter(); import neetorch; "
                "print(repr(time.perf_counter() - t0))")


def import_time_subprocess() -> tuple[float, float]:
    """(seconds inside ``import neetorch``, whole-process wall seconds) in a fresh interpreter."""
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", _IMPORT_CODE], env=_subprocess_env(),
                       capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"import neetorch failed in a subprocess:\n{r.stderr[-2000:]}")
    return float(r.stdout.strip().splitlines()[-1]), wall


def python_startup_seconds() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - t0


def demo_run_seconds(warm: bool = True) -> float:
    """Wall seconds of ``python examples/demo.py`` in a fresh process; ``warm``: run once first so
    the kernel cache and the OS page cache are warm, then time a second process."""
    path = demo_path()
    env = _subprocess_env()

    def once():
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, path], env=env, cwd=os.path.dirname(os.path.dirname(path)),
                           capture_output=True, text=True, timeout=600)
        dt = time.perf_counter() - t0
        if r.returncode != 0:
            raise RuntimeError(f"{path} failed (rc {r.returncode}):\n{r.stderr[-2000:]}")
        return dt

    if warm:
        once()
    return once()


def gbps(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e9


def fmt_time(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.1f} us"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"
