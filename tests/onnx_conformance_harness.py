"""Shared harness for the ONNX conformance tests (also a script: ``python3 tests/onnx_conformance_harness.py``).

Runs ONNX's own node test cases (``onnx.backend.test.case.node.collect_testcases()``)
and the model tests under ``onnx/backend/test/data/{simple,pytorch-converted,
pytorch-operator,light}`` through ``neetorch.onnx.backend`` (node cases eagerly, model
tests with ``nee.jit``) and through onnxruntime, comparing with ONNX's runner rule:
same count, same shape, same dtype, ``np.testing.assert_allclose(out, ref, rtol, atol)``
with the case's rtol/atol (default 1e-3 / 1e-7; bfloat16 outputs: rtol >= 2**-6).

``device`` (``run_nee(case, device="opencl")``, script: ``--device opencl``) runs the same cases
on another neetorch device through ``backend.prepare(model, device)``: inputs go to the device,
ops it does not claim fall back to the CPU visibly (``nee.fallback_report()``), outputs are
compared with the same rule.  ``device="cuda"`` without a GPU runs the CUDA backend emulated
on the CPU (:func:`use_device`, ``neetorch.devices.cuda.emulate``: g++) when NEE_CUDA_EMULATE=1.
"""
from __future__ import annotations

import glob
import os
import sys
import time
import warnings
from collections import defaultdict

import numpy as np

CATEGORIES = ("simple", "pytorch-converted", "pytorch-operator", "light")


def data_dir() -> str:
    import onnx
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")


def assert_similar(ref_outputs, outputs, rtol, atol):
    """ONNX's runner rule (onnx/backend/test/runner/__init__.py: assert_similar_outputs)."""
    np.testing.assert_equal(len(outputs), len(ref_outputs))
    for out, ref in zip(outputs, ref_outputs):
        if isinstance(out, (list, tuple)) or isinstance(ref, (list, tuple)):
            assert isinstance(out, (list, tuple)) and isinstance(ref, (list, tuple)), "sequence vs tensor"
            assert_similar(ref, out, rtol, atol)
            continue
        out, ref = np.asarray(out), np.asarray(ref)
        np.testing.assert_array_equal(out.shape, ref.shape, err_msg="incorrect shape")
        if ref.dtype == object:
            np.testing.assert_array_equal(out, ref)
            continue
        np.testing.assert_equal(out.dtype, ref.dtype)
        r = rtol
        if out.dtype.name == "bfloat16":
            r = max(rtol, 2 ** -6)
            out, ref = out.astype(np.float32), ref.astype(np.float32)
        if out.dtype.kind not in "fciub" or out.dtype.name.startswith(("float8", "int4", "uint4", "float4")):
            out, ref = out.astype(np.float32), ref.astype(np.float32)
        np.testing.assert_allclose(out, ref, rtol=r, atol=atol)


# ------------------------------------------------------------------------- cases
class Case:
    __slots__ = ("name", "category", "op_type", "model", "data_sets", "rtol", "atol", "path")

    def __init__(self, name, category, op_type, model, data_sets, rtol, atol, path=None):
        self.name, self.category, self.op_type = name, category, op_type
        self.model, self.data_sets, self.rtol, self.atol, self.path = model, data_sets, rtol, atol, path


_NODE_CACHE: list = []


def node_cases():
    if not _NODE_CACHE:
        from onnx.backend.test.case.node import collect_testcases
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cases = collect_testcases()
        for c in cases:
            c = _normalized(c)
            ops = [n.op_type for n in c.model.graph.node]
            op_type = ops[0] if len(ops) == 1 else (c.model.graph.node[-1].op_type if ops else "?")
            # expanded (function-body) cases are named *_expanded: attribute them to the op tested
            _NODE_CACHE.append(Case(c.name, "node", _op_of(c.name, op_type), c.model, c.data_sets, c.rtol, c.atol))
    return list(_NODE_CACHE)


def _norm(x):
    """TensorProto / SequenceProto items in generated data sets -> numpy (as ONNX's runner does)."""
    import onnx
    from onnx import numpy_helper
    if isinstance(x, onnx.TensorProto):
        return numpy_helper.to_array(x)
    if isinstance(x, onnx.SequenceProto):
        return [numpy_helper.to_array(t) for t in x.tensor_values]
    if isinstance(x, (list, tuple)):
        return [_norm(v) for v in x]
    return x


