"""Per-node cost of a chain of small conv + bias + relu nodes in an ONNX session, neetorch vs onnxruntime:
the Python (neetorch) or framework (onnxruntime) cost around each kernel when the kernels are tiny.

    python3 bench/conv_step_overhead.py [--channels 4] [--size 4] [--nodes 50] [--threads 1]

Prints microseconds per node (min over repeated calls) and the ratio; at 4 channels on 4x4 planes the
arithmetic is negligible, so the figure is the per-step overhead.
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def model(C: int, H: int, N: int) -> bytes:
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh
    rng = np.random.default_rng(0)
    nodes, inits, cur = [], [], "x"
    for i in range(N):
        inits.append(nh.from_array((rng.random((C, C, 1, 1)) * 0.1).astype(np.float32), f"w{i}"))
        inits.append(nh.from_array(rng.random(C).astype(np.float32), f"b{i}"))
        nodes.append(h.make_node("Conv", [cur, f"w{i}", f"b{i}"], [f"c{i}"]))
        nodes.append(h.make_node("Relu", [f"c{i}"], [f"r{i}"]))
        cur = f"r{i}"
    g = h.make_graph(nodes, "chain", [h.make_tensor_value_info("x", T.FLOAT, [1, C, H, H])],
                     [h.make_tensor_value_info(cur, T.FLOAT, [1, C, H, H])], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()


def best(f, n=200) -> float:
    for _ in range(5):
        f()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return min(ts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--channels", type=int, default=4)
    ap.add_argument("--size", type=int, default=4)
    ap.add_argument("--nodes", type=int, default=50)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    import neetorch as nee
    from neetorch.onnx import InferenceSession
    m = model(a.channels, a.size, a.nodes)
    feed = {"x": np.random.default_rng(1).random((1, a.channels, a.size, a.size)).astype(np.float32)}
    nee.set_num_threads(a.threads)
    s = InferenceSession(m)
    t_nee = best(lambda: s.run(None, feed)) / a.nodes * 1e6
    line = f"{a.nodes} x (conv {a.channels}->{a.channels} 1x1 on {a.size}x{a.size} + bias + relu), " \
           f"{a.threads} thread(s): neetorch {t_nee:.1f} us per node"
    try:
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = a.threads
        o = ort.InferenceSession(m, so, providers=["CPUExecutionProvider"])
        np.testing.assert_allclose(s.run(None, feed)[0], o.run(None, feed)[0], rtol=1e-4, atol=1e-5)
        t_ort = best(lambda: o.run(None, feed)) / a.nodes * 1e6
        line += f", onnxruntime {t_ort:.1f} us ({t_nee / t_ort:.1f}x)"
    except ImportError:
        pass
    print(line)


if __name__ == "__main__":
    main()
