"""Indexing ops: ``Tensor.__getitem__``/``__setitem__``, gather/scatter, index_*, take, masked_*, nonzero,
sort/argsort/topk, unique, searchsorted.

Basic indexing (ints, slices, None, Ellipsis) never copies: it builds a view with
:func:`neetorch.tensor.views.make_view`.  Advanced indexing (integer index tensors,
bool masks) runs the ``index`` op (a copy) and ``index_put`` for assignment, with
PyTorch's rule for where the indexed dims go: the broadcast index dims replace the
indexed dims in place when those are adjacent, else they go first.

Every index is validated in the frontend before a kernel sees it.
Ops whose output size depends on the data (``nonzero``, ``masked_select``,
``unique``) get the size as an attr, computed here from a host pass.
"""
from __future__ import annotations

import numbers
from collections import namedtuple

import numpy as np

from ..tensor import _storage
from ..tensor import dtypes as _dt
from ..tensor.tensor import Tensor
from .registry import Meta, OpDef, export, register, run
from .shape_rules import broadcast_shapes, int_arg, numel, wrap_dim

__all__ = ["getitem", "setitem", "gather", "scatter", "scatter_add", "scatter_reduce", "index_select", "index_add",
           "index_fill", "index_copy", "index_put", "take", "take_along_dim", "masked_select", "masked_scatter",
           "nonzero", "argwhere", "sort", "argsort", "msort", "topk", "unique", "searchsorted", "bucketize", "kthvalue"]


# ---------------------------------------------------------------- helpers
def _host(t: Tensor) -> np.ndarray:
    return t.numpy(force=True)


def _shape_list(s) -> str:
    return str(list(s))


def _minmax(a: np.ndarray):
    if a.size == 0:
        return None, None
    return int(a.min()), int(a.max())


class IndexOutOfRangeError(IndexError, RuntimeError):
    """An index out of range where torch raises IndexError on some paths and RuntimeError on others (index_select:
    by dim and dtype; index_add; embedding_bag): ``except IndexError`` and ``except RuntimeError`` both catch it."""


def _check_range(op: str, a: np.ndarray, size: int, dim: int, allow_negative: bool, exc=IndexError, fmt=None):
    """Raise ``exc`` naming the op, the dim, its size and the first offending value."""
    lo, hi = _minmax(a)
    if lo is None:
        return
    low = -size if allow_negative else 0
    if lo >= low and hi < size:
        return
    bad = a[(a < low) | (a >= size)].reshape(-1)[0]
    if fmt is not None:
        raise exc(fmt.format(v=int(bad), d=dim, n=size))
    raise exc(f"{op}: index {int(bad)} is out of bounds for dimension {dim} with size {size}")


# ================================================================ __getitem__ / __setitem__
def _index_result_shape(xshape, dims, ncons, idx_shapes, nnz):
    """Shape of ``x[key]`` where the advanced entries sit at ``dims`` (each consuming ``ncons`` dims)."""
    shapes = []
    for k, (c, s) in enumerate(zip(ncons, idx_shapes)):
        shapes.append((nnz[k],) if c != 1 or nnz[k] >= 0 else tuple(s))
    b = broadcast_shapes(*shapes, op="index") if shapes else ()
    covered = []
    for d, c in zip(dims, ncons):
        covered.extend(range(d, d + c))
    adjacent = covered == list(range(covered[0], covered[0] + len(covered)))
    rest = [xshape[i] for i in range(len(xshape)) if i not in covered]
    if adjacent:
        first = covered[0]
        before = [xshape[i] for i in range(first)]
        after = [xshape[i] for i in range(covered[-1] + 1, len(xshape))]
        return tuple(before) + tuple(b) + tuple(after)
    return tuple(b) + tuple(rest)


def _infer_index(metas, attrs):
    x = metas[0]
    dims, ncons, nnz = attrs["dims"], attrs["ncons"], attrs["nnz"]
    shape = _index_result_shape(x.shape, dims, ncons, [m.shape for m in metas[1:]], nnz)
    return [Meta(shape, x.dtype)]


INDEX = register(OpDef("index", infer=_infer_index,
                       doc="x[key] for integer index tensors / bool masks at dims (advanced indexing, a copy)"))


def _infer_index_put(metas, attrs):
    return [Meta(metas[0].shape, metas[0].dtype)]


INDEX_PUT = register(OpDef("index_put", infer=_infer_index_put,
                           doc="in place: target[key] = value (or += with accumulate); inputs target, value, *indices"))


def _fast_key(x: Tensor, index):
    """A numpy basic-index key (ints, positive-step slices, None, Ellipsis) for CPU tensors, else None.

    numpy's basic indexing is a view with the same semantics; an Ellipsis is appended so the result
    is always an array (never a numpy scalar)."""
    if x._device.type != "cpu":
        return None
    key = index if type(index) is tuple else (index,)
    ell = False
    for it in key:
        tp = type(it)
        if tp is int:
            continue
        if tp is slice:
            st = it.step
            if st is not None and (type(st) is not int or st <= 0):
                return None
            if not (type(it.start) in (int, type(None)) and type(it.stop) in (int, type(None))):
                return None
            continue
        if it is None:
            continue
        if it is Ellipsis:
            if ell:
                return None
            ell = True
            continue
        return None
    return key if ell else key + (Ellipsis,)


def _bad_index(it):
    return IndexError("only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables are valid "
                      f"indices (got {type(it).__name__})")


def _classify(x: Tensor, index):
    """Normalize an index into a list of entries: ('int', i) ('slice', s) ('none',) ('ellipsis',)
    ('bool', b) ('idx', Tensor) ('mask', Tensor)."""
    if isinstance(index, list) and len(index) < 32 and any(
            isinstance(e, (list, tuple, slice, Tensor, np.ndarray)) or e is None or e is Ellipsis for e in index):
        index = tuple(index)  # torch's (deprecated, still current) treatSequenceAsTuple rule
    if not isinstance(index, tuple):
        index = (index,)
    out = []
    for it in index:
        if it is None:
            out.append(("none",))
        elif it is Ellipsis:
            out.append(("ellipsis",))
        elif isinstance(it, slice):
            out.append(("slice", it))
        elif isinstance(it, (bool, np.bool_)):
            out.append(("bool", bool(it)))
        elif isinstance(it, (numbers.Integral, np.integer)):
            out.append(("int", int(it)))
        elif isinstance(it, Tensor):
            out.append(_tensor_entry(it))
        elif isinstance(it, (np.ndarray, list, tuple)):
            a = np.asarray(it)
            if a.dtype == object or a.dtype.kind not in "biu":
                if a.size == 0:
                    a = a.astype(np.int64)
                else:
                    raise _bad_index(it)
            from ..tensor.creation import tensor
            t = tensor(a.astype(np.int64) if a.dtype.kind in "iu" and a.dtype != np.int32 else a, device=x._device)
            out.append(_tensor_entry(t))
        else:
            raise _bad_index(it)
    return out


def _tensor_entry(t: Tensor):
    if t._dtype is _dt.bool_ or t._dtype is _dt.uint8:
        return ("mask", t if t._dtype is _dt.bool_ else t.to(_dt.bool_))
    if t._dtype.name not in ("int64", "int32"):
        raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
    if t.ndim == 0:
        return ("int", int(t.item()))  # torch treats a 0-d integer tensor like an int
    return ("idx", t)


