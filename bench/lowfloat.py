"""float16 / bfloat16 elementwise speed vs float32 and vs torch (CPU), in one process, interleaved.

    NEE_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python3 bench/lowfloat.py [n] [repeats]

Each case runs its variants round-robin ``repeats`` times; the figure is the minimum (ms).
Ratios: low float / float32 of the same engine, and neetorch / torch for the same dtype.
"""
from __future__ import annotations

import sys
import time

import numpy as np

import neetorch as nee
import neetorch.nn.functional as F

try:
    import torch
    torch.set_num_threads(1)
except ImportError:   # pragma: no cover
    torch = None

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 20
REP = int(sys.argv[2]) if len(sys.argv) > 2 else 15
JIT = "--jit" in sys.argv

CASES = {
    "add": lambda m, a, b: a + b,
    "mul": lambda m, a, b: a * b,
    "gelu": lambda m, a, b: (m.nn.functional.gelu(a)),
    "x*w+b": lambda m, a, b: a * b + a,
    "tanh": lambda m, a, b: m.tanh(a),
    "to_f32": lambda m, a, b: a.float(),
    "from_f32": lambda m, a, b: b,
    "sum": lambda m, a, b: a.sum(),
    "softmax": lambda m, a, b: m.softmax(a.reshape(-1, 1024), -1),
    "layer_norm": lambda m, a, b: m.nn.functional.layer_norm(a.reshape(-1, 1024), (1024,)),
    "log_softmax": lambda m, a, b: m.log_softmax(a.reshape(-1, 1024), -1),
    "log_softmax0": lambda m, a, b: m.log_softmax(a.reshape(-1, 1024), 0),
    "group_norm": lambda m, a, b: m.nn.functional.group_norm(a.reshape(-1, 64, 1024), 8),
    "cumsum": lambda m, a, b: a.reshape(-1, 1024).cumsum(-1),
    "max_dim": lambda m, a, b: a.reshape(-1, 1024).max(-1)[0],
}


def main():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(N).astype(np.float32)
    y = rng.standard_normal(N).astype(np.float32)
    dts = [("float32", nee.float32, torch.float32 if torch else None),
           ("float16", nee.float16, torch.float16 if torch else None),
           ("bfloat16", nee.bfloat16, torch.bfloat16 if torch else None)]
    print(f"n={N} repeats={REP} (ms, min of interleaved repeats)")
    print(f"{'case':12s} " + " ".join(f"{d:>9s} {'torch':>7s}" for d, _, _ in dts) + "   f16/f32 bf16/f32  f16/torch bf16/torch")
    for name, fn in CASES.items():
        runs = []
        for dname, nd, td in dts:
            a, b = nee.tensor(x).to(nd), nee.tensor(y).to(nd)
            f = (lambda a, b, fn=fn: fn(nee, a, b))
            if name == "from_f32":   # float32 -> the dtype (float32: a copy)
                a, b = nee.tensor(x), nee.tensor(y)
                f = (lambda a, b, nd=nd: a.to(nd) if nd is not nee.float32 else a.clone())
            if JIT:
                f = nee.jit(f)
            runs.append((lambda f=f, a=a, b=b: f(a, b)))
            if torch is not None:
                ta, tb = torch.from_numpy(x).to(td), torch.from_numpy(y).to(td)
                if name == "from_f32":
                    ta = torch.from_numpy(x)
                    runs.append((lambda ta=ta, td=td: ta.to(td) if td is not torch.float32 else ta.clone()))
                else:
                    runs.append((lambda ta=ta, tb=tb: fn(torch, ta, tb)))
            else:
                runs.append(lambda: None)
        best = [float("inf")] * len(runs)
        for r in runs:
            r()
        for _ in range(REP):
            for i, r in enumerate(runs):
                t0 = time.perf_counter()
                r()
                best[i] = min(best[i], time.perf_counter() - t0)
        ms = [b * 1e3 for b in best]
        print(f"{name:12s} " + " ".join(f"{ms[2 * i]:9.3f} {ms[2 * i + 1]:7.3f}" for i in range(3)) +
              f"   {ms[2] / ms[0]:7.2f} {ms[4] / ms[0]:8.2f}  {ms[2] / ms[3]:9.2f} {ms[4] / ms[5]:10.2f}")


if __name__ == "__main__":
    main()
