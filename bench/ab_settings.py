#!/usr/bin/env python3
"""In-process A/B of two settings on one ONNX model: both sessions in one process, alternating run by run.

    python3 bench/ab_settings.py MODEL "STMT_A" "STMT_B" [--threads 2] [--rounds 25]
    python3 bench/ab_settings.py light_resnet50 "CV._WINO_GEMM[0] = 'blas'" "CV._WINO_GEMM[0] = ''"

On a shared VM whose speed swings ±10-30% within minutes, fresh-process A/B (bench/onnx_vs_ort.py --alone) cannot
resolve effects of a few percent; run-by-run alternation in one process sees both variants under the same noise.
Run A against A first to see what is left of it (SqueezeNet, 8 rounds, session 21's 2-core Zen 5: B/A median 0.97,
min 1.04; 25-40 rounds on ResNet-50: within ~2%).  Each statement is executed (names: ``CV``
kernels/conv.py, ``CD`` kernels/conv_direct.py, ``PK`` kernels/conv1x1_packed.py, ``W`` kernels/winograd.py) before its
session is built and before each of its runs, then the shape-rule caches are cleared (``CD._pays``, ``PK._pays``), so
its session binds its steps under its setting and the unbound steps ask the rules under it at each call.  Settings a
kernel is compiled with (IR shape, vector width) need fresh processes instead.  Prints each side's median and min
per run (ms) and B / A.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=25)
    args = ap.parse_args()
    os.environ["NEE_NUM_THREADS"] = str(args.threads)
    sys.path.insert(0, ROOT)
    import numpy as np

    from asv_benchmarks import _onnx_models as M
    from neetorch.devices.cpu.kernels import conv as CV
    from neetorch.devices.cpu.kernels import conv1x1_packed as PK
    from neetorch.devices.cpu.kernels import conv_direct as CD
    from neetorch.devices.cpu.kernels import winograd as W

    ns = {"CV": CV, "CD": CD, "PK": PK, "W": W}
    stmts = {"A": args.a, "B": args.b}

    def use(k):
        exec(stmts[k], ns)  # noqa: S102 - the user's own setting statement
        CD._pays.clear()
        PK._pays.clear()

    spec = M.spec(args.model)
    runs = {}
    for k in ("A", "B"):
        use(k)
        fn = M.run_fn(M.nee_session(spec.model, args.threads), spec.feed)
        for _ in range(3):
            fn()
        runs[k] = fn
    res = {"A": [], "B": []}
    for _ in range(args.rounds):
        for k in ("A", "B"):
            use(k)
            fn = runs[k]
            fn()
            t0 = time.perf_counter()
            fn()
            fn()
            res[k].append((time.perf_counter() - t0) / 2 * 1e3)
    for k in ("A", "B"):
        v = np.array(res[k])
        print(f"{k}: median {np.median(v):.3f} ms  min {v.min():.3f} ms  ({stmts[k]})")
    print(f"B/A: median {np.median(res['B']) / np.median(res['A']):.3f}  min {min(res['B']) / min(res['A']):.3f}")


if __name__ == "__main__":
    main()
