"""Graph rewrites on an ONNX model before lowering: folding constant per-channel affine epilogues (and a Relu
of a Concat pushed into its inputs).

:func:`fold_affine` does what onnxruntime's basic graph optimizations (``ConvBNFusion``,
``ConvMulFusion``, ``ConvAddFusion``, ``MatMulScaleFusion``-like) do for the patterns CNN and MLP
exporters write:

* ``Conv -> BatchNormalization`` (inference form) / ``-> Mul(c)`` / ``-> Add(d)``, any chain of them:
  ``y * S + T`` per output channel becomes ``W' = W * S[m]`` and one shift ``B * S + T``: a per-channel
  ``Add`` after the conv by default (neetorch fuses it into the conv's epilogue; see :func:`fold_affine`),
  or the conv's bias (``shift_as_add=False``, onnxruntime's form);
* ``Gemm -> BatchNormalization / Mul(c) / Add(d)`` per column: ``B`` scaled along N,
  ``C' = beta * C * S + T``, ``beta = 1``;
* ``MatMul(x, W) [-> Add(b)] -> Mul(c) / Add(d)`` per column (last axis): ``W' = W * S``, ``b' = b * S + T``
  (the first Add is the bias and stays; a Mul right after the MatMul needs no Add).

It folds only what is provably the same computation: the weights, biases and the Mul/Add/BN operands
are constants (initializers that cannot be overridden, ``Constant`` nodes, or ``ConstantOfShape`` /
``Identity`` / ``Unsqueeze`` / ``Squeeze`` / ``Reshape`` of constants); float16/32/64 of one dtype; each
folded value has exactly one consumer (the next node of the chain) and is not a graph output; a Mul/Add
operand broadcasts over one output channel only (per-channel or a single value) and does not grow the
output's rank; BN is the inference form (one output, ``training_mode=0``).  Grouped / depthwise convs
fold like any other (output channel ``m`` is computed by ``W[m]`` alone).  ``S`` and ``T`` are
accumulated in float64 over the whole chain and cast to the weight dtype once; a chain whose factors
are not all finite (BN with ``var + eps <= 0``) is left alone.

It also rewrites ``Relu(Concat(a, b, ...))`` to ``Concat(Relu(a), b, ...)`` where each input either is
provably >= 0 (``b``: a relu output, pooled, concatenated or reshaped) or is written by a Conv / Add / Mul /
Sub / Sum / Gemm / MatMul that only the Concat reads (its Relu then joins that node's fused epilogue in the
executor): ShuffleNet's stride-2 units lose one elementwise pass over their whole output.

The switch: ``NEE_ONNX_FOLD=0`` or ``graph_optimization_level == ORT_DISABLE_ALL`` in ``sess_options``
(:func:`fold_enabled`).
"""
from __future__ import annotations

import os

import numpy as np

from .loader import tensor_to_numpy

__all__ = ["fold_affine", "fold_enabled"]

_FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
_CONST_OPS = ("Constant", "ConstantOfShape", "Identity", "Unsqueeze", "Squeeze", "Reshape")
_BN_MUL_ADD = ("BatchNormalization", "Mul", "Add")
# outputs >= 0 (or NaN) whatever the input; outputs >= 0 when input 0 is
_NONNEG_OPS = frozenset({"Relu", "Sigmoid", "Softmax"})
_NONNEG_KEEPING = frozenset({"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Identity", "Reshape",
                             "Flatten", "Transpose", "Squeeze", "Unsqueeze"})
# nodes whose output a following Relu joins in the executor's fusion (a conv's epilogue, a fused elementwise group)
_RELU_FUSES = frozenset({"Conv", "Add", "Mul", "Sub", "Gemm", "MatMul", "Sum"})


