#!/usr/bin/env python3
"""The direct conv kernels (kernels/conv_direct.py) against onnxruntime on single convs (Conv + Relu), one thread.

    python3 bench/conv_vs_ort.py                          # SqueezeNet 1.1's 3x3 convs and the two stems
    python3 bench/conv_vs_ort.py --old /tmp/conv_direct_old.py   # also another copy of conv_direct.py (A/B)
    python3 bench/conv_vs_ort.py --shapes sq_e1,sh_stem --reps 300

neetorch: ``conv_direct.conv2d`` (frozen weights, relu in the stores: what an ONNX session runs per conv, less
the session's per-call Python) timed by process CPU time (``--threads 2``: wall time, both engines on 2 threads),
min over ``--reps`` calls (after warm-up; ``--cold``: the caches evicted before each call, both engines).  ``--old``: a second
copy of the module loaded as a sibling module (its own kernel cache keys: its source hash), timed in the same
process alternating with the tree's, round by round.  onnxruntime: a one-node Conv + Relu model (its Conv fuses
the Relu; its NCHWc reorders, if any, counted), ``intra_op_num_threads`` = ``--threads``, the nodes' kernel time
from its profiler (min over the calls; the session's per-run overhead not counted; bench/_ort.py).  Ratios: neetorch / onnxruntime (lower is better).  Outputs are checked against onnxruntime's (max |diff|
/ max |ref|).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys

from _ort import node_times, threads_and_clock  # noqa: E402 - bench/ (before neetorch: the thread count)

NT, CLOCK = threads_and_clock()

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# name: (x shape, w shape, stride, pad (t, b, l, r))
SHAPES = {
    "sq_e1": ((1, 16, 55, 55), (64, 16, 3, 3), 1, (1, 1, 1, 1)),
    "sq_e2": ((1, 32, 27, 27), (128, 32, 3, 3), 1, (1, 1, 1, 1)),
    "sq_e3": ((1, 48, 13, 13), (192, 48, 3, 3), 1, (1, 1, 1, 1)),
    "sq_e4": ((1, 64, 13, 13), (256, 64, 3, 3), 1, (1, 1, 1, 1)),
    "sq_stem": ((1, 3, 224, 224), (64, 3, 3, 3), 2, (0, 0, 0, 0)),
    "sh_stem": ((1, 3, 224, 224), (24, 3, 3, 3), 2, (1, 1, 1, 1)),
}


def load_module(path: str, tag: str):
    """Another copy of conv_direct.py as neetorch.devices.cpu.kernels.<tag> (its relative imports resolve)."""
    name = f"neetorch.devices.cpu.kernels.{tag}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    mod.source_key.cache_clear()
    return mod


def ort_node(xs, ws, s, pad, x, w, b, reps, junk=None):
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    N, C, H, W = xs
    O, _, KH, KW = ws
    OH, OW = (H + pad[0] + pad[1] - KH) // s + 1, (W + pad[2] + pad[3] - KW) // s + 1
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[KH, KW], strides=[s, s],
                          pads=[pad[0], pad[2], pad[1], pad[3]]),
         helper.make_node("Relu", ["c"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(xs))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [N, O, OH, OW])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    so = ort.SessionOptions()
    so.intra_op_num_threads = NT
    so.inter_op_num_threads = 1
    so.enable_profiling = True
    so.profile_file_prefix = f"/tmp/conv_vs_ort_{os.getpid()}"
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    out = None
    for _ in range(reps + 5):
        if junk is not None:
            junk[::16] += 1.0
        out = sess.run(None, {"x": x})[0]
    return sum(node_times(sess).values()), out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--old", default="", help="another conv_direct.py to time alternating with the tree's")
    ap.add_argument("--no-ort", action="store_true")
    ap.add_argument("--cold", action="store_true", help="evict the caches (a 64 MB write) before each timed call "
                    "(both engines: as a model's first conv meets its input and output)")
    ap.add_argument("--threads", type=int, default=1, help="both engines' threads (from 2: wall time, noisy)")
    args = ap.parse_args()
    import neetorch  # noqa: F401
    from neetorch.devices.cpu.kernels import conv_direct as new, winograd
    mods = [("new", new)]
    if args.old:
        mods.append(("old", load_module(args.old, "conv_direct_bench_old")))
    for _, m in mods:
        m.available()
    rng = np.random.default_rng(0)
    junk = np.zeros(16 << 20, np.float32) if args.cold else None
    print(f"load {os.getloadavg()[0]:.2f}; {NT} thread(s) ({'process CPU' if NT == 1 else 'wall'} time); us (min); "
          "ratios vs onnxruntime's node kernel time")
    for name in args.shapes.split(","):
        xs, ws, s, pad = SHAPES[name]
        x = rng.standard_normal(xs).astype(np.float32)
        w = (rng.standard_normal(ws) / np.sqrt(ws[1] * ws[2] * ws[3])).astype(np.float32)
        b = rng.standard_normal(ws[0]).astype(np.float32) * 0.1
        winograd.freeze(w)
        OH, OW = (xs[2] + pad[0] + pad[1] - ws[2]) // s + 1, (xs[3] + pad[2] + pad[3] - ws[3]) // s + 1
        flops = 2.0 * np.prod(ws) * OH * OW
        outs = {k: np.empty((xs[0], ws[0], OH, OW), np.float32) for k, _ in mods}
        best = {k: 1e18 for k, _ in mods}
        for _ in range(args.rounds):
            for k, m in mods:
                y = outs[k]
                fn = lambda m=m, y=y: m.conv2d(x, w, b, y, s, s, *pad, 1, 1, True)  # noqa: E731
                for _ in range(5):
                    fn()
                for _ in range(args.reps):
                    if args.cold:
                        junk[::16] += 1.0
                    t = CLOCK()
                    fn()
                    best[k] = min(best[k], CLOCK() - t)
        line = f"{name:8s} {str(xs[1:]):15s} -> {ws[0]:3d} k{ws[2]} s{s}: "
        line += "  ".join(f"{k} {best[k] * 1e6:7.1f} us ({flops / best[k] / 1e9:5.1f} GF/s)" for k, _ in mods)
        if not args.no_ort:
            t_ort, ref = ort_node(xs, ws, s, pad, x, w, b, args.reps, junk)
            err = max(float(np.max(np.abs(outs[k] - ref))) / float(np.max(np.abs(ref))) for k, _ in mods)
            line += f"  ort {t_ort:7.1f} us ({flops / t_ort / 1e3:5.1f} GF/s)  "
            line += "  ".join(f"{k}/ort {best[k] * 1e6 / t_ort:4.2f}" for k, _ in mods) + f"  err {err:.1e}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
