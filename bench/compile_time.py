"""Cold and warm compile seconds of every bench_jit workload, each in fresh processes.

    python bench/compile_time.py [workload ...] [--repeat N]

cold: a new process with an empty NEE_CACHE_DIR (nothing compiled: Numba's cache of the
static kernels lives under it too); warm: a second new process on the cache the first one
filled.  Both time the first call of the jitted function (trace, passes, kernel compiles or
loads, first run) after ``import neetorch`` and the workload's setup, like
``asv_benchmarks/bench_jit.JitCompileTime``.  Each line also shows what the cold process
compiled (``kernels``: generated kernels built, of which ``llvm`` through llvmlite;
``eager``: ops run for real while tracing) and the warm process's compile count (0 expected).
The machine is shared: with ``--repeat N`` the minimum of N runs is printed.

    python bench/compile_time.py --rows

times the softmax / log_softmax / layer_norm / rms_norm row kernels on (4096, 1024), LLVM IR vs
Numba, interleaved in one process (min of repeats).

    python bench/compile_time.py --renderers [workload ...]

compares the two CPU renderers on the fused elementwise groups of the workloads, in this
process with a fresh cache: seconds to build each kernel (LLVM IR through llvmlite vs
generated Numba source) and its GB/s (inputs + outputs bytes / time, min of interleaved
repeats, both kernels launched the same way).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_SCRIPT = textwrap.dedent("""
    import json, sys, time
    sys.path.insert(0, {root!r})
    import neetorch as nee
    from asv_benchmarks import bench_jit
    fn, args = bench_jit._workload(nee, {name!r})
    jf = nee.jit(fn)
    from neetorch.devices.cpu import codegen, llvm_render
    from neetorch.trace import tracer
    t0 = time.perf_counter()
    jf(*args)
    dt = time.perf_counter() - t0
    print(json.dumps(dict(seconds=dt, compiled=codegen.stats["compiled"], llvm=llvm_render.stats["compiled"],
                          disk_hits=codegen.stats["disk_hits"], eager_ops=tracer.stats["eager_ops"],
                          retraces=tracer.stats["eager_retraces"])))
