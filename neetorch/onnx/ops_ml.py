"""Classical-ML ops: the ``ai.onnx.ml`` domain (what sklearn-onnx / onnxmltools export) and TfIdfVectorizer.

Every op is lowered onto nee ops over constants built from its attributes, so a model of them
traces and compiles under ``nee.jit`` like any other graph:

* linear models are a matmul; Scaler / Normalizer / Binarizer / Imputer elementwise;
  ArrayFeatureExtractor an ``index_select``; OneHotEncoder / LabelEncoder a ``searchsorted`` into
  the sorted keys plus an equality check;
* a tree ensemble (the legacy TreeEnsembleRegressor / TreeEnsembleClassifier and ai.onnx.ml 5's
  TreeEnsemble) becomes flat node tables (feature, threshold, a 4-bit "go true when x < / == / > the
  threshold / x is NaN" code that encodes the node mode and its missing-value track, next-node
  pairs; leaves point to themselves) and is evaluated for all rows x trees at once, one level per
  step (``take`` / ``gather`` / compare), as many steps as the deepest tree; when every node has
  the same mode and track (sklearn's exports) the step compares directly, without the code; set
  membership (BRANCH_MEMBER) compares with a NaN-padded (nodes, members) table; the leaves'
  weights are a (nodes, targets) table summed (or min/max-ed) over the trees;
* TfIdfVectorizer maps tokens to their rank in the pool's vocabulary and walks the n-gram prefixes
  with one ``searchsorted`` per n-gram length and skip distance, then counts with ``scatter_add``; over
  strings (``pool_strings``) :func:`expand_node` first maps the tokens to int64 ids on the host
  (``ops_text``) and counts them there (eagerly: the token count changes with every batch).

Semantics follow ONNX's reference implementations (``onnx/reference/ops/aionnxml/``,
``op_tfidf_vectorizer.py``); where the reference and onnxruntime differ the choice is noted.
String tensors are not nee tensors: LabelEncoder with string keys or values, CategoryMapper and
OneHotEncoder over strings run on the host (``ops_string``, numpy).  A classifier with
``classlabels_strings`` (LinearClassifier, SVMClassifier, TreeEnsembleClassifier) is split by
:func:`expand_node` into the classifier on class indices (numeric, jitted) and a CategoryMapper
index -> label on the host, whose string tensor (numpy object array) is the label output, as
onnxruntime's; ZipMap (``ops_string``) turns scores into a sequence of maps (a Python list of dicts,
as onnxruntime returns).  SVMClassifier's probabilities (libsvm's pairwise coupling, an iteration with
a per-row stopping test) run on the host too, after the jitted kernel part (onnxruntime's float32
arithmetic, so its results match it).
"""
from __future__ import annotations

import numpy as np

import neetorch as nee

from .lowering import LoweringError, op

_POST = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")


def _err(node, msg):
    return LoweringError(f"node {node.name} ({node.op_type}): {msg}")


def _arr(v, dtype=None):
    """An attribute value (list or TensorProto) as numpy; None stays None."""
    if v is None:
        return None
    if hasattr(v, "data_type"):  # a TensorProto
        from onnx import numpy_helper
        a = numpy_helper.to_array(v)
    else:
        a = np.asarray(v)
    return a if dtype is None else a.astype(dtype)


def _attr(node, name, dtype=None):
    """``name`` or its ``name_as_tensor`` form (opset 3: double-precision tensors), as numpy."""
    t = node.get(name + "_as_tensor")
    return _arr(t if t is not None else node.get(name), dtype)


def _string_attrs(proto, names):
    """The names of ``names`` set to string data on a NodeProto (for the session's up-front check)."""
    out = []
    for a in proto.attribute:
        if a.name in names and (a.strings or (a.type == a.TENSOR and a.t.data_type == 8)):
            out.append(a.name)
    return out


def _refuses(*names):
    """Mark an op function as refusing nodes with string attributes ``names`` (read by unsupported_nodes)."""
    def deco(fn):
        def why(proto):
            bad = _string_attrs(proto, names)
            return f"string attribute(s) {', '.join(bad)}: neetorch has no string dtype" if bad else None
        fn.unsupported_reason = why
        return fn
    return deco


# ------------------------------------------------------------------------- string labels, SVM probabilities
_INT_LABELS = {"LinearClassifier": "classlabels_ints", "SVMClassifier": "classlabels_ints",
               "TreeEnsembleClassifier": "classlabels_int64s"}
_STRING_MARK = "_nee_string_labels"  # set on a classifier expand_node relabeled to class indices 0..C-1
_PAIRWISE_MARK = "_nee_pairwise"     # set on an SVMClassifier whose Y is its pairwise scores (coupled on the host)


def _svm_has_proba(attrs) -> bool:
    """An SVMClassifier in SVC mode (support vectors) with prob_a: its probabilities need the coupling."""
    pa, vpc = attrs.get("prob_a"), attrs.get("vectors_per_class")
    return bool(pa is not None and len(pa.floats) and vpc is not None and sum(vpc.ints) > 0)


def expand_node(proto) -> list:
    """The NodeProtos neetorch runs for one NodeProto: ``[proto]``, except

    * a classifier with ``classlabels_strings``: the classifier relabeled to class indices 0..C-1 (numeric,
      jitted, its label output renamed) + ``CategoryMapper`` index -> label (a host node named
      ``<node>/labels``) writing the original label output;
    * an SVMClassifier with probabilities: the classifier writing its pairwise scores + the coupling
      (``neetorch.internal:SVMProbabilities``, a host node named ``<node>/probabilities``) writing Y;
    * a TfIdfVectorizer with ``pool_strings``: :func:`_expand_tfidf`.
    """
    if proto.op_type == "TfIdfVectorizer" and proto.domain in ("", "ai.onnx"):
        return _expand_tfidf(proto)
    if proto.domain != "ai.onnx.ml" or proto.op_type not in _INT_LABELS:
        return [proto]
    from onnx import NodeProto, helper
    attrs = {a.name: a for a in proto.attribute}
    strs = attrs.get("classlabels_strings")
    labels = [v.decode("utf-8", "replace") for v in strs.strings] if strs is not None else []
    proba = proto.op_type == "SVMClassifier" and _svm_has_proba(attrs)
    if not labels and not proba:
        return [proto]
    base = proto.name or f"{proto.op_type}({', '.join(proto.output)})"
    main = NodeProto()
    main.CopyFrom(proto)
    main.name = base
    extra = []
    if labels:
        keep = [a for a in main.attribute if a.name not in ("classlabels_strings", _INT_LABELS[proto.op_type])]
        del main.attribute[:]
        main.attribute.extend(keep)
        main.attribute.extend([helper.make_attribute(_INT_LABELS[proto.op_type], list(range(len(labels)))),
                               helper.make_attribute(_STRING_MARK, 1)])
        if proto.output and proto.output[0]:
            idx = proto.output[0] + "__nee_label_index"
            main.output[0] = idx
            extra.append(helper.make_node("CategoryMapper", [idx], [proto.output[0]], name=f"{base}/labels",
                                          domain="ai.onnx.ml", cats_int64s=list(range(len(labels))),
                                          cats_strings=labels, default_string="_Unused"))
    if proba:
        main.attribute.extend([helper.make_attribute(_PAIRWISE_MARK, 1)])
        if len(proto.output) > 1 and proto.output[1]:
            pw = proto.output[1] + "__nee_pairwise"
            main.output[1] = pw
            pt = attrs.get("post_transform")
            extra.append(helper.make_node(
                "SVMProbabilities", [pw], [proto.output[1]], name=f"{base}/probabilities",
                domain="neetorch.internal", prob_a=list(attrs["prob_a"].floats),
                prob_b=list(attrs["prob_b"].floats) if "prob_b" in attrs else [],
                n_classes=len(labels) or len(attrs["classlabels_ints"].ints if "classlabels_ints" in attrs else []),
                post_transform=pt.s.decode() if pt is not None else "NONE"))
    return [main] + extra


