"""``python3 -m neetorch.onnx model.onnx [--input name=file.npy] [--repeat N] [--eager] [--provider NAME]``.

Runs the model (inputs not given are filled with deterministic data, symbolic dims = 1),
prints each output's name, shape and dtype, the first-call time (trace + compile) and the
mean time of ``--repeat`` further runs.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m neetorch.onnx", description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--eager", action="store_true", help="run the lowered graph without nee.jit")
    ap.add_argument("--provider", action="append", default=None, metavar="NAME",
                    help="an onnxruntime provider name (CPUExecutionProvider, CUDAExecutionProvider, "
                         "OpenCLExecutionProvider, ...; see get_available_providers()); repeat for a list")
    a = ap.parse_args(argv)
    from . import InferenceSession, OnnxError
    from .loader import ONNX_TO_NP
    try:
        sess = InferenceSession(a.model, providers=a.provider, jit=not a.eager)
    except OnnxError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    given = {}
    for spec in a.input:
        name, _, path = spec.partition("=")
        given[name] = np.load(path)
    feed = {}
    rng = np.random.default_rng(0)
    for arg in sess.get_inputs():
        if arg.name in given:
            feed[arg.name] = given[arg.name]
            continue
        shape = [d if isinstance(d, int) else 1 for d in (arg.shape or [])]
        if arg.type == "tensor(string)":
            feed[arg.name] = rng.integers(0, 4, shape).astype(str).astype(object)
            continue
        dt = ONNX_TO_NP.get(arg.elem_type, np.dtype(np.float32))
        if dt.kind == "f":
            feed[arg.name] = rng.standard_normal(shape).astype(dt)
        elif dt.kind == "b":
            feed[arg.name] = rng.integers(0, 2, shape).astype(dt)
        else:
            feed[arg.name] = rng.integers(0, 4, shape).astype(dt)
    try:
        t0 = time.perf_counter()
        outs = sess.run(None, feed)
        first = time.perf_counter() - t0
        ts = []
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            sess.run(None, feed)
            ts.append(time.perf_counter() - t0)
    except OnnxError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for o, v in zip(sess.get_outputs(), outs):
        shp = list(np.shape(v)) if not isinstance(v, list) else f"sequence of {len(v)}"
        print(f"{o.name}: shape {shp} dtype {getattr(v, 'dtype', 'seq')}")
    print(f"providers: {sess.get_providers()} (device {sess.device})")
    print(f"mode: {sess.info['mode']}" + (f" ({sess.info['fallback_reason']})" if sess.info["fallback_reason"] else ""))
    if sess.info.get("breaks"):
        print(f"graph breaks: {sess.info['breaks']}")
    print(f"first run (trace + compile): {first * 1e3:.1f} ms")
    if ts:
        print(f"steady state: mean {np.mean(ts) * 1e3:.3f} ms, min {np.min(ts) * 1e3:.3f} ms over {len(ts)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