def _normalized(c):
    if c.data_sets:
        c.data_sets = [([_norm(i) for i in ins], [_norm(o) for o in outs]) for ins, outs in c.data_sets]
    return c


def _op_of(name, op_type):
    return op_type


def _read_pb(path, tp=None):
    import onnx
    from onnx import numpy_helper
    data = open(path, "rb").read()
    if tp is not None and tp.WhichOneof("value") == "sequence_type":
        s = onnx.SequenceProto()
        s.ParseFromString(data)
        return [numpy_helper.to_array(t) for t in s.tensor_values]
    t = onnx.TensorProto()
    t.ParseFromString(data)
    return numpy_helper.to_array(t)


def model_cases(category):
    """Model tests of one category; light models get the runner's deterministic dummy input."""
    import json
    import onnx
    d = os.path.join(data_dir(), category)
    out = []
    if category == "light":
        for path in sorted(glob.glob(os.path.join(d, "*.onnx"))):
            name = os.path.basename(path)[:-5]
            m = onnx.load(path)
            inits = {i.name for i in m.graph.initializer}
            feeds = []
            for x in m.graph.input:
                if x.name in inits:
                    continue
                shape = tuple(dd.dim_value if dd.HasField("dim_value") else 1 for dd in x.type.tensor_type.shape.dim)
                n = int(np.prod(shape))
                feeds.append((np.arange(n).reshape(shape) / n).astype(np.float32))
            outs = []
            for i in range(len(m.graph.output)):
                p = f"{path[:-5]}_output_{i}.pb"
                if not os.path.exists(p):
                    outs = None
                    break
                outs.append(_read_pb(p))
            out.append(Case(name, category, "model", m, [(feeds, outs)] if outs is not None else None, 1e-3, 1e-7,
                            path))
        return out
    for case_dir in sorted(glob.glob(os.path.join(d, "*"))):
        mp = os.path.join(case_dir, "model.onnx")
        rtol, atol = 1e-3, 1e-7
        if os.path.exists(os.path.join(case_dir, "data.json")):
            with open(os.path.join(case_dir, "data.json")) as f:
                j = json.load(f)
            rtol, atol = j.get("rtol", rtol), j.get("atol", atol)
        if not os.path.exists(mp):
            out.append(Case(os.path.basename(case_dir), category, "model", None, None, rtol, atol, case_dir))
            continue
        m = onnx.load(mp)
        sets = []
        for ds in sorted(glob.glob(os.path.join(case_dir, "test_data_set*"))):
            ins = [_read_pb(os.path.join(ds, f"input_{i}.pb"), m.graph.input[i].type)
                   for i in range(len(glob.glob(os.path.join(ds, "input_*.pb"))))]
            outs = [_read_pb(os.path.join(ds, f"output_{i}.pb"), m.graph.output[i].type)
                    for i in range(len(glob.glob(os.path.join(ds, "output_*.pb"))))]
            sets.append((ins, outs))
        out.append(Case(os.path.basename(case_dir), category, "model", m, sets, rtol, atol, mp))
    return out


# ------------------------------------------------------------------------- devices
def device_unavailable(device: str) -> str | None:
    """None when ``device`` can run here (cuda: a GPU, or NEE_CUDA_EMULATE=1 and g++), else why not."""
    from neetorch.onnx import backend
    if backend.supports_device(device):
        return None
    if device.split(":")[0].lower() == "cuda":
        from neetorch.devices.cuda import emulate
        if os.environ.get("NEE_CUDA_EMULATE", "") in ("", "0"):
            return "no CUDA device (NEE_CUDA_EMULATE=1 runs the CUDA backend emulated on the CPU: g++)"
        return emulate.available()
    import neetorch as nee
    why = [d.reason for d in nee.devices() if d.type == device.split(":")[0].lower()]
    return f"device {device!r} is not available here" + (f": {why[0]}" if why and why[0] else "")


class use_device:
    """Context: ``device`` usable for the duration (installs the emulated CUDA backend when needed)."""

    def __init__(self, device: str):
        self.device, self._emulated = device, False

    def __enter__(self):
        from neetorch.onnx import backend
        if self.device.split(":")[0].lower() == "cuda" and not backend.supports_device(self.device):
            import importlib

            from neetorch.devices import register_backend
            from neetorch.devices.cuda import CUDABackend, emulate
            devs = importlib.import_module("neetorch.devices")
            devs._discover()
            self._before = devs._backend_classes.get("cuda")
            emulate.install()
            register_backend(CUDABackend, "cuda")
            self._emulated = True
        return self

    def __exit__(self, *exc):
        if self._emulated:
            import importlib

            from neetorch.devices.cuda import emulate
            from neetorch.ops import registry
            devs = importlib.import_module("neetorch.devices")
            emulate.uninstall()
            with devs._lock:
                devs._instances.pop(("cuda", 0), None)
                if self._before is None:
                    devs._backend_classes.pop("cuda", None)
                else:
                    devs._backend_classes["cuda"] = self._before
            registry._backends.clear()
            registry._claims.clear()
        return False