def _expand_tfidf(proto) -> list:
    """A TfIdfVectorizer with ``pool_strings``: ``neetorch.internal:StringIds`` (a host node named
    ``<node>/ids``: each token -> its index among the pool's distinct strings, -1 if absent) + the node over
    ``pool_int64s`` = those indexes, as ``neetorch.internal:TfIdfCounts``: the same lowering (:func:`_tfidf`)
    run eagerly on the host, not compiled.  (Measured on a 14-word TfidfVectorizer + LogisticRegression,
    one thread: compiled it takes ~1.2 ms a run at a fixed batch shape but ~16 ms when each batch has a new
    token count, as every new count retraces; eagerly ~1.3-1.5 ms either way.)"""
    attrs = {a.name: a for a in proto.attribute}
    ps = attrs.get("pool_strings")
    if ps is None or not proto.input or not proto.input[0]:
        return [proto]
    from onnx import NodeProto, helper
    pool = [v.decode("utf-8", "replace") for v in ps.strings]
    vocab = list(dict.fromkeys(pool))
    rank = {w: i for i, w in enumerate(vocab)}
    base = proto.name or f"{proto.op_type}({', '.join(proto.output)})"
    ids = proto.input[0] + "__nee_token_ids"
    main = NodeProto()
    main.CopyFrom(proto)
    main.name = base
    keep = [a for a in main.attribute if a.name not in ("pool_strings", "pool_int64s")]
    del main.attribute[:]
    main.attribute.extend(keep)
    main.attribute.extend([helper.make_attribute("pool_int64s", [rank[w] for w in pool])])
    main.input[0] = ids
    # the counting runs on the host too (eagerly): its input's last dim, the most tokens of any row,
    # changes with every batch, and a compiled segment would specialize on it every time
    main.domain, main.op_type = "neetorch.internal", "TfIdfCounts"
    pre = helper.make_node("StringIds", [proto.input[0]], [ids], name=f"{base}/ids", domain="neetorch.internal",
                           vocabulary=vocab)
    return [pre, main]


def expand_nodes(nodes) -> list:
    return [m for n in nodes for m in expand_node(n)]


# ------------------------------------------------------------------------- post transforms
def _erf_inv_approx(x):
    """The approximation of erf^-1 ONNX's reference and onnxruntime both use (Winitzki, a = 0.147)."""
    sgn = nee.where(x < 0, -nee.ones((), dtype=x.dtype), nee.ones((), dtype=x.dtype))
    y = (1.0 - x) * (1.0 + x)
    zero = y == 0
    y = nee.where(zero, nee.ones((), dtype=x.dtype), y)
    lg = nee.log(y)
    v = 2.0 / (np.pi * 0.147) + 0.5 * lg
    v2 = (1.0 / 0.147) * lg
    v3 = -v + nee.sqrt(v * v - v2)
    return nee.where(zero, nee.zeros((), dtype=x.dtype), sgn * nee.sqrt(v3))


def _post_transform(node, s, pt):
    """``post_transform`` over the last dim of scores ``s``, in their dtype (the caller casts the result)."""
    if pt in (None, "NONE"):
        return s
    if pt == "LOGISTIC":
        return nee.sigmoid(s)
    if pt == "SOFTMAX":
        return nee.softmax(s, -1)
    if pt == "SOFTMAX_ZERO":
        vmax = nee.amax(s, -1, keepdim=True)
        e = nee.where(nee.abs(s) > 1e-7, nee.exp(s - vmax), s * nee.exp(-vmax))
        tot = nee.sum(e, -1, keepdim=True)
        z = tot == 0
        return nee.where(z, nee.full((), 0.5, dtype=s.dtype), e / nee.where(z, nee.ones((), dtype=s.dtype), tot))
    if pt == "PROBIT":
        return 1.41421356 * _erf_inv_approx(s * 2.0 - 1.0)
    raise _err(node, f"post_transform {pt!r} is not one of {', '.join(_POST)}")


def _rows(node, x):
    if x.ndim == 1:
        return x.reshape(1, -1)
    if x.ndim != 2:
        raise _err(node, f"expects a [N, F] (or [F]) input, got shape {tuple(x.shape)}")
    return x


# ------------------------------------------------------------------------- simple ops
@op("ai.onnx.ml:Binarizer")
def _binarizer(ctx, node, x):
    t = float(node.get("threshold", 0.0))
    return (x > t).to(x.dtype)


@op("ai.onnx.ml:Scaler")
def _scaler(ctx, node, x):
    """(x - offset) * scale over the last dim; onnxruntime's float output (the reference keeps int inputs int)."""
    off = _arr(node.get("offset"), np.float64)
    sc = _arr(node.get("scale"), np.float64)
    F = x.shape[-1] if x.ndim else 1
    for name, v in (("offset", off), ("scale", sc)):
        if v is not None and v.size not in (1, F):
            raise _err(node, f"{name} has {v.size} values; expected 1 or the {F} features of input shape "
                             f"{tuple(x.shape)}")
    dt = nee.float64 if x.dtype == nee.float64 else nee.float32
    y = x.to(dt)
    if off is not None:
        y = y - ctx.const(off.astype(dt.np))
    if sc is not None:
        y = y * ctx.const(sc.astype(dt.np))
    return y.to(nee.float32)


@op("ai.onnx.ml:Normalizer")
def _normalizer(ctx, node, x):
    """MAX divides by max |x| per row, as scikit-learn and ONNX's reference; onnxruntime divides by the
    signed max (the spec's "X / max(X)" taken literally), which differs on rows whose largest entry is not
    the largest in magnitude: neetorch follows what the exported Normalizer(norm="max") computes."""
    norm = node.get("norm", "MAX")
    y = _rows(node, x if x.dtype == nee.float64 else x.to(nee.float32))
    if norm == "MAX":
        d = nee.amax(nee.abs(y), 1, keepdim=True)
    elif norm == "L1":
        d = nee.sum(nee.abs(y), 1, keepdim=True)
    elif norm == "L2":
        d = nee.sqrt(nee.sum(y * y, 1, keepdim=True))
    else:
        raise _err(node, f"norm {norm!r} is not one of MAX, L1, L2")
    out = y / nee.clamp(d, 1e-30)
    return out.reshape(*x.shape).to(nee.float32) if x.ndim == 1 else out.to(nee.float32)


@op("ai.onnx.ml:ArrayFeatureExtractor")
def _array_feature_extractor(ctx, node, x, idx):
    """``x[..., idx.ravel()]``; a 1-D input gives one row [1, k] (as onnxruntime and the reference)."""
    k = idx.numel()
    sel = nee.index_select(x, x.ndim - 1, idx.reshape(-1).to(nee.int64))
    if x.ndim == 1:
        return sel.reshape(1, k)
    return sel.reshape(*x.shape[:-1], k)


@op("ai.onnx.ml:Imputer")
def _imputer(ctx, node, x):
    fv = node.get("imputed_value_floats")
    iv = node.get("imputed_value_int64s")
    if fv:
        vals, rep = np.asarray(fv, np.float32), node.get("replaced_value_float", 0.0)
    elif iv:
        vals, rep = np.asarray(iv, np.int64), node.get("replaced_value_int64", 0)
    else:
        raise _err(node, "neither imputed_value_floats nor imputed_value_int64s is set")
    if x.ndim != 2:
        raise _err(node, f"expects a [N, F] input, got shape {tuple(x.shape)}")
    if vals.size not in (1, x.shape[1]):
        raise _err(node, f"{vals.size} imputed values for {x.shape[1]} features (expected 1 or {x.shape[1]})")
    v = ctx.const(vals.astype(x.dtype.np))
    if isinstance(rep, float) and np.isnan(rep):
        hit = nee.isnan(x)
    else:
        hit = x == ctx.const(np.asarray(rep).astype(x.dtype.np))
    return nee.where(hit, v.reshape(1, -1).expand(x.shape[0], x.shape[1]), x)