def _apply_basic(x: Tensor, index):
    """Apply ints/slices/None/Ellipsis as a view; return (view, adv) with adv = [(dim, kind, tensor)]."""
    from ..tensor.views import make_view
    entries = _classify(x, index)
    consumed = 0
    nell = 0
    for e in entries:
        k = e[0]
        if k in ("int", "slice", "idx"):
            consumed += 1
        elif k == "mask":
            consumed += max(e[1].ndim, 0) if e[1].ndim else 0
        elif k == "ellipsis":
            nell += 1
    # torch accepts several ellipses (numpy refuses): each one advances its dim cursor by ndim - (the dims the
    # other entries index), so a second '...' can carry the cursor (src) past the last dim; an entry there
    # raises (torch's messages; an int's names its position in the index), but a full slice ``:`` there is a
    # no-op (torch's applySlice shortcut)
    nd = x.ndim
    if consumed > nd:
        raise IndexError(f"too many indices for tensor of dimension {nd}")
    shape, isz = x._data.shape, x._dtype.itemsize
    strides = [s // isz for s in x._data.strides]
    nshape, nstrides, off = [], [], 0
    adv = []
    src = 0  # current dim of x
    for pos, e in enumerate(entries):
        k = e[0]
        if nell > 1 and k != "ellipsis" and (src > nd or (src == nd and k in ("int", "slice", "idx"))):
            if k == "slice" and e[1].start in (None, 0) and e[1].stop is None and e[1].step in (None, 1):
                continue
            if k == "int":
                raise IndexError(f"index {e[1]} is out of bounds for dimension {pos} with size 0")
            if k == "idx":
                raise IndexError(f"too many indices for tensor of dimension {nd} (got {src + 1})")
            raise IndexError(f"Dimension out of range (expected to be in range of [{-len(nshape) - 1}, "
                             f"{len(nshape)}], but got {len(nshape) + src - nd})")
        if k == "ellipsis":
            n = nd - consumed
            nshape.extend(shape[src:src + n])
            nstrides.extend(strides[src:src + n])
            src += n
        elif k == "none":
            nshape.append(1)
            nstrides.append(0)
        elif k == "bool":
            # torch records a Python bool as an index tensor (boolToIndexingTensor: [0] for True, [] for False)
            # on an unsqueezed dim: an advanced index (a copy) that broadcasts with the other advanced ones
            from ..tensor.creation import zeros
            nshape.append(1)
            nstrides.append(0)
            adv.append((len(nshape) - 1, "idx", zeros(1 if e[1] else 0, dtype=_dt.int64, device=x._device)))
        elif k == "int":
            i, n = e[1], shape[src]
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for dimension {src} with size {n}")
            if i < 0:
                i += n
            off += i * strides[src]
            src += 1
        elif k == "slice":
            s = e[1]
            step = 1 if s.step is None else _int_or_raise(s.step)
            if step <= 0:
                raise ValueError("step must be greater than zero")
            n = shape[src]
            start, stop, _ = slice(None if s.start is None else _int_or_raise(s.start),
                                   None if s.stop is None else _int_or_raise(s.stop), step).indices(n)
            length = max(0, (stop - start + step - 1) // step)
            if length > 0:
                off += start * strides[src]
            nshape.append(length)
            nstrides.append(strides[src] * step)
            src += 1
        elif k == "idx":
            adv.append((len(nshape), "idx", e[1]))
            nshape.append(shape[src])
            nstrides.append(strides[src])
            src += 1
        elif k == "mask":
            m = e[1]
            if m.ndim == 0:
                # a 0-d mask adds a dim of size 1 (True) or 0 (False)
                nshape.append(1)
                nstrides.append(0)
                adv.append((len(nshape) - 1, "mask0", m))
                continue
            for j in range(m.ndim):
                if src + j >= nd or m.shape[j] != shape[src + j]:
                    raise IndexError(f"The shape of the mask {_shape_list(m.shape)} at index {j} does not match the "
                                     f"shape of the indexed tensor {_shape_list(shape)} at index {src + j}")
            adv.append((len(nshape), "mask", m))
            nshape.extend(shape[src:src + m.ndim])
            nstrides.extend(strides[src:src + m.ndim])
            src += m.ndim
    nshape.extend(shape[src:])
    nstrides.extend(strides[src:])
    if tuple(nshape) == tuple(shape) and nstrides == strides and off == 0:
        v = Tensor._make(x._data, x._device, x._dtype)  # a new tensor object over the same storage, like torch
    else:
        v = make_view(x, nshape, nstrides, off)
    return v, adv


def _int_or_raise(v):
    if isinstance(v, Tensor):
        v = v.__index__()
    if not isinstance(v, (numbers.Integral, np.integer)):
        raise TypeError(f"slice indices must be integers or None or have an __index__ method (got {type(v).__name__})")
    return int(v)


def _prepare_adv(v: Tensor, adv):
    """Validate advanced entries against view ``v``; return (tensors, attrs)."""
    dims, ncons, nnz, tens = [], [], [], []
    for d, kind, t in adv:
        if kind == "idx":
            dims.append(d)
            ncons.append(1)
            nnz.append(-1)
            tens.append(t)
        elif kind == "mask0":
            from ..tensor.creation import zeros
            dims.append(d)
            ncons.append(1)
            nnz.append(-1)
            tens.append(zeros(1 if bool(t.item()) else 0, dtype=_dt.int64, device=v._device))
        else:
            dims.append(d)
            ncons.append(t.ndim)
            nnz.append(int(np.count_nonzero(_host(t))))
            tens.append(t)
    shapes = [((nnz[k],) if ncons[k] != 1 or nnz[k] >= 0 else tuple(t.shape)) for k, t in enumerate(tens)]
    try:
        bshape = broadcast_shapes(*shapes, op="index")
    except RuntimeError:
        raise IndexError("shape mismatch: indexing tensors could not be broadcast together with shapes "
                         + ", ".join(_shape_list(s) for s in shapes)) from None
    attrs = {"dims": tuple(dims), "ncons": tuple(ncons), "nnz": tuple(nnz)}
    res = _index_result_shape(tuple(v.shape), attrs["dims"], attrs["ncons"], [tuple(t.shape) for t in tens], nnz)
    for d, c, t in zip(dims, ncons, tens):
        # like torch, an empty result reads nothing and is not range-checked, unless the dim itself is empty
        if c == 1 and t._dtype.category == 1 and (numel(res) or (v.shape[d] == 0 and numel(bshape))):
                _check_range("index", _host(t), v.shape[d], d, True,
                             fmt="index {v} is out of bounds for dimension {d} with size {n}")
    return tens, attrs, res


def _getitem_tensor(self: Tensor, index: Tensor):
    """Fast path for ``x[int_tensor]`` and ``x[mask_of_x's_shape]``; None when the general path must run."""
    dt = index._dtype
    sh = self._data.shape
    if dt is _dt.int64 or dt is _dt.int32:
        a = _host(index)
        n = sh[0]
        if a.size:
            lo, hi = int(a.min()), int(a.max())
            if lo < -n or hi >= n:
                return None  # the general path raises the error
        metas = [Meta(tuple(index._data.shape) + tuple(sh[1:]), self._dtype)]
        return run(INDEX, [self, index], {"dims": (0,), "ncons": (1,), "nnz": (-1,)}, metas)[0]
    if dt is _dt.bool_ and index._data.shape == sh:
        c = int(np.count_nonzero(_host(index)))
        metas = [Meta((c,), self._dtype)]
        return run(INDEX, [self, index], {"dims": (0,), "ncons": (len(sh),), "nnz": (c,)}, metas)[0]
    return None


@export(name="getitem", function=False)
def getitem(self: Tensor, index) -> Tensor:
    """``self[index]`` with PyTorch's semantics: a view for basic indices, a copy for advanced ones."""
    key = _fast_key(self, index)
    if key is not None:
        try:
            return Tensor._make(self._data[key], self._device, self._dtype)
        except IndexError:
            pass  # the general path below raises torch's message
    elif type(index) is Tensor and index.ndim >= 1 and self.ndim >= 1:
        r = _getitem_tensor(self, index)
        if r is not None:
            return r
    v, adv = _apply_basic(self, index)
    if not adv:
        return v
    tens, attrs, res = _prepare_adv(v, adv)
    if not numel(res):
        from ..tensor.creation import empty
        return empty(res, dtype=self._dtype, device=self._device)
    return run(INDEX, [v] + tens, attrs)[0]


def _value_tensor(value, target: Tensor) -> Tensor:
    if isinstance(value, Tensor):
        if value._device != target._device:
            if value.ndim == 0:
                value = value.to(target._device)
            else:
                raise RuntimeError(f"setitem: value on {value._device} but the tensor is on {target._device}")
        if value._dtype is not target._dtype:
            value = value.to(target._dtype)
        return value
    from ..ops.elementwise import _is_scalar, _scalar_tensor
    if _is_scalar(value):
        if target._dtype.category == 1 and isinstance(value, float) and value != value:
            raise RuntimeError("setitem: cannot assign NaN to an integer tensor")
        return _scalar_tensor(value, target._dtype, target._device)
    from ..tensor.creation import tensor
    return tensor(value, dtype=target._dtype, device=target._device)


def _strip_leading_ones(value: Tensor, ndim: int) -> Tensor:
    # torch's copy_to/slicePrefix1sSize: drop leading size-1 dims the target does not have
    if value.ndim > ndim:
        sh = list(value.shape)
        k = 0
        while len(sh) - k > ndim and sh[k] == 1:
            k += 1
        if k:
            value = value.reshape(sh[k:])
    return value


@export(name="setitem", function=False)
def setitem(self: Tensor, index, value) -> None:
    """``self[index] = value``: writes through a view (basic) or scatters (advanced, ``index_put_``)."""
    if type(value) in (int, float):
        if self._dtype.category == 2 and self._dtype.itemsize == 2 and type(value) is float:
            # torch: a float written into a float16 / bfloat16 tensor rounds (past the range: inf), never refused
            # (through float32 like torch's Half(float(x)): two roundings)
            with np.errstate(over="ignore"):
                value = float(np.array(value, np.float64).astype(np.float32).astype(self._dtype.np))
        else:
            value = _dt.fit_scalar(value, self._dtype, "setitem")
    elif type(value) is complex and self._dtype.category != 3:
        value = _dt.fit_scalar(value, self._dtype, "setitem").real     # (torch: only a zero imaginary part)
    key = _fast_key(self, index)
    if key is not None and (type(value) in (int, float, bool) or (
            isinstance(value, Tensor) and value._device.type == "cpu" and value.ndim <= self.ndim)):
        if not self._data.flags.writeable:
            raise RuntimeError("setitem: the tensor is read-only")
        if 0 in self._data.strides:     # (what is written must not overlap itself: x.expand(3, 4)[0] may be)
            _check_no_overlap(Tensor._make(self._data[key], self._device, self._dtype))
        if isinstance(value, Tensor) and np.may_share_memory(self._data, value._data):   # (x[1:] = x[:-1]: torch
            _check_partial_overlap(Tensor._make(self._data[key], self._device, self._dtype), value)  # refuses)
        src = value._data if isinstance(value, Tensor) else value
        if isinstance(value, Tensor) and _dt.via_f32(src.dtype, self._data.dtype):
            src = src.astype(np.float32)   # (torch narrows to float16/bfloat16 through float32)
        try:
            self._data[key] = src
            _storage.bump(self._data)   # (write counter of the storage: tensor/_storage.py)
            return
        except (IndexError, ValueError, OverflowError):
            pass  # nothing was written; the general path below raises torch's message
    if index is False:
        return  # torch writes nothing for a lone False index (and checks nothing)
    # a lone True: torch's copy into an unsqueezed view (in a tuple, True is an index tensor: _apply_basic)
    v, adv = (self.unsqueeze(0), []) if index is True else _apply_basic(self, index)
    if 0 in v._data.strides:
        if adv:
            _warn_expanded(v)
        else:
            _check_no_overlap(v)
    # torch's index_put_ wants matching dtypes except where it dispatches to masked_fill: a one-element value
    # and a single bool mask as the only tensor index (a True inside a tuple index becomes an int64 index
    # tensor; a lone True is torch's copy into an unsqueezed view)
    has_true = type(index) is tuple and any(it is True for it in index)
    if adv or has_true:
        _check_put_dtype(self, value, adv, has_true, False)
    val = _value_tensor(value, self)
    if not adv:
        val = _strip_leading_ones(val, v.ndim)
        try:
            broadcast_shapes(tuple(val.shape), tuple(v.shape))
            ok = broadcast_shapes(tuple(val.shape), tuple(v.shape)) == tuple(v.shape)
        except RuntimeError:
            ok = False
        if not ok:
            raise RuntimeError(f"setitem: shape mismatch: value tensor of shape {_shape_list(val.shape)} cannot be "
                               f"broadcast to indexing result of shape {_shape_list(v.shape)}")
        if v.numel():
            v.copy_(val)
        return
    tens, attrs, res = _prepare_adv(v, adv)
    _index_put_impl(v, tens, attrs, val, False, res)


def _check_put_dtype(self: Tensor, value, adv, has_true: bool, accumulate: bool):
    """torch's index_put_ wants matching dtypes, except where it dispatches to masked_fill: no accumulation, a
    one-element value and a single bool mask as the only tensor index."""
    if isinstance(value, Tensor) and value._dtype is not self._dtype and not (
            not accumulate and value.numel() == 1 and len(adv) == 1 and adv[0][1] == "mask" and not has_true):
        raise RuntimeError(f"Index put requires the source and destination dtypes match, got "
                           f"{_TNAME[self._dtype.name]} for the destination and {_TNAME[value._dtype.name]} for the "
                           f"source.")


_TNAME = {"bool": "Bool", "uint8": "Byte", "int8": "Char", "int16": "Short", "int32": "Int", "int64": "Long",
          "float16": "Half", "bfloat16": "BFloat16", "float32": "Float", "float64": "Double"}


def _warn_expanded(t: Tensor):
    """torch scatters into an expanded tensor with a deprecation warning (the aliased elements take the last
    write); a plain view write into one is refused (``_check_no_overlap``)."""
    if any(st == 0 and n > 1 for n, st in zip(t._data.shape, t._data.strides)):
        import warnings
        warnings.warn("Use of index_put_ on expanded tensors is deprecated. Please clone() the tensor before "
                      "performing this operation. This also applies to advanced indexing e.g. tensor[indices] = "
                      "tensor", UserWarning, stacklevel=3)


def _check_no_overlap(t: Tensor):
    if 0 in t._data.shape:
        return
    for n, st in zip(t._data.shape, t._data.strides):
        if st == 0 and n > 1:
            raise RuntimeError("unsupported operation: more than one element of the written-to tensor refers to a "
                               "single memory location. Please clone() the tensor before performing the operation.")


def _dense_range(a):
    """(start, end) bytes of a numpy array whose elements tile that range exactly (torch's non-overlapping and
    dense), else None."""
    if a.size == 0:
        return None
    lo = hi = a.__array_interface__["data"][0]
    for n, st in zip(a.shape, a.strides):
        if n > 1:
            if st == 0:
                return None
            if st > 0:
                hi += (n - 1) * st
            else:
                lo += (n - 1) * st
    hi += a.itemsize
    return (lo, hi) if hi - lo == a.size * a.itemsize else None


def _check_any_overlap(out: Tensor, src) -> None:
    """torch's assert_no_overlap (index_put_: the values may not share any element with the target, the same
    elements included); either one not dense passes (torch: too hard to tell)."""
    if not isinstance(src, Tensor) or not isinstance(out._data, np.ndarray) or \
            not isinstance(src._data, np.ndarray) or not np.may_share_memory(out._data, src._data):
        return
    ra, rb = _dense_range(out._data), _dense_range(src._data)
    if ra is not None and rb is not None and ra[0] < rb[1] and rb[0] < ra[1]:
        raise RuntimeError("unsupported operation: some elements of the input tensor and the written-to tensor refer "
                           "to a single memory location. Please clone() the tensor before performing the operation.")


def _check_partial_overlap(out: Tensor, src) -> None:
    """torch's assert_no_partial_overlap for a write into ``out`` reading ``src``: both dense over memory that
    overlaps without being the same elements (x[1:].copy_(x[:-1]), x.t().add_(x)) is refused; the same range with
    the same strides, or either one not dense (torch: too hard to tell), passes."""
    if not isinstance(src, Tensor) or src is out:
        return
    a, b = out._data, src._data
    if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)) or not np.may_share_memory(a, b):
        return
    ra, rb = _dense_range(a), _dense_range(b)
    if ra is None or rb is None or (ra == rb and a.strides == b.strides):
        return
    if ra[0] < rb[1] and rb[0] < ra[1]:
        raise RuntimeError("unsupported operation: some elements of the input tensor and the written-to tensor refer "
                           "to a single memory location. Please clone() the tensor before performing the operation.")


