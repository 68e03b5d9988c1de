#!/usr/bin/env python3
"""The native pooling kernels (kernels/pool_native.py) against onnxruntime on the light ONNX models' pools
(SqueezeNet, ShuffleNet, Inception v1 and v2; Inception v2's end-only padded 3x3/2 max pools as the ONNX importer
runs them: ceil_mode without padding).

    python3 bench/pool_vs_ort.py                                  # one thread, every pool of the two models
    python3 bench/pool_vs_ort.py --old /tmp/pool_native_old.py    # also another copy of pool_native.py (A/B)
    python3 bench/pool_vs_ort.py --threads 2 --rounds 60

neetorch: the session's bound step (``pool_native.bind_pool``: what a jitted ONNX session runs per pool, its
Python included) on a random input of the pool's shape, timed by process CPU time (``--threads 2``: wall time),
min over ``--rounds`` rounds of a few calls.  ``--old``: a second copy of the module loaded as a sibling module
(its own kernel cache keys: its source hash), timed in the same process alternating with the tree's, round by
round.  onnxruntime: the whole model run with ``intra_op_num_threads`` = ``--threads`` and its profiler on; each
pool node's kernel time (min over the runs; onnxruntime runs them in its NCHWc layout, the reorders around them
not counted), as /tmp/ortprof.py reads them.  Ratios: neetorch / onnxruntime (lower is better).  Outputs are
checked against torch (max: exactly).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile

from _ort import node_times, threads_and_clock  # noqa: E402 - bench/ (before neetorch: the thread count)

NT, CLOCK = threads_and_clock()

import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

MODELS = ("light_squeezenet", "light_shufflenet", "light_inception_v1", "light_inception_v2")


def model_pools(name):
    """(node name, output name, is_max, attrs, (N, C, H, W), out shape) of the model's MaxPool / AveragePool
    nodes (global ones: GlobalAveragePool is another op, skipped)."""
    import onnx
    from onnx import helper, shape_inference
    from asv_benchmarks import _onnx_models as M
    m = shape_inference.infer_shapes(M.spec(name).model)
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
              for vi in list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output)}
    out = []
    for n in m.graph.node:
        if n.op_type not in ("MaxPool", "AveragePool"):
            continue
        at = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        k = tuple(at["kernel_shape"])
        s = tuple(at.get("strides", (1, 1)))
        pads = tuple(at.get("pads", (0, 0, 0, 0)))
        ceil = bool(at.get("ceil_mode", 0))
        if pads == (0, 0, 1, 1) and not ceil and n.op_type == "MaxPool" and all(
                (h + 1 - kk) // ss == -(-(h - kk) // ss) for h, kk, ss in zip(shapes[n.input[0]][2:], k, s)):
            # caffe2's end-only padding (Inception v2's 3x3/2 pools): the importer's ceil mode without padding
            # where the output sizes agree (the bound step's output shape carries it)
            pads, ceil = (0, 0, 0, 0), True
        if pads[0] != pads[2] or pads[1] != pads[3] or at.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            continue        # (none in these models; the bound step takes symmetric pads)
        attrs = {"kernel_size": k, "stride": s, "padding": pads[:2], "dilation": tuple(at.get("dilations", (1, 1))),
                 "count_include_pad": bool(at.get("count_include_pad", 0)), "divisor_override": None,
                 "ceil_mode": ceil}
        out.append((n.name, n.output[0], n.op_type == "MaxPool", attrs, tuple(shapes[n.input[0]]),
                    tuple(shapes[n.output[0]])))
    assert onnx
    return out


def ort_times(name, pools, runs):
    """us per pool node: onnxruntime's profiler, min over ``runs`` runs of the whole model."""
    import onnxruntime as ort
    from asv_benchmarks import _onnx_models as M
    spec = M.spec(name)
    so = ort.SessionOptions()
    so.intra_op_num_threads = NT
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(tempfile.gettempdir(), f"pool_vs_ort_{os.getpid()}")
    s = ort.InferenceSession(spec.model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    for _ in range(5):
        s.run(None, spec.feed)
    for _ in range(runs):
        s.run(None, spec.feed)
    best = node_times(s)
    res = {}
    for node, outname, *_ in pools:
        for cand in (node, f"{outname}_nchwc", f"{node}_nchwc"):
            if cand in best:
                res[node] = float(best[cand])
                break
    return res


def load_old(path):
    spec = importlib.util.spec_from_file_location("neetorch.devices.cpu.kernels._pool_native_old", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--ort-runs", type=int, default=200)
    ap.add_argument("--old", default=None, help="another copy of pool_native.py, timed alternating")
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    import torch
    import neetorch as nee
    from neetorch.devices.cpu.kernels import pool_native as PN
    nee.set_num_threads(NT)
    mods = [PN] + ([load_old(args.old)] if args.old else [])
    print(f"threads {NT}  clock {'process CPU' if NT == 1 else 'wall'}  load {os.getloadavg()[0]:.2f}")
    hdr = f"{'model':17s} {'node':6s} {'op':4s} {'input':>16s} {'ort us':>8s} {'nee us':>8s} {'nee/ort':>8s}"
    print(hdr + (f" {'old us':>8s} {'old/ort':>8s} {'new/old':>8s}" if args.old else ""))
    rng = np.random.default_rng(0)
    ratios = []
    for name in args.models.split(","):
        pools = model_pools(name)
        ort_us = ort_times(name, pools, args.ort_runs)
        for node, _, is_max, attrs, xs, os_ in pools:
            x = rng.standard_normal(xs).astype(np.float32)
            outs = [np.empty(os_, np.float32) for _ in mods]
            fs = [m.bind_pool(is_max, attrs, o, [x]) for m, o in zip(mods, outs)]
            if not all(fs):
                print(f"{name:17s} {node:6s}: no bound step")
                continue
            for f, o in zip(fs, outs):
                for _ in range(5):
                    f([o], [x])
            t = torch.from_numpy(x)
            k, s, p = attrs["kernel_size"], attrs["stride"], attrs["padding"]
            c = attrs["ceil_mode"]
            ref = (torch.nn.functional.max_pool2d(t, k, s, p, ceil_mode=c) if is_max else
                   torch.nn.functional.avg_pool2d(t, k, s, p, ceil_mode=c,
                                                  count_include_pad=attrs["count_include_pad"])).numpy()
            assert ref.shape == os_, (node, ref.shape, os_)
            for o in outs:
                if is_max:
                    np.testing.assert_array_equal(o, ref)
                else:
                    np.testing.assert_allclose(o, ref, rtol=1e-5, atol=1e-6)
            inner = max(1, int(2000 // (x.size / 1e4 + 1)))
            best = [float("inf")] * len(fs)
            for _ in range(args.rounds):
                for i, (f, o) in enumerate(zip(fs, outs)):
                    t0 = CLOCK()
                    for _ in range(inner):
                        f([o], [x])
                    best[i] = min(best[i], (CLOCK() - t0) / inner)
            us = [b * 1e6 for b in best]
            r = ort_us.get(node)
            line = (f"{name:17s} {node:6s} {'max' if is_max else 'avg':4s} {str(xs[1:]):>16s} "
                    f"{r if r is not None else float('nan'):8.1f} {us[0]:8.1f} "
                    f"{us[0] / r if r else float('nan'):8.2f}")
            if args.old:
                line += f" {us[1]:8.1f} {us[1] / r if r else float('nan'):8.2f} {us[0] / us[1]:8.2f}"
            if r:
                ratios.append(us[0] / r)
            print(line)
    if ratios:
        print(f"geomean nee/ort {float(np.exp(np.mean(np.log(ratios)))):.2f}  load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
