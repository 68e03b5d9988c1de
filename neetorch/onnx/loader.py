"""Load and validate an ONNX model: path, bytes or ModelProto in, a checked ModelProto out.

* calls of model-local functions (``ModelProto.functions``) are inlined first (``functions.py``);
* the ONNX checker and shape inference run first (a model that fails them is refused
  with the checker's message);
* the default-domain opset must be in ``MIN_OPSET .. onnx.defs.onnx_opset_version()``;
  older models are converted up to ``MIN_OPSET`` with ONNX's version converter (and
  refused, naming the supported range, when that fails);
* external data is read only from files inside the model's folder, and each
  ``offset``/``length`` is checked against the file's size before anything is
  allocated;
* malformed or truncated files raise :class:`ModelLoadError`, never a crash.
"""
from __future__ import annotations

import os
import re

import numpy as np

__all__ = ["OnnxError", "ModelLoadError", "UnsupportedModelError", "InvalidInputError", "load_model",
           "MIN_OPSET", "max_opset", "tensor_to_numpy", "ONNX_TO_NP"]

MIN_OPSET = 13
ML_MAX_OPSET = 5  # the ai.onnx.ml opsets neetorch/onnx/ops_ml.py implements (TreeEnsemble is ai.onnx.ml 5)


class OnnxError(RuntimeError):
    """Base class of every neetorch.onnx error."""


class ModelLoadError(OnnxError):
    """The file or bytes are not a loadable, valid ONNX model."""


class UnsupportedModelError(OnnxError):
    """The model is valid ONNX but uses ops, opsets or types neetorch does not run."""


class InvalidInputError(OnnxError, ValueError):
    """``run()`` was given inputs that do not match the model (names, dtypes, ranks, shapes)."""


def max_opset() -> int:
    import onnx
    return onnx.defs.onnx_opset_version()


def _np_dtypes():
    from onnx import TensorProto as T
    m = {T.FLOAT: np.float32, T.DOUBLE: np.float64, T.FLOAT16: np.float16, T.INT8: np.int8, T.INT16: np.int16,
         T.INT32: np.int32, T.INT64: np.int64, T.UINT8: np.uint8, T.UINT16: np.uint16, T.UINT32: np.uint32,
         T.UINT64: np.uint64, T.BOOL: np.bool_, T.STRING: np.object_, T.COMPLEX64: np.complex64,
         T.COMPLEX128: np.complex128}
    try:
        import ml_dtypes
        m[T.BFLOAT16] = ml_dtypes.bfloat16
        m[T.FLOAT8E4M3FN] = ml_dtypes.float8_e4m3fn
        m[T.FLOAT8E4M3FNUZ] = ml_dtypes.float8_e4m3fnuz
        m[T.FLOAT8E5M2] = ml_dtypes.float8_e5m2
        m[T.FLOAT8E5M2FNUZ] = ml_dtypes.float8_e5m2fnuz
        m[T.INT4] = ml_dtypes.int4
        m[T.UINT4] = ml_dtypes.uint4
    except (ImportError, AttributeError):
        pass
    for code, name in (("INT2", "int2"), ("UINT2", "uint2"), ("FLOAT4E2M1", "float4_e2m1fn"),
                       ("FLOAT8E8M0", "float8_e8m0fnu")):
        try:
            import ml_dtypes
            m[getattr(T, code)] = getattr(ml_dtypes, name)
        except (ImportError, AttributeError):
            pass
    return {k: np.dtype(v) for k, v in m.items()}


ONNX_TO_NP = _np_dtypes()


def tensor_to_numpy(t, base_dir: str | None = None) -> np.ndarray:
    """A TensorProto as a numpy array; external data is read safely from ``base_dir``."""
    from onnx import numpy_helper
    from onnx.external_data_helper import uses_external_data
    if uses_external_data(t):
        return _read_external(t, base_dir)
    try:
        return numpy_helper.to_array(t)
    except Exception as e:  # noqa: BLE001
        raise ModelLoadError(f"initializer {t.name!r}: cannot decode tensor data ({e})") from e