def fold_enabled(sess_options=None) -> bool:
    """False when ``NEE_ONNX_FOLD`` is ``0`` / ``false`` or ``sess_options.graph_optimization_level`` is
    ``ORT_DISABLE_ALL`` (0); True otherwise."""
    if os.environ.get("NEE_ONNX_FOLD", "1").strip().lower() in ("0", "false", "off", "no"):
        return False
    level = getattr(sess_options, "graph_optimization_level", None)
    if level is not None:
        try:
            return int(level) != 0
        except (TypeError, ValueError):
            return getattr(level, "name", str(level)) != "ORT_DISABLE_ALL"
    return True


def fold_affine(model, base_dir: str | None = None, *, shift_as_add: bool = True) -> int:
    """Fold per-channel constant affine epilogues into the preceding Conv / Gemm / MatMul's constant
    weights and bias, in place on ``model`` (a ``ModelProto``; only its top-level graph; ``base_dir``: where
    its external data lives).  Returns the number of nodes folded (BatchNormalization, Mul, Add; the
    Relu(Concat) rewrites described in the module docstring are not counted).

    ``shift_as_add``: a Conv's folded shift becomes one per-channel ``Add`` after it (the conv keeps no
    bias) rather than its bias input (onnxruntime's form, ``shift_as_add=False``): neetorch fuses that Add
    into the conv's epilogue at no cost, while its conv kernels add a bias in a separate pass on the GEMM
    paths (1x1 and im2col convs)."""
    return _Folder(model, base_dir, shift_as_add).run()


