"""Weight files: safetensors (``load_safetensors`` / ``save_safetensors``) and ``save`` / ``load`` for dicts of
tensors (an ``.npz`` archive: arrays only, never pickled code).

The dicts these return plug straight into ``Module.load_state_dict``.
"""
from __future__ import annotations

import os
from collections import OrderedDict

import numpy as np

from .tensor import dtypes as _dt
from .tensor.tensor import Tensor

__all__ = ["load_safetensors", "save_safetensors", "save", "load"]


def _import_safetensors_numpy():
    try:
        import safetensors.numpy as stnp
    except ImportError:
        raise ImportError("neetorch.load_safetensors / save_safetensors need the optional 'safetensors' package: "
                          "pip install safetensors") from None
    return stnp


def _contig(a: np.ndarray) -> np.ndarray:
    # (np.ascontiguousarray would turn 0-d arrays into 1-d ones)
    return a if a.flags.c_contiguous else np.array(a, order="C")


def _host_array(v, name: str) -> np.ndarray:
    if isinstance(v, Tensor):
        return _contig(v.numpy(force=True))
    if isinstance(v, np.ndarray):
        return _contig(v)
    if hasattr(v, "detach") and hasattr(v, "numpy"):  # torch tensors
        return _contig(v.detach().cpu().numpy())
    if hasattr(v, "__array__"):
        return _contig(np.asarray(v))
    raise TypeError(f"save: value for {name!r} is a {type(v).__name__}, expected a Tensor or array")


def _wrap(a: np.ndarray, device) -> Tensor:
    from .tensor import creation
    if a.dtype.name.startswith("float8") or (a.dtype.name == "bfloat16" and _dt.bfloat16 is None):
        # with ml_dtypes imported, numpy knows these types; neetorch stores them as float32 (bfloat16 arrays
        # stay bfloat16: nee.bfloat16)
        a = a.astype(np.float32)
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    if not a.flags.writeable or not a.flags.c_contiguous:
        a = np.array(a, copy=True, order="C")
    t = creation.from_numpy(a)
    if device is not None and str(device) != "cpu":
        t = t.to(device)
    return t


def load_safetensors(path, device="cpu") -> "OrderedDict[str, Tensor]":
    """Read a ``.safetensors`` file into ``{name: Tensor}`` (file order), on ``device``."""
    stnp = _import_safetensors_numpy()
    path = os.fspath(path)
    try:
        arrays = stnp.load_file(path)
    except Exception as ex:  # bfloat16 & co. have no numpy dtype
        if "bf16" in str(ex).lower() or "bfloat16" in str(ex).lower() or "dtype" in str(ex).lower():
            arrays = _load_safetensors_raw(path)
        else:
            raise
    return OrderedDict((k, _wrap(v, device)) for k, v in arrays.items())


def _load_safetensors_raw(path) -> dict:
    """Minimal reader (header + raw buffers) that widens BF16 to float32."""
    import json
    import struct
    np_types = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
                "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        s, e = info["data_offsets"]
        buf = data[s:e]
        shape = tuple(info["shape"])
        dt = info["dtype"]
        if dt == "BF16":
            u16 = np.frombuffer(buf, dtype="<u2")
            if _dt.bfloat16 is not None:
                out[name] = u16.copy().view(_dt.bfloat16.np).reshape(shape)
            else:
                out[name] = (u16.astype(np.uint32) << 16).view(np.float32).reshape(shape)
        elif dt in np_types:
            out[name] = np.frombuffer(buf, dtype=np.dtype(np_types[dt]).newbyteorder("<")).reshape(shape).copy()
        else:
            raise TypeError(f"load_safetensors: unsupported dtype {dt} for tensor {name!r}")
    return out


def save_safetensors(tensors, path, metadata=None) -> None:
    """Write ``{name: Tensor | ndarray}`` (e.g. ``model.state_dict()``) to a ``.safetensors`` file."""
    stnp = _import_safetensors_numpy()
    if not hasattr(tensors, "items"):
        raise TypeError(f"save_safetensors: expected a dict of tensors, got {type(tensors).__name__}")
    arrays = {}
    seen = {}
    for k, v in tensors.items():
        if not isinstance(k, str):
            raise TypeError(f"save_safetensors: keys must be str, got {type(k).__name__}")
        a = _host_array(v, k)
        # safetensors refuses shared memory; tied weights are saved as copies
        key = (a.__array_interface__["data"][0], a.shape, a.strides) if a.size else None
        if key is not None and key in seen:
            a = a.copy()
        seen[key] = k
        arrays[k] = a
    stnp.save_file(arrays, os.fspath(path), metadata=metadata)


_KEYS = "__neetorch_keys__"


def save(obj, f) -> None:
    """Save a tensor or a (nested-free) dict of tensors as an ``.npz`` archive (no pickle)."""
    if isinstance(obj, Tensor) or isinstance(obj, np.ndarray):
        obj, single = {"": obj}, True
    elif hasattr(obj, "items"):
        single = False
    else:
        raise TypeError(f"neetorch.save: expected a Tensor or a dict of Tensors, got {type(obj).__name__}")
    keys = list(obj.keys())
    arrays = {f"a{i}": _host_array(obj[k], str(k)) for i, k in enumerate(keys)}
    names = np.array([str(k) for k in keys] + (["\x00single"] if single else []), dtype=np.str_)
    if hasattr(f, "write"):
        np.savez(f, **{_KEYS: names}, **arrays)
    else:
        with open(os.fspath(f), "wb") as fh:
            np.savez(fh, **{_KEYS: names}, **arrays)


def _npz_array(a) -> np.ndarray:
    # .npz keeps a bfloat16 array (an ml_dtypes type) as raw 2-byte records ("|V2"): its bits, viewed back
    a = np.array(a)
    if a.dtype.kind == "V" and a.dtype.itemsize == 2 and a.dtype.names is None and _dt.bfloat16 is not None:
        a = a.view(_dt.bfloat16.np)
    return a


def load(f, map_location=None, weights_only=True):
    """Load what :func:`save` wrote: a Tensor or an OrderedDict of Tensors."""
    with np.load(f, allow_pickle=False) as z:
        names = list(z[_KEYS])
        single = bool(names) and names[-1] == "\x00single"
        if single:
            names = names[:-1]
        out = OrderedDict((str(n), _wrap(_npz_array(z[f"a{i}"]), map_location)) for i, n in enumerate(names))
    if single:
        return out[""]
    return out
