"""``InferenceSession``: onnxruntime's API over a lowered, jitted ONNX graph."""
from __future__ import annotations

import os
import threading
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
from .lowering import EMPTY, LoweringError, Program, carry_np, unsupported_nodes
from .optimize import fold_affine, fold_enabled
from .ort_api import (
    Fail,
    InvalidArgument,
    OrtSessionAPI,
    OrtValue,
    SessionOptions,
    SessionProfiler,
    check_run_options,
    ort_load_error,
    override_free_dims,
    provider_for_device,
    replace_initializers,
    resolve_providers,
)
from .ort_api import _NotImplemented as NotImplementedModelError

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
        elif d.HasField("dim_param") and not d.dim_param.startswith("unk__"):
            out.append(d.dim_param)
        else:  # unknown, or a name ONNX shape inference made up for an unknown dim ("unk__0"): None, as onnxruntime
            out.append(None)
    return out


def _optional_dims(tp):
    """An ``optional(tensor(...))`` type's tensor dims (None for any other type)."""
    if tp.WhichOneof("value") != "optional_type":
        return None
    return _dims(tp.optional_type.elem_type)


def _raise_located(err, run_eager, args):
    """A jitted graph that raised at run time (bad data: a Gather index out of range, a Reshape to a shape its
    input does not have, ...) says only what the kernel saw; the graph is run again eagerly, node by node, on
    the same inputs to name the ONNX node that fails (name and op type, as onnxruntime's "running Gather node.
    Name:'...'"). Raises that error, an instance of the original error's class (``except IndexError`` still
    catches it) and of :class:`~.ort_api.RuntimeException` (neetorch's OnnxError family); returns if ``err``
    already names its node, or the eager run does not fail (the caller then re-raises ``err``)."""
    if isinstance(err, MemoryError) or (isinstance(err, OnnxError) and "node " in str(err)):
        return   # (out of memory: an eager run would need more, not less)
    try:
        run_eager(*args)
    except OnnxError as e2:
        msg = str(e2)
        if not msg.startswith("node "):
            return
    except Exception:  # noqa: BLE001  (not located: the original error is the one to see)
        return
    else:
        return
    from .ort_api import RuntimeException
    raise _as_ort(RuntimeException, err, msg) from err


_ort_mixed: dict = {}


def _as_ort(ort_cls, err, msg=None):
    """``err`` as an instance of onnxruntime's ``ort_cls`` and of its own class (``except IndexError`` and
    ``except RuntimeException`` / ``Fail`` both catch it), with message ``msg`` (default: err's); ``ort_cls`` alone
    where the two cannot be mixed."""
    msg = str(err) if msg is None else msg
    base = type(err)
    cls = _ort_mixed.get((ort_cls, base))
    if cls is None:
        try:
            cls = type(base.__name__, (ort_cls, base), {"__module__": base.__module__})
        except TypeError:  # a base that cannot be mixed in (layout conflict)
            cls = ort_cls
        _ort_mixed[(ort_cls, base)] = cls
    try:
        return cls(msg)
    except Exception:  # noqa: BLE001  (a class whose constructor takes other arguments)
        return ort_cls(msg)


class NodeArg:
    """An input or output description, as onnxruntime's: ``name``, ``type`` ("tensor(float)", "seq(tensor(int64))",
    "map(int64,tensor(float))", ...), ``shape`` (ints, symbolic dims as their names, unknown dims None; ``[]``
    when the rank is unknown, as onnxruntime; ``_shape`` is None then)."""

    def __init__(self, name, shape, type_, elem_type=None, ort_shape=None):
        self.name, self._shape, self.type = name, shape, type_
        self.elem_type = elem_type
        self._ort_shape = ort_shape  # an optional tensor's: its tensor's dims (what onnxruntime reports)

    @property
    def shape(self):
        if self._ort_shape is not None:
            return self._ort_shape
        return [] if self._shape is None else self._shape

    def __repr__(self):
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape})"


#: a compiled segment (strings or graph breaks split the graph) specialized for more than this many exact input
#: sizes (sizes shape buckets do not cover: a box count after NonMaxSuppression) runs eagerly from then on
SEGMENT_SPECIALIZATIONS = int(os.environ.get("NEE_ONNX_SEGMENT_SPECIALIZATIONS", "8"))


