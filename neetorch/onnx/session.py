"""``InferenceSession``: onnxruntime's API over a lowered, jitted ONNX graph."""
from __future__ import annotations

import time

import numpy as np

from ..devices import device as nee_device
from ..tensor.creation import from_numpy as _from_numpy
from ..tensor.tensor import _READ_HOOK
from ..tensor.tensor import Tensor as _Tensor
from ..trace.tracer import TraceError as _TraceError
from .loader import (
    ONNX_TO_NP,
    InvalidInputError,
    OnnxError,
    UnsupportedModelError,
    default_opset,
    load_model,
    tensor_to_numpy,
)
from .lowering import EMPTY, Program, carry_np, unsupported_nodes
from .optimize import fold_affine, fold_enabled

__all__ = ["InferenceSession", "NodeArg"]


def _type_string(tp) -> str:
    from onnx import TensorProto
    which = tp.WhichOneof("value")
    if which == "tensor_type":
        return f"tensor({TensorProto.DataType.Name(tp.tensor_type.elem_type).lower()})"
    if which == "sequence_type":
        return f"seq({_type_string(tp.sequence_type.elem_type)})"
    if which == "optional_type":
        return f"optional({_type_string(tp.optional_type.elem_type)})"
    if which == "map_type":  # ZipMap's seq(map(string,tensor(float))), as onnxruntime spells it
        key = TensorProto.DataType.Name(tp.map_type.key_type).lower()
        return f"map({key},{_type_string(tp.map_type.value_type)})"
    return str(which)


def _dims(tp):
    """ints, dim_param strings (or None for unknown dims); None if the rank is unknown."""
    if tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
        return None
    out = []
    for d in tp.tensor_type.shape.dim:
        if d.HasField("dim_value"):
            out.append(int(d.dim_value))
        elif d.HasField("dim_param"):
            out.append(d.dim_param)
        else:
            out.append(None)
    return out


class NodeArg:
    """An input or output description (``name``, ``shape``, ``type``), as onnxruntime's."""

    def __init__(self, name, shape, type_, elem_type=None):
        self.name, self.shape, self.type = name, shape, type_
        self.elem_type = elem_type

    def __repr__(self):
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape})"