class _Folder:
    def __init__(self, model, base_dir, shift_as_add):
        self.model, self.g, self.base_dir = model, model.graph, base_dir
        self.shift_as_add = shift_as_add
        g = self.g
        self.init_proto = {t.name: t for t in g.initializer}
        graph_inputs = {i.name for i in g.input}
        # an initializer that is also a graph input can be fed from IR version 4 on: not a constant
        self.overridable = graph_inputs & set(self.init_proto) if model.ir_version >= 4 else set()
        self.outputs = {o.name for o in g.output}
        self.nodes = list(g.node)
        self.producer = {}
        self.consumers: dict = {}   # value name -> number of reads (node inputs, subgraph outer refs)
        self.readers: dict = {}     # value name -> nodes reading it (this graph's)
        from .lowering import _outer_refs
        for n in self.nodes:
            for o in n.output:
                if o:
                    self.producer[o] = n
            for i in n.input:
                if i:
                    self.readers.setdefault(i, []).append(n)
            for i in list(n.input) + sorted(_outer_refs(n)):
                if i:
                    self.consumers[i] = self.consumers.get(i, 0) + 1
        self.names = set(self.producer) | set(self.init_proto) | graph_inputs | _subgraph_names(g)
        from .loader import default_opset
        self.opset = default_opset(model)
        self.value_info = {v.name: v for v in g.value_info}
        self._const: dict = {}
        self.removed: set = set()     # id() of nodes folded away
        self.touched: set = set()     # values that lost a reader
        self.vanished: set = set()    # values no node writes any more
        self.count = 0
        self.pushed = 0               # Relu(Concat) rewrites (not counted as folds)

    # ------------------------------------------------------------------ constants
    def const(self, name):
        """The value of ``name`` as numpy if it is a constant (else None)."""
        if not name:
            return None
        if name in self._const:
            return self._const[name]
        v = None
        if name in self.init_proto and name not in self.overridable:
            v = tensor_to_numpy(self.init_proto[name], self.base_dir)
        elif name in self.producer:
            try:
                v = self._eval(self.producer[name])
            except Exception:  # noqa: BLE001  (a malformed constant node: not a constant we fold)
                v = None
        self._const[name] = v
        return v

    def meta(self, name):
        """(shape, numpy dtype) of constant ``name`` without materializing a large one (None if not a constant):
        the weights are read only once a fold is certain."""
        if not name:
            return None
        if name in self._const:
            v = self._const[name]
            return None if v is None else (v.shape, v.dtype)
        from .loader import ONNX_TO_NP
        if name in self.init_proto and name not in self.overridable:
            t = self.init_proto[name]
            dt = ONNX_TO_NP.get(t.data_type)
            return None if dt is None else (tuple(int(d) for d in t.dims), dt)
        n = self.producer.get(name)
        if n is not None and n.op_type == "ConstantOfShape" and n.domain in ("", "ai.onnx") and n.input:
            shape = self.const(n.input[0])
            val = next((a.t for a in n.attribute if a.name == "value"), None)
            if shape is None:
                return None
            dt = ONNX_TO_NP.get(val.data_type) if val is not None else np.dtype(np.float32)
            return None if dt is None else (tuple(int(d) for d in shape.reshape(-1)), dt)
        v = self.const(name)
        return None if v is None else (v.shape, v.dtype)

    def _eval(self, n):
        from onnx import helper, numpy_helper
        if n.domain not in ("", "ai.onnx") or n.op_type not in _CONST_OPS or len(n.output) != 1:
            return None
        ins = [self.const(i) if i else None for i in n.input]
        if any(i and v is None for i, v in zip(n.input, ins)):
            return None
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        if n.op_type == "Constant":
            if "value" in attrs:
                return numpy_helper.to_array(attrs["value"])
            for k, dt in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64),
                          ("value_ints", np.int64)):
                if k in attrs:
                    return np.asarray(attrs[k], dtype=dt)
            return None
        if n.op_type == "ConstantOfShape":
            val = numpy_helper.to_array(attrs["value"]) if "value" in attrs else np.zeros(1, np.float32)
            return np.full(tuple(int(d) for d in ins[0].reshape(-1)), val.reshape(-1)[0], dtype=val.dtype)
        x = ins[0]
        if n.op_type == "Identity":
            return x
        if n.op_type in ("Unsqueeze", "Squeeze"):
            axes = ins[1] if len(ins) > 1 and ins[1] is not None else attrs.get("axes")
            if n.op_type == "Squeeze":
                return np.squeeze(x, axis=None if axes is None else tuple(int(a) for a in np.ravel(axes)))
            axes = [int(a) for a in np.ravel(axes)]
            r = x.ndim + len(axes)
            return np.expand_dims(x, tuple(sorted(a % r for a in axes)))
        # Reshape: 0 copies the input's dim unless allowzero, -1 is inferred
        shape = [int(d) for d in ins[1].reshape(-1)]
        if not attrs.get("allowzero", 0):
            shape = [x.shape[k] if d == 0 else d for k, d in enumerate(shape)]
        return x.reshape(shape)

    # ------------------------------------------------------------------ chain helpers
    def _sole_reader(self, name):
        """The one node reading ``name``, if there is exactly one and ``name`` is not a graph output."""
        if name in self.outputs or self.consumers.get(name, 0) != 1:
            return None
        for n in self.readers.get(name, ()):
            if id(n) not in self.removed:
                return n if list(n.input).count(name) == 1 else None
        return None  # read only from inside a subgraph

    def _other_const(self, n, y):
        """For a binary Mul/Add ``n`` reading ``y``: the other operand's constant value (None if not)."""
        if n.domain not in ("", "ai.onnx") or len(n.input) != 2 or len(n.output) != 1:
            return None, None
        other = n.input[1] if n.input[0] == y else n.input[0]
        return other, self.const(other)

    def _declared_ok(self, name, dtype, rank):
        """False if shape inference recorded a different dtype or rank for ``name``."""
        vi = self.value_info.get(name)
        if vi is None or vi.type.WhichOneof("value") != "tensor_type":
            return True
        from .loader import ONNX_TO_NP
        tt = vi.type.tensor_type
        if tt.elem_type and ONNX_TO_NP.get(tt.elem_type) != dtype:
            return False
        return not (rank is not None and tt.HasField("shape") and len(tt.shape.dim) != rank)

    @staticmethod
    def _per_channel(c, rank, axis, size, dtype):
        """``c`` as a float64 vector of ``size`` if it broadcasts over output axis ``axis`` of a rank-``rank``
        output only (every other aligned dim 1, the rank not grown); else None."""
        if c is None or c.dtype != dtype or c.ndim > rank:
            return None
        for j, d in enumerate(c.shape):
            k = rank - c.ndim + j
            if d != 1 and not (k == axis and d == size):
                return None
        return np.broadcast_to(c.astype(np.float64).reshape(-1), (size,)) if c.size == 1 else \
            c.astype(np.float64).reshape(size)

    def _fold_node(self, tail, n):
        """``n`` (reading ``tail``'s output) is folded: ``tail`` now writes ``n``'s output."""
        old = tail.output[0]
        for i in n.input:
            if i and i != old:
                self.consumers[i] -= 1
                self.touched.add(i)
        self.consumers.pop(old, None)
        self.vanished.add(old)
        tail.output[0] = n.output[0]
        self.producer[n.output[0]] = tail
        del self.producer[old]
        self.removed.add(id(n))
        self.count += 1

    def _new_init(self, base, arr):
        from onnx import helper
        from onnx.helper import np_dtype_to_tensor_dtype
        name = self._fresh(f"{base}_folded")
        # written straight into the graph (numpy_helper.from_array + extend would copy the bytes twice more)
        t = self.g.initializer.add()
        t.name, t.data_type = name, np_dtype_to_tensor_dtype(arr.dtype)
        t.dims.extend(arr.shape)
        t.raw_data = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes()
        if self.model.ir_version < 4:  # initializers are graph inputs too before IR version 4
            self.g.input.append(helper.make_tensor_value_info(name, t.data_type, list(arr.shape)))
        self.consumers[name] = 1
        return name

    def _fresh(self, base):
        name, k = base, 0
        while name in self.names:
            k += 1
            name = f"{base}{k}"
        self.names.add(name)
        return name

    def _drop_input(self, n, k):
        """Remove input ``k`` of ``n`` (an optional trailing input)."""
        self.consumers[n.input[k]] -= 1
        self.touched.add(n.input[k])
        del n.input[k]

    def _set_input(self, n, k, arr):
        """Point input ``k`` of ``n`` at a new initializer holding ``arr`` (appending it if missing)."""
        base = n.input[k] if k < len(n.input) and n.input[k] else (n.name or n.op_type) + "_bias"
        name = self._new_init(base, arr)
        if k < len(n.input):
            if n.input[k]:
                self.consumers[n.input[k]] -= 1
                self.touched.add(n.input[k])
            n.input[k] = name
        else:
            while len(n.input) < k:
                n.input.append("")
            n.input.append(name)

    # ------------------------------------------------------------------ patterns
    def run(self) -> int:
        for n in list(self.nodes):
            if id(n) in self.removed or n.domain not in ("", "ai.onnx") or len(n.output) != 1:
                continue
            if n.op_type == "Conv":
                self._conv(n)
            elif n.op_type == "Gemm":
                self._gemm(n)
            elif n.op_type == "MatMul":
                self._matmul(n)
        for n in list(self.nodes):
            if n.op_type == "Relu" and id(n) not in self.removed and n.domain in ("", "ai.onnx"):
                self._relu_of_concat(n)
        if self.count or self.pushed:
            self._finish()
        return self.count

    # ------------------------------------------------------------------ Relu(Concat(...))
    def _nonneg(self, name, depth=0) -> bool:
        """Whether value ``name`` is provably >= 0 or NaN (written by Relu / Sigmoid / Softmax, or by max /
        average pooling, a concat or a reshape of such values)."""
        p = self.producer.get(name)
        if p is None or id(p) in self.removed or depth > 16 or p.domain not in ("", "ai.onnx") or \
                not p.output or p.output[0] != name:
            return False
        t = p.op_type
        if t in _NONNEG_OPS:
            return True
        if t in _NONNEG_KEEPING:
            return bool(p.input) and bool(p.input[0]) and self._nonneg(p.input[0], depth + 1)
        if t == "Concat":
            return all(i and self._nonneg(i, depth + 1) for i in p.input)
        return False

    def _relu_of_concat(self, relu):
        """``Relu(Concat(a, b, ...))`` -> ``Concat(Relu(a), b, ...)``: each input that is not provably >= 0
        (``b``: a pooled relu output) gets its own Relu, which the executor fuses into the conv / product writing
        it (so each input must be read by the Concat alone and written by one of _RELU_FUSES), and the Relu on
        the concatenation goes (ShuffleNet's stride-2 units: one elementwise pass over the whole output saved).
        The same values, up to the sign of a zero (Relu(-0.0) where an input was -0.0)."""
        if len(relu.input) != 1 or len(relu.output) != 1:
            return
        c = self.producer.get(relu.input[0])
        if c is None or id(c) in self.removed or c.op_type != "Concat" or c.domain not in ("", "ai.onnx") or \
                len(c.output) != 1 or self._sole_reader(c.output[0]) is not relu:
            return
        wrap = []
        for k, a in enumerate(c.input):
            if not a:
                return
            if self._nonneg(a):
                continue
            p = self.producer.get(a)
            if p is None or p.op_type not in _RELU_FUSES or p.domain not in ("", "ai.onnx") or \
                    self._sole_reader(a) is not c:
                return
            wrap.append(k)
        from onnx import helper
        at = next(i for i, n in enumerate(self.nodes) if n is c)
        for k in wrap:
            a = c.input[k]
            r = self._fresh(f"{a}_relu")
            self.nodes.insert(at, helper.make_node("Relu", [a], [r], name=self._fresh(f"{relu.name or a}_pushed")))
            at += 1
            self.producer[r] = self.nodes[at - 1]
            self.readers.setdefault(r, []).append(c)
            self.consumers[r] = 1
            c.input[k] = r
        old = c.output[0]
        self.consumers.pop(old, None)
        self.vanished.add(old)
        c.output[0] = relu.output[0]
        self.producer[relu.output[0]] = c
        del self.producer[old]
        self.removed.add(id(relu))
        self.pushed += 1

    def _chain(self, y, rank, axis, size, dtype, S, T, ops):
        """Plan: the run of ``ops`` nodes (Mul / Add / BatchNormalization) reading ``y`` one after the other,
        each by a per-channel constant, composed onto ``y * S + T`` (float64 vectors or None).  Nothing is
        changed.  Returns (S, T, [nodes])."""
        nodes = []
        while True:
            n = self._sole_reader(y)
            if n is None or n.domain not in ("", "ai.onnx") or n.op_type not in ops \
                    or not self._declared_ok(y, dtype, rank):
                break
            if n.op_type == "BatchNormalization":
                ab = self._bn(n, y, size)
                if ab is None:
                    break
                a, b = ab
                S2 = a if S is None else S * a
                T2 = b if T is None else T * a + b
            else:
                _, c = self._other_const(n, y)
                v = self._per_channel(c, rank, axis, size, dtype)
                if v is None:
                    break
                if n.op_type == "Mul":
                    S2, T2 = (v if S is None else S * v), (None if T is None else T * v)
                else:
                    S2, T2 = S, (v if T is None else T + v)
            if not all(z is None or np.all(np.isfinite(z)) for z in (S2, T2)):
                break
            S, T = S2, T2
            nodes.append(n)
            y = n.output[0]
        return S, T, nodes

    def _apply(self, tail, nodes):
        for m in nodes:
            self._fold_node(tail, m)

    def _starts_chain(self, n, ops):
        """Cheap first look (before reading any weight): is ``n``'s output read by one of ``ops`` only?"""
        r = self._sole_reader(n.output[0])
        return r is not None and r.op_type in ops

    def _bn(self, n, y, size):
        """(a, b) with BN(y) = y * a + b per channel, or None if ``n`` is not a foldable inference BN."""
        from onnx import helper
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        if len(n.output) != 1 or len(n.input) != 5 or n.input[0] != y or attrs.get("training_mode", 0):
            return None
        if attrs.get("spatial", 1) != 1 or (self.opset < 7 and not attrs.get("is_test", 0)):
            return None   # per-activation statistics (BN-7's spatial=0), or BN-6 in training mode
        vals = [self.const(i) for i in n.input[1:]]
        if any(v is None or v.dtype not in _FLOATS or v.shape != (size,) for v in vals):
            return None
        scale, bias, mean, var = (v.astype(np.float64) for v in vals)
        with np.errstate(all="ignore"):   # var + eps <= 0: not finite, the caller leaves the chain alone
            a = scale / np.sqrt(var + float(attrs.get("epsilon", 1e-5)))
            return a, bias - mean * a

    def _conv(self, n):
        wm = self.meta(n.input[1]) if len(n.input) > 1 else None
        if wm is None or wm[1] not in _FLOATS or len(wm[0]) < 3 or not self._starts_chain(n, _BN_MUL_ADD):
            return
        (wshape, wdt), has_b = wm, len(n.input) > 2 and bool(n.input[2])
        b = self.const(n.input[2]) if has_b else None
        if has_b and (b is None or b.dtype != wdt or b.shape != (wshape[0],)):
            return
        T0 = None if b is None else b.astype(np.float64)
        S, T, nodes = self._chain(n.output[0], len(wshape), 1, wshape[0], wdt, None, T0, _BN_MUL_ADD)
        if not nodes or (self.shift_as_add and S is None and len(nodes) == 1 and not has_b):
            return  # (one Add after a bias-less conv would only be rewritten as itself)
        self._apply(n, nodes)
        w = self.const(n.input[1])
        if S is not None:
            self._set_input(n, 1, _scaled(w, S.reshape((-1,) + (1,) * (w.ndim - 1))))
        if T is None:
            return
        if not self.shift_as_add:
            self._set_input(n, 2, T.astype(w.dtype))
            return
        # the shift as one per-channel Add after the conv, which neetorch fuses into the conv's epilogue
        # (its conv kernels add a bias in a pass of their own on the GEMM paths)
        from onnx import helper
        if has_b:
            self._drop_input(n, 2)
        out = n.output[0]
        mid = self._fresh(out + "_conv")
        t = self._new_init((n.name or out) + "_shift", T.astype(w.dtype).reshape((-1,) + (1,) * (w.ndim - 2)))
        add = helper.make_node("Add", [mid, t], [out], name=self._fresh((n.name or out) + "_shift_add"))
        n.output[0] = mid
        self.producer[mid], self.producer[out] = n, add
        self.consumers[mid] = 1
        self.nodes.insert(self.nodes.index(n) + 1, add)

    def _gemm(self, n):
        from onnx import helper
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        bm = self.meta(n.input[1]) if len(n.input) > 1 else None
        if bm is None or bm[1] not in _FLOATS or len(bm[0]) != 2 or not self._starts_chain(n, _BN_MUL_ADD):
            return
        (bshape, bdt), has_c = bm, len(n.input) > 2 and bool(n.input[2])
        c = self.const(n.input[2]) if has_c else None
        if has_c and (c is None or c.dtype != bdt or c.ndim > 2):
            return
        trans_b = int(attrs.get("transB", 0))
        size = bshape[0] if trans_b else bshape[1]
        S, Tv, nodes = self._chain(n.output[0], 2, 1, size, bdt, None, None, _BN_MUL_ADD)
        if not nodes:
            return
        self._apply(n, nodes)
        # (x @ B + beta * C) * S + Tv = x @ (B * S) + (beta * C * S + Tv): C may be a matrix ([M, N], [M, 1])
        T = None if c is None else c.astype(np.float64) * float(attrs.get("beta", 1.0))
        if T is not None and S is not None:
            T = T * S
        if Tv is not None:
            T = Tv if T is None else T + Tv
        bw = self.const(n.input[1])
        if S is not None:
            self._set_input(n, 1, _scaled(bw, S[:, None] if trans_b else S[None, :]))
        if T is not None:
            self._set_input(n, 2, T.astype(bw.dtype))
            for a in list(n.attribute):
                if a.name == "beta":
                    n.attribute.remove(a)
            n.attribute.append(helper.make_attribute("beta", 1.0))

    def _matmul(self, n):
        wm = self.meta(n.input[1]) if len(n.input) == 2 else None
        if wm is None or wm[1] not in _FLOATS or len(wm[0]) < 2 or n.input[0] == n.input[1] \
                or not self._starts_chain(n, ("Mul", "Add")):
            return
        (wshape, wdt), y = wm, n.output[0]
        size = wshape[-1]
        # the output's rank: declared, else the least it can be (a 1-D x drops W's row axis); a Mul / Add
        # operand of at most that rank cannot grow it
        rank = _declared_rank(self.value_info.get(y))
        rank = len(wshape) - 1 if rank is None else rank
        if not self._declared_ok(y, wdt, None):
            return
        bias, T, k = self._sole_reader(y), None, None
        if bias.op_type == "Add":
            _, c = self._other_const(bias, y)
            T = self._per_channel(c, rank, rank - 1, size, wdt)
            k = 1 if bias.input[0] == y else 0
        if T is None:
            # no bias: Mul(s) fold into W; an Add after them is the bias and stays as it is
            S, _, nodes = self._chain(y, rank, rank - 1, size, wdt, None, None, ("Mul",))
            tail = n
        else:
            # MatMul + Add(bias): the Mul / Add after it fold into W and the bias
            S, T, nodes = self._chain(bias.output[0], rank, rank - 1, size, wdt, None, T, ("Mul", "Add"))
            tail = bias
        if not nodes:
            return
        self._apply(tail, nodes)
        w = self.const(n.input[1])
        if S is not None:
            self._set_input(n, 1, _scaled(w, S))
        if T is not None:
            self._set_input(bias, k, T.astype(w.dtype))

    # ------------------------------------------------------------------ write back
    def _finish(self):
        g = self.g
        # constant-making nodes and initializers nothing reads any more (BN statistics, Unsqueeze'd scales)
        dead = set()
        changed = True
        while changed:
            changed = False
            for n in reversed(self.nodes):
                if id(n) in self.removed or id(n) in dead or n.op_type not in _CONST_OPS:
                    continue
                outs = [o for o in n.output if o]
                if outs and all(o in self.touched and self.consumers.get(o, 0) == 0 and o not in self.outputs
                                for o in outs):
                    dead.add(id(n))
                    self.vanished.update(outs)
                    for i in n.input:
                        if i:
                            self.consumers[i] -= 1
                            self.touched.add(i)
                    changed = True
        keep = [n for n in self.nodes if id(n) not in self.removed and id(n) not in dead]
        del g.node[:]
        g.node.extend(keep)
        unused = {i for i in self.touched if i in self.init_proto and self.consumers.get(i, 0) == 0
                  and i not in self.outputs}
        for k in range(len(g.initializer) - 1, -1, -1):
            if g.initializer[k].name in unused:
                del g.initializer[k]
        for k in range(len(g.input) - 1, -1, -1):
            if g.input[k].name in unused:
                del g.input[k]
        for k in range(len(g.value_info) - 1, -1, -1):
            if g.value_info[k].name in self.vanished:
                del g.value_info[k]


def _scaled(w, s):
    """``w * s`` computed in float64, stored in ``w``'s dtype (no float64 copy of ``w``)."""
    out = np.empty(w.shape, w.dtype)
    np.multiply(w, s, out=out, dtype=np.float64, casting="unsafe")
    return out


def _subgraph_names(g) -> set:
    """Every value name defined inside ``g``'s nodes' subgraphs (new names must not collide with them)."""
    out = set()

    def walk(sg):
        out.update(i.name for i in sg.input)
        out.update(t.name for t in sg.initializer)
        for n in sg.node:
            out.update(o for o in n.output if o)
            for a in n.attribute:
                if a.type == a.GRAPH:
                    walk(a.g)
                for x in a.graphs:
                    walk(x)
    for n in g.node:
        for a in n.attribute:
            if a.type == a.GRAPH:
                walk(a.g)
            for x in a.graphs:
                walk(x)
    return out


def _declared_rank(vi):
    if vi is None or vi.type.WhichOneof("value") != "tensor_type" or not vi.type.tensor_type.HasField("shape"):
        return None
    return len(vi.type.tensor_type.shape.dim)