def _index_put_impl(target: Tensor, tens, attrs, val: Tensor, accumulate: bool, res):
    _check_any_overlap(target, val)
    val = _strip_leading_ones(val, len(res))
    try:
        ok = broadcast_shapes(tuple(val.shape), res) == res
    except RuntimeError:
        ok = False
    if not ok:
        raise RuntimeError(f"shape mismatch: value tensor of shape {_shape_list(val.shape)} cannot be broadcast to "
                           f"indexing result of shape {_shape_list(res)}")
    if not numel(res):
        return
    if not target._data.flags.writeable and target._device.type == "cpu":
        raise RuntimeError("index_put_: the tensor is read-only")
    a = dict(attrs)
    a["accumulate"] = bool(accumulate)
    run(INDEX_PUT, [target, val] + list(tens), a, [Meta(tuple(target.shape), target._dtype)], out=[target])


@export(name="index_put_")
def index_put_(input: Tensor, indices, values, accumulate: bool = False) -> Tensor:
    """In place ``input[indices] = values`` (``+=`` with ``accumulate=True``, duplicates summed)."""
    if not isinstance(indices, (tuple, list)):
        raise TypeError("index_put_: indices must be a tuple of tensors")
    idx = tuple(i if i is not None else slice(None) for i in indices)
    v, adv = _apply_basic(input, idx)
    if 0 in v._data.strides:
        if adv:
            _warn_expanded(v)
        else:
            _check_no_overlap(v)
    _check_put_dtype(input, values, adv, False, accumulate)
    val = _value_tensor(values, input)
    if not adv:
        if accumulate:
            v.copy_(v + val)
        else:
            v.copy_(val)
        return input
    tens, attrs, res = _prepare_adv(v, adv)
    _index_put_impl(v, tens, attrs, val, accumulate, res)
    return input