@op("ai.onnx.ml:FeatureVectorizer")
def _feature_vectorizer(ctx, node, *xs):
    dims = node.get("inputdimensions")
    if dims is None or len(dims) != len(xs):
        raise _err(node, f"inputdimensions {dims} must give one width per input ({len(xs)} inputs)")
    parts = []
    for a, d in zip(xs, dims):
        a = a.reshape(-1, 1) if a.ndim == 1 else a
        if a.ndim != 2:
            raise _err(node, f"every input must be 1-D or 2-D, got shape {tuple(a.shape)}")
        a = a.to(nee.float32)
        if a.shape[1] > d:
            a = a.narrow(1, 0, d)
        elif a.shape[1] < d:
            a = nee.pad(a, (0, d - a.shape[1]), mode="constant", value=0.0)
        parts.append(a)
    return nee.cat(parts, 1)


def _lookup(ctx, x, keys, values, default, node):
    """values[keys.index(x)] or default, elementwise: searchsorted into the sorted keys + equality check.
    Later duplicates win (as a dict built from the attribute lists); a NaN key matches nothing (as in
    the reference and onnxruntime)."""
    kd = {}
    for k, v in zip(keys.tolist(), values.tolist()):
        if not (isinstance(k, float) and np.isnan(k)):
            kd[k] = v
    ks = np.array(sorted(kd), dtype=keys.dtype)
    vs = np.array([kd[k] for k in ks.tolist()] + [default], dtype=values.dtype)
    xk = x.to(nee.float64) if keys.dtype.kind == "f" else x.to(nee.int64)
    ks = ks.astype(np.float64 if keys.dtype.kind == "f" else np.int64)
    if ks.size == 0:
        out = nee.zeros_like(x, dtype=_nee_of(values.dtype)) + ctx.const(vs[-1:]).reshape(())
    else:
        kt = ctx.const(ks)
        pos = nee.clamp(nee.searchsorted(kt, xk), 0, ks.size - 1)
        hit = nee.take(kt, pos) == xk
        pos = nee.where(hit, pos, nee.full((), ks.size, dtype=nee.int64))
        out = nee.take(ctx.const(vs), pos)
    return out


def _nee_of(dt):
    return getattr(nee, np.dtype(dt).name)


@op("ai.onnx.ml:LabelEncoder")
def _label_encoder(ctx, node, x):
    """Numeric keys and values (floats, int64s, or tensors of them); a node with string keys or values is a
    host node (``ops_string.is_host_node``) and runs ``ops_string``'s LabelEncoder instead."""
    kt, vt = _arr(node.get("keys_tensor")), _arr(node.get("values_tensor"))
    keys = kt if kt is not None else (_arr(node.get("keys_int64s"), np.int64) if node.get("keys_int64s")
                                      else _arr(node.get("keys_floats"), np.float32))
    if vt is not None:
        values = vt
        dt = _arr(node.get("default_tensor"))
        default = dt.reshape(-1)[0] if dt is not None else (-0.0 if vt.dtype.kind == "f" else -1)  # the spec
    elif node.get("values_int64s"):
        values, default = _arr(node.get("values_int64s"), np.int64), node.get("default_int64", -1)
    else:
        values, default = _arr(node.get("values_floats"), np.float32), node.get("default_float", -0.0)
    if keys is None or values is None or keys.dtype == object or values.dtype == object:
        raise _err(node, "string keys/values reached the numeric LabelEncoder (they run on the host: ops_string)")
    if keys.size != values.size:
        raise _err(node, f"{keys.size} keys but {values.size} values")
    return _lookup(ctx, x, keys.reshape(-1), values.reshape(-1), default, node)


def _values_check(node, ctx, flag, what):
    """A check on input values: eagerly its result; under tracing a TraceError naming the node."""
    from ..trace.tracer import TraceError
    try:
        return bool(ctx.static(flag))
    except TraceError as e:
        raise TraceError(f"node {node.name} ({node.op_type}, {what}) checks input values: {e}") from e


@_refuses("cats_strings")
@op("ai.onnx.ml:OneHotEncoder")
def _one_hot_encoder(ctx, node, x):
    cats = node.get("cats_int64s")
    if not cats:
        raise _err(node, "cats_int64s is empty (string categories are not supported: neetorch has no string dtype)")
    cats = np.asarray(cats, np.int64)
    idx = _lookup(ctx, x, cats.astype(np.float64) if x.is_floating_point() else cats,
                  np.arange(cats.size, dtype=np.int64), -1, node)
    oh = idx.unsqueeze(-1) == ctx.const(np.arange(cats.size, dtype=np.int64))
    # zeros=0: a value outside the categories is an error (a value check: under nee.jit the trace
    # fails here and the session runs this node eagerly, a graph break named in info["break_reasons"])
    if not node.get("zeros", 1) and _values_check(node, ctx, nee.any(idx < 0), "zeros=0"):
        raise _err(node, f"zeros=0 and an input value is not one of the categories {cats.tolist()[:10]}")
    return oh.to(nee.float32)


# ------------------------------------------------------------------------- linear models
def _linear_scores(ctx, node, x, coef, icpt, n_out):
    x = _rows(node, x)
    dt = nee.float64 if x.dtype == nee.float64 else nee.float32
    F = x.shape[1]
    if coef.size != n_out * F:
        raise _err(node, f"{coef.size} coefficients do not make {n_out} rows of the {F} features of input shape "
                         f"{tuple(x.shape)}")
    W = coef.reshape(n_out, F).T.astype(dt.np)
    s = nee.matmul(x.to(dt), ctx.const(np.ascontiguousarray(W)))
    if icpt is not None and icpt.size:
        if icpt.size not in (1, n_out):
            raise _err(node, f"{icpt.size} intercepts for {n_out} outputs")
        s = s + ctx.const(icpt.astype(dt.np))
    return s


@op("ai.onnx.ml:LinearRegressor")
def _linear_regressor(ctx, node, x):
    t = int(node.get("targets", 1))
    coef = _arr(node.get("coefficients"), np.float64)
    s = _linear_scores(ctx, node, x, coef, _arr(node.get("intercepts"), np.float64), t)
    return _post_transform(node, s, node.get("post_transform", "NONE")).to(nee.float32)


@op("ai.onnx.ml:LinearClassifier")
def _linear_classifier(ctx, node, x):
    labels = node.get("classlabels_ints")
    n_cls = len(labels or [])
    coef = _arr(node.get("coefficients"), np.float64)
    F = x.shape[-1]
    if F == 0 or coef.size % F:
        raise _err(node, f"{coef.size} coefficients are not a multiple of the {F} features of input shape "
                         f"{tuple(x.shape)}")
    n_out = coef.size // F
    if labels and n_out not in (1, n_cls):
        raise _err(node, f"{n_out} rows of coefficients for {n_cls} class labels")
    s = _linear_scores(ctx, node, x, coef, _arr(node.get("intercepts"), np.float64), n_out)
    pt = node.get("post_transform", "NONE")
    if n_out == 1 and n_cls == 2:
        s = nee.cat([-s, s], 1)
    s = _post_transform(node, s, pt).to(nee.float32)
    if s.shape[1] > 1:
        am = nee.argmax(s, 1)
        lab = nee.take(ctx.const(np.asarray(labels, np.int64)), am) if labels else am
    elif node.get(_STRING_MARK):
        raise _err(node, f"string class labels with one score column ({n_cls} labels, {n_out} row(s) of "
                         f"coefficients) are not supported")
    else:
        thr = 0.0 if pt == "NONE" else 0.5
        ok = (s >= thr).reshape(-1)
        lab = (nee.where(ok, nee.full((), int(labels[0]), dtype=nee.int64), nee.zeros((), dtype=nee.int64))
               if labels else ok.to(nee.int64))
    return lab, s