def _read_external(t, base_dir):
    from onnx import TensorProto
    info = {e.key: e.value for e in t.external_data}
    loc = info.get("location", "")
    if base_dir is None:
        raise ModelLoadError(f"tensor {t.name!r} uses external data ({loc!r}) but the model was not loaded from a "
                             f"path: load it from its file so its folder is known")
    if not loc or os.path.isabs(loc) or ".." in loc.replace("\\", "/").split("/"):
        raise ModelLoadError(f"tensor {t.name!r}: external data location {loc!r} is not a relative path inside the "
                             f"model's folder")
    root = os.path.realpath(base_dir)
    path = os.path.realpath(os.path.join(root, loc))
    if os.path.commonpath([root, path]) != root:
        raise ModelLoadError(f"tensor {t.name!r}: external data location {loc!r} resolves outside the model's folder")
    if not os.path.isfile(path):
        raise ModelLoadError(f"tensor {t.name!r}: external data file {loc!r} not found in {root}")
    size = os.path.getsize(path)
    try:
        offset = int(info.get("offset", 0))
        length = int(info["length"]) if "length" in info else size - offset
    except ValueError as e:
        raise ModelLoadError(f"tensor {t.name!r}: bad external data offset/length ({e})") from None
    dt = ONNX_TO_NP.get(t.data_type)
    if dt is None or dt == np.object_ or t.data_type == TensorProto.STRING:
        raise UnsupportedModelError(f"tensor {t.name!r}: external data of type {t.data_type} is not supported")
    n = 1
    for d in t.dims:
        n *= int(d)
    need = n * dt.itemsize
    if offset < 0 or length < 0 or offset + length > size:
        raise ModelLoadError(f"tensor {t.name!r}: external data range [{offset}, {offset + length}) is past the end "
                             f"of {loc!r} ({size} bytes)")
    if length != need:
        raise ModelLoadError(f"tensor {t.name!r}: external data holds {length} bytes, shape {list(t.dims)} of "
                             f"{dt.name} needs {need}")
    with open(path, "rb") as f:
        f.seek(offset)
        buf = f.read(length)
    return np.frombuffer(buf, dtype=dt).reshape(tuple(int(d) for d in t.dims)).copy()


def _parse(model):
    import onnx
    base_dir = None
    if isinstance(model, onnx.ModelProto):
        return model, None, None
    if isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
        where = "<bytes>"
    elif isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise ModelLoadError(f"ONNX model file not found: {path}")
        base_dir = os.path.dirname(os.path.abspath(path))
        with open(path, "rb") as f:
            data = f.read()
        where = path
    else:
        raise TypeError(f"expected a path, bytes or onnx.ModelProto, got {type(model).__name__}")
    if not data:
        raise ModelLoadError(f"{where}: empty file, not an ONNX model")
    m = onnx.ModelProto()
    try:
        m.ParseFromString(data)
    except Exception as e:  # noqa: BLE001  (protobuf DecodeError and friends)
        raise ModelLoadError(f"{where}: not a valid ONNX model (malformed or truncated protobuf: {e})") from None
    if not m.HasField("graph") or (len(m.graph.node) == 0 and len(m.graph.output) == 0):
        raise ModelLoadError(f"{where}: not a valid ONNX model (no graph; the file may be truncated)")
    return m, base_dir, (path if base_dir else None)


def default_opset(model) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    return 1


_SHAPELESS_IO = "Field 'shape' of 'type' is required but missing"
_TYPELESS_IO = "Unrecognized type value case"
_DEPRECATED = re.compile(r"Op registered for (\w+) is deprecated in domain_version of \d+")
_UNCHECKED_DOMAIN = "neetorch.checked_by_lowering"


def _check_as_onnxruntime_runs(onnx, data: bytes) -> None:
    """ONNX's checker (structural: it infers no shapes) on the serialized model, but for what the checker refuses and
    onnxruntime runs, each then checked on a copy with the refused part put in a checkable form:

    * a graph input or output declared without a shape (``make_tensor_value_info(name, type, None)``: any rank)
      or without a type (``make_value_info(name, TypeProto())``): declared rank-0 float in the copy; the model
      keeps them unknown (inputs take their feed's shape and type);
    * an op the installed onnx marks deprecated at the model's opset (GroupNormalization-18, whose per-group scale
      the lowering implements): its nodes moved to a private domain in the copy, so the rest is still checked."""
    try:
        onnx.checker.check_model(data)
        return
    except onnx.checker.ValidationError as e:
        err = e
    c = onnx.ModelProto()
    c.ParseFromString(data)
    for _ in range(8):
        msg = str(err)
        dep = _DEPRECATED.search(msg)
        if _SHAPELESS_IO in msg or _TYPELESS_IO in msg:
            for vi in list(c.graph.input) + list(c.graph.output):
                which = vi.type.WhichOneof("value")
                if which is None:
                    vi.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
                    which = "tensor_type"
                tt = vi.type.tensor_type if which == "tensor_type" else None
                if tt is not None and not tt.HasField("shape"):
                    tt.shape.SetInParent()
        elif dep:
            for g in _graphs(c.graph):
                for n in g.node:
                    if n.op_type == dep.group(1) and n.domain in ("", "ai.onnx"):
                        n.domain = _UNCHECKED_DOMAIN
            if not any(o.domain == _UNCHECKED_DOMAIN for o in c.opset_import):
                c.opset_import.append(onnx.helper.make_opsetid(_UNCHECKED_DOMAIN, 1))
        else:
            raise err
        try:
            onnx.checker.check_model(c)
            return
        except onnx.checker.ValidationError as e:
            if str(e) == msg:
                raise
            err = e
    raise err


