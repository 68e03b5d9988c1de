#!/usr/bin/env python3
"""neetorch vs numpy vs torch on the issue's workloads, without asv: prints a ratio table.

    NEE_CACHE_DIR=/tmp/neecache python3 bench/compare.py [--quick] [--only SUBSTR ...]

Every number is the median of N repeats after a warm-up call (so Numba compile time is excluded);
tiny ops are looped until one sample lasts long enough to time.  The machine's parallel copy
bandwidth is measured in the same run, and memory-bound workloads are reported as a fraction of it.
Ratios are speeds: t_other / t_neetorch, higher = neetorch faster.  Ops that neetorch does not have
yet print "n/a (missing: nee.X)".  The workloads are the asv suite's (asv_benchmarks/_workloads.py).
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

from asv_benchmarks import _workloads as W  # noqa: E402

STAT = "median"
IMPORT_TARGET_S = 1.0
DEMO_TARGET_S = 2.0


def _reason(e: BaseException) -> str:
    if isinstance(e, W.Missing):
        return f"n/a (missing: {e.what})"
    if isinstance(e, NotImplementedError):
        msg = str(e) or "not implemented"
        return f"n/a ({msg[:48]})"
    return f"error: {type(e).__name__}: {str(e).splitlines()[0][:60] if str(e) else ''}"


def run_workload(w: W.Workload, repeats: int, min_time: float, check: bool, copy_fn=None) -> dict:
    """{lib: seconds or reason-string}, plus 'wrong' when neetorch's result disagrees.

    The three libraries are built and warmed up first, then sampled round-robin (same load for all);
    memory-bound workloads also sample ``copy_fn`` in the same rounds (key "copy", its seconds)."""
    res: dict = {}
    fns: dict = {}
    outputs: dict = {}
    for lib in W.LIBS:
        try:
            fn = w.build(lib)
            out = fn()  # warm-up: compile, first touch
            if check and w.check:
                outputs[lib] = W.to_numpy(out).copy()
            del out
            fns[lib] = fn
        except Exception as e:  # noqa: BLE001 - the table must survive colleagues' half-done ops
            res[lib] = _reason(e)
    if copy_fn is not None and w.nbytes is not None and "neetorch" in fns:
        fns["copy"] = copy_fn
    try:
        res.update(W.measure_interleaved(fns, repeats=repeats, min_time=min_time, stat=STAT))
    except Exception as e:  # noqa: BLE001 - e.g. an op that works once and fails the second time
        for lib in fns:
            res.setdefault(lib, _reason(e))
    fns.clear()  # frees this workload's arrays before the next one is built
    if "neetorch" in outputs:
        ref = outputs.get("numpy", outputs.get("torch"))
        if ref is not None and not W.results_match(outputs["neetorch"], ref):
            res["wrong"] = True
    return res


def _t(v) -> str:
    return W.fmt_time(v) if isinstance(v, float) else str(v)


def _ratio(res, other) -> float | None:
    a, b = res.get("neetorch"), res.get(other)
    if isinstance(a, float) and isinstance(b, float):
        return b / a
    return None


def evaluate(w: W.Workload, res: dict, copy_bw: float):
    """(throughput text, status text)."""
    t = res.get("neetorch")
    thr = "-"
    frac = None
    if isinstance(t, float):
        if w.nbytes is not None:
            g = W.gbps(w.nbytes(), t)
            if isinstance(res.get("copy"), float):  # copy sampled in the same rounds as this workload
                copy_bw = W.gbps(W.copy_bytes(), res["copy"])
            frac = g / copy_bw
            thr = f"{g:6.1f} GB/s ({frac:.2f}x copy)"
        elif w.flops is not None:
            thr = f"{w.flops() / t / 1e9:6.1f} GFLOP/s"
    if res.get("wrong"):
        return thr, "WRONG result"
    tg = w.target
    if not isinstance(t, float):
        return thr, "n/a"
    if tg.kind == "copy":
        return thr, "meets" if frac >= tg.value else f"short ({frac:.2f}x)"
    if tg.kind == "vs":
        r = _ratio(res, tg.ref)
        if r is None:
            return thr, f"n/a (no {tg.ref})"
        return thr, "meets" if r >= tg.value else f"short ({r:.2f}x)"
    return thr, "-"


def table(rows, headers):
    widths = [max(len(str(r[i])) for r in rows + [headers]) for i in range(len(headers))]
    line = " | ".join(h.ljust(wd) for h, wd in zip(headers, widths))
    print(line)
    print("-+-".join("-" * wd for wd in widths))
    for r in rows:
        print(" | ".join(str(c).ljust(wd) for c, wd in zip(r, widths)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 repeats, shorter samples (same sizes)")
    ap.add_argument("--repeats", type=int, default=None, help="samples per measurement (median)")
    ap.add_argument("--only", nargs="*", default=None, help="run workloads whose name contains any of these")
    ap.add_argument("--no-check", action="store_true", help="skip comparing neetorch's results with numpy's")
    ap.add_argument("--no-coldstart", action="store_true", help="skip the subprocess import / demo timings")
    ap.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)  # smoke test: tiny sizes, 1 sample
    ap.add_argument("--stat", choices=("median", "min"), default="median",
                    help="statistic over the repeats (min is more robust on a loaded machine)")
    args = ap.parse_args(argv)
    global STAT
    STAT = args.stat
    if args.tiny:
        W.TINY = True
    repeats = args.repeats or (5 if args.quick else 11)
    min_time = 0.02 if args.quick else 0.05

    os.environ.setdefault("NEE_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "neetorch"))
    t_start = time.perf_counter()
    nee = W.nee()
    libs = [f"neetorch {nee.__version__} ({nee.get_num_threads()} threads)", f"numpy {np.__version__}"]
    try:
        torch = W.torch()
        libs.append(f"torch {torch.__version__} ({torch.get_num_threads()} threads)")
    except NotImplementedError:
        libs.append("torch: not installed")
    print(f"# neetorch benchmark comparison - {platform.machine()} {os.cpu_count()} cpus, "
          f"python {platform.python_version()}; " + ", ".join(libs))
    print(f"# {STAT} of {repeats} repeats after warm-up (libraries sampled round-robin); "
          f"ratios are t_other / t_neetorch (higher = neetorch faster)")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"# load average {load:.1f} on {os.cpu_count()} cpus (above the cpu count, absolute times are inflated: "
          f"read the ratios); NEE_CACHE_DIR={os.environ.get('NEE_CACHE_DIR')}")

    # ---- copy bandwidth (the yardstick for memory-bound rows), same run
    bw = W.machine_copy_bandwidth(repeats=repeats)
    copy_bw = bw.pop("best")
    best_method = max((m for m in ("np.copyto", "threaded np.copyto", "numba prange") if bw.get(m)), key=bw.get)
    copy_fn = W.copy_fn(best_method)
    print(f"\n## copy bandwidth, {W.COPY_N() * 4 // (1 << 20)} MiB float32, GB/s = (read + write bytes) / s")
    print("   " + "; ".join(f"{k}: {v:.1f}" if v else f"{k}: n/a" for k, v in bw.items())
          + f"  -> reference: {best_method} ({copy_bw:.1f} GB/s here), re-sampled in the same rounds as each "
          "memory-bound row for its 'x copy' fraction")

    # ---- workloads
    rows = []
    names = [n for n in W.WORKLOADS if not args.only or any(s in n for s in args.only)]
    print()
    for name in names:
        w = W.WORKLOADS[name]
        if sys.stderr.isatty():
            print(f"   running {name} ...", end="\r", flush=True, file=sys.stderr)
        res = run_workload(w, repeats, min_time, check=not args.no_check, copy_fn=copy_fn)
        thr, status = evaluate(w, res, copy_bw)
        rn, rt = _ratio(res, "numpy"), _ratio(res, "torch")
        rows.append([w.label, _t(res["neetorch"]), _t(res["numpy"]), _t(res["torch"]),
                     f"{rn:.2f}x" if rn else "-", f"{rt:.2f}x" if rt else "-", thr, w.target.describe(), status])
    if sys.stderr.isatty():
        print(" " * 60, end="\r", file=sys.stderr)
    table(rows, ["workload", "neetorch", "numpy", "torch", "nee/numpy", "nee/torch",
                 "neetorch throughput", "target", "status"])
    print("(numpy gelu/erf use scipy.special.erf; numpy softmax/layer_norm/conv2d are written with numpy ops "
          "(conv2d: im2col + BLAS matmul); chain GB/s counts only a fused kernel's bytes: read x + write out;\n"
          " 4096x1024 float32 is 16 MiB and can stay in L3 between calls, so its 'x copy' can exceed 1)")

    # ---- cold start
    if not args.no_coldstart:
        print("\n## cold start (fresh processes)")
        n = 3 if args.quick else 5
        try:
            samples = [W.import_time_subprocess() for _ in range(n)]
            imp = float(np.median([s[0] for s in samples]))
            wall = float(np.median([s[1] for s in samples]))
            py = float(np.median([W.python_startup_seconds() for _ in range(n)]))
            st = "meets" if imp < IMPORT_TARGET_S else "short"
            print(f"   import neetorch: {imp:.3f} s inside the import, {wall:.3f} s whole process "
                  f"(bare python: {py:.3f} s) | target < {IMPORT_TARGET_S:g} s | {st}")
        except Exception as e:  # noqa: BLE001
            print(f"   import neetorch: {_reason(e)}")
        try:
            d = W.demo_run_seconds(warm=True)
            st = "meets" if d < DEMO_TARGET_S else "short"
            print(f"   examples/demo.py, second fresh process: {d:.3f} s | target < {DEMO_TARGET_S:g} s | {st}")
        except Exception as e:  # noqa: BLE001
            print(f"   examples/demo.py: {_reason(e)}")
    print(f"\n# total {time.perf_counter() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
