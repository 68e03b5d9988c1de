"""Output-quality comparison: the same function or ONNX model on two devices (or in two dtypes).

    report = nee.compare(fn, [x, w], devices=("cpu", "opencl"))
    report = nee.compare("model.onnx", {"input": x}, devices="cpu", dtypes=("float32", "float16"))
    print(report); assert report.ok

    python3 -m neetorch.compare model.onnx --devices cpu,opencl [--dtype float16] [--dim N=4]

Side A is the reference: per output the report gives the shape, the max absolute error
``max|b - a|``, the max relative error ``max|b - a| / |a|`` (over elements where ``a != 0``)
and whether every element satisfies ``|b - a| <= atol + rtol * |a|`` (NaNs must sit at the
same places, infinities must be equal; integer and bool outputs must be equal).  Ops that
fell back to the CPU while a side ran are listed per side.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field

import numpy as np

__all__ = ["CompareReport", "OutputDiff", "compare", "main", "random_inputs"]


@dataclass
class OutputDiff:
    name: str
    shape: tuple
    dtypes: tuple              # (side A dtype, side B dtype)
    max_abs: float
    max_rel: float
    mismatched: int            # elements outside tolerance
    within: bool
    note: str = ""


@dataclass
class CompareReport:
    a: str                      # "cpu float32"
    b: str
    rtol: float
    atol: float
    outputs: list = field(default_factory=list)
    fallbacks: dict = field(default_factory=dict)   # side label -> ["op (device, dtypes) xN: reason"]

    @property
    def ok(self) -> bool:
        return all(o.within for o in self.outputs)

    def __getitem__(self, name_or_index):
        if isinstance(name_or_index, int):
            return self.outputs[name_or_index]
        for o in self.outputs:
            if o.name == name_or_index:
                return o
        raise KeyError(f"no output {name_or_index!r}; outputs: {[o.name for o in self.outputs]}")

    def __str__(self):
        lines = [f"compare: A = {self.a}, B = {self.b}  (within: |B-A| <= {self.atol:g} + {self.rtol:g}*|A|)",
                 (f"{'output':<24}{'shape':<18}{'dtypes':<20}{'max abs err':>13}{'max rel err':>13}"
                  f"{'mismatched':>12}  within")]
        for o in self.outputs:
            lines.append(f"{o.name[:23]:<24}{str(tuple(o.shape))[:17]:<18}{'/'.join(o.dtypes)[:19]:<20}"
                         f"{o.max_abs:>13.4g}{o.max_rel:>13.4g}{o.mismatched:>12}  {'yes' if o.within else 'NO'}"
                         + (f"  ({o.note})" if o.note else ""))
        for side, recs in self.fallbacks.items():
            for r in recs:
                lines.append(f"fallback on {side}: {r}")
        lines.append("all outputs within tolerance" if self.ok else
                     f"{sum(not o.within for o in self.outputs)} of {len(self.outputs)} output(s) OUT of tolerance")
        return "\n".join(lines)

    __repr__ = __str__

    def assert_ok(self):
        if not self.ok:
            raise AssertionError(str(self))


# ------------------------------------------------------------------------------- the comparison
def _diff(name, a: np.ndarray, b: np.ndarray, rtol, atol) -> OutputDiff:
    dts = (a.dtype.name, b.dtype.name)
    if a.shape != b.shape:
        return OutputDiff(name, a.shape, dts, math.inf, math.inf, max(a.size, b.size), False,
                          f"shapes differ: A {a.shape}, B {b.shape}")
    if a.size == 0:
        return OutputDiff(name, a.shape, dts, 0.0, 0.0, 0, True)
    exact = a.dtype.kind in "biu" and b.dtype.kind in "biu"
    x, y = np.atleast_1d(a.astype(np.float64)), np.atleast_1d(b.astype(np.float64))
    nan_x, nan_y = np.isnan(x), np.isnan(y)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(y - x)
        err[nan_x & nan_y] = 0.0                           # NaN in both: agreement
        err[(x == y)] = 0.0                                # equal infinities
        err[nan_x ^ nan_y] = math.inf
        fin = np.isfinite(x)
        tol = 0.0 if exact else atol + rtol * np.abs(np.where(fin, x, 0.0))
        bad = ~(err <= tol)                                # an infinity must be matched exactly
        nz = (x != 0) & fin
        rel = err[nz] / np.abs(x[nz])
    max_rel = float(rel.max()) if rel.size else (0.0 if not err.any() else math.inf)
    n = int(np.count_nonzero(bad))
    note = []
    if np.any(nan_x ^ nan_y):
        note.append(f"NaN at {int(np.count_nonzero(nan_x ^ nan_y))} place(s) on one side only")
    if dts[0] != dts[1]:
        note.append("dtypes differ")
    return OutputDiff(name, a.shape, dts, float(err.max()), max_rel, n, n == 0, "; ".join(note))


def _pair(v, what):
    if v is None:
        return (None, None)
    if isinstance(v, (tuple, list)):
        if len(v) == 1:
            return (v[0], v[0])
        if len(v) != 2:
            raise ValueError(f"nee.compare: {what} must be one value or a pair, got {v!r}")
        return tuple(v)
    return (v, v)


def _label(dev, dt):
    return f"{dev}" + (f" {dt}" if dt is not None else "")


def _snapshot():
    from ..devices import fallback_report
    return {k: r.count for k, r in fallback_report().records.items()}


def _fallbacks_since(before):
    from ..devices import fallback_report
    out = []
    for k, r in fallback_report().records.items():
        n = r.count - before.get(k, 0)
        if n > 0:
            out.append(f"{r.op} ({r.device}, {','.join(r.dtypes)}) x{n}: {r.reason}")
    return out


def _is_model(obj) -> bool:
    if isinstance(obj, (str, bytes)) or hasattr(obj, "__fspath__"):
        return True
    return type(obj).__name__ == "ModelProto"


def compare(fn_or_model, inputs, devices=("cpu", "opencl"), dtypes=None, rtol: float = 1e-4,
            atol: float = 1e-5, *, names=None) -> CompareReport:
    """Run ``fn_or_model`` on two devices (or in two dtypes) and compare the outputs.

    ``fn_or_model``: a callable taking tensors, or an ONNX model (path, bytes or
    ``onnx.ModelProto``, run through ``nee.onnx.InferenceSession(model, device=...)``).
    ``inputs``: the arguments (numpy arrays, tensors, Python values; one value or a
    list/tuple; a ``{name: array}`` dict for a model).  ``devices`` / ``dtypes``: one value
    or a pair (side A, side B); a dtype casts the floating inputs (and, for a model, its
    float32 weights and typed inputs/outputs) to it.  Side A is the reference.
    ``names``: output names for a function's flattened outputs.
    """
    from ..devices import device as _device
    dev_a, dev_b = _pair(devices, "devices")
    dt_a, dt_b = _pair(dtypes, "dtypes")
    if dev_a is None:
        raise ValueError("nee.compare: devices must name at least one device")
    if (_device(dev_a), dt_a) == (_device(dev_b), dt_b):
        raise ValueError(f"nee.compare: both sides are {_label(dev_a, dt_a)}; give two devices or two dtypes")
    report = CompareReport(_label(_device(dev_a), dt_a), _label(_device(dev_b), dt_b), rtol, atol)
    if report.a == report.b:
        report.b += " (B)"
    runner = _run_model if _is_model(fn_or_model) else _run_fn
    results = []
    for dev, dt, label in ((dev_a, dt_a, report.a), (dev_b, dt_b, report.b)):
        before = _snapshot()
        results.append(runner(fn_or_model, inputs, _device(dev), dt, names))
        fb = _fallbacks_since(before)
        if fb:
            report.fallbacks[label] = fb
    (names_a, outs_a), (names_b, outs_b) = results
    if names_a != names_b:
        raise RuntimeError(f"nee.compare: the two sides returned different outputs: {names_a} vs {names_b}")
    for n, a, b in zip(names_a, outs_a, outs_b):
        report.outputs.append(_diff(n, a, b, rtol, atol))
    return report


# ------------------------------------------------------------------------------- functions
def _to_side(x, dev, dt):
    from ..tensor.creation import tensor as _tensor
    from ..tensor.dtypes import to_dtype
    from ..tensor.tensor import Tensor
    if isinstance(x, Tensor):
        t = x
    elif isinstance(x, np.ndarray):
        t = _tensor(x)
    else:
        return x
    if dt is not None and t.dtype.is_floating_point:
        t = t.to(to_dtype(dt))
    return t.to(dev)


def _flatten(out, names):
    from ..tensor.tensor import Tensor
    flat = []

    def walk(o, name):
        if isinstance(o, Tensor):
            flat.append((name, np.array(o.numpy(force=True), copy=True)))
        elif isinstance(o, dict):
            for k in o:
                walk(o[k], f"{name}.{k}" if name != "output" else str(k))
        elif isinstance(o, (list, tuple)):
            for i, v in enumerate(o):
                walk(v, f"{name}[{i}]")
        elif isinstance(o, (np.ndarray, int, float, bool, np.generic)):
            flat.append((name, np.asarray(o)))
        else:
            raise TypeError(f"nee.compare: output {name} is a {type(o).__name__}, not a tensor")
    walk(out, "output")
    if names is not None:
        if len(names) != len(flat):
            raise ValueError(f"nee.compare: {len(names)} names for {len(flat)} outputs")
        flat = [(n, a) for n, (_, a) in zip(names, flat)]
    return [n for n, _ in flat], [a for _, a in flat]


def _run_fn(fn, inputs, dev, dt, names):
    if isinstance(inputs, dict):
        out = fn(**{k: _to_side(v, dev, dt) for k, v in inputs.items()})
    else:
        args = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        out = fn(*[_to_side(a, dev, dt) for a in args])
    return _flatten(out, names)


# ------------------------------------------------------------------------------- ONNX models
def _model_as(model, dt):
    """A copy of ``model`` computing in float dtype ``dt`` instead of float32 (weights, typed inputs,
    outputs and value_infos, Constant values, Cast targets)."""
    import onnx
    from onnx import TensorProto, numpy_helper

    from ..onnx.loader import load_model
    m, _, _ = load_model(model, check=False)
    m = onnx.ModelProto.FromString(m.SerializeToString())
    want = {"float16": TensorProto.FLOAT16, "float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE}
    if dt not in want:
        raise ValueError(f"nee.compare: a model can be compared in float16/float32/float64, not {dt}")
    new, npdt = want[dt], np.dtype(dt)

    def conv_tensor(t):
        if t.data_type == TensorProto.FLOAT:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(npdt), t.name))

    def conv_graph(g):
        for t in g.initializer:
            conv_tensor(t)
        for vi in list(g.input) + list(g.output) + list(g.value_info):
            tt = vi.type.tensor_type
            if vi.type.WhichOneof("value") == "tensor_type" and tt.elem_type == TensorProto.FLOAT:
                tt.elem_type = new
        for n in g.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.TENSOR:
                    conv_tensor(a.t)
                elif a.type == onnx.AttributeProto.GRAPH:
                    conv_graph(a.g)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    for sg in a.graphs:
                        conv_graph(sg)
                elif n.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                    a.i = new
    conv_graph(m.graph)
    return m


def _feed(sess, inputs, dt):
    args = sess.get_inputs()
    if isinstance(inputs, dict):
        feed = dict(inputs)
    else:
        vals = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        if len(vals) != len(args):
            raise ValueError(f"nee.compare: the model has {len(args)} input(s) {[a.name for a in args]}, "
                             f"got {len(vals)} value(s)")
        feed = {a.name: v for a, v in zip(args, vals)}
    out = {}
    for k, v in feed.items():
        v = np.asarray(v.numpy(force=True) if hasattr(v, "numpy") and not isinstance(v, np.ndarray) else v)
        if dt is not None and v.dtype.kind == "f":
            v = v.astype(dt)
        out[k] = v
    return out


def _run_model(model, inputs, dev, dt, names):
    from ..onnx import InferenceSession
    m = _model_as(model, dt) if dt is not None and dt != "float32" else model
    sess = InferenceSession(m, device=str(dev))
    outs = sess.run(None, _feed(sess, inputs, dt))
    onames = names or [o.name for o in sess.get_outputs()]
    return list(onames), [np.asarray(o) for o in outs]


def random_inputs(model, dims: dict | None = None, default_dim: int = 1, seed: int = 0,
                  int_high: int = 4) -> dict:
    """Random inputs for a model's (non-initializer) inputs: symbolic dims from ``dims`` (name -> size),
    else ``default_dim``; floats standard normal, integers in [0, int_high), bools 0/1."""
    from ..onnx.loader import ONNX_TO_NP, load_model
    m, _, _ = load_model(model, check=False)
    g = m.graph
    inits = {t.name for t in g.initializer}
    dims = dims or {}
    rng = np.random.default_rng(seed)
    feed = {}
    for vi in g.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = []
        for d in tt.shape.dim:
            if d.HasField("dim_value"):
                shape.append(int(d.dim_value))
            else:
                shape.append(int(dims.get(d.dim_param, default_dim)) if d.HasField("dim_param") else default_dim)
        npdt = ONNX_TO_NP.get(tt.elem_type, np.dtype(np.float32))
        if npdt.kind == "f":
            feed[vi.name] = rng.standard_normal(shape).astype(npdt)
        elif npdt.kind == "b":
            feed[vi.name] = rng.integers(0, 2, shape).astype(npdt)
        else:
            feed[vi.name] = rng.integers(0, int_high, shape).astype(npdt)
    return feed


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python3 -m neetorch.compare",
                                 description="Run an ONNX model on two devices (or in two dtypes) and compare "
                                             "every output (max abs/rel error, within tolerance).")
    ap.add_argument("model", help="an .onnx file")
    ap.add_argument("--devices", default="cpu,opencl", help="DEV_A,DEV_B (one device with --dtype: both sides "
                                                            "on it); default cpu,opencl")
    ap.add_argument("--dtype", default=None, help="run side B in this float dtype (e.g. float16); side A runs "
                                                  "the model as it is")
    ap.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE", help="size of a symbolic dim")
    ap.add_argument("--default-dim", type=int, default=1, help="size of symbolic dims not given (default 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rtol", type=float, default=None, help="default 1e-4 (1e-2 with --dtype float16)")
    ap.add_argument("--atol", type=float, default=None, help="default 1e-5 (1e-2 with --dtype float16)")
    a = ap.parse_args(argv)
    devs = [d.strip() for d in a.devices.split(",") if d.strip()]
    if not 1 <= len(devs) <= 2:
        ap.error("--devices takes one or two devices")
    dims = {}
    for spec in a.dim:
        k, sep, v = spec.partition("=")
        if not sep or not v.strip().isdigit():
            ap.error(f"--dim expects NAME=SIZE, got {spec!r}")
        dims[k.strip()] = int(v)
    half = a.dtype == "float16"
    rtol = a.rtol if a.rtol is not None else (1e-2 if half else 1e-4)
    atol = a.atol if a.atol is not None else (1e-2 if half else 1e-5)
    dtypes = None if a.dtype is None else ("float32", a.dtype)
    try:
        feed = random_inputs(a.model, dims, a.default_dim, a.seed)
        rep = compare(a.model, feed, devices=tuple(devs), dtypes=dtypes, rtol=rtol, atol=atol)
    except Exception as e:  # noqa: BLE001 - a CLI: the message, not a traceback
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    shapes = ", ".join(f"{k}{list(v.shape)}" for k, v in feed.items())
    print(f"model: {a.model}\ninputs (seed {a.seed}): {shapes}")
    print(rep)
    return 0 if rep.ok else 1
