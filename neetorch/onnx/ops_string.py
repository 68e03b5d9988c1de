"""String tensors: ONNX's string ops, evaluated on the host with numpy.

neetorch's tensors are numeric (its kernels are Numba / OpenCL / CUDA code), so a string value
never becomes a nee tensor: it is a numpy ``object`` array of Python ``str`` living on the host,
and every node that reads or writes one (a *host node*, :func:`is_host_node`) runs here, eagerly,
through :data:`HOST_OPS` instead of :data:`~neetorch.onnx.lowering.OPS`:

* the string ops: StringConcat, StringSplit, RegexFullMatch (Python's ``re``: RE2 patterns without
  RE2-only syntax), StringNormalizer, ``Equal`` on strings;
* classical ML over strings: ``ai.onnx.ml`` LabelEncoder (string keys and/or values, either way),
  CategoryMapper, OneHotEncoder with ``cats_strings``, ArrayFeatureExtractor (sklearn-onnx's
  ``classes[argmax]``); ZipMap (scores -> a sequence of maps: a Python list of dicts, as onnxruntime);
* ``Cast`` / ``CastLike`` to and from strings (numbers format as onnxruntime does: ``%.8g``, ``NaN``,
  ``INF``, ``-INF``; booleans as ``1`` / ``0``; string -> bool as onnxruntime: the leading integer is nonzero);
* the data movement a model does on strings: Constant, Identity, Reshape, Flatten, Squeeze,
  Unsqueeze, Transpose, Concat, Gather, Slice, Expand, Where, Shape, Size;
* maps (Python dicts: DictVectorizer, CastMap, map inputs; ``ops_map``) and text (the com.microsoft
  Tokenizer, TfIdfVectorizer over strings; ``ops_text``) register their host ops here too;
* sequences of strings (Python lists of object arrays): SequenceEmpty / Construct / At / Insert / Erase /
  Length, SplitToSequence, ConcatFromSequence, Optional / OptionalHasElement / OptionalGetElement
  (SequenceMap, If and Loop over strings are not supported: refused up front, naming the node);
* Scan over strings (its body run eagerly on the host, step by step: skl2onnx's ``keep_empty_string``).

Where a host node produces a number (Equal -> bool, LabelEncoder -> int64, StringSplit's lengths,
Shape) it hands a normal nee tensor on the session's device to the rest of the graph; a numeric
input of a host node (LabelEncoder int64 -> string, Gather's indices) is read back as numpy.
:class:`~neetorch.onnx.lowering.Program` splits a model with host nodes into host and traced
segments (``Program.segments``); the session reports which nodes ran on the host.
"""
from __future__ import annotations

import math
import re
from functools import lru_cache

import numpy as np

from .lowering import LoweringError

__all__ = ["HOST_OPS", "STRING_ONLY", "as_strings", "has_strings", "host_op", "is_host_node", "is_string",
           "string_values"]

HOST_OPS: dict = {}
# ops whose inputs or outputs are always strings: host nodes whatever the declared types say
# (and ops whose outputs are Python objects, not tensors: ZipMap's sequence of maps; neetorch's internal
# SVM probability coupling, ``ops_ml``)
STRING_ONLY = frozenset({"StringConcat", "StringSplit", "RegexFullMatch", "StringNormalizer",
                         "ai.onnx.ml:CategoryMapper", "ai.onnx.ml:ZipMap", "neetorch.internal:SVMProbabilities",
                         "ImageDecoder",  # ImageDecoder: bytes in, a data-dependent shape out (ops_vision)
                         # maps in (ops_map), text (ops_text)
                         "ai.onnx.ml:DictVectorizer", "ai.onnx.ml:CastMap", "com.microsoft:Tokenizer",
                         "neetorch.internal:StringIds", "neetorch.internal:TfIdfCounts"})
_STRING = 8  # TensorProto.STRING


def host_op(*names):
    from .lowering import OPS

    def deco(fn):
        for n in names:
            HOST_OPS[n] = fn
            if n in STRING_ONLY:
                OPS[n] = fn  # listed by supported_ops(); its nodes are host nodes, dispatched through HOST_OPS
        return fn
    return deco


def _err(node, msg):
    return LoweringError(f"node {node.name} ({node.op_type}): {msg}")


# ------------------------------------------------------------------------- which values / nodes
def _string_type(tp) -> bool:
    """tensor(string), seq(tensor(string)) or optional(...) of them."""
    which = tp.WhichOneof("value")
    if which == "tensor_type":
        return tp.tensor_type.elem_type == _STRING
    if which == "sequence_type":
        return _string_type(tp.sequence_type.elem_type)
    if which == "optional_type":
        return _string_type(tp.optional_type.elem_type)
    return False


