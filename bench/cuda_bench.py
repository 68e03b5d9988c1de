#!/usr/bin/env python3
"""CUDA backend benchmarks (needs an NVIDIA GPU and CuPy: ``pip install -e '.[cuda]'``).

    python3 bench/cuda_bench.py [--quick] [--json OUT.json]

* **copy bandwidth** of this GPU, measured in the same run: a device-to-device copy
  (``cudaMemcpyAsync``) and CuPy's own elementwise copy; bytes read + written per second;
* **fused elementwise chain** (``nee.jit``: one generated kernel) and the same chain eager
  (one kernel per op), as a fraction of that copy bandwidth (bytes = inputs read + outputs
  written once, what an ideal fused kernel moves); CuPy's eager chain for comparison;
* **matmul** through the backend vs CuPy's own ``@`` on the same arrays (float32/float16/float64),
  TFLOP/s and the ratio;
* **launch overhead per op**: a 1-element ``x + 1`` looped, neetorch vs CuPy, microseconds per
  op as seen from Python (dispatch + launch, queued back to back, synchronized at the end).

Times: GPU work is bracketed by stream synchronization; each number is the minimum of
repeats after a warm-up (compilation excluded).  Ratios are speeds (higher = neetorch faster).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def best(fn, sync, repeats=7, inner=1):
    fn()
    sync()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        sync()
        ts.append((time.perf_counter() - t0) / inner)
    return min(ts)


def _transformer(lib, s, d, h, to):
    """asv_benchmarks/bench_jit.py's pre-norm block (causal attention + GELU MLP), parameters moved by ``to``."""
    F = lib.nn.functional
    lib.manual_seed(0)
    p = {k: to(lib.randn(*shape) * 0.05) for k, shape in dict(
        wq=(d, d), wk=(d, d), wv=(d, d), wo=(d, d), w1=(4 * d, d), w2=(d, 4 * d)).items()}
    p.update({k: to(lib.zeros(n)) for k, n in dict(bq=d, bk=d, bv=d, bo=d, b1=4 * d, b2=d).items()})
    g1, be1, g2, be2 = to(lib.ones(d)), to(lib.zeros(d)), to(lib.ones(d)), to(lib.zeros(d))

    def heads(t):
        return t.reshape(1, s, h, d // h).transpose(1, 2)

    def block(x):
        n = F.layer_norm(x, (d,), g1, be1)
        q, k, v = (heads(F.linear(n, p["w" + c], p["b" + c])) for c in "qkv")
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(1, s, d)
        x = x + F.linear(a, p["wo"], p["bo"])
        n = F.layer_norm(x, (d,), g2, be2)
        return x + F.linear(F.gelu(F.linear(n, p["w1"], p["b1"])), p["w2"], p["b2"])
    return block, to(lib.randn(1, s, d))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes")
    ap.add_argument("--tiny", action="store_true", help="toy sizes: checks the script, measures nothing")
    ap.add_argument("--json", help="also write the results as JSON here")
    ap.add_argument("--profile", action="store_true", help="cProfile the per-op launch loop (host time)")
    args = ap.parse_args(argv)

    if os.environ.get("NEE_CUDA_EMULATE") == "1" and args.tiny:   # checks the script without a GPU
        from neetorch.devices.cuda import emulate
        emulate.install()
    import cupy as cp

    import neetorch as nee
    from neetorch.devices import get_backend, register_backend
    from neetorch.devices.cuda import CUDABackend
    from neetorch.ops.elementwise import gelu

    n, why = CUDABackend.probe()
    if n == 0:
        print(f"no CUDA device: {why}")
        return 2
    register_backend(CUDABackend, "cuda")
    dev = nee.device("cuda")
    bk = get_backend(dev)
    sync = bk.synchronize
    res = {"device": bk.memory_stats()["device"], "cupy": cp.__version__, "python": platform.python_version()}
    print(f"device: {res['device']}  cupy {cp.__version__}")

    # ---------------------------------------------------------------- copy bandwidth
    N = (1 << 12) if args.tiny else (1 << 24) if args.quick else (1 << 27)   # float32 elements (64 / 512 MiB)
    with bk.on():
        a = cp.random.standard_normal(N, dtype=cp.float32)
        b = cp.empty_like(a)
    nbytes = a.nbytes

    def memcpy():
        with bk.on():
            b.data.copy_from_device_async(a.data, nbytes, bk.stream)

    def cp_copy():
        with bk.on():
            cp.copyto(b, a)
    t_mc = best(memcpy, sync)
    t_cc = best(cp_copy, sync)
    copy_bw = 2 * nbytes / min(t_mc, t_cc)
    res["copy_GBps"] = {"memcpy": 2 * nbytes / t_mc / 1e9, "cupy_copyto": 2 * nbytes / t_cc / 1e9}
    print(f"copy bandwidth: memcpy {2 * nbytes / t_mc / 1e9:.0f} GB/s, cupy copyto {2 * nbytes / t_cc / 1e9:.0f} GB/s"
          f"  (reference: {copy_bw / 1e9:.0f} GB/s)")

    # ---------------------------------------------------------------- fused elementwise chain
    x = nee.randn(N).to(dev)
    w = nee.randn(N).to(dev)

    def chain(x, w):
        return gelu(x * w + 1.0).tanh() * 0.5 + x

    f = nee.jit(chain)
    f(x, w)
    t_fused = best(lambda: f(x, w), sync)
    t_eager = best(lambda: chain(x, w), sync)
    xa, wa = x._data.a, w._data.a

    def cp_chain():
        with bk.on():
            h = xa * wa + 1.0
            g = 0.5 * h * (1.0 + cp.tanh(0.7978845608 * (h + 0.044715 * h * h * h)))   # tanh-gelu: CuPy has no erf
            return cp.tanh(g) * 0.5 + xa
    t_cp = best(cp_chain, sync)
    moved = 3 * 4 * N    # x, w read once, out written once
    res["fused_chain"] = {
        "elements": N, "bytes": moved,
        "jit_fused_GBps": moved / t_fused / 1e9, "jit_fraction_of_copy": moved / t_fused / copy_bw,
        "eager_GBps": moved / t_eager / 1e9, "eager_fraction_of_copy": moved / t_eager / copy_bw,
        "cupy_eager_GBps": moved / t_cp / 1e9, "kernels_jit": len(f.graph(x, w).nodes),
    }
    print(f"fused chain gelu(x*w+1).tanh()*0.5+x, {N} float32: jit {t_fused * 1e3:.2f} ms = "
          f"{moved / t_fused / 1e9:.0f} GB/s = {moved / t_fused / copy_bw:.0%} of copy;  eager {t_eager * 1e3:.2f} ms "
          f"({moved / t_eager / copy_bw:.0%});  cupy eager {t_cp * 1e3:.2f} ms")

    # ---------------------------------------------------------------- row kernels + torch as an anchor
    try:
        import torch
        has_torch = torch.cuda.is_available()
    except Exception:  # noqa: BLE001 - torch is only an anchor
        has_torch = False
    R, C = (64, 64) if args.tiny else (4096, 1024)
    xr = nee.randn(R, C).to(dev)
    gam, bet = nee.randn(C).to(dev), nee.randn(C).to(dev)
    F = nee.nn.functional
    rows = {"softmax": (lambda: F.softmax(xr, -1)),
            "layer_norm": (lambda: F.layer_norm(xr, (C,), gam, bet)),
            "jit_chain": (lambda: f(x, w))}
    if has_torch:
        txr = torch.as_tensor(xr._data.a, device="cuda")
        tg, tb = torch.as_tensor(gam._data.a, device="cuda"), torch.as_tensor(bet._data.a, device="cuda")
        tx, tw = torch.as_tensor(xa, device="cuda"), torch.as_tensor(wa, device="cuda")
        tf = torch.nn.functional
        trows = {"softmax": (lambda: tf.softmax(txr, -1)),
                 "layer_norm": (lambda: tf.layer_norm(txr, (C,), tg, tb)),
                 "jit_chain": (lambda: tf.gelu(tx * tw + 1.0).tanh() * 0.5 + tx)}
    res["vs_torch"] = {}
    for k, fn in rows.items():
        moved_k = (3 * 4 * N) if k == "jit_chain" else 2 * 4 * R * C
        t_n = best(fn, sync)
        row = {"nee_GBps": moved_k / t_n / 1e9, "nee_fraction_of_copy": moved_k / t_n / copy_bw}
        msg = f"{k}: neetorch {t_n * 1e3:.3f} ms = {moved_k / t_n / copy_bw:.0%} of copy"
        if has_torch:
            t_t = best(trows[k], torch.cuda.synchronize)
            row["torch_GBps"] = moved_k / t_t / 1e9
            row["speed_vs_torch"] = t_t / t_n
            msg += f"; torch eager {t_t * 1e3:.3f} ms; ratio (torch time / neetorch time) {t_t / t_n:.2f}"
        res["vs_torch"][k] = row
        print(msg)

    # ---------------------------------------------------------------- matmul vs cupy @
    res["matmul"] = []
    sizes = [32] if args.tiny else [1024, 4096] if args.quick else [1024, 4096, 8192]
    for dt in ("float32", "float16", "float64"):
        for s in sizes:
            A = nee.randn(s, s).to(getattr(nee, dt)).to(dev)
            B = nee.randn(s, s).to(getattr(nee, dt)).to(dev)
            Aa, Ba = A._data.a, B._data.a
            t_nee = best(lambda A=A, B=B: A @ B, sync, repeats=5)

            def cpm(Aa=Aa, Ba=Ba):
                with bk.on():
                    return Aa @ Ba
            t_cpm = best(cpm, sync, repeats=5)
            fl = 2 * s ** 3
            row = {"dtype": dt, "n": s, "nee_TFLOPs": fl / t_nee / 1e12, "cupy_TFLOPs": fl / t_cpm / 1e12,
                   "speed_vs_cupy": t_cpm / t_nee}
            res["matmul"].append(row)
            print(f"matmul {dt} {s}^3: neetorch {fl / t_nee / 1e12:.1f} TFLOP/s, cupy @ {fl / t_cpm / 1e12:.1f} "
                  f"TFLOP/s, ratio {t_cpm / t_nee:.2f}")

    # ---------------------------------------------------------------- launch overhead per op
    tiny = nee.ones(1).to(dev)
    one = nee.ones(1).to(dev)
    ta, oa = tiny._data.a, one._data.a
    K = 20 if args.tiny else 2000 if args.quick else 20000

    def nee_loop():
        y = tiny
        for _ in range(K):
            y = y + one
        return y

    def nee_loop_scalar():          # a Python scalar operand becomes a 0-d device tensor per call
        y = tiny
        for _ in range(K):
            y = y + 1.0
        return y

    def cp_loop():
        with bk.on():
            y = ta
            for _ in range(K):
                y = y + oa
        return y
    t_nl = best(nee_loop, sync, repeats=3) / K
    t_ns = best(nee_loop_scalar, sync, repeats=3) / K
    t_cl = best(cp_loop, sync, repeats=3) / K
    res["launch_us_per_op"] = {"neetorch": t_nl * 1e6, "neetorch_scalar_operand": t_ns * 1e6, "cupy": t_cl * 1e6}
    print(f"launch overhead (1-element x + y, queued): neetorch {t_nl * 1e6:.1f} us/op "
          f"(x + 1.0: {t_ns * 1e6:.1f}), cupy {t_cl * 1e6:.1f} us/op")
    # ---------------------------------------------------------------- where the per-op time goes (host side)
    if args.profile:
        import cProfile
        import io
        import pstats
        pr = cProfile.Profile()
        pr.enable()
        nee_loop()
        sync()
        pr.disable()
        buf = io.StringIO()
        pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(22)
        print(f"cProfile of {K} ops (x + y on 1 element), by own time:")
        print(buf.getvalue())

    # ---------------------------------------------------------------- a transformer block: eager, jit, torch
    res["transformer"] = []
    shapes = [(16, 32, 4)] if args.tiny else [(128, 256, 4), (1024, 1024, 16)]
    for s_, d_, h_ in shapes:
        row = {"seq": s_, "d": d_, "heads": h_}
        block, xin = _transformer(nee, s_, d_, h_, lambda t: t.to(dev))
        jb = nee.jit(block)
        jb(xin)
        t_e = best(lambda: block(xin), sync, repeats=5)
        t_j = best(lambda: jb(xin), sync, repeats=5)
        row.update(eager_ms=t_e * 1e3, jit_ms=t_j * 1e3)
        msg = f"transformer block seq {s_} d {d_}: neetorch eager {t_e * 1e3:.3f} ms, jit {t_j * 1e3:.3f} ms"
        if has_torch:
            tblock, txin = _transformer(torch, s_, d_, h_, lambda t: t.cuda())
            with torch.no_grad():
                t_t = best(lambda: tblock(txin), torch.cuda.synchronize, repeats=5)
            row["torch_ms"] = t_t * 1e3
            msg += f", torch eager {t_t * 1e3:.3f} ms (jit speed vs torch {t_t / t_j:.2f})"
        res["transformer"].append(row)
        print(msg)
    res["memory_stats"] = bk.memory_stats()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=2, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
