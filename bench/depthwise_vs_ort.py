#!/usr/bin/env python3
"""Depthwise 3x3 convs (ONNX Conv, group == channels, + bias) of ShuffleNet's shapes: neetorch against onnxruntime,
each engine in its own fresh process, the processes alternating round by round.

    python3 bench/depthwise_vs_ort.py                       # 5 rounds, one thread
    python3 bench/depthwise_vs_ort.py --old /tmp/depthwise_native_old.py --rounds 7
    python3 bench/depthwise_vs_ort.py --threads 2

neetorch: ``conv.conv2d_into`` (the bias as the ONNX session's epilogue passes it: what a session runs per
depthwise conv, less its per-call Python above conv2d_into), min over batches of calls.  ``--old``: another copy of
kernels/depthwise_native.py (e.g. ``git show HEAD:neetorch/devices/cpu/kernels/depthwise_native.py``) put in the
package's place in its own processes.  onnxruntime: a one-node Conv model, ``intra_op_num_threads`` = ``--threads``:
``run`` (min over batches of calls: its per-run overhead counted), ``node`` (its profiler's kernel times summed
over the nodes, its NCHWc reorders included: in light_shufflenet each depthwise conv has them too, between the
NCHW grouped 1x1 convs; min over calls) and ``conv`` (the Conv node's kernel time alone).  One thread: process
CPU time; more: wall time.  Outputs are checked against onnxruntime's.  Prints per shape the minimum over the rounds and the ratios
neetorch / onnxruntime (lower is better).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from _ort import node_times  # bench/

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# (channels, plane, stride): light_shufflenet's depthwise 3x3 convs (padding 1)
SHAPES = [(112, 56, 2), (136, 28, 1), (136, 28, 2), (272, 14, 1), (272, 14, 2), (544, 7, 1)]


def _case(C, H, s, seed=0):
    import numpy as np
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, C, H, H), dtype=np.float32)
    w = rng.standard_normal((C, 1, 3, 3), dtype=np.float32)
    b = rng.standard_normal(C, dtype=np.float32)
    return x, w, b, (H + 2 - 3) // s + 1


def _bench(f, clock, n=40, k=20):
    for _ in range(5):
        f()
    best = 1e9
    for _ in range(n):
        t = clock()
        for _ in range(k):
            f()
        best = min(best, (clock() - t) / k)
    return best * 1e6


def child(engine: str, nt: int, old: str | None) -> dict:
    import numpy as np
    clock = time.process_time if nt == 1 else time.perf_counter
    out = {}
    if engine == "ort":
        import onnxruntime as ort
        from onnx import TensorProto, helper
        for C, H, s in SHAPES:
            x, w, b, OH = _case(C, H, s)
            node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=C, strides=[s, s], pads=[1, 1, 1, 1],
                                    kernel_shape=[3, 3])
            g = helper.make_graph([node], "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C, OH, OH])],
                                  [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel()),
                                   helper.make_tensor("b", TensorProto.FLOAT, b.shape, b)])
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
            so = ort.SessionOptions()
            so.intra_op_num_threads = nt
            so.inter_op_num_threads = 1
            so.enable_profiling = True
            so.profile_file_prefix = f"/tmp/dw_vs_ort_{os.getpid()}"
            sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
            run = _bench(lambda: sess.run(None, {"x": x}), clock)
            nodes = node_times(sess)
            out[f"{C}x{H}s{s}"] = {"run": run, "node": float(sum(nodes.values())),
                                   "conv": float(sum(v for n, v in nodes.items() if "Reorder" not in n)),
                                   "y": sess.run(None, {"x": x})[0].tolist()}
        return out
    if old:
        import importlib.util
        import neetorch.devices.cpu.kernels as kp
        name = "neetorch.devices.cpu.kernels.depthwise_native"
        spec = importlib.util.spec_from_file_location(name, old)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        kp.depthwise_native = mod
    import neetorch as nee
    from neetorch.devices.cpu.kernels import conv
    nee.set_num_threads(nt)
    for C, H, s in SHAPES:
        x, w, b, OH = _case(C, H, s)
        y = np.empty((1, C, OH, OH), np.float32)
        attrs = {"stride": (s, s), "padding": (1, 1, 1, 1), "dilation": (1, 1), "groups": C}
        t = _bench(lambda: conv.conv2d_into(y, [x, w], attrs, b, None, False), clock)
        out[f"{C}x{H}s{s}"] = {"run": t, "y": y.tolist()}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--old", help="another copy of kernels/depthwise_native.py, timed in processes of its own")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child, a.threads, a.old)))
        return
    import numpy as np
    engines = ["new", "ort"] + (["old"] if a.old else [])
    best: dict = {}
    ys: dict = {}
    env = dict(os.environ, NEE_NUM_THREADS=str(a.threads), OMP_NUM_THREADS=str(a.threads))
    for _ in range(a.rounds):
        for e in engines:
            cmd = [sys.executable, os.path.abspath(__file__), "--child", "ort" if e == "ort" else "nee",
                   "--threads", str(a.threads)] + (["--old", a.old] if e == "old" else [])
            r = json.loads(subprocess.run(cmd, env=env, cwd=ROOT, check=True, capture_output=True,
                                          text=True).stdout.strip().splitlines()[-1])
            for k, v in r.items():
                for f in ("run", "node", "conv"):
                    if f in v:
                        best[(e, k, f)] = min(best.get((e, k, f), 1e18), v[f])
                ys[(e, k)] = np.asarray(v["y"], np.float32)
    print(f"depthwise 3x3 + bias, {a.threads} thread(s), min over {a.rounds} rounds of fresh processes "
          f"({'process CPU' if a.threads == 1 else 'wall'} us); load {os.getloadavg()[0]:.2f}")
    print(f"{'shape':>12} {'nee':>7} " + (f"{'old':>7} " if a.old else "") + f"{'ort run':>8} {'ort node':>8} "
          f"{'ort conv':>8} {'nee/run':>8} {'nee/node':>8} {'nee/conv':>8}" + (f" {'old/new':>8}" if a.old else "")
          + "  max|diff|")
    for C, H, s in SHAPES:
        k = f"{C}x{H}s{s}"
        n, r, nd, cv = (best[("new", k, "run")], best[("ort", k, "run")], best[("ort", k, "node")],
                        best[("ort", k, "conv")])
        ref = ys[("ort", k)]
        err = float(np.abs(ys[("new", k)] - ref).max() / max(1e-30, np.abs(ref).max()))
        line = f"{k:>12} {n:7.1f} "
        if a.old:
            line += f"{best[('old', k, 'run')]:7.1f} "
        line += f"{r:8.1f} {nd:8.1f} {cv:8.1f} {n / r:8.2f} {n / nd:8.2f} {n / cv:8.2f}"
        if a.old:
            line += f" {best[('old', k, 'run')] / n:8.2f}"
        print(line + f"  {err:.1e}")


if __name__ == "__main__":
    main()