class InferenceSession:
    """Run an ONNX model with neetorch.

    ``InferenceSession(model, providers=None, device=None)``: ``model`` is a path, bytes
    or ``onnx.ModelProto``.  The model is validated, checked for unsupported ops (one
    error listing all of them), lowered onto nee ops and compiled with ``nee.jit``
    (symbolic input dims become dynamic dims with shape buckets).  ``jit=False`` runs
    the lowered graph eagerly.  ``info`` says how the model runs.  ``sess_options`` may be an
    ``onnxruntime.SessionOptions`` or any object with ``intra_op_num_threads``: a count > 0 sets
    neetorch's (process-wide) CPU thread count (``nee.set_num_threads``); ``graph_optimization_level ==
    ORT_DISABLE_ALL`` (or ``NEE_ONNX_FOLD=0``) turns off :func:`~neetorch.onnx.optimize.fold_affine`, which
    folds per-channel BatchNormalization / Mul / Add by constants into the preceding Conv / Gemm / MatMul
    weights (``info["folded"]``: how many nodes, None when off); other options are ignored.

    String tensors (``tensor(string)``) are numpy object arrays of ``str`` on the host: ``run()`` takes
    numpy str / bytes / object arrays for them and returns object arrays, as onnxruntime does.  The
    nodes that read or write strings run on the host (``ops_string``), the numeric rest compiled
    (``Program.segments``); ``host_nodes``, ``info["host"]`` and :meth:`placement_summary` name them.
    An input declared ``map(K,tensor(V))`` (skl2onnx's DictVectorizer) takes one ``dict`` per run, as
    onnxruntime (``ops_map.as_map`` checks its key and value types); ``seq(map(...))`` a list of dicts.
    """

    def __init__(self, model, sess_options=None, providers=None, device=None, *, jit=True, buckets="pow2",
                 check=True):
        import neetorch as nee
        threads = getattr(sess_options, "intra_op_num_threads", 0) or 0
        if threads:
            # neetorch's CPU threads are one process-wide pool: the session's count sets it (the last
            # session created with a count wins); 0 keeps the current setting, like onnxruntime's default
            nee.set_num_threads(int(threads))
        m, base_dir, notes = load_model(model, check=check)
        g = m.graph
        if len(g.sparse_initializer):
            raise UnsupportedModelError("sparse initializers are not supported")
        self._model = m
        self.opset = default_opset(m)
        bad = unsupported_nodes(g)
        if bad:
            by = {}
            for t, n in bad:
                by.setdefault(t, []).append(n)
            parts = [f"{t} (nodes: {', '.join(ns[:5])}{', ...' if len(ns) > 5 else ''})" for t, ns in sorted(by.items())]
            raise UnsupportedModelError(f"model uses {len(by)} op type(s) neetorch.onnx does not support: "
                                        + "; ".join(parts))
        if device is None and providers:
            p = providers[0] if isinstance(providers[0], str) else providers[0][0]
            device = "cuda" if "CUDA" in p else "cpu"
        self.device = nee.device(device or "cpu")
        # Conv/Gemm/MatMul + per-channel BatchNormalization/Mul/Add by constants: folded into the weights
        optimize = fold_enabled(sess_options)
        folded = fold_affine(m, base_dir) if optimize else None
        inits = {t.name: tensor_to_numpy(t, base_dir) for t in g.initializer}
        self._inputs = []
        for vi in g.input:
            if vi.name in inits:
                continue
            et = vi.type.tensor_type.elem_type if vi.type.WhichOneof("value") == "tensor_type" else None
            if et is not None and et != _STRING and carry_np(ONNX_TO_NP.get(et, np.dtype(object))) is None:
                raise UnsupportedModelError(f"input {vi.name!r} has type {_type_string(vi.type)}, which neetorch "
                                            f"cannot hold")
            self._inputs.append(NodeArg(vi.name, _dims(vi.type), _type_string(vi.type), et))
        self._outputs = []
        for vi in g.output:
            et = vi.type.tensor_type.elem_type if vi.type.WhichOneof("value") == "tensor_type" else None
            self._outputs.append(NodeArg(vi.name, _dims(vi.type), _type_string(vi.type), et))
        self._output_names = [o.name for o in self._outputs]
        self._input_names = [a.name for a in self._inputs]
        self._plan = self._input_plan()
        self._on_cpu = str(self.device) == "cpu"
        self._program = Program(g, inits, self.device, self.opset)
        self._const_roots = {_root_id(t) for t in self._program.consts.values()}
        self._seen_specs = 0
        dynamic = {}
        for i, a in enumerate(self._inputs):
            if a.shape:
                dims = tuple(k for k, d in enumerate(a.shape) if not isinstance(d, int))
                if dims:
                    dynamic[i] = dims
        self.info = {"mode": "jit" if jit else "eager", "fallback_reason": None, "notes": notes,
                     "dynamic": {self._inputs[i].name: d for i, d in dynamic.items()}, "opset": self.opset,
                     "folded": folded}
        # string values: the nodes on strings run on the host (numpy), the numeric rest in traced segments
        self._segments = self._program.segments()
        #: names of the nodes that run on the host because they read or write strings ([] for none)
        self.host_nodes = self._program.host_nodes
        self._seg_jits = []
        freeze = "views" if optimize else False
        if self._segments is not None:
            self._jit = None
            self._init_segments(nee, jit, buckets, freeze)
        else:
            # initializers belong to the session and never change: the jit may lay them out anew
            # (freeze="views": transposed weights of products stored row-major, passes.freeze_constants)
            self._jit = nee.jit(self._program, dynamic=dynamic, buckets=buckets, name=self._program.__name__,
                                freeze=freeze) if jit else None

    def _init_segments(self, nee, jit, buckets, freeze=False):
        """A graph with string values runs as host / nee segments (``Program.segments``): each numeric segment
        gets its own ``nee.jit`` (dims declared symbolic in the model are dynamic), each host segment runs
        eagerly on numpy; ``info["host"]`` and :meth:`placement_summary` say which nodes ran on the host."""
        declared = {}
        g = self._program.graph
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            d = _dims(vi.type)
            if d is not None:
                declared[vi.name] = d
        for seg in self._segments:
            if seg.kind != "nee" or not jit:
                self._seg_jits.append(None)
                continue
            dyn = {}
            for i, name in enumerate(seg.inputs):
                dims = tuple(k for k, d in enumerate(declared.get(name) or ()) if not isinstance(d, int))
                if dims:
                    dyn[i] = dims
            self._seg_jits.append(nee.jit(seg, dynamic=dyn, buckets=buckets, name=seg.__name__, freeze=freeze))
        kinds = [f"{s.kind}({len(s.nodes)})" for s in self._segments]
        n_host = len(self.host_nodes)
        self.info["host"] = (f"{n_host} node(s) on string tensors run on the host (numpy), not compiled: "
                             f"{_names(self.host_nodes)}; segments: {' -> '.join(kinds) or 'none'}")
        if jit:
            self.info["mode"] = "jit+host" if any(s.kind == "nee" for s in self._segments) else "host"
        from .. import _env
        if _env.DEBUG >= 1:
            import sys
            print(f"[neetorch] onnx {self._program.__name__}: {self.info['host']}", file=sys.stderr)

    # ------------------------------------------------------------ onnxruntime API
    def get_inputs(self):
        return list(self._inputs)

    def get_outputs(self):
        return list(self._outputs)

    def get_modelmeta(self):
        return self._model

    def get_providers(self):
        return ["NeetorchExecutionProvider"]

    def _input_plan(self):
        """Per input, what a call checks: (NodeArg, expected numpy dtype or None (object: strings), its carry
        dtype, rank or None, [(dim, size)] fixed sizes, kind: 0 tensor, 1 optional, 2 sequence)."""
        plan = []
        for a in self._inputs:
            want = ONNX_TO_NP.get(a.elem_type) if a.elem_type is not None else None
            kind = 2 if a.type.startswith(("seq(", "optional(seq(")) else (1 if a.type.startswith("optional(") else 0)
            kind = 3 if a.type.startswith("map(") else kind  # one dict per run (ops_map.as_map)
            fixed = [(k, d) for k, d in enumerate(a.shape or ()) if isinstance(d, int)]
            plan.append((a, want, carry_np(want) if want is not None else None,
                         None if a.shape is None else len(a.shape), fixed, kind))
        return plan

    def _convert_inputs(self, input_feed):
        if not isinstance(input_feed, dict):
            raise InvalidInputError(f"input_feed must be a dict {{name: array}}, got {type(input_feed).__name__}")
        if len(input_feed) != len(self._plan) or any(k not in input_feed for k in self._input_names):
            names = self._input_names
            unknown = [k for k in input_feed if k not in names]
            if unknown:
                raise InvalidInputError(f"unknown input name(s) {unknown}; the model's inputs are {names}")
            missing = [k for k in names if k not in input_feed]
            raise InvalidInputError(f"missing input(s) {missing}; the model's inputs are {names}")
        out = []
        fast = self._fast_inputs()
        for (a, want, carry, rank, fixed, kind), fdt in zip(self._plan, fast):
            v = input_feed[a.name]
            if kind == 3:
                out.append(self._to_map(a, v, a.type))
                continue
            if kind:
                if v is None and a.type.startswith("optional("):
                    out.append(EMPTY)
                    continue
                if kind == 2 and a.type.startswith("seq(map("):  # a list of dicts, on the host
                    if not isinstance(v, list):
                        raise InvalidInputError(f"input {a.name!r}: expected {a.type} (a list of dicts), got "
                                                f"{type(v).__name__}")
                    out.append([self._to_map(a, x, a.type[4:-1], k) for k, x in enumerate(v)])
                    continue
                if isinstance(v, list) and kind == 2:
                    if a.type.endswith("(tensor(string))"):  # a sequence of strings stays numpy, on the host
                        out.append([self._to_strings(a, x) for x in v])
                    else:
                        out.append([self._to_tensor(a, np.asarray(x)) for x in v])
                    continue
            if isinstance(v, dict) or (isinstance(v, list) and v and isinstance(v[0], dict)):
                raise InvalidInputError(f"input {a.name!r}: expected {a.type}, got "
                                        f"{'a dict (a map)' if isinstance(v, dict) else 'a list of dicts (maps)'}")
            if a.elem_type == _STRING and kind == 0:
                arr = self._to_strings(a, v)
            else:
                arr = v if isinstance(v, np.ndarray) else np.asarray(v)
            if want is not None and arr.dtype != want:
                raise InvalidInputError(f"input {a.name!r}: expected {a.type} (numpy {want.name}), got numpy "
                                        f"{arr.dtype.name}")
            if rank is not None:
                if arr.ndim != rank:
                    raise InvalidInputError(f"input {a.name!r}: expected rank {rank} (shape {a.shape}), "
                                            f"got rank {arr.ndim} (shape {list(arr.shape)})")
                shape = arr.shape
                for k, d in fixed:
                    if shape[k] != d:
                        raise InvalidInputError(f"input {a.name!r}: dim {k} must be {d}, got shape "
                                                f"{list(shape)} (expected {a.shape})")
            if a.elem_type == _STRING and kind == 0:
                out.append(arr)  # strings stay numpy, on the host
            elif fdt is not None and arr.flags.c_contiguous and arr.flags.writeable:
                # the common case: zero-copy (what from_numpy checks, the dtype and a C-contiguous
                # layout, is checked above)
                out.append(_Tensor._make(arr, fast[-1], fdt))
            else:
                out.append(self._to_tensor(a, arr))
        return out

    def _fast_inputs(self):
        """Per input, the neetorch dtype of a zero-copy input (a CPU session, an expected numpy dtype
        neetorch holds as is) or None; the CPU device last.  Made on the first call."""
        f = getattr(self, "_fast_in", None)
        if f is None:
            from ..tensor.dtypes import from_numpy_dtype
            f = [from_numpy_dtype(want) if carry is not None and carry == want and self._on_cpu
                 and a.elem_type != _STRING and not kind else None
                 for a, want, carry, rank, fixed, kind in self._plan] + [nee_device("cpu")]
            self._fast_in = f
        return f

    def _to_strings(self, a, v):
        """A string input as a numpy object array of str (numpy str / bytes / object arrays accepted)."""
        from .ops_string import as_strings
        try:
            return as_strings(v, f"input {a.name!r}")
        except TypeError as e:
            dt = getattr(v, "dtype", None)
            got = f"numpy {dt.name}" if dt is not None else type(v).__name__
            raise InvalidInputError(f"input {a.name!r}: expected {a.type} (a numpy str array or object array of "
                                    f"str), got {got}: {e}") from None

    def _to_map(self, a, v, type_string, index=None):
        """A map input (one dict) checked against its declared map type (``ops_map.as_map``)."""
        from .ops_map import as_map
        what = f"input {a.name!r}" + (f" (element {index} of the sequence)" if index is not None else "")
        try:
            return as_map(v, type_string, what)
        except TypeError as e:
            raise InvalidInputError(str(e)) from None

    def _to_tensor(self, a, arr):
        c = carry_np(arr.dtype)
        if c is None:
            raise InvalidInputError(f"input {a.name!r}: numpy dtype {arr.dtype.name} is not supported")
        if arr.dtype != c or not arr.flags.c_contiguous or not arr.flags.writeable:
            arr = np.array(arr, dtype=c, order="C", copy=True)
        t = _from_numpy(arr)
        if self._on_cpu:
            return t
        try:
            return t.to(self.device)
        except TypeError as e:  # a dtype the device has no storage for (float16 without cl_khr_fp16)
            raise UnsupportedModelError(f"input {a.name!r} ({arr.dtype.name}) cannot be placed on {self.device}: "
                                        f"{e}") from None

    def _call(self, tensors):
        if self._segments is not None:
            return self._run_segments(tensors)
        if self._jit is not None and all(isinstance(t, _Tensor) for t in tensors):
            try:
                return self._jit(*tensors)
            except _TraceError as e:
                self.info["mode"] = "eager"
                self.info["fallback_reason"] = f"jit trace failed, running eagerly: {e}"
                self._jit = None
        return self._program(*tensors)

    def _run_segments(self, values):
        env = dict(zip(self._program.input_names, values))
        for k, (seg, jf) in enumerate(zip(self._segments, self._seg_jits)):
            args = [env[n] if n in env else self._program.consts[n] for n in seg.inputs]
            if jf is not None and all(isinstance(t, _Tensor) for t in args):
                try:
                    outs = jf(*args)
                except _TraceError as e:
                    self._seg_jits[k] = None
                    self.info["fallback_reason"] = f"jit trace of {seg.__name__} failed, running it eagerly: {e}"
                    outs = seg(*args)
            else:
                outs = seg(*args)
            if not isinstance(outs, tuple):
                outs = (outs,)
            env.update(zip(seg.outputs, outs))
        consts = self._program.consts
        return tuple(env[n] if n in env else consts[n] for n in self._program.output_names)

    def placement_summary(self) -> str:
        """What ran where in the compiled graphs run so far (ops per device, transfers, fallbacks);
        ``"eager"`` when the model runs uncompiled; a model with string values first lists the nodes
        that ran on the host."""
        if self._segments is not None:
            from ..jit.placement import summarize
            parts = [f"host (numpy, string tensors): {len(self.host_nodes)} node(s): {_names(self.host_nodes)}"]
            for seg, jf in zip(self._segments, self._seg_jits):
                if seg.kind == "nee":
                    if jf is None:
                        parts.append(f"{seg.__name__}: eager ({len(seg.nodes)} node(s))")
                    else:
                        parts.extend(f"{seg.__name__}: {x}" for x in summarize(jf))
            return "\n".join(parts)
        if self._jit is None:
            return "eager: " + self.info.get("fallback_reason", "jit disabled")
        from ..jit.placement import summarize
        parts = [str(s) for s in summarize(self._jit)]
        return "\n".join(parts) if parts else "not run yet: call run() first"

    def run_tensors(self, tensors):
        """Run on nee tensors (positional, in get_inputs() order); returns nee tensors."""
        return self._call(list(tensors))

    def run(self, output_names, input_feed, run_options=None):
        del run_options
        tensors = self._convert_inputs(input_feed)
        t0 = time.perf_counter()
        outs = self._call(tensors)
        self.info["last_run_seconds"] = time.perf_counter() - t0
        all_names = self._output_names
        if output_names:
            bad = [n for n in output_names if n not in all_names]
            if bad:
                raise InvalidInputError(f"unknown output name(s) {bad}; the model's outputs are {all_names}")
            idx = [all_names.index(n) for n in output_names]
        else:
            idx = range(len(all_names))
        # outputs are the caller's (as onnxruntime's): an array is copied only when it shares memory
        # with something that outlives this call (an input, a model constant) or with another output
        keep = self._persistent_roots(tensors)
        res = []
        want = self._out_dtypes()
        for i in idx:
            t = outs[i]
            a = t._data if type(t) is _Tensor and t._device.type == "cpu" else None
            if type(a) is np.ndarray and a.dtype == want[i] and None not in keep and _READ_HOOK[0] is None:
                # the common output (a CPU tensor of the declared dtype): _to_numpy's last steps
                r = _root_id(a)
                if r in keep or r is None:
                    a = np.array(a, copy=True)
                else:
                    keep.add(r)   # a second output on the same buffer gets its own copy
                res.append(a)
            else:
                res.append(self._to_numpy(t, self._outputs[i], keep))
        return res

    def _out_dtypes(self):
        """Per output, the numpy dtype its declared elem type asks for (None: undeclared / strings)."""
        w = getattr(self, "_out_np", None)
        if w is None:
            w = self._out_np = [ONNX_TO_NP.get(o.elem_type) if o.elem_type and o.elem_type != _STRING else None
                                for o in self._outputs]
        return w

    def _persistent_roots(self, tensors):
        """ids of the buffers an output must not share: the inputs' and the model's constants'."""
        Tensor = _Tensor
        if self._segments is not None:
            return {None}  # host values and segment outputs: every output is copied
        if self._jit is not None and self._jit.stats["specializations"] != self._seen_specs:
            # constants the trace made (folded values, Constant nodes) live in the jitted graph
            self._seen_specs = self._jit.stats["specializations"]
            try:
                g = self._jit.graph(*tensors)
                self._const_roots.update(_root_id(t) for t in g.consts.values() if isinstance(t, Tensor))
            except Exception:  # noqa: BLE001  (no graph for these inputs: every output is then copied)
                self._const_roots.add(None)
        ids = self._const_roots.copy()
        for t in tensors:
            if isinstance(t, Tensor):
                ids.add(_root_id(t))
            elif isinstance(t, list):
                ids.update(_root_id(x) for x in t if isinstance(x, Tensor))
        return ids

    def _to_numpy(self, t, arg, keep=None):
        if t is EMPTY:
            return None
        if isinstance(t, dict):  # a map (ZipMap's rows): {int or str: float}, as onnxruntime
            return dict(t)
        if isinstance(t, (list, tuple)):  # a sequence
            if t and type(t[0]) is dict:  # ZipMap's maps: fresh dicts, fast
                return [dict(x) for x in t]
            return [self._to_numpy(x, NodeArg(arg.name, None, "", None), keep) for x in t]
        if isinstance(t, np.ndarray):  # strings (host values)
            if t.dtype != object or (arg.elem_type and arg.elem_type != _STRING):
                raise OnnxError(f"output {arg.name!r}: declared {arg.type}, the model computed "
                                f"{'strings' if t.dtype == object else t.dtype.name}")
            return np.array(t, dtype=object, copy=True)
        a = t.numpy(force=True)
        want = ONNX_TO_NP.get(arg.elem_type) if arg.elem_type else None
        if want is not None and a.dtype != want:
            return a.astype(want)
        r = _root_id(a)
        if keep is None or None in keep or r in keep or r is None:
            return np.array(a, copy=True)
        keep.add(r)  # a second output on the same buffer gets its own copy
        return a


_STRING = 8  # onnx.TensorProto.STRING


def _names(names, k=8):
    return ", ".join(names[:k]) + (f", ... ({len(names)} in all)" if len(names) > k else "")


def _root_id(x):
    """id of the object owning ``x``'s memory (a Tensor's array or an array); None if unknown."""
    a = getattr(x, "_data", x)
    if not isinstance(a, np.ndarray):
        return None
    while isinstance(a.base, np.ndarray):
        a = a.base
    return id(a if a.base is None else a.base)