def _graphs(g):
    """``g`` and every subgraph inside it (If / Loop / Scan bodies), depth first."""
    yield g
    for n in g.node:
        for a in n.attribute:
            if a.HasField("g"):
                yield from _graphs(a.g)
            for sub in a.graphs:
                yield from _graphs(sub)


def _topo_order(graph):
    """The node order (indices) in which each node comes after the producers of what it reads, the given order
    kept where it already is one (onnxruntime sorts such a graph; ONNX's checker refuses it), or None when the
    graph is already in order or has a cycle (the checker then says why)."""
    from .lowering import _outer_refs    # (what a node's subgraphs read from outside them)
    nodes = list(graph.node)
    producer = {}
    for i, n in enumerate(nodes):
        for o in n.output:
            if o:
                producer.setdefault(o, i)
    deps = [{producer[x] for x in set(n.input) | _outer_refs(n) if x in producer and producer[x] != i}
            for i, n in enumerate(nodes)]
    if all(d < i for i, ds in enumerate(deps) for d in ds):
        return None
    users: dict = {}
    for i, ds in enumerate(deps):
        for d in ds:
            users.setdefault(d, []).append(i)
    left = [len(ds) for ds in deps]
    import heapq
    ready = [i for i, k in enumerate(left) if k == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users.get(i, ()):
            left[u] -= 1
            if left[u] == 0:
                heapq.heappush(ready, u)
    return order if len(order) == len(nodes) else None


def _dropped_semantics(m) -> dict:
    """{output name: (op type, original node)} of the default-domain nodes whose meaning onnx.version_converter
    loses on its way to MIN_OPSET: Upsample and Resize-10 (asymmetric coordinates, nearest = floor: its adapters
    leave the opset-11 defaults, half_pixel and round_prefer_floor) and Hardmax before 13 (the input coerced to
    2-D at ``axis``, default 1: its adapter keeps the node, which then means one maximum along ``axis`` alone,
    default -1).  Softmax / LogSoftmax's adapters do rewrite theirs."""
    op = default_opset(m)
    olds = {}
    for g in _graphs(m.graph):
        for n in g.node:
            if n.domain not in ("", "ai.onnx") or not n.output:
                continue
            if n.op_type == "Upsample" or (n.op_type == "Resize" and op < 11) or (n.op_type == "Hardmax" and op < 13):
                o = type(n)()
                o.CopyFrom(n)
                olds[n.output[0]] = (n.op_type, o)
    return olds


def _restore_semantics(m, olds: dict) -> None:
    """In place in the converted model ``m``: the nodes of :func:`_dropped_semantics` given their old meaning back
    (found by their output names, which the converter keeps)."""
    if not olds:
        return
    from onnx import helper
    for g in _graphs(m.graph):
        nodes = list(g.node)
        out = []
        changed = False
        for n in nodes:
            hit = olds.get(n.output[0]) if n.output else None
            if hit is None or n.domain not in ("", "ai.onnx"):
                out.append(n)
                continue
            kind, orig = hit
            if n.op_type == "Resize" and kind in ("Upsample", "Resize"):
                have = {a.name for a in n.attribute}
                if "coordinate_transformation_mode" not in have:
                    n.attribute.append(helper.make_attribute("coordinate_transformation_mode", "asymmetric"))
                if "nearest_mode" not in have:
                    n.attribute.append(helper.make_attribute("nearest_mode", "floor"))
                out.append(n)
            elif n.op_type == "Hardmax" and kind == "Hardmax":
                axis = next((a.i for a in orig.attribute if a.name == "axis"), 1)
                x, y = n.input[0], n.output[0]
                t = f"{y}__hardmax2d"
                out += [helper.make_node("Shape", [x], [t + "_shape"], name=t + "_shape"),
                        helper.make_node("Flatten", [x], [t + "_flat"], axis=axis, name=t + "_flat"),
                        helper.make_node("Hardmax", [t + "_flat"], [t], axis=1, name=n.name or t),
                        helper.make_node("Reshape", [t, t + "_shape"], [y], name=t + "_reshape")]
                changed = True
            else:
                out.append(n)
        if changed:
            del g.node[:]
            g.node.extend(out)


def load_model(model, *, check: bool = True):
    """(ModelProto with shapes inferred, base folder or None, {initializer name: ndarray}, notes)."""
    import onnx
    m, base_dir, path = _parse(model)
    from .functions import inline_local_functions  # skl2onnx's KNNImputer calls functions it defines
    m, notes = inline_local_functions(m)
    from .ops_contrib import ort_default_domain_compat  # onnxruntime-optimized models: its LayerNorms
    m, note = ort_default_domain_compat(m)
    notes += [note] if note else []
    op = default_opset(m)
    hi = max_opset()
    if op > hi:
        raise UnsupportedModelError(f"model uses default-domain opset {op}; supported: {MIN_OPSET}..{hi} (the "
                                    f"installed onnx {onnx.__version__} knows up to {hi})")
    used = {n.domain for n in m.graph.node
            if n.domain not in ("", "ai.onnx", "ai.onnx.preview", "ai.onnx.ml", "com.microsoft")}
    if used:
        raise UnsupportedModelError(f"model uses operator domains {sorted(used)}; supported: the default ONNX "
                                    f"domain at opsets {MIN_OPSET}..{hi}, ai.onnx.ml (classical ML ops, "
                                    f"neetorch/onnx/ops_ml.py) and com.microsoft's Tokenizer (ops_text.py), QLinear* / "
                                    f"QGemm (ops_vision.py), DynamicQuantizeLSTM (ops_nn.py) and the fused "
                                    f"transformer / CNN ops of onnxruntime's optimizers (Attention, "
                                    f"SkipLayerNormalization, FusedMatMul, MatMulNBits, ...: ops_contrib.py)")
    ml = [int(o.version) for o in m.opset_import if o.domain == "ai.onnx.ml"]
    if ml and ml[0] > ML_MAX_OPSET:
        raise UnsupportedModelError(f"model uses ai.onnx.ml opset {ml[0]}; supported: 1..{ML_MAX_OPSET}")
    order = _topo_order(m.graph)
    if order is not None:
        c = onnx.ModelProto()
        c.CopyFrom(m)           # (the caller's ModelProto is not reordered)
        nodes = list(c.graph.node)
        del c.graph.node[:]
        c.graph.node.extend(nodes[i] for i in order)
        m = c
        notes.append("nodes reordered into a topological order (the file lists some before their inputs' producers)")
    # the checker and shape inference each serialize a ModelProto they are given: serialize once
    # (a 40 MB model costs ~50 ms per serialization)
    data = None
    if check:
        try:
            from onnx.external_data_helper import uses_external_data
            if path and any(uses_external_data(t) for t in m.graph.initializer):
                onnx.checker.check_model(path)  # resolves external data against the model's folder
            else:
                data = m.SerializeToString()
                _check_as_onnxruntime_runs(onnx, data)
        except Exception as e:  # noqa: BLE001
            raise ModelLoadError(f"ONNX checker rejected the model: {e}") from None
    # a model of ai.onnx.ml nodes only imports no default-domain opset: nothing to convert
    if op < MIN_OPSET and any(o.domain in ("", "ai.onnx") for o in m.opset_import):
        try:
            from onnx import version_converter
            olds = _dropped_semantics(m)
            m = version_converter.convert_version(m, MIN_OPSET)
            _restore_semantics(m, olds)
            data = None
            notes.append(f"converted from opset {op} to {MIN_OPSET} with onnx.version_converter")
        except Exception as e:  # noqa: BLE001
            raise UnsupportedModelError(f"model uses default-domain opset {op}; supported: {MIN_OPSET}..{hi}, and "
                                        f"converting it up failed: {e}") from None
    try:
        m = onnx.shape_inference.infer_shapes(m if data is None else data, check_type=False, strict_mode=False)
    except Exception as e:  # noqa: BLE001
        raise ModelLoadError(f"ONNX shape inference failed: {e}") from None
    return m, base_dir, notes
