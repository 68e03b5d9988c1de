"""Throughput of the fastmath kernels vs numpy, single thread.

    python3 -m neetorch.devices.cpu._bench_fastmath [n_elements [reps]] [--f64]

For each function: a serial ``@njit`` loop ``out[i] = f(a[i])`` over n
float32 elements (16M by default) against the numpy (or scipy, where numpy
has no such ufunc) call writing into a preallocated ``out``.  GB/s counts
the bytes read plus written (8 bytes per float32 element); best of 11 runs,
the two sides interleaved (the ratio is the robust number on a busy box).

fastmath.py is loaded by file path, so this runs even if ``import neetorch``
is broken while the package is being built.
"""
import importlib.util
import os
import sys
import time

import numba
import numpy as np

_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fastmath.py")
_spec = importlib.util.spec_from_file_location("_neetorch_fastmath_bench", _PATH)
fm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fm)

try:
    import scipy.special as _sps
except ImportError:        # pragma: no cover
    _sps = None


def _loop(fn):
    @numba.njit
    def loop(a, out):
        for i in range(a.size):
            out[i] = fn(a[i])
    return loop


def _np_sigmoid(a, out):
    np.negative(a, out=out)
    np.exp(out, out=out)
    out += 1
    np.reciprocal(out, out=out)


def _cases(dt):
    sfx = "_f32" if dt == np.float32 else "_f64"
    c = [
        ("exp", (-20, 20), lambda a, o: np.exp(a, out=o), "np.exp"),
        ("log", (1e-3, 1e3), lambda a, o: np.log(a, out=o), "np.log"),
        ("tanh", (-5, 5), lambda a, o: np.tanh(a, out=o), "np.tanh"),
        ("sigmoid", (-10, 10), _np_sigmoid, "numpy 1/(1+exp(-x))"),
        ("expm1", (-5, 5), lambda a, o: np.expm1(a, out=o), "np.expm1"),
        ("log1p", (-0.5, 10), lambda a, o: np.log1p(a, out=o), "np.log1p"),
    ]
    if _sps is not None:
        c.insert(3, ("erf", (-3, 3), lambda a, o: _sps.erf(a, out=o), "scipy.special.erf"))
        c.insert(5, ("sigmoid", (-10, 10), lambda a, o: _sps.expit(a, out=o), "scipy.special.expit"))
    if dt == np.float32:
        c += [("sin", (-10, 10), lambda a, o: np.sin(a, out=o), "np.sin"),
              ("cos", (-10, 10), lambda a, o: np.cos(a, out=o), "np.cos")]
    return [(name + sfx, rng, f, ref) for name, rng, f, ref in c]


def _best_pair(f, g, a, out, reps):
    """Best-of-reps time of f and of g, runs interleaved so that load from
    other processes hits both alike."""
    f(a, out)
    g(a, out)
    tf = tg = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        f(a, out)
        t1 = time.perf_counter()
        g(a, out)
        t2 = time.perf_counter()
        tf, tg = min(tf, t1 - t0), min(tg, t2 - t1)
    return tf, tg


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    dt = np.float64 if "--f64" in argv else np.float32
    nums = [a for a in argv if not a.startswith("--")]
    n = int(nums[0]) if nums else 16 * 1024 * 1024
    reps = int(nums[1]) if len(nums) > 1 else 11
    rng = np.random.default_rng(0)
    nbytes = 2 * n * np.dtype(dt).itemsize
    print(f"n={n} {np.dtype(dt).name}, 1 thread, numba {numba.__version__}, numpy {np.__version__}, "
          f"cpu={numba.config.CPU_NAME or 'host'}")
    print(f"{'function':<12} {'range':>14} {'neetorch GB/s':>14} {'reference':>22} {'ref GB/s':>9} {'ratio':>6}")
    kernels = {}
    for name, (lo, hi), ref, refname in _cases(dt):
        a = rng.uniform(lo, hi, n).astype(dt)
        out = np.empty_like(a)
        if name not in kernels:
            kernels[name] = _loop(getattr(fm, name))
        k = kernels[name]
        t_nee, t_ref = _best_pair(k, ref, a, out, reps)
        print(f"{name:<12} {f'[{lo:g},{hi:g}]':>14} {nbytes / t_nee / 1e9:14.2f} {refname:>22} "
              f"{nbytes / t_ref / 1e9:9.2f} {t_ref / t_nee:6.2f}")


if __name__ == "__main__":
    main()
