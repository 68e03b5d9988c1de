#!/usr/bin/env python3
"""Regression check of a fixed bug (sessions 24-25): a jitted function's first call at a new specialization,
made from several Python threads at once, returned wrong values (every output element: one element off, garbage,
NaN; glibc heap-corruption aborts) in ~1 fresh process in 5 when a second copy ran beside it; the same call
repeated was right.  Cause: the fused matmul + softmax step's GEMM-driver descriptor held the address of its row
meta (gemm_driver.with_row_epilogue; the elementwise epilogue's operand table likewise), an array only the step's
plan kept alive; two threads making the same plan at once each stored theirs in the plans dict, and the one
replaced was freed while its thread's native call was still reading the meta.  The descriptor now owns a copy
(gemm_driver._owning); tests/test_gemm_driver.py::test_epilogue_descriptors_own_their_tables checks the contract.

    python3 scripts/jit_thread_race.py 20          # 20 fresh processes; prints the failures and a count
    # (run two copies at once on a 2-core box: the race needs the load)
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