def string_values(graph) -> set:
    """Names of the values a graph declares as tensor(string) or seq(tensor(string)) (inputs, value_info,
    outputs, initializers)."""
    out = set()
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        if _string_type(vi.type):
            out.add(vi.name)
    for t in graph.initializer:
        if t.data_type == _STRING:
            out.add(t.name)
    # values shape inference leaves untyped (the outputs of ops outside the onnx domains, what follows them):
    # the string outputs of the ops that always write strings, and data movement of a string value
    for n in graph.node:
        key = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}:{n.op_type}"
        writes = key in _WRITES_STRINGS or (key in _MOVES and n.input and n.input[0] in out)
        if writes and n.output and n.output[0]:
            out.add(n.output[0])
    return out


_WRITES_STRINGS = frozenset({"com.microsoft:Tokenizer", "StringNormalizer", "StringConcat", "StringSplit"})
_MOVES = frozenset({"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Gather", "Slice",
                    "Expand", "Concat"})


def _string_attr(proto, names) -> bool:
    for a in proto.attribute:
        if a.name in names and (len(a.strings) or (a.type == a.TENSOR and a.t.data_type == _STRING)):
            return True
    return False


def is_host_node(proto, strings: set) -> bool:
    """True when a NodeProto reads or writes a string value (so runs here, on the host)."""
    from .lowering import op_key
    key = op_key(proto)
    if key in STRING_ONLY:
        return True
    if any(n in strings for n in proto.input if n) or any(n in strings for n in proto.output if n):
        return True
    if key in ("ai.onnx.ml:LabelEncoder",):
        return _string_attr(proto, ("keys_strings", "values_strings", "keys_tensor", "values_tensor"))
    if key == "ai.onnx.ml:OneHotEncoder":
        return _string_attr(proto, ("cats_strings",))
    if key == "Cast":
        return any(a.name == "to" and a.i == _STRING for a in proto.attribute)
    if key == "SequenceEmpty":
        return any(a.name == "dtype" and a.i == _STRING for a in proto.attribute)
    if key == "Constant":
        return _string_attr(proto, ("value", "value_strings"))
    return False


def is_string(v) -> bool:
    return isinstance(v, np.ndarray) and v.dtype == object


def has_strings(v) -> bool:
    """A string tensor, or a sequence (list) holding one."""
    return is_string(v) or (isinstance(v, list) and any(is_string(x) for x in v))


# ------------------------------------------------------------------------- values
def as_strings(a, what="value") -> np.ndarray:
    """``a`` (numpy str / bytes / object array of str or bytes, a str, a list) as a numpy object array of
    ``str``; bytes are decoded as UTF-8.  Raises TypeError (naming ``what``) for anything else."""
    if isinstance(a, (str, bytes)):
        a = np.array(a, dtype=object)
    elif not isinstance(a, np.ndarray):
        try:
            a = np.array(a, dtype=object)
        except Exception as e:  # noqa: BLE001  (ragged lists)
            raise TypeError(f"{what}: cannot make a string tensor of {type(a).__name__}: {e}") from None
    kind = a.dtype.kind
    if kind == "U":
        return a.astype(object)
    if kind == "S":
        a = a.astype(object)  # bytes elements: decoded below
    elif kind != "O":
        raise TypeError(f"{what}: expected strings (a numpy str or object array of str), got numpy {a.dtype.name}")
    out = np.empty(a.shape, dtype=object)
    flat, src = out.reshape(-1), a.reshape(-1)
    for i, v in enumerate(src.tolist()):
        if isinstance(v, str):
            flat[i] = v
        elif isinstance(v, bytes):
            try:
                flat[i] = v.decode("utf-8")
            except UnicodeDecodeError as e:
                raise TypeError(f"{what}: element {v[:20]!r} at flat index {i} is not UTF-8 ({e})") from None
        elif isinstance(v, np.str_):
            flat[i] = str(v)
        else:
            raise TypeError(f"{what}: expected strings, found element {v!r} ({type(v).__name__}) at flat index {i}")
    return out


def _obj(r) -> np.ndarray:
    """A numpy result of an op on object arrays (a 0-d op gives a bare Python object) as an object array."""
    if isinstance(r, np.ndarray) and r.dtype == object:
        return r
    if isinstance(r, np.ndarray):
        return r.astype(object)
    out = np.empty((), dtype=object)
    out[()] = r
    return out


