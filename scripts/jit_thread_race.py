#!/usr/bin/env python3
"""Repro of an open bug (session 24): a jitted function's first call at a new specialization, made from several
Python threads at once while another thread runs eager elementwise ops, sometimes returns wrong values (every output
element: garbage / inf / NaN); the same call repeated is right.  Seen with NEE_NUM_THREADS=1 too (not the native
worker pool), with the LLVM elementwise renderer (NEE_CPU_RENDERER=numba: not seen in 50), through the GEMM driver's
fused-epilogue plans (NEE_MATMUL_DRIVER=0: not seen in 28; NEE_JIT_CHAIN=0: still seen), with the weight captured or
passed as an argument, ~1 fresh process in 5-10 on the 2-core box when a second copy of this script runs beside it
(load); a lone copy rarely shows it.

    python3 scripts/jit_thread_race.py 20          # 20 fresh processes; prints the failures and a count
"""
import os
import subprocess
import sys

CHILD = r'''
import sys, threading, math
import numpy as np
import neetorch as nee
import neetorch.nn.functional as F
nee.manual_seed(0)
W = nee.randn(16, 16)
Wn = W.numpy().astype(np.float64)
erf = np.vectorize(math.erf)
def f(x):
    h = F.gelu(x @ W)
    return h.softmax(-1) + x, h.sum(0)
def ref(xn):
    h = xn.astype(np.float64) @ Wn
    return (0.5 * h * (1 + erf(h / math.sqrt(2)))).sum(0)
jf = nee.jit(f)
stop = [False]
def eager():
    rng = np.random.default_rng(9)
    while not stop[0]:
        for B in (1, 3, 8, 5, 16, 2):
            F.gelu(nee.from_numpy(rng.standard_normal((B, 16)).astype(np.float32)))
res = []
def worker(tid):
    rng = np.random.default_rng(tid)
    for it in range(6):
        B = [1, 3, 8, 5, 16, 2][(tid + it) % 6]
        xn = (rng.standard_normal((B, 16)) + tid).astype(np.float32)
        ok = np.allclose(jf(nee.from_numpy(xn.copy()))[1].numpy(), ref(xn), rtol=1e-3, atol=1e-3)
        res.append((tid, it, B, ok))
        if not ok:
            again = np.allclose(jf(nee.from_numpy(xn.copy()))[1].numpy(), ref(xn), rtol=1e-3, atol=1e-3)
            res.append(("again", B, again))
e = threading.Thread(target=eager); e.start()
ths = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
[t.start() for t in ths]; [t.join() for t in ths]
stop[0] = True; e.join()
bad = [r for r in res if r[-1] is False or r[0] == "again"]
print("WRONG" if bad else "ok", bad)
'''


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    fails = 0
    for i in range(n):
        p = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300, env=env)
        last = (p.stdout.strip().splitlines() or [""])[-1]
        if p.returncode != 0 or not last.startswith("ok"):
            fails += 1
            print(f"run {i}: rc={p.returncode} {last} {p.stderr.strip().splitlines()[-1:] if p.returncode else ''}",
                  flush=True)
    print(f"{fails} of {n} fresh processes returned wrong values or crashed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