class InferenceSession(OrtSessionAPI):
    """Run an ONNX model with neetorch; onnxruntime's ``InferenceSession`` API (:mod:`.ort_api`).

    ``InferenceSession(path_or_bytes, sess_options=None, providers=None, provider_options=None, *, device=None,
    jit=True, buckets="pow2", check=True, enable_fallback=1)``: ``path_or_bytes`` is a path, bytes
    or ``onnx.ModelProto``; ``providers`` (onnxruntime's names, :func:`~.ort_api.resolve_providers`) or
    ``device`` (a neetorch device, which wins) say where it runs; ``sess_options``: :class:`~.ort_api.SessionOptions`
    (or onnxruntime's).  Errors are onnxruntime's classes (:mod:`.ort_api`), subclasses of :class:`OnnxError`'s.
    ``run(output_names, input_feed, run_options=None)`` as onnxruntime's: lists are converted to the input's
    dtype, OrtValues accepted, omitted optional inputs are empty, overridable initializers (initializers listed
    as graph inputs) may be fed (a second compiled session per set of fed names).

    The model is validated, checked for unsupported ops (one
    error listing all of them), lowered onto nee ops and compiled with ``nee.jit``
    (symbolic input dims become dynamic dims with shape buckets).  ``jit=False`` runs
    the lowered graph eagerly.  ``info`` says how the model runs.  ``sess_options`` may be an
    ``onnxruntime.SessionOptions`` or any object with ``intra_op_num_threads``: a count > 0 sets
    neetorch's (process-wide) CPU thread count (``nee.set_num_threads``); ``graph_optimization_level ==
    ORT_DISABLE_ALL`` (or ``NEE_ONNX_FOLD=0``) turns off :func:`~neetorch.onnx.optimize.fold_affine`, which
    folds per-channel BatchNormalization / Mul / Add by constants into the preceding Conv / Gemm / MatMul
    weights (``info["folded"]``: how many nodes, None when off); the other options: :class:`~.ort_api.SessionOptions`.

    String tensors (``tensor(string)``) are numpy object arrays of ``str`` on the host: ``run()`` takes
    numpy str / bytes / object arrays for them and returns object arrays, as onnxruntime does.  The
    nodes that read or write strings run on the host (``ops_string``), the numeric rest compiled
    (``Program.segments``); ``host_nodes``, ``info["host"]`` and :meth:`placement_summary` name them.
    An input declared ``map(K,tensor(V))`` (skl2onnx's DictVectorizer) takes one ``dict`` per run, as
    onnxruntime (``ops_map.as_map`` checks its key and value types); ``seq(map(...))`` a list of dicts.
    """

    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None, *, device=None,
                 jit=True, buckets="pow2", check=True, **kwargs):
        import neetorch as nee
        model = path_or_bytes
        extra = sorted(set(kwargs) - {"enable_fallback", "read_config_from_model", "disabled_optimizers"})
        if extra:
            raise TypeError(f"InferenceSession() got unexpected keyword argument(s) {extra}")
        t_start = time.perf_counter()
        self._ort_fallback = int(kwargs.get("enable_fallback", 1)) == 1
        self._ort_init_args = {"model": model, "sess_options": sess_options, "jit": jit, "buckets": buckets,
                               "check": check}
        self._ort_options = so = SessionOptions._from(sess_options)
        if device is None:
            if providers is None and so.has_providers():
                providers = list(so._providers)
            device, self._ort_providers, self._ort_provider_options = resolve_providers(
                providers, provider_options, self._ort_fallback)
        else:
            name = provider_for_device(device)
            self._ort_providers = list(dict.fromkeys([name, "CPUExecutionProvider"]))
            self._ort_provider_options = {n: {} for n in self._ort_providers}
        self._profiler = SessionProfiler(so.profile_file_prefix) if so.enable_profiling else None
        threads = getattr(sess_options, "intra_op_num_threads", 0) or 0
        if threads:
            # neetorch's CPU threads are one process-wide pool: the session's count sets it (the last
            # session created with a count wins); 0 keeps the current setting, like onnxruntime's default
            nee.set_num_threads(int(threads))
        try:
            m, base_dir, notes = load_model(model, check=check)
        except OnnxError as e:  # onnxruntime's classes (NoSuchFile, InvalidProtobuf, InvalidGraph, NotImplemented)
            raise ort_load_error(e) from None
        t_loaded = time.perf_counter()
        g = m.graph
        if so._dim_by_name or so._dim_by_denotation:
            override_free_dims(g, so._dim_by_name, so._dim_by_denotation)
        if so._initializers:
            replace_initializers(g, so._initializers)
        if len(g.sparse_initializer):
            raise NotImplementedModelError("sparse initializers are not supported")
        self._model = m
        self.opset = default_opset(m)
        bad = unsupported_nodes(g)
        if bad:
            by = {}
            for t, n in bad:
                by.setdefault(t, []).append(n)
            parts = [f"{t} (nodes: {', '.join(ns[:5])}{', ...' if len(ns) > 5 else ''})" for t, ns in sorted(by.items())]
            raise NotImplementedModelError(f"model uses {len(by)} op type(s) neetorch.onnx does not support: "
                                           + "; ".join(parts))
        self.device = nee.device(device or "cpu")
        # Conv/Gemm/MatMul + per-channel BatchNormalization/Mul/Add by constants: folded into the weights
        optimize = fold_enabled(sess_options)
        folded = fold_affine(m, base_dir) if optimize else None
        if so.optimized_model_filepath:
            from .ort_api import write_optimized_model
            write_optimized_model(m, base_dir, so.optimized_model_filepath)
        inits = {t.name: tensor_to_numpy(t, base_dir) for t in g.initializer}
        # initializers listed as graph inputs (IR >= 4) can be fed to run(): onnxruntime's overridable initializers
        self._overridable = {vi.name for vi in g.input if vi.name in inits} if m.ir_version >= 4 else set()
        self._overridable_args = [NodeArg(vi.name, _dims(vi.type), _type_string(vi.type), vi.type.tensor_type.elem_type)
                                  for vi in g.input if vi.name in self._overridable]
        self._override_sessions = {}
        self._inputs = []
        for vi in g.input:
            if vi.name in inits:
                continue
            et = vi.type.tensor_type.elem_type if vi.type.WhichOneof("value") == "tensor_type" else None
            if et is not None and et != _STRING and carry_np(ONNX_TO_NP.get(et, np.dtype(object))) is None:
                raise NotImplementedModelError(f"input {vi.name!r} has type {_type_string(vi.type)}, which "
                                               f"neetorch cannot hold")
            self._inputs.append(NodeArg(vi.name, _dims(vi.type), _type_string(vi.type), et, _optional_dims(vi.type)))
        self._outputs = []
        for vi in g.output:
            et = vi.type.tensor_type.elem_type if vi.type.WhichOneof("value") == "tensor_type" else None
            self._outputs.append(NodeArg(vi.name, _dims(vi.type), _type_string(vi.type), et, _optional_dims(vi.type)))
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
        # string values: the nodes on strings run on the host (numpy), the numeric rest in traced segments;
        # graph breaks: nodes whose output shapes depend on values (NonZero, NonMaxSuppression, ...) run eagerly
        # between compiled segments (seeded by op type here, found by the first trace for the others)
        self._breaks = set(self._program.data_dependent_nodes()) if jit else set()
        self._segments = self._program.segments(self._breaks)
        #: names of the nodes that run on the host because they read or write strings ([] for none)
        self.host_nodes = self._program.host_nodes
        self._seg_jits = []
        self._seg_cache = {}     # (node names, inputs, outputs) -> the segment's jit (kept across re-splits)
        self._split_lock = threading.Lock()
        self._break_why = {}     # graph breaks the trace found: node -> its trace error
        freeze = "views" if optimize else False
        self._jit_args = (jit, buckets, freeze)   # (a re-split at a graph break makes the segments' jits again)
        if self._segments is not None:
            self._jit = None
            self._init_segments(*self._jit_args)
        else:
            # initializers belong to the session and never change: the jit may lay them out anew
            # (freeze="views": transposed weights of products stored row-major, passes.freeze_constants)
            self._jit = nee.jit(self._program, dynamic=dynamic, buckets=buckets, name=self._program.__name__,
                                freeze=freeze) if jit else None
        if self._profiler is not None:
            self._profiler.add("model_loading_" + ("uri" if isinstance(model, (str, os.PathLike)) else "array"),
                               t_start, t_loaded - t_start)
            self._profiler.add("session_initialization", t_start, time.perf_counter() - t_start)
        self._log(f"session on {self.device} ({', '.join(self._ort_providers)}): {self.info['mode']}, "
                  f"{len(g.node)} node(s), folded {folded}")

    def _init_segments(self, jit, buckets, freeze=False):
        """A graph with string values or graph breaks runs as segments (``Program.segments``): each numeric
        segment gets its own ``nee.jit`` (dims declared symbolic in the model are dynamic, and a dim that a
        later call brings another size for: ``dynamic="auto"``, as the sizes after a NonZero vary with the
        data), host segments run eagerly on numpy, eager segments (the breaks) as eager nee ops;
        ``info["host"]`` / ``info["breaks"]`` and :meth:`placement_summary` name those nodes."""
        from ..jit.api import JitFunction
        declared = {}
        g = self._program.graph
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            d = _dims(vi.type)
            if d is not None:
                declared[vi.name] = d
        self._seg_jits = []
        for seg in self._segments:
            if seg.kind != "nee" or not jit:
                self._seg_jits.append(None)
                continue
            key = (tuple(n.name for n in seg.nodes), tuple(seg.inputs), tuple(seg.outputs))
            jf = self._seg_cache.get(key)
            if jf is None:
                dyn = {}
                for i, name in enumerate(seg.inputs):
                    dims = tuple(k for k, d in enumerate(declared.get(name) or ()) if not isinstance(d, int))
                    if dims:
                        dyn[i] = dims
                jf = self._seg_cache[key] = JitFunction(seg, dynamic=dyn, buckets=buckets, name=seg.__name__,
                                                        freeze=freeze, auto=True)
            self._seg_jits.append(jf)
        kinds = " -> ".join(f"{s.kind}({len(s.nodes)})" for s in self._segments) or "none"
        n_host = len(self.host_nodes)
        if n_host:
            self.info["host"] = (f"{n_host} node(s) on string tensors run on the host (numpy), not compiled: "
                                 f"{_names(self.host_nodes)}; segments: {kinds}")
        brk = [n for n in self._program.nodes if n.name in self._breaks and not n.host]
        if brk:
            self.info["breaks"] = (f"{len(brk)} node(s) whose output shapes or control flow depend on values run "
                                   f"eagerly between compiled segments: {_names([f'{n.name} ({n.op_type})' for n in brk])}; "
                                   f"segments: {kinds}")
            #: per break node, why it is one (its op type's output shape depends on values, or the trace error)
            self.info["break_reasons"] = {n.name: self._break_why.get(n.name, f"{n.op_type}: its output shape "
                                                                               f"depends on its input values")
                                          for n in brk}
        if jit:
            compiled = any(s.kind == "nee" for s in self._segments)
            self.info["mode"] = ("jit+" if compiled else "") + ("host" if n_host else "eager")
        from .. import _env
        if _env.DEBUG >= 1:
            import sys
            print(f"[neetorch] onnx {self._program.__name__}: {self.info.get('host') or self.info['breaks']}",
                  file=sys.stderr)

    def _break_at(self, err) -> bool:
        """A trace failed at a node (``err.onnx_node``, set by the lowering): that node becomes a graph break,
        run eagerly between compiled segments, and the graph is split again (segments already compiled are
        kept: :attr:`_seg_cache`).  False when the error names no node of this graph not already a break (the
        caller then runs what failed eagerly, as before)."""
        node = getattr(err, "onnx_node", None)
        jit = self._jit_args[0]
        if not jit or node is None or node not in {n.name for n in self._program.nodes}:
            return False
        with self._split_lock:
            if node in self._breaks:   # (another thread's run split the graph there meanwhile)
                return self._segments is not None
            self._breaks.add(node)
            self._break_why[node] = str(err)
            self._segments = self._program.segments(self._breaks)
            self._jit = None
            self._init_segments(*self._jit_args)
            self.info["fallback_reason"] = None
        return True

    # ------------------------------------------------------------ onnxruntime API
    def get_inputs(self):
        return list(self._inputs)

    def get_outputs(self):
        return list(self._outputs)

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
                         None if a._shape is None else len(a._shape), fixed, kind))
        return plan

    def _convert_inputs(self, input_feed):
        if not isinstance(input_feed, dict):
            raise InvalidInputError(f"input_feed must be a dict {{name: array}}, got {type(input_feed).__name__}")
        if len(input_feed) != len(self._plan) or any(k not in input_feed for k in self._input_names):
            # onnxruntime's order: missing required inputs first (a ValueError), then unknown names
            names = self._input_names
            unknown = [k for k in input_feed if k not in names]
            missing = [a.name for a in self._inputs if a.name not in input_feed and not a.type.startswith("optional")]
            if missing:
                also = f"; unknown input name(s) {unknown}" if unknown else ""
                raise InvalidInputError(f"missing input(s) {missing}: required inputs are missing from the input feed "
                                        f"{list(input_feed)}{also}; the model's inputs are {names}")
            if unknown:
                raise InvalidArgument(f"unknown input name(s) {unknown}; the model's inputs are {names}")
            input_feed = {**{k: None for k in names}, **input_feed}  # omitted optional inputs: empty
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
                        raise InvalidArgument(f"input {a.name!r}: expected {a.type} (a list of dicts), got "
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
                raise InvalidArgument(f"input {a.name!r}: expected {a.type}, got "
                                      f"{'a dict (a map)' if isinstance(v, dict) else 'a list of dicts (maps)'}")
            if a.elem_type == _STRING and kind == 0:
                arr = self._to_strings(a, v._host() if isinstance(v, OrtValue) else v)
            else:
                arr = v if isinstance(v, np.ndarray) else _as_array(a, v, want)
            if want is not None and arr.dtype != want:
                raise InvalidArgument(f"input {a.name!r}: expected {a.type} (numpy {want.name}), got numpy "
                                      f"{arr.dtype.name}")
            if rank is not None and not (rank == 0 and arr.size == 1):
                # (a one-element array for a scalar input, [1] or [[1]]: onnxruntime takes it as fed)
                if arr.ndim != rank:
                    raise InvalidArgument(f"input {a.name!r}: expected rank {rank} (shape {a.shape}), "
                                          f"got rank {arr.ndim} (shape {list(arr.shape)})")
                shape = arr.shape
                for k, d in fixed:
                    if shape[k] != d:
                        raise InvalidArgument(f"input {a.name!r}: dim {k} must be {d}, got shape "
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
            raise InvalidArgument(f"input {a.name!r}: expected {a.type} (a numpy str array or object array of "
                                  f"str), got {got}: {e}") from None

    def _to_map(self, a, v, type_string, index=None):
        """A map input (one dict) checked against its declared map type (``ops_map.as_map``)."""
        from .ops_map import as_map
        what = f"input {a.name!r}" + (f" (element {index} of the sequence)" if index is not None else "")
        try:
            return as_map(v, type_string, what)
        except TypeError as e:
            raise InvalidArgument(str(e)) from None

    def _to_tensor(self, a, arr):
        c = carry_np(arr.dtype)
        if c is None:
            raise InvalidArgument(f"input {a.name!r}: numpy dtype {arr.dtype.name} is not supported")
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
        try:
            return self._call0(tensors)
        except LoweringError as e:
            # a node that cannot run on these inputs (shapes that do not broadcast or multiply, a bad reshape,
            # an Expand / Split that does not fit): onnxruntime's Fail, still the LoweringError it was
            if isinstance(e, Fail):
                raise
            raise _as_ort(Fail, e) from e

    def _call0(self, tensors):
        if self._segments is not None:
            return self._run_segments(tensors)
        if self._jit is not None and all(isinstance(t, _Tensor) for t in tensors):
            try:
                return self._jit(*tensors)
            except _TraceError as e:
                if self._break_at(e):
                    return self._run_segments(tensors)
                self.info["mode"] = "eager"
                self.info["fallback_reason"] = f"jit trace failed, running eagerly: {e}"
                self._jit = None
            except Exception as e:  # noqa: BLE001
                _raise_located(e, self._program, tensors)
                raise
        return self._program(*tensors)

    def _run_segments(self, values, env=None):
        """Run the segments in order.  When a trace finds a new graph break the graph is split again and the run
        resumes on the new split with the values computed so far (``env``): a segment whose outputs are all
        there already is not run again (a detector's first run found 10 breaks, and ran its NMS 14 times)."""
        resume = env is not None
        if env is None:
            env = dict(zip(self._program.input_names, values))
        segments, jits = self._segments, self._seg_jits   # (another thread's re-split replaces both lists)
        for k, (seg, jf) in enumerate(zip(segments, jits)):
            if resume and seg.outputs and all(o in env for o in seg.outputs):
                continue
            args = [env[n] if n in env else self._program.consts[n] for n in seg.inputs]
            if jf is not None and all(isinstance(t, _Tensor) for t in args):
                try:
                    outs = jf(*args)
                    st = jf.stats
                    if st["specializations"] - st["bucket_specializations"] > SEGMENT_SPECIALIZATIONS:
                        # sizes after a break vary with the data (a detector's box count): a segment specialized
                        # for this many exact sizes (shape buckets did not cover them) runs eagerly from now on
                        jits[k] = None
                        self.info.setdefault("eager_segments", []).append(
                            f"{seg.__name__}: specialized for {st['specializations']} input sizes, now eager")
                except _TraceError as e:
                    if self._break_at(e):
                        return self._run_segments(values, env)
                    jits[k] = None
                    self.info["fallback_reason"] = f"jit trace of {seg.__name__} failed, running it eagerly: {e}"
                    outs = seg(*args)
                except Exception as e:  # noqa: BLE001
                    _raise_located(e, seg, args)
                    raise
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
            parts = []
            if self.host_nodes:
                parts.append(f"host (numpy, string tensors): {len(self.host_nodes)} node(s): {_names(self.host_nodes)}")
            for seg, jf in zip(self._segments, self._seg_jits):
                if seg.kind == "eager":
                    parts.append(f"{seg.__name__}: eager, a graph break ({len(seg.nodes)} node(s): "
                                 f"{_names([n.name for n in seg.nodes])})")
                elif seg.kind == "nee":
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
        if run_options is not None:
            check_run_options(run_options)
        if self._overridable and not self._overridable.isdisjoint(input_feed):
            return self._override_session(input_feed).run(output_names, input_feed, run_options)
        tensors = self._convert_inputs(input_feed)
        t0 = time.perf_counter()
        if self._profiler is None:
            outs = self._call(tensors)
        else:
            with self._profiler.run(getattr(run_options, "logid", "")):
                outs = self._call(tensors)
        self.info["last_run_seconds"] = time.perf_counter() - t0
        all_names = self._output_names
        if output_names:
            bad = [n for n in output_names if n not in all_names]
            if bad:
                raise InvalidArgument(f"unknown output name(s) {bad}; the model's outputs are {all_names}")
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

    def _override_session(self, input_feed):
        """The session that runs with the overridable initializers fed in ``input_feed`` as inputs (one per set
        of fed names, made on first use from this session's model without those initializers)."""
        key = frozenset(self._overridable.intersection(input_feed))
        sub = self._override_sessions.get(key)
        if sub is None:
            import onnx
            m = onnx.ModelProto()
            m.CopyFrom(self._model)
            keep = [t for t in m.graph.initializer if t.name not in key]
            del m.graph.initializer[:]
            m.graph.initializer.extend(keep)
            so = SessionOptions._from(self._ort_options)
            so.enable_profiling, so.optimized_model_filepath = False, ""
            so._initializers, so._dim_by_name, so._dim_by_denotation = {}, {}, {}  # already in self._model
            a = self._ort_init_args
            sub = InferenceSession(m, so, device=str(self.device), jit=a["jit"], buckets=a["buckets"], check=False)
            self._override_sessions[key] = sub
        return sub

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
        n = self._jit.stats["specializations"] if self._jit is not None else 0
        if self._jit is not None and n != self._seen_specs:
            # constants the trace made (folded values, Constant nodes) live in the jitted graph; the count is
            # noted after they are added (another thread's run then finds them, or adds them again)
            try:
                g = self._jit.graph(*tensors)
                self._const_roots.update(_root_id(t) for t in g.consts.values() if isinstance(t, Tensor))
            except Exception:  # noqa: BLE001  (no graph for these inputs: every output is then copied)
                self._const_roots.add(None)
            self._seen_specs = n
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


def _as_array(a, v, want):
    """A non-ndarray input value as numpy: an OrtValue's array; a Python list / scalar in the input's
    declared dtype (onnxruntime converts lists to the expected type)."""
    if isinstance(v, OrtValue):
        return v._host()
    if want is not None and isinstance(v, (list, int, float, bool, np.generic)) and want != np.dtype(object):
        try:
            return np.asarray(v, dtype=want)
        except (TypeError, ValueError) as e:
            raise InvalidArgument(f"input {a.name!r}: cannot make a {a.type} tensor from the given "
                                  f"{type(v).__name__}: {e}") from None
    return np.asarray(v)


def _names(names, k=8):
    return ", ".join(names[:k]) + (f", ... ({len(names)} in all)" if len(names) > k else "")


def _root_id(x):
    """id of the object owning ``x``'s memory (a Tensor's array or an array); None if unknown."""
    a = getattr(x, "_data", x)
    if not isinstance(a, np.ndarray):
        return None
    while True:
        b = a.base
        if not isinstance(b, np.ndarray):
            # the CPU backend's views over a byte span (devices/cpu _Span, ops/complex): the array it keeps
            b = getattr(b, "_keep", None)
            if not isinstance(b, np.ndarray):
                break
        a = b
    return id(a if a.base is None else a.base)