def _s(node, x, what="input"):
    """A string input of a host node."""
    if x is None or not is_string(x):
        got = "nothing" if x is None else f"a {_desc(x)} tensor"
        raise _err(node, f"{what} must be a string tensor, got {got}")
    return x


def _desc(x):
    if is_string(x):
        return "string"
    dt = getattr(x, "dtype", None)
    return str(getattr(dt, "name", dt))


def _np(x):
    """A numeric input of a host node as numpy (strings pass through)."""
    if x is None or isinstance(x, np.ndarray):
        return x
    return np.asarray(x.numpy(force=True))


def _num(ctx, a, dtype=None):
    """A numeric host result as a nee tensor on the session's device."""
    return ctx.const(np.asarray(a) if dtype is None else np.asarray(a, dtype=dtype))


def _out(ctx, a):
    """A host result: strings stay numpy, numbers become nee tensors."""
    return a if is_string(a) else _num(ctx, a)


def _ints(x):
    return None if x is None else [int(v) for v in _np(x).reshape(-1)]


# ------------------------------------------------------------------------- string ops
@host_op("StringConcat")
def _string_concat(ctx, node, x, y):
    return _obj(np.add(_s(node, x, "X"), _s(node, y, "Y"), dtype=object))


@host_op("Equal")
def _equal(ctx, node, x, y):
    if not (is_string(x) and is_string(y)):
        raise _err(node, f"cannot compare a {_desc(x)} tensor with a {_desc(y)} tensor (both must be strings)")
    try:
        r = np.equal(x, y, dtype=object)
    except ValueError as e:
        raise _err(node, f"shapes {list(x.shape)} and {list(y.shape)} do not broadcast: {e}") from None
    return _num(ctx, np.asarray(r, dtype=bool))


@lru_cache(maxsize=256)
def _regex(pattern):
    # RE2's Perl classes (\w \d \s \b) are ASCII-only, as onnxruntime matches them; Python's are Unicode
    return re.compile(pattern, re.ASCII)


@host_op("RegexFullMatch")
def _regex_full_match(ctx, node, x):
    x = _s(node, x, "X")
    pat = node.get("pattern")
    if pat is None:
        raise _err(node, "attribute 'pattern' is required")
    try:
        rx = _regex(pat)
    except re.error as e:
        raise _err(node, f"invalid pattern {pat!r} ({e}; neetorch evaluates RE2 patterns with Python's re)") from None
    out = np.fromiter((rx.fullmatch(s) is not None for s in x.reshape(-1).tolist()), dtype=bool, count=x.size)
    return _num(ctx, out.reshape(x.shape))


@host_op("StringSplit")
def _string_split(ctx, node, x):
    x = _s(node, x, "X")
    # as Python's str.split (ONNX's reference): unset or "" splits on runs of whitespace; an empty string split
    # on an explicit delimiter gives one empty substring (onnxruntime gives none; the spec does not say)
    sep = node.get("delimiter") or None
    maxsplit = node.get("maxsplit")
    maxsplit = -1 if maxsplit is None else int(maxsplit)
    parts = [s.split(sep, maxsplit) for s in x.reshape(-1).tolist()]
    if sep is None:
        # the spec: on whitespace, leading or trailing whitespace is removed; str.split keeps the trailing
        # whitespace of the remainder a maxsplit leaves (onnxruntime: "a  b " maxsplit 1 -> "a", "b")
        parts = [p[:-1] + [p[-1].rstrip()] if p else p for p in parts]
    lengths = np.array([len(p) for p in parts], dtype=np.int64)
    width = int(lengths.max()) if lengths.size else 0
    out = np.full((len(parts), width), "", dtype=object)
    for i, p in enumerate(parts):
        out[i, :len(p)] = p
    return out.reshape(*x.shape, width), _num(ctx, lengths.reshape(x.shape))


@lru_cache(maxsize=4096)
def _upper1(c):
    """One character's upper case, one to one (as C++'s towupper: "ß" stays, where str.upper gives "SS")."""
    u = c.upper()
    return u if len(u) == 1 else c


@lru_cache(maxsize=4096)
def _lower1(c):
    lo = c.lower()
    return lo if len(lo) == 1 else c