@export
def index_put(input: Tensor, indices, values, accumulate: bool = False) -> Tensor:
    """Out-of-place ``index_put_`` (``torch.index_put``)."""
    return index_put_(input.clone(), indices, values, accumulate)


# ================================================================ gather / scatter
def _infer_gather(metas, attrs):
    return [Meta(metas[1].shape, metas[0].dtype)]


GATHER = register(OpDef("gather", infer=_infer_gather,
                        reference=lambda xs, a: [np.take_along_axis(xs[0], xs[1], a["dim"])]))


def _check_gather_like(op: str, input: Tensor, dim: int, index: Tensor, src: Tensor | None = None, size_dim=True):
    if not isinstance(index, Tensor):
        raise TypeError(f"{op}(): index must be a Tensor, got {type(index).__name__}")
    if index._dtype.name not in ("int64", "int32"):
        raise RuntimeError(f"{op}(): Expected dtype int32/int64 for index, got {index._dtype.name}")
    ind, xnd = max(index.ndim, 1), max(input.ndim, 1)
    if index.numel() and ind != xnd:
        raise RuntimeError(f"{op}(): Index tensor must have the same number of dimensions as input tensor "
                           f"(index {_shape_list(index.shape)}, input {_shape_list(input.shape)})")
    d = wrap_dim(dim, input.ndim, op)
    ish = tuple(index.shape) or (1,)
    xsh = tuple(input.shape) or (1,)
    if index.numel():
        for k in range(ind):
            if k != d and ish[k] > xsh[k]:
                raise RuntimeError(f"{op}(): Size does not match at dimension {k} expected index {_shape_list(ish)} "
                                   f"to be no larger than self {_shape_list(xsh)} apart from dimension {d}")
            if src is not None and ish[k] > ((tuple(src.shape) or (1,))[k] if src.ndim >= k + 1 or src.ndim == 0
                                             else 0):
                raise RuntimeError(f"{op}(): Expected index {_shape_list(ish)} to be no larger than src "
                                   f"{_shape_list(src.shape)} at dimension {k}")
    return d  # index values are range-checked by the op's check() inside run()


def _nd1(t: Tensor) -> Tensor:
    return t.reshape(1) if t.ndim == 0 else t


@export
def gather(input: Tensor, dim: int, index: Tensor, *, sparse_grad: bool = False, out=None) -> Tensor:
    """``out[i][j][k] = input[index[i][j][k]][j][k]`` along ``dim`` (``torch.gather``)."""
    if out is not None:
        from .reduction import _write_out
        _check_any_overlap(out, input)     # (torch: assert_no_overlap(result, self / index))
        _check_any_overlap(out, index)
        return _write_out(gather(input, dim, index, sparse_grad=sparse_grad), out, "gather")
    d = _check_gather_like("gather", input, dim, index)
    if index.numel() == 0:
        from ..tensor.creation import empty
        return empty(tuple(index.shape), dtype=input._dtype, device=input._device)
    r = run(GATHER, [_nd1(input), _nd1(index)], {"dim": d})[0]
    return r.reshape(()) if index.ndim == 0 else r