# ------------------------------------------------------------------------- runners
def run_nee(case, jit=False, device="CPU"):
    from neetorch.onnx import backend
    if case.model is None or case.data_sets is None:
        raise FileNotFoundError(f"{case.name}: model or data not available locally")
    rep = backend.prepare(case.model, device, jit=jit)
    for ins, outs in case.data_sets:
        got = list(rep.run(list(ins)))
        assert_similar(outs, got, case.rtol, case.atol)


def run_ort(case):
    import onnxruntime as ort
    if case.model is None or case.data_sets is None:
        raise FileNotFoundError(f"{case.name}: model or data not available locally")
    so = ort.SessionOptions()
    so.log_severity_level = 4
    s = ort.InferenceSession(case.model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [i.name for i in s.get_inputs()]
    for ins, outs in case.data_sets:
        ins = [x if isinstance(x, list) or x is None else np.asarray(x) for x in ins]  # numpy scalars -> 0-d
        got = s.run(None, dict(zip(names, ins)))
        assert_similar(outs, got, case.rtol, case.atol)


def evaluate(cases, runner, **kw):
    """{name: None (pass) or 'ExceptionType: message'}"""
    res = {}
    for c in cases:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with np.errstate(all="ignore"):
                    runner(c, **kw)
            res[c.name] = None
        except Exception as e:  # noqa: BLE001
            msg = str(e).strip().splitlines()
            res[c.name] = f"{type(e).__name__}: {msg[0][:300] if msg else ''}"
    return res


def summarize(cases, nee_res, ort_res=None, by_op=True, label="neetorch", others=None) -> str:
    """Pass counts per category (``label``'s results, then each of ``others`` {label: results}, e.g. the
    CPU's next to a device's, and onnxruntime's), then per node op type."""
    lines = []
    cats = defaultdict(list)
    for c in cases:
        cats[c.category].append(c)
    cols = [(label, nee_res)] + list((others or {}).items())
    if ort_res is not None:
        cols.append(("onnxruntime", ort_res))
    for cat, cs in cats.items():
        n = len(cs)
        parts = []
        for lab, res in cols:
            p = sum(res.get(c.name, "x") is None for c in cs)
            parts.append(f"{lab} {p}/{n} ({100 * p / max(n, 1):.1f}%)")
        lines.append(f"{cat:>18}: " + "   ".join(parts))
    if by_op:
        ops = defaultdict(lambda: [0, 0])
        for c in cases:
            if c.category != "node":
                continue
            ops[c.op_type][1] += 1
            ops[c.op_type][0] += nee_res.get(c.name, "x") is None
        bad = sorted((k, v) for k, v in ops.items() if v[0] < v[1])
        lines.append(f"node op types: {sum(v[0] == v[1] for v in ops.values())}/{len(ops)} fully passing; "
                     f"partial/failing: " + ", ".join(f"{k} {a}/{b}" for k, (a, b) in bad))
    return "\n".join(lines)


if __name__ == "__main__":
    # python3 tests/onnx_conformance_harness.py [node|models] [name,substrings] [--device opencl]
    args = sys.argv[1:]
    dev = "CPU"
    if "--device" in args:
        k = args.index("--device")
        dev = args[k + 1]
        del args[k:k + 2]
    which = args[0] if args else "node"
    t0 = time.time()
    if which == "node":
        cs = node_cases()
    else:
        cs = [c for cat in CATEGORIES for c in model_cases(cat)]
    if len(args) > 1:
        cs = [c for c in cs if any(s in c.name for s in args[1].split(","))]
    why = device_unavailable(dev)
    if why:
        sys.exit(why)
    with use_device(dev):
        r = evaluate(cs, run_nee, jit=(which != "node"), device=dev)
    for k, v in sorted(r.items()):
        if v:
            print(f"FAIL {k}: {v}")
    print(summarize(cs, r, label=f"neetorch[{dev}]"))
    print(f"{time.time() - t0:.1f}s")