@host_op("StringNormalizer")
def _string_normalizer(ctx, node, x):
    """As the spec and onnxruntime: drop the elements that are stopwords (compared case-insensitively unless
    is_case_sensitive), then change case; an empty result is [""] ([[""]] for a [1, C] input).  ONNX's
    reference differs: it also strips accents and drops empty strings.  Case changes map each character by
    Unicode's simple one-to-one case mapping, as a UTF-8 C++ locale does ("ß" stays "ß", a final "Σ" lowers
    to "σ"), whatever the locale attribute names (onnxruntime in the "C" locale changes ASCII letters only)."""
    x = _s(node, x, "X")
    if not (x.ndim == 1 or (x.ndim == 2 and x.shape[0] == 1)):
        raise _err(node, f"input must have shape [C] or [1, C], got {list(x.shape)}")
    action = node.get("case_change_action", "NONE")
    if action not in ("NONE", "LOWER", "UPPER"):
        raise _err(node, f"case_change_action must be NONE, LOWER or UPPER, got {action!r}")
    sensitive = bool(node.get("is_case_sensitive", 0))
    stops = list(node.get("stopwords") or [])
    words = x.reshape(-1).tolist()
    if stops:
        if sensitive:
            st = set(stops)
            words = [w for w in words if w not in st]
        else:
            st = {"".join(map(_lower1, w)) for w in stops}
            words = [w for w in words if "".join(map(_lower1, w)) not in st]
    if action == "LOWER":
        words = ["".join(map(_lower1, w)) for w in words]
    elif action == "UPPER":
        words = ["".join(map(_upper1, w)) for w in words]
    if not words:
        words = [""]
    out = np.empty(len(words), dtype=object)
    out[:] = words
    return out if x.ndim == 1 else out.reshape(1, -1)


# ------------------------------------------------------------------------- classical ML on strings
def _attr_array(node, name):
    """An attribute (list or TensorProto) as numpy; strings as an object array of str; None if unset."""
    v = node.get(name)
    if v is None:
        return None
    if hasattr(v, "data_type"):
        from onnx import numpy_helper
        a = numpy_helper.to_array(v)
        return as_strings(a, name) if a.dtype.kind in "OSU" else a
    if isinstance(v, list) and v and isinstance(v[0], str):
        return as_strings(np.array(v, dtype=object), name)
    return np.asarray(v) if isinstance(v, list) and v else None


def _key_list(keys: np.ndarray) -> list:
    return keys.reshape(-1).tolist()


def _map(node, x, table: dict, default, out_dtype, key_is_string: bool):
    """table[v] or default, elementwise over ``x`` (a string array or a numeric nee tensor / array)."""
    if key_is_string:
        x = _s(node, x, "X (the keys are strings)")
    else:
        if is_string(x):
            raise _err(node, "X is a string tensor but the keys are numbers")
        x = _np(x)
    vals = [table.get(k, default) for k in x.reshape(-1).tolist()]
    if out_dtype == object:
        out = np.empty(len(vals), dtype=object)
        out[:] = vals
    else:
        out = np.array(vals, dtype=out_dtype)
    return out.reshape(x.shape)


@host_op("ai.onnx.ml:LabelEncoder")
def _label_encoder(ctx, node, x):
    """Keys and values of any kind (strings, int64s, floats, tensors); the lookup runs on the host."""
    keys = next((k for k in (_attr_array(node, n) for n in ("keys_tensor", "keys_strings", "keys_int64s",
                                                             "keys_floats")) if k is not None), None)
    values, default = None, None
    vt = _attr_array(node, "values_tensor")
    if vt is not None:
        values = vt
        dt = _attr_array(node, "default_tensor")
        if dt is not None:
            default = dt.reshape(-1)[0]
            default = default if isinstance(default, str) else default.item()
        else:  # the spec: "_Unused" for strings, -1 for integers, -0.0 for floats
            default = "_Unused" if vt.dtype == object else (-0.0 if vt.dtype.kind == "f" else -1)
    elif node.get("values_strings") is not None:
        values, default = _attr_array(node, "values_strings"), node.get("default_string", "_Unused")
    elif node.get("values_int64s") is not None:
        values, default = np.asarray(node.get("values_int64s"), np.int64), node.get("default_int64", -1)
    elif node.get("values_floats") is not None:
        values, default = np.asarray(node.get("values_floats"), np.float32), node.get("default_float", -0.0)
    if keys is None or values is None:
        raise _err(node, "needs keys_* and values_* attributes")
    if keys.size != values.size:
        raise _err(node, f"{keys.size} keys but {values.size} values")
    if keys.dtype.kind == "f":
        keys = keys.astype(np.float32)  # the input is float32: compare float32 values
    table = dict(zip(_key_list(keys), _key_list(values)))  # later duplicates win, as in the reference
    out = _map(node, x, table, default, values.dtype, keys.dtype == object)
    return _out(ctx, out)