""")


def run_once(name: str, cache: str) -> dict:
    env = dict(os.environ, NEE_CACHE_DIR=cache)
    env.pop("NUMBA_CACHE_DIR", None)   # neetorch puts Numba's cache under NEE_CACHE_DIR
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
    r = subprocess.run([sys.executable, "-c", _SCRIPT.format(root=ROOT, name=name)], env=env,
                       capture_output=True, text=True, timeout=900, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"{name}: subprocess failed\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def measure(name: str, repeat: int = 1) -> tuple[dict, dict]:
    best_cold = best_warm = None
    for _ in range(repeat):
        d = tempfile.mkdtemp(prefix="nee-compile-time-")
        try:
            cold = run_once(name, d)
            warm = run_once(name, d)
        finally:
            shutil.rmtree(d, ignore_errors=True)
        if best_cold is None or cold["seconds"] < best_cold["seconds"]:
            best_cold = cold
        if best_warm is None or warm["seconds"] < best_warm["seconds"]:
            best_warm = warm
    return best_cold, best_warm


def renderers(names) -> None:
    import tempfile
    import time

    import numpy as np

    import neetorch as nee
    from asv_benchmarks import bench_jit
    from neetorch import _env
    from neetorch.devices.cpu import codegen, elementwise, llvm_render
    from neetorch.jit.fusion import FusedElementwise
    _env.CACHE_DIR = tempfile.mkdtemp(prefix="nee-renderers-")
    print(f"{'workload':<12} {'group':<28} {'shape':<16} {'llvm s':>7} {'numba s':>8} {'llvm GB/s':>10} "
          f"{'numba GB/s':>11}")
    for name in names:
        fn, args = bench_jit._workload(nee, name)
        g = nee.jit(fn).graph(*args)

        def groups(nodes):   # fused groups, also inside composite nodes (matmul epilogues...)
            for n in nodes:
                if isinstance(n.op, FusedElementwise):
                    yield n.op
                yield from groups(getattr(n.op, "parts", None) or [])
        seen = set()
        for grp in groups(g.nodes):
            if grp.name in seen:
                continue
            seen.add(grp.name)
            pieces = elementwise._group_pieces(grp)
            src = elementwise.render_group(grp.name, *pieces)
            shape = tuple(grp.outputs[0].shape)
            ins = []
            for v in grp.inputs:
                a = np.random.default_rng(0).standard_normal(v.shape).astype(v.dtype.np) if v.shape else \
                    np.asarray(np.float32(0.5)).astype(v.dtype.np)
                ins.append(a)
            outs = [np.empty(shape, o.dtype.np) for o in grp.outputs]
            t0 = time.perf_counter()
            try:
                kl, _ = llvm_render.load("cmp", grp.name, *pieces, src)
                elementwise.launch_group(kl, outs, ins)
                tl = time.perf_counter() - t0
            except NotImplementedError:
                kl, tl = None, float("nan")
            t0 = time.perf_counter()
            kn = codegen.load_kernel("cmp", src)
            elementwise.launch_group(kn, outs, ins)
            tn = time.perf_counter() - t0
            nbytes = sum(o.nbytes for o in outs) + sum(a.nbytes for a in ins)
            best = {"llvm": 1e9, "numba": 1e9}
            for _ in range(7):
                for key, k in (("llvm", kl), ("numba", kn)):
                    if k is None:
                        continue
                    reps = max(1, int(2e7 // max(nbytes, 1)))
                    t0 = time.perf_counter()
                    for _ in range(reps):
                        elementwise.launch_group(k, outs, ins)
                    best[key] = min(best[key], (time.perf_counter() - t0) / reps)
            print(f"{name:<12} {grp.name[:28]:<28} {shape!s:<16} {tl:7.3f} {tn:8.3f} "
                  f"{nbytes / best['llvm'] / 1e9:10.1f} {nbytes / best['numba'] / 1e9:11.1f}", flush=True)


def rows(shape=(4096, 1024), repeat=15) -> None:
    """Runtime of the row kernels (softmax, log_softmax, layer_norm, rms_norm on ``shape``),
    the LLVM IR ones vs the Numba ones, interleaved in this process (min of ``repeat``), each
    launched the same way (``nn.softmax_launch`` / ``nn.norm_launch``, thread pool included)."""
    import time

    import numpy as np

    from neetorch.devices.cpu import elementwise
    from neetorch.devices.cpu.kernels import nn
    R, N = shape
    print(f"{'kernel':<12} {'dtype':<8} {'shape':<12} {'llvm ms':>8} {'numba ms':>9} {'numba/llvm':>11}")
    for dt in ("float32", "float64"):
        x = np.random.default_rng(0).standard_normal(shape).astype(dt)
        o = np.empty_like(x)
        w, b = np.ones(N, dt), np.zeros(N, dt)
        cases = {"softmax": lambda x=x, o=o: nn.softmax_launch(x, o, 1, False),
                 "log_softmax": lambda x=x, o=o: nn.softmax_launch(x, o, 1, True),
                 "layer_norm": lambda x=x, o=o, w=w, b=b: nn.norm_launch(x, o, w, b, R, 1, 1, N, True, 1e-5, False),
                 "rms_norm": lambda x=x, o=o, w=w: nn.norm_launch(x, o, w, None, R, 1, 1, N, True, 1e-5, True)}
        for name, f in cases.items():
            best = {}
            for _ in range(repeat):
                for r in ("llvm", "numba"):
                    elementwise.RENDERER = r       # nn.ir_rows: None (the Numba kernels) unless "llvm"
                    try:
                        f()     # warm-up / compile on the first round
                        t0 = time.perf_counter()
                        f()
                        best[r] = min(best.get(r, 1e9), time.perf_counter() - t0)
                    finally:
                        elementwise.RENDERER = "llvm"
            print(f"{name:<12} {dt:<8} {f'{R}x{N}':<12} {best['llvm'] * 1e3:8.3f} {best['numba'] * 1e3:9.3f} "
                  f"{best['numba'] / best['llvm']:11.2f}", flush=True)


def main(argv=None):
    sys.path.insert(0, ROOT)
    from asv_benchmarks.bench_jit import WORKLOADS
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workloads", nargs="*", default=list(WORKLOADS))
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--renderers", action="store_true", help="compare the LLVM and Numba renderers in-process")
    p.add_argument("--rows", action="store_true",
                   help="runtime of the softmax / norm row kernels, LLVM IR vs Numba, in-process")
    a = p.parse_args(argv)
    if a.rows:
        return rows()
    if a.renderers:
        return renderers(a.workloads)
    print(f"{'workload':<12} {'cold s':>8} {'warm s':>8}   cold compiled (llvm) / eager ops while tracing;"
          f" warm compiled / disk hits")
    for name in a.workloads:
        cold, warm = measure(name, a.repeat)
        print(f"{name:<12} {cold['seconds']:8.3f} {warm['seconds']:8.3f}   {cold['compiled']} ({cold['llvm']}) / "
              f"{cold['eager_ops']};  {warm['compiled']} / {warm['disk_hits']}", flush=True)


if __name__ == "__main__":
    main()
