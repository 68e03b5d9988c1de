"""The OpenCL device against the CPU device (issue 5): same workloads, same process.

Here OpenCL is PoCL on the SAME CPU cores as the CPU backend, so these numbers check the
backend's overhead (launches, transfers, generated kernels vs Numba kernels), not a GPU's speed.

- ``DeviceWorkload.time_run``: one run of a workload on ``cpu`` or ``opencl`` (device synchronized);
- ``DeviceRatio.track_speed_ratio``: t_cpu / t_opencl measured interleaved in one process, min of
  repeats (higher = OpenCL faster); the OpenCL result is checked against the CPU's first;
- ``LaunchOverhead.track_us_per_op``: microseconds per op on 8-element tensors: ``queued`` = 200 ops
  then one synchronize (what the host spends per launch), ``synced`` = a synchronize after each op
  (launch-to-completion round trip).

Workloads: an eager elementwise chain and the same chain under ``nee.jit`` (one fused kernel),
softmax over the last dim, a square matmul, and one light ONNX model from the onnx package's
backend test data (``light_squeezenet``, 1x3x224x224) through ``nee.onnx.InferenceSession(device=)``
(convolutions are not claimed by OpenCL: they fall back to the CPU, visibly; the ratio includes
those transfers).  Skipped (NotImplementedError in setup) without an OpenCL device; with
NEE_BENCH_TINY=1 everything is a few elements and the ONNX model is a tiny MLP built with onnx.helper.
"""
from __future__ import annotations

import os

import numpy as np

from . import _workloads as W

DEVICES = ("cpu", "opencl")
WORKLOADS = ("ew_chain", "ew_chain_jit", "softmax", "matmul", "onnx_light")
LIGHT_MODEL = "light_squeezenet"


def _require(dev):
    nee = W.nee()
    info = {d.type: d for d in nee.devices()}.get(dev)
    if info is None:
        raise NotImplementedError(f"no {dev} backend registered")
    if not info.available:
        raise NotImplementedError(f"no {dev} device: {info.reason}")
    return nee


def _sync(nee, dev):
    from neetorch.devices import get_backend
    return get_backend(nee.device(dev)).synchronize


def _light_path():
    try:
        import onnx
    except ImportError:
        raise NotImplementedError("onnx is not installed") from None
    p = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", LIGHT_MODEL + ".onnx")
    if not os.path.exists(p):
        raise NotImplementedError(f"{p} is not in this onnx install")
    return p


def _tiny_model():
    try:
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        raise NotImplementedError("onnx is not installed") from None
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Softmax", ["r"], ["y"], axis=-1)]
    g = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _onnx_feed(path_or_model):
    import onnx
    m = onnx.load(path_or_model) if isinstance(path_or_model, str) else path_or_model
    inits = {i.name for i in m.graph.initializer}
    feed = {}
    for x in m.graph.input:
        if x.name in inits:
            continue
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in x.type.tensor_type.shape.dim)
        n = int(np.prod(shape))
        feed[x.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)   # the ONNX runner's ramp
    return feed


def build(workload: str, dev: str):
    """A zero-argument callable running ``workload`` once on ``dev`` (synchronized); returns the result."""
    nee = _require(dev)
    sync = _sync(nee, dev)
    if workload == "onnx_light":
        model = _tiny_model() if W.TINY else _light_path()
        feed = _onnx_feed(model)
        sess = nee.onnx.InferenceSession(model, device=dev)

        def run_model():
            return sess.run(None, feed)[0]    # host arrays in and out: transfers included
        run_model()
        return run_model
    if workload in ("ew_chain", "ew_chain_jit"):
        r, c = W.tiny((1024, 1024), (16, 32))
        x, y = [t.to(dev) for t in W.data("neetorch", (r, c), (c,))]

        def chain(a, b):
            return ((a * b + 1.0).relu() * 0.5 - b).exp()
        f = nee.jit(chain) if workload.endswith("_jit") else chain

        def run_chain():
            out = f(x, y)
            sync()
            return out
    elif workload == "softmax":
        (x,) = [t.to(dev) for t in W.data("neetorch", W.tiny((512, 1024), (4, 8)))]

        def run_chain():
            out = nee.softmax(x, -1)
            sync()
            return out
    elif workload == "matmul":
        n = W.tiny(256, 8)
        a, b = [t.to(dev) for t in W.data("neetorch", (n, n), (n, n))]

        def run_chain():
            out = a @ b
            sync()
            return out
    else:
        raise ValueError(f"unknown workload {workload!r}")
    run_chain()   # warm-up: kernel builds / compiles
    return run_chain


def _host(r):
    return r if isinstance(r, np.ndarray) else r.numpy(force=True)


class DeviceWorkload:
    params = (list(WORKLOADS), list(DEVICES))
    param_names = ["workload", "device"]
    timeout = 600

    def setup(self, workload, device):
        _require("opencl")           # the comparison needs both devices
        self.fn = build(workload, device)

    def teardown(self, workload, device):
        self.fn = None

    def time_run(self, workload, device):
        self.fn()


class DeviceRatio:
    params = (list(WORKLOADS),)
    param_names = ["workload"]
    unit = "x (t_cpu / t_opencl)"
    timeout = 600

    def setup(self, workload):
        self.fns = {d: build(workload, d) for d in DEVICES}
        got, ref = _host(self.fns["opencl"]()), _host(self.fns["cpu"]())
        if not W.results_match(got, ref):
            raise AssertionError(f"{workload}: the OpenCL result differs from the CPU's "
                                 f"(max abs diff {np.max(np.abs(got.astype(np.float64) - ref)):.3g})")

    def teardown(self, workload):
        self.fns = None

    def track_speed_ratio(self, workload):
        t = W.measure_interleaved(self.fns, repeats=5, stat="min")
        return t["cpu"] / t["opencl"]


class LaunchOverhead:
    params = (["add", "exp", "sum"], ["queued", "synced"], list(DEVICES))
    param_names = ["op", "mode", "device"]
    unit = "us per op"
    N = 200

    def setup(self, op, mode, device):
        _require("opencl")
        nee = _require(device)
        sync = _sync(nee, device)
        x = nee.ones(8, device=device)
        f = {"add": lambda: x + x, "exp": lambda: x.exp(), "sum": lambda: x.sum()}[op]
        n = W.tiny(self.N, 3)

        def queued():
            for _ in range(n):
                f()
            sync()

        def synced():
            for _ in range(n):
                f()
                sync()
        self.fn, self.n = (queued if mode == "queued" else synced), n
        self.fn()

    def time_ops(self, op, mode, device):
        self.fn()

    def track_us_per_op(self, op, mode, device):
        return W.measure(self.fn, repeats=5) / self.n * 1e6