@host_op("ai.onnx.ml:CategoryMapper")
def _category_mapper(ctx, node, x):
    """strings -> int64 (default_int64, -1) or int64 -> strings (default_string, "_Unused"), by the pairs
    (cats_strings[i], cats_int64s[i])."""
    cs, ci = node.get("cats_strings") or [], node.get("cats_int64s") or []
    if len(cs) != len(ci):
        raise _err(node, f"cats_strings has {len(cs)} entries but cats_int64s {len(ci)}")
    if is_string(x):
        table = dict(zip(cs, (int(v) for v in ci)))
        return _num(ctx, _map(node, x, table, int(node.get("default_int64", -1)), np.int64, True))
    xv = _np(x)
    if xv is None or xv.dtype != np.int64:
        raise _err(node, f"X must be a string or int64 tensor, got {_desc(xv)}")
    # int64 -> strings, vectorized: the keys sorted (a repeated key keeps its last string, as a dict would),
    # searchsorted, the default where the key is absent (neetorch's own index -> class label nodes come here)
    table = dict(zip((int(v) for v in ci), cs))
    keys = np.array(sorted(table), dtype=np.int64)
    vals = np.empty(keys.size + 1, dtype=object)
    vals[:keys.size] = [table[k] for k in keys.tolist()]
    vals[keys.size] = node.get("default_string", "_Unused")
    if keys.size == 0:
        return np.full(xv.shape, vals[0], dtype=object)
    pos = np.minimum(np.searchsorted(keys, xv), keys.size - 1)
    return np.take(vals, np.where(keys[pos] == xv, pos, keys.size))


@host_op("ai.onnx.ml:OneHotEncoder")
def _one_hot_encoder(ctx, node, x):
    """String categories (cats_strings): float32 one-hot of shape X.shape + [len(cats)]."""
    cats = node.get("cats_strings") or []
    x = _s(node, x, "X")
    if not cats:
        raise _err(node, "a string input needs cats_strings")
    pos = {c: i for i, c in reversed(list(enumerate(cats)))}  # the first occurrence wins
    idx = np.array([pos.get(v, -1) for v in x.reshape(-1).tolist()], dtype=np.int64)
    if not node.get("zeros", 1) and (idx < 0).any():
        bad = x.reshape(-1)[np.argmax(idx < 0)]
        raise _err(node, f"zeros=0 and input value {bad!r} is not one of the categories {cats[:10]}")
    out = (idx[:, None] == np.arange(len(cats))[None, :]).astype(np.float32)
    return _num(ctx, out.reshape(*x.shape, len(cats)))


@host_op("ai.onnx.ml:ArrayFeatureExtractor")
def _array_feature_extractor(ctx, node, x, idx):
    """``x[..., idx.ravel()]`` on strings (sklearn-onnx picks class labels this way: classes[argmax]); a 1-D
    input gives one row [1, k], as the numeric op, onnxruntime and the reference."""
    x = _s(node, x, "X")
    i = _np(idx).astype(np.int64).reshape(-1)
    n = x.shape[-1] if x.ndim else 0
    if ((i < 0) | (i >= n)).any():
        raise _err(node, f"index {int(i[(i < 0) | (i >= n)][0])} is out of range for the last dim of size {n}")
    out = np.take(x, i, axis=x.ndim - 1)
    return _obj(out.reshape(1, i.size) if x.ndim == 1 else out)


# ------------------------------------------------------------------------- casts
def _format_number(v, kind) -> str:
    """A number as onnxruntime's Cast writes it."""
    if kind == "b":
        return "1" if v else "0"
    if kind in "iu":
        return str(int(v))
    v = float(v)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "INF" if v > 0 else "-INF"
    return f"{v:.8g}"  # C's %.8g, as onnxruntime


def _float_like(dt) -> bool:
    return dt.kind == "f" or dt.name.startswith(("bfloat", "float"))


def _parse_number(node, s, dt):
    t = s.strip()
    try:
        if _float_like(dt):
            try:
                return float(t)  # also "nan", "inf", "-Infinity", "1e3"
            except ValueError:
                return float.fromhex(t)  # "0x1p3", as C's strtod
        return int(t, 16) if t.lower().startswith(("0x", "-0x", "+0x")) else int(t)
    except ValueError:
        raise _err(node, f"cannot parse {s!r} as {dt.name}") from None