def _svm_kernel(ctx, node, x, sv, kernel, gamma, coef0, degree):
    """K(x_i, sv_j) [N, n_sv] in float64: linear / poly / sigmoid from x @ sv.T, rbf from the squared
    distances (|x|^2 + |sv|^2 - 2 x.sv, clamped at 0)."""
    svc = ctx.const(np.ascontiguousarray(sv.T))
    dot = nee.matmul(x, svc)
    if kernel == "LINEAR":
        return dot
    if kernel == "POLY":
        base = dot * gamma + coef0
        return base ** float(degree) if degree != 1 else base
    if kernel == "SIGMOID":
        return nee.tanh(dot * gamma + coef0)
    if kernel == "RBF":
        d2 = nee.sum(x * x, 1, keepdim=True) + ctx.const((sv * sv).sum(1).reshape(1, -1)) - 2.0 * dot
        return nee.exp(nee.clamp(d2, 0.0) * -gamma)
    raise _err(node, f"kernel_type {kernel!r} is not one of LINEAR, POLY, RBF, SIGMOID")


@op("ai.onnx.ml:SVMRegressor")
def _svm_regressor(ctx, node, x):
    """sum_j coef_j K(x, sv_j) + rho (or x . coef + rho without support vectors); one_class: the sign as +-1."""
    x = _rows(node, x).to(nee.float64)
    F = x.shape[1]
    coef = _arr(node.get("coefficients") or [], np.float64)
    rho = _arr(node.get("rho") or [0.0], np.float64)
    gamma, coef0, degree = (list(node.get("kernel_params") or []) + [0.0, 0.0, 0.0])[:3]
    n_sv = int(node.get("n_supports", 0))
    if int(node.get("n_targets", 1)) != 1:
        raise _err(node, f"n_targets {node.get('n_targets')} is not supported (one target, as the reference)")
    if n_sv > 0:
        sv = _arr(node.get("support_vectors") or [], np.float64)
        if sv.size != n_sv * F or coef.size != n_sv:
            raise _err(node, f"{sv.size} support vector values and {coef.size} coefficients for n_supports {n_sv} "
                             f"and {F} features (input shape {tuple(x.shape)})")
        k = _svm_kernel(ctx, node, x, sv.reshape(n_sv, F), node.get("kernel_type", "LINEAR"), float(gamma),
                        float(coef0), int(degree))
        s = nee.matmul(k, ctx.const(coef.reshape(-1, 1)))
    else:
        if coef.size != F:
            raise _err(node, f"{coef.size} coefficients for {F} features (input shape {tuple(x.shape)})")
        s = nee.matmul(x, ctx.const(coef.reshape(-1, 1)))
    s = s + float(rho.reshape(-1)[0])
    if node.get("one_class", 0):
        s = nee.where(s > 0, nee.ones((), dtype=s.dtype), -nee.ones((), dtype=s.dtype))
    return _post_transform(node, s, node.get("post_transform", "NONE")).to(nee.float32)


@op("ai.onnx.ml:SVMClassifier")
def _svm_classifier(ctx, node, x):
    """onnxruntime's SVMClassifier.  SVC mode (support vectors): K(x, sv) [N, V], the one-vs-one scores
    ``K @ A + rho`` [N, C(C-1)/2] (A holds both classes' coefficients per pair), one vote per pair (score > 0:
    the first class), the label of the most votes (the first on ties).  Y: with prob_a the probabilities
    (the pairwise scores here; :func:`expand_node` adds the coupling on the host), else the pairwise scores
    after the post transform ([-s, s] for two classes).  Linear mode (no support vectors): scores
    ``x @ coef.T + rho[0]`` [N, C], the label of the highest (binary: onnxruntime's rule)."""
    labels = node.get("classlabels_ints")
    if not labels or len(labels) < 2:
        raise _err(node, f"needs at least 2 class labels (classlabels_ints / classlabels_strings), got "
                         f"{len(labels or [])}")
    C = len(labels)
    x = _rows(node, x).to(nee.float64)
    F = x.shape[1]
    coef = _arr(node.get("coefficients") or [], np.float64)
    rho = _arr(node.get("rho") or [], np.float64)
    pa = node.get("prob_a") or []
    pt = node.get("post_transform", "NONE")
    vpc = [int(v) for v in node.get("vectors_per_class") or []]
    V = sum(vpc)
    lab_t = ctx.const(np.asarray(labels, np.int64))
    if rho.size == 0:
        raise _err(node, "rho is empty")
    if V == 0:  # linear mode (liblinear)
        if coef.size != C * F:
            raise _err(node, f"{coef.size} coefficients for {C} classes and {F} features (input shape "
                             f"{tuple(x.shape)})")
        s = nee.matmul(x, ctx.const(np.ascontiguousarray(coef.reshape(C, F).T))) + float(rho[0])
        s = s.to(nee.float32)
        am = nee.argmax(s, 1)
        lab = nee.take(lab_t, am)
        if C == 2 and not pa:
            mw = nee.amax(s, 1)
            pos = bool((coef >= 0).all())
            one = (mw >= 0.5) if pos else (mw > 0)
            lab = nee.where(one, nee.full((), int(labels[1]), dtype=nee.int64), lab)
        return lab, _post_transform(node, s.to(nee.float64), pt).to(nee.float32)
    if len(vpc) != C:
        raise _err(node, f"vectors_per_class has {len(vpc)} entries for {C} classes")
    P = C * (C - 1) // 2
    sv = _arr(node.get("support_vectors") or [], np.float64)
    if sv.size != V * F:
        raise _err(node, f"{sv.size} support vector values for {V} vectors of the {F} features of input shape "
                         f"{tuple(x.shape)}")
    if coef.size < (C - 1) * V or rho.size < P or (pa and (len(pa) < P or len(node.get("prob_b") or []) < P)):
        raise _err(node, f"{coef.size} coefficients, {rho.size} rho, {len(pa)} prob_a for {C} classes and {V} "
                         f"support vectors (need {(C - 1) * V}, {P}, {P})")
    coef = coef[:(C - 1) * V].reshape(C - 1, V)
    start = np.concatenate([[0], np.cumsum(vpc)[:-1]]).astype(np.int64)
    A = np.zeros((V, P))
    Mi, Mj = np.zeros((P, C)), np.zeros((P, C))
    e = 0
    for i in range(C):
        for j in range(i + 1, C):
            si, sj = start[i], start[j]
            A[si:si + vpc[i], e] = coef[j - 1, si:si + vpc[i]]
            A[sj:sj + vpc[j], e] = coef[i, sj:sj + vpc[j]]
            Mi[e, i], Mj[e, j] = 1.0, 1.0
            e += 1
    K = _svm_kernel(ctx, node, x, sv.reshape(V, F), node.get("kernel_type", "LINEAR"),
                    *[float(v) for v in (list(node.get("kernel_params") or []) + [0.0, 0.0, 0.0])[:2]],
                    int((list(node.get("kernel_params") or []) + [0.0, 0.0, 0.0])[2]))
    s = nee.matmul(K, ctx.const(A)) + ctx.const(rho[:P].reshape(1, P))
    win = (s > 0).to(nee.float64)
    votes = nee.matmul(win, ctx.const(Mi)) + nee.matmul(1.0 - win, ctx.const(Mj))
    lab = nee.take(lab_t, nee.argmax(votes, 1))
    s = s.to(nee.float32)
    if node.get(_PAIRWISE_MARK):
        return lab, s  # expand_node's host node couples them into probabilities
    if pa:
        raise _err(node, "prob_a is set but the probability coupling was not added (run the model through "
                         "neetorch.onnx.InferenceSession)")
    if C == 2:
        if pt == "LOGISTIC":  # onnxruntime and the reference: [logistic(-s), logistic(s)]
            return lab, nee.sigmoid(nee.cat([-s, s], 1).to(nee.float64)).to(nee.float32)
        if pt != "NONE":
            # onnxruntime writes [1 - s, s] for SOFTMAX / SOFTMAX_ZERO (and leaves a column unset for PROBIT);
            # the reference transforms [-s, s]: no answer to follow
            raise _err(node, f"post_transform {pt!r} on a binary SVMClassifier without probabilities is not "
                             f"supported (onnxruntime and ONNX's reference disagree; NONE and LOGISTIC are)")
        return lab, nee.cat([-s, s], 1)
    return lab, _post_transform(node, s.to(nee.float64), pt).to(nee.float32)