def _infer_scatter(metas, attrs):
    return [Meta(metas[0].shape, metas[0].dtype)]


def _infer_scatter_op(metas, attrs):
    x = metas[0]
    red = attrs.get("reduce")
    if (x.dtype.category == 3 and red in ("amax", "amin")) or (x.dtype.category == 0 and red == "mean"):
        # torch has no complex max/min and no bool mean here (its own message)
        raise NotImplementedError(f'"scatter_gather_tensor_cpu_reduce_{red}" not implemented for '
                                  f"'{_COMPLEX_NAMES.get(x.dtype.name, x.dtype.name)}'")
    return [Meta(x.shape, x.dtype)]


_COMPLEX_NAMES = {"complex64": "ComplexFloat", "complex128": "ComplexDouble", "bool": "Bool"}

SCATTER = register(OpDef("scatter", infer=_infer_scatter_op,
                         doc="copy of input with src scattered along dim at index; "
                             "reduce None/sum/prod/mean/amax/amin"))

_REDUCES = {"add": "sum", "multiply": "prod", "sum": "sum", "prod": "prod", "mean": "mean", "amax": "amax",
            "amin": "amin"}


def _scatter_impl(op, input, dim, index, src, reduce, include_self=True):
    value_src = not isinstance(src, Tensor)
    if value_src:
        from ..ops.elementwise import _scalar_tensor
        # torch converts the value with an overflow check (uint8 300, float 1j: refused; uint8 -1 wraps to 255)
        src_t = _scalar_tensor(_dt.fit_scalar(src, input._dtype, op), input._dtype, input._device)
    else:
        src_t = src
        if src._dtype is not input._dtype:
            raise RuntimeError(f"{op}(): Expected self.dtype to be equal to src.dtype (got {input._dtype.name} and "
                               f"{src._dtype.name})")
    d = _check_gather_like(op, input, dim, index, None if value_src else src_t)
    if not value_src and index.numel() and max(src_t.ndim, 1) != max(index.ndim, 1):
        raise RuntimeError(f"{op}(): Index tensor must have the same number of dimensions as src tensor")
    if index.numel() == 0:
        return input.clone()
    ix = _nd1(index)
    if value_src:
        s = src_t.expand(tuple(ix.shape))
    else:
        s = _nd1(src_t)
        s = s[tuple(slice(0, n) for n in ix.shape)]
    r = run(SCATTER, [_nd1(input), ix, s], {"dim": d, "reduce": reduce, "include_self": bool(include_self)})[0]
    return r.reshape(()) if input.ndim == 0 else r


@export(inplace=True)
def scatter(input: Tensor, dim: int, index: Tensor, src=None, *, value=None, reduce: str | None = None) -> Tensor:
    """Copy of ``input`` with ``src`` (tensor or scalar) written at ``index`` along ``dim`` (``torch.scatter``)."""
    if src is None:
        src = value
    if src is None:
        raise TypeError("scatter(): expected a src tensor or a value")
    if reduce is not None and reduce not in ("add", "multiply"):
        raise RuntimeError(f"scatter(): reduce argument must be either add or multiply, got {reduce!r}")
    return _scatter_impl("scatter", input, dim, index, src, None if reduce is None else _REDUCES[reduce])