def _cast_strings(ctx, node, x, to):
    from .lowering import onnx_np
    if to == _STRING:
        if is_string(x):
            return x
        a = _np(x)
        if a.dtype.kind == "c":
            raise _err(node, "casting complex numbers to strings is not supported")
        kind = "f" if _float_like(a.dtype) else a.dtype.kind
        vals = a.astype(np.float64) if kind == "f" else a
        out = np.empty(a.size, dtype=object)
        out[:] = [_format_number(v, kind) for v in vals.reshape(-1).tolist()]
        return out.reshape(a.shape)
    x = _s(node, x, "input")
    dt = onnx_np(to)
    if dt == np.bool_:
        return _num(ctx, _strings_to_bool(node, x))
    if dt.kind == "c":
        raise _err(node, f"casting strings to {dt.name} is not supported")
    vals = [_parse_number(node, s, dt) for s in x.reshape(-1).tolist()]
    with np.errstate(all="ignore"):
        a = np.array(vals, dtype=np.float64 if _float_like(dt) else np.int64).astype(dt)
    return _num(ctx, a.reshape(x.shape))


_STOULL = re.compile(r"\s*[+-]?([0-9]+)")


def _strings_to_bool(node, x) -> np.ndarray:
    """string -> bool as onnxruntime (the spec leaves it undefined): the leading integer literal, read as
    C's ``std::stoull`` does (leading blanks, a sign, decimal digits, anything after them ignored), is
    nonzero; a string without one is an error.  (ONNX's reference instead takes Python's truthiness:
    every non-empty string is true.)"""
    out = np.empty(x.size, dtype=bool)
    for i, v in enumerate(x.reshape(-1).tolist()):
        m = _STOULL.match(v)
        if m is None:
            raise _err(node, f"cannot cast {v[:40]!r} to bool (expected an integer literal, as onnxruntime)")
        out[i] = int(m.group(1)) != 0
    return out.reshape(x.shape)


@host_op("Cast")
def _cast(ctx, node, x):
    return _cast_strings(ctx, node, x, int(node.get("to")))


@host_op("CastLike")
def _castlike(ctx, node, x, like):
    if is_string(like):
        return _cast_strings(ctx, node, x, _STRING)
    from .loader import ONNX_TO_NP
    want = np.dtype(like.dtype.name if not isinstance(like, np.ndarray) else like.dtype)
    to = next((k for k, v in ONNX_TO_NP.items() if v == want), None)
    if to is None:
        raise _err(node, f"cannot cast strings to {want.name}")
    return _cast_strings(ctx, node, x, to)


# ------------------------------------------------------------------------- data movement on strings
@host_op("Constant")
def _constant(ctx, node):
    v = node.get("value")
    if v is not None:
        return _out(ctx, _attr_array(node, "value"))
    if node.get("value_strings") is not None:
        return as_strings(np.array(node.get("value_strings"), dtype=object), "value_strings")
    if node.get("value_string") is not None:
        return as_strings(node.get("value_string"), "value_string")
    raise _err(node, f"unsupported value attribute {sorted(node.attrs)}")


@host_op("Identity")
def _identity(ctx, node, x):
    return x


@host_op("Reshape")
def _reshape(ctx, node, x, shape):
    x = _s(node, x, "data")
    shp = _ints(shape)
    allow = node.get("allowzero", 0)
    out = [x.shape[i] if s == 0 and not allow else s for i, s in enumerate(shp)]
    try:
        return x.reshape(out)
    except ValueError as e:
        raise _err(node, f"cannot reshape {list(x.shape)} to {shp}: {e}") from None


@host_op("Flatten")
def _flatten(ctx, node, x):
    x = _s(node, x)
    ax = node.get("axis", 1)
    ax = ax + x.ndim if ax < 0 else ax
    lead = int(np.prod(x.shape[:ax], dtype=np.int64))
    return x.reshape(lead, int(np.prod(x.shape[ax:], dtype=np.int64)))


def _axes(node, axes):
    a = _ints(axes)
    return a if a is not None else node.get("axes")


@host_op("Squeeze")
def _squeeze(ctx, node, x, axes=None):
    x = _s(node, x)
    ax = _axes(node, axes)
    return np.squeeze(x) if ax is None else np.squeeze(x, axis=tuple(a % max(x.ndim, 1) for a in ax))


@host_op("Unsqueeze")
def _unsqueeze(ctx, node, x, axes=None):
    x = _s(node, x)
    ax = _axes(node, axes)
    r = x.ndim + len(ax)
    return np.expand_dims(x, tuple(sorted(a % r for a in ax)))


@host_op("Transpose")
def _transpose(ctx, node, x):
    x = _s(node, x)
    perm = node.get("perm")
    return np.transpose(x, perm).copy()


@host_op("Concat")
def _concat(ctx, node, *xs):
    xs = [_s(node, x, f"input {i}") for i, x in enumerate(xs)]
    return np.concatenate(xs, axis=node.get("axis"))


