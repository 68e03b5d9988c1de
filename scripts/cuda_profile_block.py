#!/usr/bin/env python3
"""Where the host time of a jitted transformer block goes on the CUDA device (bench/cuda_bench.py's block).

    python3 scripts/cuda_profile_block.py [--emulate] [--seq 128 --d 256 --heads 4]

Prints the fallback report, launches per call, ``nee.profile()``'s kernel table (synchronized per kernel),
the unsynchronized wall time per call, and a cProfile of 50 calls (by own time and by cumulative time).
``--emulate`` runs on neetorch.devices.cuda.emulate (no GPU; host structure only, small sizes).
"""
import argparse
import cProfile
import os
import pstats
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--emulate", action="store_true")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    a = ap.parse_args()
    if a.emulate:
        from neetorch.devices.cuda import emulate
        emulate.install()
    import neetorch as nee
    from neetorch.devices import get_backend, register_backend
    from neetorch.devices.cuda import CUDABackend
    import cuda_bench as CB
    register_backend(CUDABackend, "cuda")
    dev = nee.device("cuda:0")
    bk = get_backend(dev)
    block, xin = CB._transformer(nee, a.seq, a.d, a.heads, lambda t: t.to(dev))
    jb = nee.jit(block)
    for _ in range(3):
        jb(xin)
    bk.synchronize()
    print(nee.fallback_report())
    l0 = bk.launches
    jb(xin)
    print("launches per jit call:", bk.launches - l0)
    for f, name in ((jb, "jit"), (block, "eager")):
        bk.synchronize()
        t0 = time.perf_counter()
        for _ in range(50):
            f(xin)
        t1 = time.perf_counter()
        bk.synchronize()
        t2 = time.perf_counter()
        print(f"{name}: {(t1 - t0) / 50 * 1e6:.0f} us per call queued (host), {(t2 - t0) / 50 * 1e6:.0f} us with the final sync")
    with nee.profile() as prof:
        jb(xin)
    print(prof.table(row_limit=40))
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(50):
        jb(xin)
    bk.synchronize()
    pr.disable()
    st = pstats.Stats(pr)
    st.sort_stats("tottime").print_stats(30)
    st.sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