@export(inplace=True)
def scatter_add(input: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    """Copy of ``input`` with ``src`` summed in at ``index`` along ``dim``; duplicates accumulate."""
    if not isinstance(src, Tensor):
        raise TypeError("scatter_add(): src must be a Tensor")
    return _scatter_impl("scatter_add", input, dim, index, src, "sum")


@export(inplace=True)
def scatter_reduce(input: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, *,
                   include_self: bool = True) -> Tensor:
    """Reduce ``src`` into ``input`` at ``index`` with sum/prod/mean/amax/amin (``torch.scatter_reduce``)."""
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
        raise RuntimeError(f"scatter_reduce(): reduce argument must be one of sum, prod, mean, amax, amin, "
                           f"got {reduce!r}")
    if not isinstance(src, Tensor):
        raise TypeError("scatter_reduce(): src must be a Tensor")
    return _scatter_impl("scatter_reduce", input, dim, index, src, reduce, include_self)


# ================================================================ index_select / index_add / fill / copy
def _infer_index_select(metas, attrs):
    x, i = metas
    d = attrs["dim"]
    sh = list(x.shape)
    sh[d] = numel(i.shape)
    return [Meta(tuple(sh), x.dtype)]


INDEX_SELECT = register(OpDef("index_select", infer=_infer_index_select,
                              reference=lambda xs, a: [np.take(xs[0], xs[1], axis=a["dim"])]))


def _check_index_vector(op: str, input: Tensor, dim: int, index: Tensor, allowed=("int64", "int32")):
    if not isinstance(index, Tensor):
        raise TypeError(f"{op}(): index must be a Tensor, got {type(index).__name__}")
    if index._dtype.name not in allowed:
        raise (IndexError if op == "index_fill" else RuntimeError)(
            f"{op}(): Expected dtype {' or '.join(allowed)} for index, got {index._dtype.name}")
    if index.ndim > 1:
        raise IndexError(f"{op}(): Index is supposed to be a vector, got index of shape {_shape_list(index.shape)}")
    return wrap_dim(dim, input.ndim, op)  # index values are range-checked by the op's check() inside run()


@export
def index_select(input: Tensor, dim: int, index: Tensor, *, out=None) -> Tensor:
    """Entries of ``input`` at ``index`` (1-D) along ``dim`` (``torch.index_select``)."""
    if out is not None:
        from .reduction import _write_out
        _check_any_overlap(out, input)     # (torch: assert_no_overlap(result, self / index))
        _check_any_overlap(out, index)
        return _write_out(index_select(input, dim, index), out, "index_select")
    d = _check_index_vector("index_select", input, dim, index)
    r = run(INDEX_SELECT, [_nd1(input), index.reshape(-1)], {"dim": d})[0]
    return r.reshape(()) if input.ndim == 0 else r


INDEX_REDUCE = register(OpDef("index_reduce_dim", infer=_infer_scatter,
                              doc="copy of input with slices of src added/copied at index along dim; "
                                  "or value (0-d src) filled"))


def _index_dim_op(op, input, dim, index, source, mode, alpha=1):
    d = _check_index_vector(op, input, dim, index, ("int64",) if mode != "add" else ("int64", "int32"))
    idx = index.reshape(-1)
    x = _nd1(input)
    if mode == "add" and input._dtype.category < 3 and isinstance(alpha, (complex, np.complexfloating)):
        # torch converts alpha to self's dtype: a complex alpha with an imaginary part is refused for a real self
        if alpha.imag != 0:
            raise RuntimeError(f"{op}(): value {alpha!r} cannot be converted to type {input._dtype.name} without "
                               f"overflow")
        alpha = float(alpha.real)
    if mode == "add" and input._dtype.category == 2:    # (float16 70000: refused, as torch)
        _dt.check_scalar(alpha, input._dtype, op)
    if mode == "add" and input._dtype.category < 2 and not isinstance(alpha, (bool, np.bool_)):
        # torch converts alpha to self's dtype (a float truncates towards zero; out of range refused),
        # unlike add(alpha=) which refuses a float alpha for integers
        if isinstance(alpha, (float, np.floating)):
            alpha = _dt.check_scalar(float(alpha), input._dtype, op)
            alpha = bool(alpha) if input._dtype.category == 0 else int(alpha)
        else:
            _dt.check_scalar(int(alpha), input._dtype, op)
    if mode == "fill":
        from ..ops.elementwise import _scalar_tensor
        if isinstance(source, Tensor):
            if source.ndim != 0:
                raise RuntimeError(f"index_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                                   f"{source.ndim} dimension(s).")
            source = source.item()
        s = _scalar_tensor(_dt.fit_scalar(source, input._dtype, op), input._dtype, input._device)
    else:
        if not isinstance(source, Tensor):
            raise TypeError(f"{op}(): source must be a Tensor")
        s = _nd1(source)
        if s._dtype is not input._dtype:  # torch casts neither way
            if mode == "copy":
                raise RuntimeError(f"{op}(): self and source expected to have the same dtype, but got (self) "
                                   f"{input._dtype.name} and (source) {s._dtype.name}")
            raise RuntimeError(f"{op}(): self ({input._dtype.name}) and source ({s._dtype.name}) must have the same "
                               f"scalar type")
        exp = list(x.shape)
        exp[d] = idx.numel()
        if tuple(exp) != tuple(s.shape) and not (numel(exp) == s.numel() and x.ndim <= 1):
            raise RuntimeError(f"{op}(): source of shape {_shape_list(source.shape)} does not match the expected "
                               f"shape {_shape_list(exp)} (input {_shape_list(input.shape)}, index of "
                               f"{idx.numel()} entries along dim {d})")
        s = s.reshape(exp)
    if idx.numel() == 0:
        return input.clone()
    if mode == "fill":  # torch's index_fill wraps negative indices (index_add / index_copy refuse them)
        n = x.shape[d]
        idx = idx + (idx < 0).to(idx._dtype) * n
        from .registry import _trace_hook
        if n and _trace_hook[0] is None:
            lo = int(idx.min())
            if lo < 0:
                raise IndexError(f"index_fill(): index {lo - n} is out of bounds for dimension {d} with size {n}")
    r = run(INDEX_REDUCE, [x, idx, s], {"dim": d, "mode": mode, "alpha": alpha})[0]
    return r.reshape(()) if input.ndim == 0 else r


@export(inplace=True)
def index_add(input: Tensor, dim: int, index: Tensor, source: Tensor, *, alpha=1) -> Tensor:
    """Copy of ``input`` with ``alpha * source`` slices added at ``index`` along ``dim`` (duplicates accumulate)."""
    return _index_dim_op("index_add", input, dim, index, source, "add", alpha)


@export(inplace=True)
def index_copy(input: Tensor, dim: int, index: Tensor, source: Tensor) -> Tensor:
    """Copy of ``input`` with ``source`` slices copied at ``index`` along ``dim``."""
    return _index_dim_op("index_copy", input, dim, index, source, "copy")


@export(inplace=True)
def index_fill(input: Tensor, dim: int, index: Tensor, value) -> Tensor:
    """Copy of ``input`` with the slices at ``index`` along ``dim`` set to ``value``."""
    return _index_dim_op("index_fill", input, dim, index, value, "fill")


# ================================================================ take / take_along_dim
def _infer_take(metas, attrs):
    return [Meta(metas[1].shape, metas[0].dtype)]


TAKE = register(OpDef("take", infer=_infer_take, reference=lambda xs, a: [np.take(xs[0].reshape(-1), xs[1])]))


@export
def take(input: Tensor, index: Tensor) -> Tensor:
    """``input`` treated as 1-D, at ``index`` (negative indices count from the end) (``torch.take``)."""
    if not isinstance(index, Tensor) or index._dtype is not _dt.int64:
        raise RuntimeError(f"take(): Expected a long tensor for index, but got "
                           f"{getattr(getattr(index, '_dtype', None), 'name', type(index).__name__)}")
    return run(TAKE, [input, index], {})[0]


@export
def take_along_dim(input: Tensor, indices: Tensor, dim: int | None = None) -> Tensor:
    """Gather along ``dim`` with ``indices`` broadcast against ``input`` (``torch.take_along_dim``)."""
    if not isinstance(indices, Tensor) or indices._dtype is not _dt.int64:
        raise RuntimeError("take_along_dim(): dtype of indices should be Long but got "
                           f"{getattr(getattr(indices, '_dtype', None), 'name', type(indices).__name__)}")
    if dim is None:
        return gather(input.reshape(-1), 0, indices.reshape(-1))
    if input.ndim != indices.ndim:
        raise RuntimeError(f"take_along_dim(): input and indices should have the same number of dimensions, but got "
                           f"{input.ndim} dimensions for input, and {indices.ndim} dimensions for indices")
    d = wrap_dim(dim, input.ndim, "take_along_dim")
    xs, is_ = list(input.shape), list(indices.shape)
    xs[d] = is_[d] = 1
    b = broadcast_shapes(tuple(xs), tuple(is_), op="take_along_dim")
    bx, bi = list(b), list(b)
    bx[d] = input.shape[d]
    bi[d] = indices.shape[d]
    # like torch (and numpy's take_along_axis), a negative index along ``dim`` counts from the end
    from .elementwise import where
    n = input.shape[d]
    if n:
        indices = where(indices < 0, indices + n, indices)
    return gather(input.expand(bx), d, indices.expand(bi))


# ================================================================ masked_select / masked_scatter / nonzero
def _infer_count(metas, attrs):
    return [Meta((attrs["count"],), metas[0].dtype)]


MASKED_SELECT = register(OpDef("masked_select", infer=_infer_count,
                               reference=lambda xs, a: [xs[0][xs[1]]]))


def _check_mask(op, mask):
    if not isinstance(mask, Tensor) or mask._dtype is not _dt.bool_:
        raise RuntimeError(f"{op}: expected BoolTensor for mask, got "
                           f"{getattr(getattr(mask, '_dtype', None), 'name', type(mask).__name__)}")


@export
def masked_select(input: Tensor, mask: Tensor, *, out=None) -> Tensor:
    """1-D tensor of the entries of ``input`` where ``mask`` (broadcast) is True."""
    if out is not None:
        from .reduction import _write_out
        return _write_out(masked_select(input, mask), out, "masked_select")
    _check_mask("masked_select", mask)
    shape = broadcast_shapes(tuple(input.shape), tuple(mask.shape), op="masked_select")
    x, m = input.expand(shape), mask.expand(shape)
    count = int(np.count_nonzero(_host(m)))
    return run(MASKED_SELECT, [x, m], {"count": count})[0]


MASKED_SCATTER = register(OpDef("masked_scatter", infer=_infer_scatter,
                                doc="copy of input with the True positions of mask filled from source in order"))


@export(inplace=True)
def masked_scatter(input: Tensor, mask: Tensor, source: Tensor) -> Tensor:
    """Copy of ``input`` with the positions where ``mask`` is True taken, in order, from ``source``."""
    _check_mask("masked_scatter", mask)
    if source._dtype is not input._dtype:
        raise RuntimeError(f"masked_scatter: expected self and source to have same dtypes but got "
                           f"{input._dtype.name} and {source._dtype.name}")
    shape = broadcast_shapes(tuple(input.shape), tuple(mask.shape), op="masked_scatter")
    # (out of place, input and mask broadcast together, as torch; masked_scatter_ writes input's shape only: its
    # in-place wrapper refuses a larger result)
    x = input.expand(shape) if shape != tuple(input.shape) else input
    m = mask.expand(shape)
    count = int(np.count_nonzero(_host(m)))
    if source.numel() < count:
        raise RuntimeError(f"masked_scatter: Number of elements of source ({source.numel()}) < number of ones in "
                           f"mask ({count})")
    return run(MASKED_SCATTER, [x, m, source], {"count": count})[0]


def _infer_nonzero(metas, attrs):
    return [Meta((attrs["count"], len(metas[0].shape)), _dt.int64)]


NONZERO = register(OpDef("nonzero", infer=_infer_nonzero, reference=lambda xs, a: [np.argwhere(xs[0])]))


@export
def nonzero(input: Tensor, *, as_tuple: bool = False, out=None):
    """Indices of the nonzero entries: an ``(n, ndim)`` int64 tensor, or a tuple of 1-D tensors."""
    if out is not None and not as_tuple:
        from .reduction import _write_out
        return _write_out(nonzero(input), out, "nonzero")
    count = int(np.count_nonzero(_host(input)))
    if as_tuple:
        x = input.reshape(1) if input.ndim == 0 else input
        r = run(NONZERO, [x], {"count": count})[0]
        return tuple(r[:, i] for i in range(x.ndim))
    return run(NONZERO, [input], {"count": count})[0]


@export
def argwhere(input: Tensor) -> Tensor:
    """``nonzero(input)`` (``torch.argwhere``)."""
    return nonzero(input)


# ================================================================ sort / topk
SortResult = namedtuple("sort", ["values", "indices"])
TopkResult = namedtuple("topk", ["values", "indices"])
KthResult = namedtuple("kthvalue", ["values", "indices"])


def _infer_sort(metas, attrs):
    x = metas[0]
    return [Meta(x.shape, x.dtype), Meta(x.shape, _dt.int64)]


SORT = register(OpDef("sort", infer=_infer_sort, nout=2,
                      doc="stable sort along dim (NaN largest); descending keeps equal elements in order"))


def _sort_args(name, args, dim, descending, stable):
    # torch has two overloads: (input, dim=-1, descending=False) and (input, *, stable, dim=-1, descending=False):
    # once ``stable`` is passed, ``dim`` and ``descending`` are keyword-only (torch.sort(x, 0, stable=True) refuses)
    if len(args) > 2:
        raise TypeError(f"{name}() takes at most 3 positional arguments ({len(args) + 1} given)")
    if args and stable is not _NOARG:
        raise TypeError(f"{name}(): dim and descending are keyword-only when stable= is given "
                        f"(torch.{name}(input, *, stable, dim=-1, descending=False))")
    if len(args) >= 1:
        if dim is not _NOARG:
            raise TypeError(f"{name}() got multiple values for argument 'dim'")
        dim = args[0]
    if len(args) == 2:
        if descending is not _NOARG:
            raise TypeError(f"{name}() got multiple values for argument 'descending'")
        descending = args[1]
    if name == "argsort" and stable is not _NOARG and not isinstance(stable, bool):
        raise TypeError(f"argsort(): argument 'stable' must be bool, not {type(stable).__name__}")
    return (-1 if dim is _NOARG else dim), (False if descending is _NOARG else descending)


_NOARG = object()


@export
def sort(input: Tensor, *args, dim=_NOARG, descending=_NOARG, stable=_NOARG, out=None):
    """(values, indices) sorted along ``dim`` (``torch.sort(input, dim=-1, descending=False)`` or
    ``torch.sort(input, *, stable, dim=-1, descending=False)``; on the CPU, ``stable=False`` (the default) puts
    equal values in the order of torch's CPU std::sort: kernels/indexing.py)."""
    dim, descending = _sort_args("sort", args, dim, descending, stable)
    if isinstance(dim, bool):  # sort(x, True) style calls are not torch's API; refuse clearly
        raise TypeError("sort(): dim must be an int")
    d = wrap_dim(dim, input.ndim, "sort")
    x = _nd1(input)
    attrs = {"dim": d, "descending": bool(descending)}
    if stable is _NOARG or not stable:      # (torch's default: stable=False)
        attrs["stable"] = False
    v, i = run(SORT, [x], attrs)
    if input.ndim == 0:
        v, i = v.reshape(()), i.reshape(())
    if out is not None:
        from .reduction import _write_out
        _write_out((v, i), out, "sort")
        return SortResult(out[0], out[1])
    return SortResult(v, i)


@export
def argsort(input: Tensor, *args, dim=_NOARG, descending=_NOARG, stable=_NOARG, out=None) -> Tensor:
    """Indices that sort ``input`` along ``dim`` (``torch.argsort(input, dim=-1, descending=False)`` or
    ``torch.argsort(input, *, stable, dim=-1, descending=False, out=None)``)."""
    if out is not None and stable is _NOARG:
        raise TypeError("argsort(): out= is only accepted with stable= (torch.argsort(input, *, stable, dim, "
                        "descending, out))")
    dim, descending = _sort_args("argsort", args, dim, descending, stable)
    r = sort(input, dim=dim, descending=descending, stable=stable).indices
    if out is not None:
        from .reduction import _write_out
        return _write_out(r, out, "argsort")
    return r


@export
def msort(input: Tensor) -> Tensor:
    """Values sorted along dim 0 (``torch.msort``)."""
    return sort(input, 0).values


def _infer_topk(metas, attrs):
    x = metas[0]
    sh = list(x.shape)
    sh[attrs["dim"]] = attrs["k"]
    return [Meta(tuple(sh), x.dtype), Meta(tuple(sh), _dt.int64)]


TOPK = register(OpDef("topk", infer=_infer_topk, nout=2))


@export
def topk(input: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):
    """The ``k`` largest (or smallest) entries along ``dim`` and their indices (``torch.topk``; on the CPU equal
    values in torch's CPU order: kernels/indexing.py)."""
    return _topk(input, k, dim, largest, sorted, "torch")


def _topk(input, k, dim, largest, sorted, ties):
    """topk; ``ties`` "torch": equal values in torch's CPU order (kernels/indexing.py), else in index order (ONNX
    TopK's rule)."""
    d = wrap_dim(dim, input.ndim, "topk")
    n = (tuple(input.shape) or (1,))[d]
    k = int_arg("topk", "k", k)
    if not 0 <= k <= n:
        raise RuntimeError(f"topk(): selected index k out of range (k={k}, size {n} along dim {d})")
    if input._dtype is _dt.bool_:
        raise RuntimeError("topk(): does not support bool inputs (like torch on the CPU)")
    attrs = {"k": k, "dim": d, "largest": bool(largest)}
    if ties == "torch":
        attrs["ties"] = "torch"
        attrs["sorted"] = bool(sorted)
    v, i = run(TOPK, [_nd1(input)], attrs)
    if input.ndim == 0:
        v, i = v.reshape(()), i.reshape(())
    return TopkResult(v, i)


@export
def kthvalue(input: Tensor, k: int, dim: int = -1, keepdim: bool = False):
    """The ``k``-th smallest entry along ``dim`` and its index (``torch.kthvalue``)."""
    d = wrap_dim(dim, input.ndim, "kthvalue")
    k = int_arg("kthvalue", "k", k)
    n = (tuple(input.shape) or (1,))[d]
    if n == 0:  # (torch: IndexError)
        raise IndexError(f"kthvalue(): Expected reduction dim {d} to have non-zero size (shape {list(input.shape)}).")
    if not 1 <= k <= n:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {d} (k={k}, size {n})")
    if input._dtype is _dt.bool_:
        raise NotImplementedError("kthvalue(): not implemented for bool inputs")
    if input._dtype.category == 3:
        raise NotImplementedError(f"kthvalue(): not implemented for complex tensors (got {input._dtype.name})")
    if input.ndim and input._device.type == "cpu":
        # the index torch's CPU quickselect picks among equal values (topk's kernel, kernels/indexing.py)
        v, i = run(TOPK, [input], {"k": 1, "dim": d, "largest": False, "select": ("kth", k)})
        if not keepdim:
            v, i = v.squeeze(d), i.squeeze(d)
        return KthResult(v.contiguous(), i.contiguous())
    v, i = sort(input, dim=d, stable=True)
    if input.ndim == 0:
        return KthResult(v, i)
    v, i = v.narrow(d, k - 1, 1), i.narrow(d, k - 1, 1)
    if not keepdim:
        v, i = v.squeeze(d), i.squeeze(d)
    return KthResult(v.contiguous(), i.contiguous())


# ================================================================ unique
def _infer_unique(metas, attrs):
    n = attrs["count"]
    return [Meta((n,), metas[0].dtype), Meta((numel(metas[0].shape),), _dt.int64), Meta((n,), _dt.int64)]


UNIQUE_SORTED = register(OpDef("unique_sorted", infer=_infer_unique, nout=3,
                               doc="inputs: sorted 1-D values and the permutation that sorted them; outputs: unique "
                                   "values, inverse indices, counts"))


def _infer_unique_dim(metas, attrs):
    x = metas[0]
    d, n = attrs["dim"], attrs["count"]
    sh = list(x.shape)
    sh[d] = n
    return [Meta(tuple(sh), x.dtype), Meta((x.shape[d],), _dt.int64), Meta((n,), _dt.int64)]


UNIQUE_DIM = register(OpDef("unique_dim", infer=_infer_unique_dim, nout=3))


@export
def unique(input: Tensor, sorted: bool = True, return_inverse: bool = False, return_counts: bool = False,
           dim: int | None = None):
    """Unique values (sorted), with optional inverse indices and counts (``torch.unique``)."""
    if dim is None:
        flat = input.reshape(-1)
        s, perm = sort(flat)
        a = _host(s)
        count = int(a.size and 1 + np.count_nonzero(a[1:] != a[:-1]))
        vals, inv, cnt = run(UNIQUE_SORTED, [s, perm], {"count": count})
        inv = inv.reshape(tuple(input.shape))
    else:
        d = wrap_dim(dim, input.ndim, "unique")
        if any(n == 0 for j, n in enumerate(input.shape) if j != d):
            raise RuntimeError("There are 0 sized dimensions, and they aren't selected, so unique cannot be applied")
        a = _host(input)
        if a.shape[d] == 0:
            count = 0
        else:
            count = int(np.unique(np.moveaxis(a, d, 0).reshape(a.shape[d], -1), axis=0).shape[0])
        vals, inv, cnt = run(UNIQUE_DIM, [input], {"dim": d, "count": count})
    if not return_inverse and not return_counts:
        return vals
    r = (vals,)
    if return_inverse:
        r += (inv,)
    if return_counts:
        r += (cnt,)
    return r


# ================================================================ searchsorted / bucketize
def _infer_searchsorted(metas, attrs):
    return [Meta(metas[1].shape, _dt.int32 if attrs["out_int32"] else _dt.int64)]


SEARCHSORTED = register(OpDef("searchsorted", infer=_infer_searchsorted))


@export(method=False)
def searchsorted(sorted_sequence: Tensor, input, *, out_int32: bool = False, right: bool = False, side=None,
                 sorter=None) -> Tensor:
    """Insertion indices of ``input`` into the innermost dim of ``sorted_sequence`` (``torch.searchsorted``)."""
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError(f"torch.searchsorted(): side can only be 'left' or 'right' but got {side}")
        if right and side == "left":
            raise RuntimeError("torch.searchsorted(): side and right can't be set to opposites, got side of left "
                               "while right was True")
        right = side == "right"
    scalar = not isinstance(input, Tensor)
    if scalar:
        from ..ops.elementwise import _scalar_tensor
        input = _scalar_tensor(input, sorted_sequence._dtype, sorted_sequence._device)
    if sorter is not None:
        sorted_sequence = gather(sorted_sequence, -1, sorter)
    if sorted_sequence.ndim > 1:
        if scalar or tuple(sorted_sequence.shape[:-1]) != tuple(input.shape[:-1]) or input.ndim != sorted_sequence.ndim:
            raise RuntimeError(f"torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 "
                               f"dimensions of boundaries tensor and input value tensor must match, but we got "
                               f"boundaries tensor {_shape_list(sorted_sequence.shape)} and input value tensor "
                               f"{_shape_list(input.shape)}")
    if sorted_sequence.ndim == 0:
        raise RuntimeError("torch.searchsorted(): boundaries tensor should have positive dimension, but got 0 "
                           "dimension")
    from ..tensor.dtypes import promote_types
    ct = promote_types(sorted_sequence._dtype, input._dtype)
    return run(SEARCHSORTED, [sorted_sequence.to(ct), input.to(ct)],
               {"right": bool(right), "out_int32": bool(out_int32)})[0]


@export
def bucketize(input, boundaries: Tensor, *, out_int32: bool = False, right: bool = False) -> Tensor:
    """Bucket index of each entry of ``input`` in 1-D ``boundaries`` (``torch.bucketize``)."""
    if boundaries.ndim != 1:
        raise RuntimeError(f"bucketize(): boundaries tensor must be 1 dimension, but got dim({boundaries.ndim})")
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)


# ================================================================ value checks
# Index ranges are checked in each op's check(), which ops.registry.run calls before any
# kernel: eager calls and replays of compiled graphs are validated alike.
def _dim_range_check(opname, exc):
    def check(ins, attrs):
        d = attrs["dim"]
        name = opname(attrs) if callable(opname) else opname
        e = exc if isinstance(exc, type) else exc(attrs)
        _check_range(name, _host(ins[1]), ins[0].shape[d], d, False, exc=e,
                     fmt=name + "(): index {v} is out of bounds for dimension {d} with size {n}")
    return check


def _take_check(ins, attrs):
    n = ins[0].numel()
    a = _host(ins[1])
    lo, hi = _minmax(a)
    if lo is not None and (lo < -n or hi >= n):
        bad = int(a[(a < -n) | (a >= n)].reshape(-1)[0])
        raise IndexError(f"take(): out of range: tried to access index {bad} on a tensor of {n} elements.")


GATHER.check = _dim_range_check("gather", RuntimeError)
SCATTER.check = _dim_range_check(lambda a: "scatter" if a.get("reduce") is None else "scatter_reduce", RuntimeError)
INDEX_SELECT.check = _dim_range_check("index_select", IndexOutOfRangeError)
# torch: index_add raises RuntimeError, index_copy / index_fill IndexError
INDEX_REDUCE.check = _dim_range_check(lambda a: f"index_{a['mode']}",
                                      lambda a: IndexOutOfRangeError if a["mode"] == "add" else IndexError)
TAKE.check = _take_check