@host_op("Gather")
def _gather(ctx, node, x, indices):
    x = _s(node, x, "data")
    idx = _np(indices).astype(np.int64)
    ax = node.get("axis", 0) % max(x.ndim, 1)
    n = x.shape[ax]
    if ((idx < -n) | (idx >= n)).any():
        raise _err(node, f"an index is out of range for axis {ax} of size {n}")
    return _obj(np.take(x, np.where(idx < 0, idx + n, idx), axis=ax))


@host_op("Slice")
def _slice(ctx, node, x, starts, ends, axes=None, steps=None):
    x = _s(node, x, "data")
    st, en = _ints(starts), _ints(ends)
    ax = _ints(axes) or list(range(len(st)))
    sp = _ints(steps) or [1] * len(st)
    sl = [slice(None)] * x.ndim
    big = 2 ** 62
    for s, e, a, p in zip(st, en, ax, sp):
        e = None if (p > 0 and e >= big) or (p < 0 and e <= -big) else e
        sl[a % x.ndim] = slice(s, e, p)
    return x[tuple(sl)].copy()


@host_op("Expand")
def _expand(ctx, node, x, shape):
    x = _s(node, x)
    shp = tuple(_ints(shape))
    return np.broadcast_to(x, np.broadcast_shapes(x.shape, shp)).copy()


@host_op("Where")
def _where(ctx, node, cond, x, y):
    if not (is_string(x) and is_string(y)):
        raise _err(node, f"X and Y must both be strings, got {_desc(x)} and {_desc(y)}")
    return _obj(np.where(_np(cond).astype(bool), x, y))


@host_op("Shape")
def _shape(ctx, node, x):
    s = list(_s(node, x).shape)
    start, end = node.get("start", 0), node.get("end", None)
    return _num(ctx, s[start:end] if end is not None else s[start:], np.int64)


@host_op("Size")
def _size(ctx, node, x):
    return _num(ctx, _s(node, x).size, np.int64)


# ------------------------------------------------------------------------- sequences of strings
# A sequence is a Python list (as in ops_control); a sequence of strings is a list of numpy object arrays and
# its nodes run here.  Not covered on strings: SequenceMap (a subgraph).
def _seq(node, s, what="input_sequence"):
    if not isinstance(s, list):
        raise _err(node, f"{what} must be a sequence, got a {_desc(s)} tensor")
    for i, x in enumerate(s):
        if not is_string(x):
            raise _err(node, f"{what}: element {i} is a {_desc(x)} tensor; a sequence holds one type (string)")
    return s


def _position(node, s, p, insert=False):
    n = len(s)
    if p is None:
        return n if insert else n - 1
    i = int(_np(p).reshape(-1)[0])
    hi = n if insert else n - 1
    if not -n <= i <= hi:
        raise _err(node, f"position {i} is out of range for a sequence of {n} tensor(s)")
    return i + n if i < 0 else i


@host_op("SequenceEmpty")
def _seq_empty(ctx, node):
    return ([],)


@host_op("SequenceConstruct")
def _seq_construct(ctx, node, *xs):
    return (_seq(node, list(xs), "inputs"),)


@host_op("SequenceAt")
def _seq_at(ctx, node, s, p):
    s = _seq(node, s)
    return s[_position(node, s, p)]


@host_op("SequenceErase")
def _seq_erase(ctx, node, s, p=None):
    s = list(_seq(node, s))
    if not s:
        raise _err(node, "cannot erase from an empty sequence")
    del s[_position(node, s, p)]
    return (s,)


@host_op("SequenceInsert")
def _seq_insert(ctx, node, s, t, p=None):
    s = list(_seq(node, s))
    s.insert(_position(node, s, p, insert=True), _s(node, t, "tensor"))
    return (s,)


@host_op("SequenceLength")
def _seq_length(ctx, node, s):
    return _num(ctx, len(_seq(node, s)), np.int64)