def _logistic32(v):
    a = np.float32(1) / (np.float32(1) + np.exp(-np.abs(v)))
    return np.where(v < 0, np.float32(1) - a, a).astype(np.float32)


def svm_coupling(r: np.ndarray) -> np.ndarray:
    """libsvm's multiclass probability coupling as onnxruntime runs it (float32, at most 100 sweeps, each
    row stopping when its max |Qp - pQp| < 0.005 / C), for every row of ``r`` [N, C, C] at once: a row that
    has stopped gets diff = 0, which leaves it unchanged."""
    N, C = r.shape[0], r.shape[1]
    f = np.float32
    Q = np.zeros((N, C, C), f)
    for i in range(C):
        for j in range(i):
            Q[:, i, i] += r[:, j, i] * r[:, j, i]
            Q[:, i, j] = Q[:, j, i]
        for j in range(i + 1, C):
            Q[:, i, i] += r[:, j, i] * r[:, j, i]
            Q[:, i, j] = -r[:, j, i] * r[:, i, j]
    p = np.full((N, C), f(1) / f(C), f)
    eps = f(0.005) / f(C)
    active = np.ones(N, bool)
    Qp = np.zeros((N, C), f)
    with np.errstate(all="ignore"):
        for _ in range(100):
            pQp = np.zeros(N, f)
            for i in range(C):
                Qp[:, i] = 0
                for j in range(C):
                    Qp[:, i] += Q[:, i, j] * p[:, j]
                pQp += p[:, i] * Qp[:, i]
            err = np.zeros(N, f)
            for i in range(C):
                err = np.maximum(err, np.abs(Qp[:, i] - pQp))
            active &= ~(err < eps)
            if not active.any():
                break
            for i in range(C):
                diff = np.where(active, (-Qp[:, i] + pQp) / Q[:, i, i], f(0)).astype(f)
                p[:, i] += diff
                d1 = f(1) + diff
                pQp = (pQp + diff * (diff * Q[:, i, i] + f(2) * Qp[:, i])) / d1 / d1
                for j in range(C):
                    Qp[:, j] = (Qp[:, j] + diff * Q[:, i, j]) / d1
                    p[:, j] /= d1
    return p


def _svm_probabilities(ctx, node, s):
    """Pairwise SVM scores [N, C(C-1)/2] -> probabilities [N, C] (Platt's sigmoid per pair, clipped to
    [1e-7, 1 - 1e-7], coupled by :func:`svm_coupling`), then the post transform; float32 as onnxruntime."""
    from .ops_string import _np
    r = np.asarray(_np(s), np.float32)
    C = int(node.get("n_classes"))
    pa = np.asarray(node.get("prob_a"), np.float32)
    pb = np.asarray(node.get("prob_b") or [0.0] * pa.size, np.float32)
    N = r.shape[0]
    pr = np.zeros((N, C, C), np.float32)
    e = 0
    with np.errstate(all="ignore"):
        for i in range(C):
            for j in range(i + 1, C):
                v = np.float32(1) - _logistic32(r[:, e] * pa[e] + pb[e])
                v = np.minimum(np.maximum(v, np.float32(1e-7)), np.float32(1) - np.float32(1e-7))
                pr[:, i, j] = v
                pr[:, j, i] = np.float32(1) - v
                e += 1
    p = svm_coupling(pr)
    return _post_transform(node, ctx.const(p).to(nee.float64), node.get("post_transform", "NONE")).to(nee.float32)


def _register_host_ops():
    from .ops_string import HOST_OPS
    HOST_OPS["neetorch.internal:SVMProbabilities"] = _svm_probabilities  # internal: not in OPS / supported_ops()


_register_host_ops()


# ------------------------------------------------------------------------- tree ensembles
# the mode's "go true" bits for x < t (1), x == t (2), x > t (4); bit 8: x is NaN
_MODE_BITS = {"BRANCH_LEQ": 3, "BRANCH_LT": 1, "BRANCH_GTE": 6, "BRANCH_GT": 4, "BRANCH_EQ": 2, "BRANCH_NEQ": 5}
_MODE5 = {0: "BRANCH_LEQ", 1: "BRANCH_LT", 2: "BRANCH_GTE", 3: "BRANCH_GT", 4: "BRANCH_EQ", 5: "BRANCH_NEQ",
          6: "BRANCH_MEMBER"}


class _Forest:
    """Flat tables of a tree ensemble: per slot (node or leaf) its feature, threshold, branch code and
    [false, true] next slots (a leaf points to itself), the roots, and (target, weight) per leaf."""

    def __init__(self, node, feat, thr, code, tnext, fnext, roots, leaf):
        # a leaf's feature is never tested but still gathered: 0 keeps it in range
        self.node, self.feat, self.thr, self.code = node, np.where(leaf, 0, feat), thr, code
        self.nxt = np.stack([fnext, tnext], 1).reshape(-1)  # slot*2 + went_true
        self.roots = np.asarray(roots, np.int64)
        self.leaf = leaf  # is a leaf, per slot
        self.members = None  # (slots, M) values, NaN-padded: BRANCH_MEMBER sets
        S = len(feat)
        refs = np.concatenate([tnext, fnext, self.roots]).astype(np.int64)
        bad = refs[(refs < 0) | (refs >= S)]
        if bad.size:
            raise _err(node, f"a node or root refers to node {int(bad[0])}, outside the {S} nodes")
        self.root_depth = self._depth(tnext, fnext)

    def _depth(self, tnext, fnext):
        """Per tree, its longest root-to-leaf path (in branch nodes); refuses cycles."""
        S = len(self.feat)
        depth = np.full(S, -1, np.int64)
        state = np.zeros(S, np.int8)  # 0 new, 1 on the stack, 2 done
        for r in self.roots.tolist():
            stack = [r]
            while stack:
                v = stack[-1]
                if state[v] == 2:
                    stack.pop()
                    continue
                if self.leaf[v]:
                    depth[v], state[v] = 0, 2
                    stack.pop()
                    continue
                kids = (int(tnext[v]), int(fnext[v]))
                state[v] = 1
                todo = [k for k in kids if state[k] != 2]
                if any(state[k] == 1 for k in todo):
                    raise _err(self.node, f"the trees have a cycle through node slot {v}")
                if todo:
                    stack.extend(todo)
                    continue
                depth[v], state[v] = 1 + max(depth[k] for k in kids), 2
                stack.pop()
        return depth[self.roots]

    def check_input(self, X):
        F = X.shape[1]
        if F == 0:
            raise _err(self.node, f"input has no features (shape {tuple(X.shape)})")
        used = self.feat[~self.leaf]
        if used.size and (used.max() >= F or used.min() < 0):
            raise _err(self.node, f"a node tests feature {int(used.max() if used.max() >= F else used.min())}, but "
                                  f"the input has {F} features (shape {tuple(X.shape)})")

    def leaves(self, ctx, X, consts, a, b):
        """The leaf slot each row of X [N, F] reaches in trees a..b-1: int64 [N, b - a]."""
        N = X.shape[0]
        roots = self.roots[a:b]
        cur = nee.zeros_like(X.narrow(1, 0, 1), dtype=nee.int64) + ctx.const(roots.reshape(1, -1))
        feat, thr, code, nxt, mem = consts
        T = roots.size
        # one mode and one missing-value track for every node (sklearn's exports: BRANCH_LEQ): compare
        # directly instead of looking up each node's code
        codes = np.unique(self.code[~self.leaf])
        uniform = mem is None and codes.size == 1
        if uniform:
            mode, nan_true = int(codes[0]) & 7, bool(codes[0] & 8)
            cmp = {3: nee.le, 1: nee.lt, 6: nee.ge, 4: nee.gt, 2: nee.eq, 5: nee.ne}[mode]
        for _ in range(int(self.root_depth[a:b].max()) if b > a else 0):
            xv = nee.gather(X, 1, nee.take(feat, cur))
            th = nee.take(thr, cur)
            if uniform:
                go = cmp(xv, th)
                if nan_true and mode != 5:
                    go = go | nee.isnan(xv)
                elif not nan_true and mode == 5:
                    go = go & ~nee.isnan(xv)
                go = go.to(nee.int64)
            else:
                rel = nee.isnan(xv).to(nee.int64) * 3 + (xv == th).to(nee.int64) + (xv > th).to(nee.int64) * 2
                go = nee.bitwise_and(nee.bitwise_right_shift(nee.take(code, cur), rel),
                                     nee.ones((), dtype=nee.int64))
            if mem is not None:
                rows = nee.index_select(mem, 0, cur.reshape(-1)).reshape(N, T, -1)
                go = go | nee.any(rows == xv.unsqueeze(2), 2).to(nee.int64)
            cur = nee.take(nxt, cur * 2 + go)
        return cur


