"""Maps: ``ai.onnx.ml`` DictVectorizer and CastMap, and map-typed model inputs, as onnxruntime runs them.

A map value is a Python ``dict`` on the host (as onnxruntime's Python API takes and returns them, and as
ZipMap's rows are), never a nee tensor, so the nodes reading one are host nodes (``ops_string.STRING_ONLY``)
and a session input declared ``map(K,tensor(V))`` takes one dict per run, checked by :func:`as_map`:

* keys: ``str`` (or ``numpy.str_``) for ``map(string, ...)``, ``int`` (``numpy`` integers, ``bool``) within
  int64 for ``map(int64, ...)``; other key types are refused, naming the input (onnxruntime also refuses
  ``bytes`` and ``float`` keys);
* values: numbers (Python or numpy, ``bool`` included) for float / double / int64 values (float values
  rounded to float32 as onnxruntime stores them), ``str`` for string values;
* a list of dicts (onnxruntime takes one map per run), a numpy array or anything else: refused, naming
  the input and the type expected.  An empty dict is accepted (onnxruntime's Python binding refuses it:
  "Size of dictionary is empty"; DictVectorizer then gives a row of zeros).

A ``dict``'s items are kept in ascending key order (onnxruntime's maps are ``std::map``), which is the order
CastMap's DENSE form writes them in.

* ``DictVectorizer``: one map -> [1, V] (V = the vocabulary's size), ``out[0, i] = map[vocab[i]]`` or 0
  (the empty string for string values), in the map's value type (onnxruntime's kernels: map(string,
  int64 / float / double), map(int64, string / float / double)); a vocabulary entry repeated gets the
  value in each of its columns;
* ``CastMap``: map(int64, float | string) -> [1, n] float32 / int64 / string: DENSE writes the values in key
  order (n = the map's size), SPARSE writes column k = map[k] for k in 0..max_map-1 and the pad value
  elsewhere (0, or onnxruntime's "0.f" for strings; a negative first key is an error, keys >= max_map are
  dropped); float -> int64 truncates toward zero, float -> string is C's ``%f`` of the float32 value
  (``std::to_string``), string -> float / int64 reads the leading number as ``std::stof`` / ``std::stoll``.

ONNX's reference DictVectorizer differs: it returns [V] for one map and also takes a list of maps ([N, V]);
neetorch follows onnxruntime (one map, [1, V]; a sequence of maps is refused up front, :func:`map_problems`).
"""
from __future__ import annotations

import re

import numpy as np

from .lowering import LoweringError
from .ops_string import _num, host_op

__all__ = ["as_map", "map_problems", "parse_map_type"]

_MAP_RE = re.compile(r"^map\((string|int64),tensor\((\w+)\)\)$")
_I64 = (-(1 << 63), (1 << 63) - 1)


def _err(node, msg):
    return LoweringError(f"node {node.name} ({node.op_type}): {msg}")


def parse_map_type(type_string: str):
    """``"map(string,tensor(float))"`` -> ("string", "float"); None for anything else."""
    m = _MAP_RE.match(type_string)
    return (m.group(1), m.group(2)) if m else None


def _py_type(v) -> str:
    t = type(v)
    return f"numpy {v.dtype.name}" if isinstance(v, np.generic) else t.__name__


def _expect(key, value) -> str:
    kt = "str" if key == "string" else "int"
    vt = "str" if value == "string" else ("int" if value.startswith(("int", "uint")) else "float")
    return f"a dict {{{kt}: {vt}}}"


def as_map(v, type_string: str, what: str) -> dict:
    """``v`` checked against the declared ``map(K,tensor(V))`` and normalized: a new dict with Python
    ``str`` / ``int`` keys in ascending order and Python ``str`` / ``int`` / ``float`` values (float and
    double values as onnxruntime stores them: float32-rounded for ``float``).  Raises TypeError naming
    ``what`` for anything else."""
    spec = parse_map_type(type_string)
    if spec is None:
        raise TypeError(f"{what}: maps of type {type_string} are not supported (neetorch takes map(string, ...) "
                        f"and map(int64, ...) of tensor values)")
    key, value = spec
    want = f"{type_string} ({_expect(key, value)})"
    if not isinstance(v, dict):
        got = type(v).__name__
        if isinstance(v, (list, tuple)) and v and all(isinstance(x, dict) for x in v):
            got = (f"a {got} of {len(v)} dicts (a map input takes one dict per run, as onnxruntime; run once per "
                   f"dict)")
        elif isinstance(v, np.ndarray):
            got = f"a numpy {v.dtype.name} array of shape {list(v.shape)} (a tensor)"
        raise TypeError(f"{what}: expected {want}, got {got}")
    items = []
    for k, x in v.items():
        if key == "string":
            if not isinstance(k, str):  # numpy.str_ is a str
                raise TypeError(f"{what}: expected {want}; key {k!r} is a {_py_type(k)}, not a str")
            k = str(k)
        else:
            if not isinstance(k, (int, np.integer)):  # bool is an int, as for onnxruntime
                raise TypeError(f"{what}: expected {want}; key {k!r} is a {_py_type(k)}, not an int")
            k = int(k)
            if not _I64[0] <= k <= _I64[1]:
                raise TypeError(f"{what}: key {k} does not fit in int64")
        items.append((k, _value(x, value, want, what, k)))
    items.sort(key=lambda kv: kv[0])
    return dict(items)