@host_op("SplitToSequence")
def _split_to_sequence(ctx, node, x, split=None):
    x = _s(node, x, "input")
    if x.ndim == 0:
        raise _err(node, "input must have rank >= 1")
    ax = node.get("axis", 0)
    if not -x.ndim <= ax < x.ndim:
        raise _err(node, f"axis {ax} is out of range for rank {x.ndim}")
    ax %= x.ndim
    n = x.shape[ax]
    if split is None:
        parts = np.split(x, n, axis=ax) if n else []
        if not node.get("keepdims", 1):
            parts = [np.squeeze(p, ax) for p in parts]
        return ([p.copy() for p in parts],)
    sv = _np(split)
    if sv.ndim == 0:
        k = int(sv)
        if k <= 0:
            raise _err(node, f"split {k} must be positive")
        sizes = [k] * (n // k) + ([n % k] if n % k else [])
    else:
        sizes = [int(v) for v in sv.reshape(-1)]
        if any(v < 0 for v in sizes) or sum(sizes) != n:
            raise _err(node, f"split sizes {sizes} do not add up to the {n} elements of axis {ax}")
    cuts = np.cumsum(sizes)[:-1]
    return ([p.copy() for p in np.split(x, cuts, axis=ax)],)


@host_op("ConcatFromSequence")
def _concat_from_sequence(ctx, node, s):
    s = _seq(node, s)
    if not s:
        raise _err(node, "cannot concatenate an empty sequence")
    ax = node.get("axis")
    new = node.get("new_axis", 0)
    r = s[0].ndim + (1 if new else 0)
    if not -r <= ax < r:
        raise _err(node, f"axis {ax} is out of range for rank {r}")
    try:
        return _obj(np.stack(s, ax % r) if new else np.concatenate(s, ax % r))
    except ValueError as e:
        raise _err(node, f"shapes {[list(x.shape) for x in s]} do not concatenate on axis {ax}: {e}") from None


@host_op("Optional")
def _optional(ctx, node, x=None):
    from .lowering import EMPTY
    return (EMPTY if x is None else x,)


@host_op("OptionalHasElement")
def _optional_has(ctx, node, x=None):
    from .lowering import EMPTY
    return _num(ctx, x is not None and x is not EMPTY, np.bool_)


@host_op("OptionalGetElement")
def _optional_get(ctx, node, x):
    from .lowering import EMPTY
    if x is EMPTY:
        raise _err(node, "the optional is empty")
    return (x,)


# ------------------------------------------------------------------------- Scan over strings
def _flip(x, ax):
    return np.flip(x, ax).copy() if is_string(x) else x.flip(ax)


def _select(x, ax, t):
    return np.take(x, t, axis=ax) if is_string(x) else x.select(ax, t)


@host_op("Scan")
def _scan(ctx, node, *xs):
    """Scan whose inputs or outputs are strings (skl2onnx's ``keep_empty_string`` text option runs
    StringNormalizer row by row): the body runs eagerly on the host, once per step (the ``ops_control`` Scan's
    semantics: scan axes and directions, state carried), string slices as numpy, numbers as nee tensors."""
    import neetorch as nee

    from .ops_control import run_scan

    def stack(vals, axis, reverse):
        strings = is_string(vals[0])
        y = np.stack(vals, 0) if strings else nee.stack([_as_tensor(ctx, o) for o in vals], 0)
        ax = axis % y.ndim
        if ax:
            y = np.moveaxis(y, 0, ax) if strings else y.movedim(0, ax)
        if reverse:
            y = _flip(y, ax)
        return _obj(y) if strings else y
    return run_scan(ctx, node, xs, flip=_flip, select=_select, stack=stack)


_scan.host_subgraphs = True  # lowering.unsupported_nodes: its body's nodes may be host nodes


def _as_tensor(ctx, o):
    return _num(ctx, o) if isinstance(o, np.ndarray) else o


# ------------------------------------------------------------------------- ZipMap
@host_op("ai.onnx.ml:ZipMap")
def _zip_map(ctx, node, x):
    """Scores [N, C] (or [C]: one row) -> a sequence of N maps {class label: score}, as onnxruntime: a Python
    list of dicts with int (classlabels_int64s) or str (classlabels_strings) keys and float values, the keys
    in ascending order (onnxruntime's maps are std::maps), a repeated label taking its last column."""
    ls, li = node.get("classlabels_strings"), node.get("classlabels_int64s")
    if bool(ls) == bool(li):
        raise _err(node, "exactly one of classlabels_strings and classlabels_int64s must be set")
    keys = list(ls) if ls else [int(v) for v in li]
    if is_string(x):
        raise _err(node, "X must be a float tensor, got strings")
    a = _np(x)
    if a.ndim not in (1, 2):
        raise _err(node, f"X must be 1-D or 2-D, got shape {list(a.shape)}")
    a = a.reshape(1, -1) if a.ndim == 1 else a
    if a.shape[1] != len(keys):
        raise _err(node, f"X has {a.shape[1]} columns for {len(keys)} class labels")
    pos = {k: i for i, k in enumerate(keys)}
    order = sorted(pos)
    cols = a[:, [pos[k] for k in order]].astype(np.float64)
    return ([dict(zip(order, row)) for row in cols.tolist()],)