_CHUNK = 1 << 22  # rows x trees x targets evaluated at once (bounds the [N, trees, targets] temporaries)


def _forest_scores(ctx, forest, X, leaf_w, n_targets, agg, node):
    """Sum / average / min / max over the trees of the weights ``leaf_w`` [(slot, target, weight)] of the
    leaves each row reaches: (scores float64 [N, targets], None) or, for MIN / MAX, (scores, which
    targets some reached leaf scores).  The trees go in chunks so temporaries stay under _CHUNK."""
    S = len(forest.feat)
    if agg in ("SUM", "AVERAGE"):
        W = np.zeros((S, n_targets), np.float64)
        for s, t, w in leaf_w:
            W[s, t] += w
        has = None
    elif agg in ("MIN", "MAX"):
        W = np.full((S, n_targets), np.inf if agg == "MIN" else -np.inf)
        has = np.zeros((S, n_targets), bool)
        for s, t, w in leaf_w:
            W[s, t] = min(W[s, t], w) if agg == "MIN" else max(W[s, t], w)
            has[s, t] = True
    else:
        raise _err(node, f"aggregate_function {agg!r} is not one of AVERAGE, SUM, MIN, MAX")
    X = _rows(node, X)
    forest.check_input(X)
    N, T = X.shape[0], forest.roots.size
    consts = (ctx.const(forest.feat), ctx.const(forest.thr), ctx.const(forest.code), ctx.const(forest.nxt),
              ctx.const(forest.members) if forest.members is not None else None)
    Wc = ctx.const(W)
    Hc = ctx.const(has) if has is not None else None
    out = got = None
    step = max(1, _CHUNK // max(N * max(n_targets, 1), 1))
    for a in range(0, T, step):
        b = min(a + step, T)
        flat = forest.leaves(ctx, X, consts, a, b).reshape(-1)
        rows = nee.index_select(Wc, 0, flat).reshape(N, b - a, n_targets)
        if has is None:
            part = nee.sum(rows, 1)
            out = part if out is None else out + part
            continue
        part = nee.amin(rows, 1) if agg == "MIN" else nee.amax(rows, 1)
        g = nee.any(nee.index_select(Hc, 0, flat).reshape(N, b - a, n_targets), 1)
        out = part if out is None else (nee.minimum(out, part) if agg == "MIN" else nee.maximum(out, part))
        got = g if got is None else got | g
    if out is None:  # no trees
        out = nee.zeros_like(X.narrow(1, 0, 1), dtype=nee.float64) + ctx.const(np.zeros((1, n_targets)))
        got = None if has is None else out != 0
    if agg == "AVERAGE" and T:
        out = out / float(T)
    return out, got


def _unscored(out, got):
    """MIN / MAX: a target no reached leaf scores is 0, base value or not (onnxruntime; the reference
    leaves the float's extreme value there)."""
    return out if got is None else nee.where(got, out, nee.zeros((), dtype=out.dtype))


def _legacy_forest(ctx, node, X):
    """(forest, slot of (tree id, node id), number of trees, compare dtype) of the legacy attributes."""
    tids = list(node.get("nodes_treeids") or [])
    nids = list(node.get("nodes_nodeids") or [])
    n = len(tids)
    names = ("nodes_nodeids", "nodes_featureids", "nodes_modes", "nodes_truenodeids", "nodes_falsenodeids")
    for k in names:
        if len(node.get(k) or []) != n:
            raise _err(node, f"{k} has {len(node.get(k) or [])} entries, nodes_treeids has {n}")
    vals = _attr(node, "nodes_values")
    if vals is None:
        vals = np.zeros(n, np.float32)
    if vals.size != n:
        raise _err(node, f"nodes_values has {vals.size} entries for {n} nodes")
    dt = np.float64 if (X.dtype == nee.float64 or vals.dtype == np.float64) else np.float32
    slot = {}
    for i, k in enumerate(zip(tids, nids)):
        slot.setdefault(k, i)
    modes = node.get("nodes_modes")
    mtt = node.get("nodes_missing_value_tracks_true") or [0] * n
    code = np.zeros(n, np.int64)
    leaf = np.zeros(n, bool)
    tnext = np.arange(n, dtype=np.int64)
    fnext = np.arange(n, dtype=np.int64)
    tn, fn = node.get("nodes_truenodeids"), node.get("nodes_falsenodeids")
    for i, m in enumerate(modes):
        if m == "LEAF":
            leaf[i] = True
            continue
        if m not in _MODE_BITS:
            raise _err(node, f"node {nids[i]} of tree {tids[i]} has mode {m!r}; expected LEAF or one of "
                             f"{', '.join(_MODE_BITS)}")
        code[i] = _MODE_BITS[m] | (8 if mtt[i] else 0)  # the spec: a NaN takes the missing-value track
        for arr, target in ((tnext, tn[i]), (fnext, fn[i])):
            j = slot.get((tids[i], target))
            if j is None:
                raise _err(node, f"node {nids[i]} of tree {tids[i]} branches to node {target}, which tree "
                                 f"{tids[i]} does not have")
            arr[i] = j
    first = {}
    for i, t in enumerate(tids):
        first.setdefault(t, i)
    trees = sorted(first)
    roots = [first[t] for t in trees]  # a tree's root: its first node (as the reference)
    feat = np.asarray(node.get("nodes_featureids"), np.int64)
    f = _Forest(node, feat, vals.astype(dt), code, tnext, fnext, roots, leaf)
    return f, slot, len(trees), dt


def _leaf_weights(node, slot, prefix):
    tids, nids = node.get(f"{prefix}_treeids") or [], node.get(f"{prefix}_nodeids") or []
    ids = node.get(f"{prefix}_ids") or []
    w = _attr(node, f"{prefix}_weights")
    w = np.zeros(0) if w is None else w.astype(np.float64).reshape(-1)
    if not len(tids) == len(nids) == len(ids) == w.size:
        raise _err(node, f"{prefix}_treeids/nodeids/ids/weights have {len(tids)}/{len(nids)}/{len(ids)}/{w.size} "
                         f"entries (must be equal)")
    out = []
    for t, n_, i, wi in zip(tids, nids, ids, w.tolist()):
        s = slot.get((t, n_))
        if s is None:
            raise _err(node, f"{prefix} weight for node {n_} of tree {t}, which does not exist")
        out.append((s, int(i), wi))
    return out


def _cmp_input(X, dt):
    return X.to(nee.float64 if dt == np.float64 else nee.float32)


@op("ai.onnx.ml:TreeEnsembleRegressor")
def _tree_regressor(ctx, node, X):
    forest, slot, _, dt = _legacy_forest(ctx, node, X)
    K = int(node.get("n_targets", 1))
    lw = _leaf_weights(node, slot, "target")
    if any(not 0 <= t < K for _, t, _ in lw):
        raise _err(node, f"a target id is outside 0..{K - 1} (n_targets {K})")
    agg = node.get("aggregate_function", "SUM")
    out, got = _forest_scores(ctx, forest, _cmp_input(X, dt), lw, K, agg, node)
    base = _attr(node, "base_values", np.float64)
    if base is not None and base.size:
        if base.size != K:
            raise _err(node, f"{base.size} base_values for {K} targets")
        out = out + ctx.const(base)
    out = _unscored(out, got)
    return _post_transform(node, out, node.get("post_transform", "NONE")).to(nee.float32)


@op("ai.onnx.ml:TreeEnsembleClassifier")
def _tree_classifier(ctx, node, X):
    """The reference's scores and labels, binary case included: one class id scored -> [1 - s, s] (NONE,
    PROBIT) or [-s, s] (other post transforms) before the post transform."""
    labels = node.get("classlabels_int64s")
    if not labels:
        raise _err(node, "neither classlabels_int64s nor classlabels_strings is set")
    if node.get(_STRING_MARK) and len(labels) < 2:
        raise _err(node, "a single string class label is not supported (the binary form with one label needs "
                         "int64 labels)")
    forest, slot, _, dt = _legacy_forest(ctx, node, X)
    C = len(labels)
    lw = _leaf_weights(node, slot, "class")
    if any(not 0 <= t < max(C, 2) for _, t, _ in lw):
        raise _err(node, f"a class id is outside the {C} classes")
    if not X.is_floating_point():
        X = X.to(nee.float32)
    K = max(C, max((t for _, t, _ in lw), default=0) + 1)
    res = _forest_scores(ctx, forest, _cmp_input(X, dt), lw, K, "SUM", node)[0].narrow(1, 0, C)
    base = _attr(node, "base_values", np.float64)
    if base is not None and base.size:
        if base.size not in (1, C):
            raise _err(node, f"{base.size} base_values for {C} classes")
        res = res + ctx.const(base)
    pt = node.get("post_transform", "NONE")
    if len({t for _, t, _ in lw}) == 1:  # binary: one class is scored
        s1 = res.narrow(1, 0, 1)
        s0 = (1.0 - s1) if pt in ("NONE", "PROBIT") else -s1
        res = nee.cat([s0, s1] + ([res.narrow(1, 2, C - 2)] if C > 2 else []), 1)
    scores = _post_transform(node, res.to(nee.float32).to(nee.float64), pt).to(nee.float32)
    am = nee.argmax(scores, 1)
    if C == 1:
        if labels[0] != 1:
            raise _err(node, f"a single class label must be 1 (got {labels[0]})")
        lab = (am == 1).to(nee.int64)
    else:
        lab = nee.take(ctx.const(np.asarray(labels, np.int64)), am)
    return lab, scores


@op("ai.onnx.ml:TreeEnsemble")
def _tree_ensemble(ctx, node, X):
    """ai.onnx.ml 5: interior nodes and leaves in separate arrays; BRANCH_MEMBER set membership."""
    def a(name, dtype=None):
        v = node.get(name)
        return None if v is None else _arr(v, dtype)
    splits = a("nodes_splits")
    feat = a("nodes_featureids", np.int64)
    modes = a("nodes_modes")
    tn, fn = a("nodes_truenodeids", np.int64), a("nodes_falsenodeids", np.int64)
    tl, fl = a("nodes_trueleafs", np.int64), a("nodes_falseleafs", np.int64)
    ltid, lw = a("leaf_targetids", np.int64), a("leaf_weights")
    roots = a("tree_roots", np.int64)
    for name, v in (("nodes_splits", splits), ("nodes_featureids", feat), ("nodes_modes", modes),
                    ("nodes_truenodeids", tn), ("nodes_falsenodeids", fn), ("nodes_trueleafs", tl),
                    ("nodes_falseleafs", fl), ("leaf_targetids", ltid), ("leaf_weights", lw), ("tree_roots", roots)):
        if v is None:
            raise _err(node, f"attribute {name} is required")
    Ni, L = feat.size, ltid.size
    for name, v in (("nodes_splits", splits), ("nodes_modes", modes), ("nodes_truenodeids", tn),
                    ("nodes_falsenodeids", fn), ("nodes_trueleafs", tl), ("nodes_falseleafs", fl)):
        if v.size != Ni:
            raise _err(node, f"{name} has {v.size} entries, nodes_featureids has {Ni}")
    if lw.size != L:
        raise _err(node, f"leaf_weights has {lw.size} entries, leaf_targetids has {L}")
    mtt = a("nodes_missing_value_tracks_true", np.int64)
    mtt = np.zeros(Ni, np.int64) if mtt is None else mtt
    S = Ni + L
    dt = np.float64 if X.dtype == nee.float64 else np.float32
    code = np.zeros(S, np.int64)
    leaf = np.zeros(S, bool)
    leaf[Ni:] = True
    tnext = np.arange(S, dtype=np.int64)
    fnext = np.arange(S, dtype=np.int64)
    thr = np.zeros(S, dt)
    thr[:Ni] = splits.astype(dt)
    fe = np.zeros(S, np.int64)
    fe[:Ni] = feat
    member_sets = []
    mv = a("membership_values")
    mv_list = [] if mv is None else mv.astype(np.float64).reshape(-1).tolist()
    k = 0
    for i in range(Ni):
        m = _MODE5.get(int(modes[i]))
        if m is None:
            raise _err(node, f"node {i} has mode {int(modes[i])}; expected 0..6")
        if m == "BRANCH_MEMBER":
            # the sets in node order, each ended by a NaN (the spec)
            st = []
            while k < len(mv_list) and not np.isnan(mv_list[k]):
                st.append(mv_list[k])
                k += 1
            if k >= len(mv_list) and not st and mv is None:
                raise _err(node, f"node {i} is BRANCH_MEMBER but membership_values is not set")
            k += 1
            member_sets.append((i, st))
            code[i] = 8 if mtt[i] else 0
        else:
            # a NaN compares false (true for NEQ) unless its missing-value track goes true
            code[i] = _MODE_BITS[m] | (8 if (mtt[i] or m == "BRANCH_NEQ") else 0)
        tnext[i] = tn[i] + (Ni if tl[i] else 0)
        fnext[i] = fn[i] + (Ni if fl[i] else 0)
    rts = []
    for r in roots.tolist():
        if not 0 <= r < Ni:
            raise _err(node, f"tree root {r} is outside the {Ni} nodes")
        rts.append(Ni + int(tn[r]) if (tl[r] and fl[r] and tn[r] == fn[r]) else r)
    forest = _Forest(node, fe, thr, code, tnext, fnext, rts, leaf)
    if member_sets:
        M = max(max(len(s) for _, s in member_sets), 1)
        tab = np.full((S, M), np.nan, dt)
        for i, s in member_sets:
            tab[i, :len(s)] = s
        forest.members = tab
    K = int(node.get("n_targets", 1) or 1)
    if L and (ltid.min() < 0 or ltid.max() >= K):
        raise _err(node, f"a leaf target id is outside 0..{K - 1} (n_targets {K})")
    aggs = {0: "AVERAGE", 1: "SUM", 2: "MIN", 3: "MAX"}
    agg = aggs.get(int(node.get("aggregate_function", 1)))
    if agg is None:
        raise _err(node, f"aggregate_function {node.get('aggregate_function')} is not one of 0..3")
    lwl = [(Ni + j, int(t), float(w)) for j, (t, w) in enumerate(zip(ltid.tolist(), lw.astype(np.float64).tolist()))]
    out = _unscored(*_forest_scores(ctx, forest, X.to(_nee_of(dt)), lwl, K, agg, node))
    pt = int(node.get("post_transform", 0))
    if not 0 <= pt < len(_POST):
        raise _err(node, f"post_transform {pt} is not one of 0..4")
    return _post_transform(node, out, _POST[pt]).to(X.dtype)


# ------------------------------------------------------------------------- TfIdfVectorizer
@op("TfIdfVectorizer")
def _tfidf(ctx, node, x):
    """Counts of the pool's n-grams (n in [min, max], tokens ``skip + 1`` apart for every skip up to
    max_skip_count; unigrams counted once), weighted per mode; [C] -> [out], [N, C] -> [N, out]."""
    mode = node.get("mode")
    lo, hi = int(node.get("min_gram_length", 1)), int(node.get("max_gram_length", 1))
    skip = int(node.get("max_skip_count", 0))
    counts = list(node.get("ngram_counts") or [])
    oidx = np.asarray(node.get("ngram_indexes") or [], np.int64)
    pool = node.get("pool_int64s")
    if node.get("pool_strings"):  # expand_node maps the tokens to int64 ids on the host first
        raise _err(node, "pool_strings reached the numeric TfIdfVectorizer (run the model through "
                         "neetorch.onnx.InferenceSession: its tokens are mapped to int64 ids on the host)")
    if mode not in ("TF", "IDF", "TFIDF"):
        raise _err(node, f"mode {mode!r} is not one of TF, IDF, TFIDF")
    if not 1 <= lo <= hi or skip < 0:
        raise _err(node, f"bad gram lengths/skip: min_gram_length {lo}, max_gram_length {hi}, max_skip_count {skip}")
    if x.is_floating_point() or x.dtype == nee.bool:
        raise _err(node, f"input must be int32/int64 tokens (string input is not supported), got {x.dtype}")
    if x.ndim > 2:
        raise _err(node, f"input must be [C] or [N, C], got shape {tuple(x.shape)}")
    pool = np.asarray(pool or [], np.int64)
    if oidx.size == 0 or oidx.min() < 0:
        raise _err(node, "ngram_indexes must be non-empty and non-negative")
    out_size = int(oidx.max()) + 1
    w = node.get("weights")
    if w:
        # the spec (and onnxruntime): weights[i] weighs the pool's i-th n-gram, counted in column
        # ngram_indexes[i] (the reference indexes weights by the output column instead)
        if len(w) != oidx.size:
            raise _err(node, f"{len(w)} weights for {oidx.size} n-grams (ngram_indexes)")
        w_out = np.ones(out_size, np.float32)
        w_out[oidx] = np.asarray(w, np.float32)
        w = w_out
    else:
        w = None
    # the pool's n-grams of the loaded lengths, in pool order (their rank indexes ngram_indexes)
    grams = {}  # length -> {tuple: output index}
    rank = 0
    for i, start in enumerate(counts):
        end = counts[i + 1] if i + 1 < len(counts) else pool.size
        size = i + 1
        ng = max(end - start, 0) // size
        if lo <= size <= hi:
            for j in range(ng):
                g = tuple(pool[start + j * size:start + (j + 1) * size].tolist())
                if rank + j >= oidx.size:
                    raise _err(node, f"ngram_indexes has {oidx.size} entries, fewer than the pool's n-grams")
                grams.setdefault(size, {})[g] = int(oidx[rank + j])
        rank += ng
    one_d = x.ndim < 2
    xr = x.reshape(1, -1) if one_d else x
    B, C = xr.shape
    if C == 0 or not grams:
        z = nee.zeros(B, out_size, dtype=nee.float32)
        return z.reshape(out_size) if one_d else z
    vocab = np.unique(np.concatenate([np.asarray(g, np.int64) for d in grams.values() for g in d]))
    V = vocab.size
    # token -> rank in the vocabulary, V when absent; padded with V so every window fits
    xt = xr.to(nee.int64)
    vt = ctx.const(vocab)
    pos = nee.clamp(nee.searchsorted(vt, xt), 0, V - 1)
    tok = nee.where(nee.take(vt, pos) == xt, pos, nee.full((), V, dtype=nee.int64))
    maxlen = max(grams)
    pad = (maxlen - 1) * (skip + 1)
    if pad:
        tok = nee.cat([tok, nee.full((B, pad), V, dtype=nee.int64)], 1)
    # prefix tables: per length k, the sorted keys pid(k-1) * (V + 1) + rank(token k) of every loaded
    # n-gram's k-prefix; a key's position is the prefix id; out[k][pid] its output column (out_size: none)
    vr = {int(v): i for i, v in enumerate(vocab.tolist())}
    pids = [{(): 0}]
    keys_k, outs_k = [], []
    for k in range(1, maxlen + 1):
        prev = pids[-1]
        ks = {}
        for size, d in grams.items():
            if size < k:
                continue
            for g in d:
                ks[prev[g[:k - 1]] * (V + 1) + vr[g[k - 1]]] = g[:k]
        order = sorted(ks)
        pids.append({ks[key]: i for i, key in enumerate(order)})
        keys_k.append(np.asarray(order, np.int64))
        out = np.full(len(order) + 1, out_size, np.int64)
        for i, key in enumerate(order):
            g = ks[key]
            if g in grams.get(k, {}):
                out[i] = grams[k][g]
        outs_k.append(out)
    total = nee.zeros(B, out_size + 1, dtype=nee.float32)
    ones = nee.ones(B, C, dtype=nee.float32)
    for d in range(1, skip + 2):
        first = lo if d == 1 or lo > 1 else 2  # unigrams do not depend on the skip: counted at d == 1 only
        if first > maxlen or (first > 1 and (first - 1) * d >= C):
            continue
        pid = nee.zeros(B, C, dtype=nee.int64)
        for k in range(1, maxlen + 1):
            kt = ctx.const(keys_k[k - 1])
            n = keys_k[k - 1].size
            key = pid * (V + 1) + tok.narrow(1, (k - 1) * d, C)
            p = nee.clamp(nee.searchsorted(kt, key), 0, n - 1)
            pid = nee.where(nee.take(kt, p) == key, p, nee.full((), n, dtype=nee.int64))
            if k >= first and k in grams:
                total = nee.scatter_add(total, 1, nee.take(ctx.const(outs_k[k - 1]), pid), ones)
    tf = total.narrow(1, 0, out_size)
    if mode == "TF":
        y = tf
    elif mode == "IDF":
        y = (tf > 0).to(nee.float32)
        if w is not None:
            y = y * ctx.const(w)
    else:
        y = tf * ctx.const(w) if w is not None else tf
    return y.reshape(out_size) if one_d else y


def _register_tfidf_counts():
    from .ops_string import HOST_OPS
    HOST_OPS["neetorch.internal:TfIdfCounts"] = _tfidf  # _expand_tfidf: string tokens' counts, run eagerly


_register_tfidf_counts()