def _value(x, value, want, what, k):
    if value == "string":
        if not isinstance(x, str):
            raise TypeError(f"{what}: expected {want}; the value of key {k!r} is a {_py_type(x)}, not a str")
        return str(x)
    if isinstance(x, (str, bytes)) or not isinstance(x, (int, float, np.integer, np.floating, np.bool_)):
        raise TypeError(f"{what}: expected {want}; the value of key {k!r} is a {_py_type(x)}, not a number")
    if value.startswith(("int", "uint")):
        if isinstance(x, (float, np.floating)):
            raise TypeError(f"{what}: expected {want}; the value of key {k!r} is a float, not an int")
        x = int(x)
        if not _I64[0] <= x <= _I64[1]:
            raise TypeError(f"{what}: the value of key {k!r} ({x}) does not fit in int64")
        return x
    if value == "float":
        with np.errstate(over="ignore"):
            return float(np.float32(x))
    if value == "double":
        return float(x)
    raise TypeError(f"{what}: maps with {value} values are not supported (float, double, int64, string are)")


def map_problems(graph) -> list:
    """[(what, node name)] for DictVectorizer / CastMap nodes whose input is declared as something other than
    a map (a sequence of maps, ZipMap's output, or a tensor): onnxruntime refuses those models (its kernels
    take one map), so neetorch refuses them up front too."""
    if not any(n.domain == "ai.onnx.ml" and n.op_type in ("DictVectorizer", "CastMap") for n in graph.node):
        return []
    from .session import _type_string
    types = {vi.name: vi.type for vi in list(graph.input) + list(graph.value_info) + list(graph.output)}
    made_by = {o: n for n in graph.node for o in n.output if o}
    bad = []
    for n in graph.node:
        if n.domain != "ai.onnx.ml" or n.op_type not in ("DictVectorizer", "CastMap") or not n.input:
            continue
        src = n.input[0]
        tp = types.get(src)
        if tp is not None and tp.WhichOneof("value") is not None:
            desc = _type_string(tp)
            ok = desc.startswith("map(")
        else:  # undeclared: a ZipMap's output is a sequence of maps
            p = made_by.get(src)
            desc = "seq(map(...)) (ZipMap's output)" if p is not None and p.op_type == "ZipMap" else None
            ok = desc is None
        if not ok:
            what = f"ai.onnx.ml.{n.op_type} on input {src!r} of type {desc} (it takes one map, as onnxruntime)"
            bad.append((what, n.name or f"<unnamed {n.op_type} -> {', '.join(n.output)}>"))
    return bad


def _the_map(node, m, what="X"):
    if isinstance(m, dict):
        return m
    got = type(m).__name__
    if isinstance(m, list):
        got = f"a sequence of {len(m)} value(s)"
    elif isinstance(m, np.ndarray) or hasattr(m, "shape"):
        got = f"a tensor of shape {list(m.shape)}"
    raise _err(node, f"{what} must be one map (a dict), got {got}")


def _kinds(m):
    """(key kind, value kind) of a map's items: 'string' / 'int64' keys, 'string' / 'int' / 'float' values."""
    if not m:
        return None, None
    k, v = next(iter(m.items()))
    return ("string" if isinstance(k, str) else "int64"), ("string" if isinstance(v, str) else
                                                           ("int" if isinstance(v, int) else "float"))


@host_op("ai.onnx.ml:DictVectorizer")
def _dict_vectorizer(ctx, node, m):
    m = _the_map(node, m)
    sv, iv = node.get("string_vocabulary"), node.get("int64_vocabulary")
    if bool(sv) == bool(iv):
        raise _err(node, "exactly one of string_vocabulary and int64_vocabulary must be set")
    vocab = list(sv) if sv else [int(k) for k in iv]
    kk, vk = _kinds(m)
    want = "string" if sv else "int64"
    if kk is not None and kk != want:
        raise _err(node, f"the map has {kk} keys but the vocabulary is {want} ({want}_vocabulary)")
    want_np = ctx.program.declared_np(node.outputs[0]) if ctx.program is not None else None
    strings = vk == "string" if vk is not None else want_np == np.object_
    if strings:
        if want_np is not None and want_np != np.object_:
            raise _err(node, f"the map has string values but the output is declared {np.dtype(want_np).name}")
        row = np.empty((1, len(vocab)), dtype=object)
        row[0, :] = [m.get(k, "") for k in vocab]
        return row
    if want_np == np.object_:
        raise _err(node, "the map has numeric values but the output is declared tensor(string)")
    dt = want_np if want_np is not None else (np.int64 if vk == "int" else np.float32)
    return _num(ctx, np.array([[m.get(k, 0) for k in vocab]], dtype=dt).reshape(1, len(vocab)))


_HEX_PREFIX = re.compile(r"\s*([+-]?)0[xX]((?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP][+-]?\d+)?)")
_NUM_PREFIX = re.compile(r"\s*[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan)", re.IGNORECASE)
_INT_PREFIX = re.compile(r"\s*[+-]?\d+")
_F32_MAX = float(np.finfo(np.float32).max)


def _stof(node, s):
    """C's ``std::stof``: the longest leading number (decimal, hex, inf, nan); none, or one out of float's
    range, is an error (onnxruntime's CastMap throws)."""
    h = _HEX_PREFIX.match(s)
    if h is not None:
        mant = h.group(2) if "p" in h.group(2).lower() else h.group(2) + "p0"
        v = float.fromhex(h.group(1) + "0x" + mant)
    else:
        m = _NUM_PREFIX.match(s)
        if m is None:
            raise _err(node, f"cannot convert {s[:40]!r} to float (std::stof, as onnxruntime)")
        v = float(m.group(0))
    if np.isfinite(v) and abs(v) > _F32_MAX:
        raise _err(node, f"{s[:40]!r} is out of float's range (std::stof, as onnxruntime)")
    return float(np.float32(v))


def _stoll(node, s):
    m = _INT_PREFIX.match(s)
    if m is None:
        raise _err(node, f"cannot convert {s[:40]!r} to int64 (std::stoll, as onnxruntime)")
    v = int(m.group(0))
    if not _I64[0] <= v <= _I64[1]:
        raise _err(node, f"{s[:40]!r} is out of int64's range (std::stoll)")
    return v


def _f32_str(v):
    """C's ``%f`` of a float32 value (``std::to_string``)."""
    v = float(np.float32(v))
    if np.isnan(v):
        return "nan"
    if v in (float("inf"), float("-inf")):
        return "inf" if v > 0 else "-inf"
    return f"{v:f}"


@host_op("ai.onnx.ml:CastMap")
def _cast_map(ctx, node, m):
    m = _the_map(node, m)
    to = node.get("cast_to", "TO_FLOAT")
    form = node.get("map_form", "DENSE")
    if to not in ("TO_FLOAT", "TO_INT64", "TO_STRING"):
        raise _err(node, f"cast_to {to!r} is not one of TO_FLOAT, TO_INT64, TO_STRING")
    if form not in ("DENSE", "SPARSE"):
        raise _err(node, f"map_form {form!r} is not one of DENSE, SPARSE")
    kk, vk = _kinds(m)
    if kk == "string":
        raise _err(node, "the map must have int64 keys (map(int64, float) or map(int64, string))")
    if vk == "int":
        vk = "float"
    if vk == "string":
        conv = {"TO_FLOAT": lambda s: _stof(node, s), "TO_INT64": lambda s: _stoll(node, s),
                "TO_STRING": str}[to]
    else:
        conv = {"TO_FLOAT": lambda x: float(np.float32(x)), "TO_STRING": _f32_str,
                "TO_INT64": lambda x: _trunc(node, x)}[to]
    pad = {"TO_FLOAT": 0.0, "TO_INT64": 0, "TO_STRING": "0.f"}[to]
    if form == "DENSE":
        vals = [conv(v) for v in m.values()]
    else:
        n = int(node.get("max_map", 1))
        if n < 0:
            raise _err(node, f"max_map {n} must be non-negative")
        if m and next(iter(m)) < 0:
            raise _err(node, f"negative keys are not allowed with map_form SPARSE (first key {next(iter(m))})")
        vals = [conv(m[k]) if k in m else pad for k in range(n)]
    if to == "TO_STRING":
        out = np.empty((1, len(vals)), dtype=object)
        out[0, :] = vals
        return out
    return _num(ctx, np.array([vals], dtype=np.float32 if to == "TO_FLOAT" else np.int64).reshape(1, len(vals)))


def _trunc(node, x):
    x = float(np.float32(x))
    if np.isnan(x) or not -9.223372036854776e18 <= x < 9.223372036854776e18:
        raise _err(node, f"cannot cast {x} to int64")
    return int(x)
