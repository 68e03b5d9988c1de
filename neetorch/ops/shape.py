"""Shape and data-movement ops: cat/stack family, flip/roll, repeat/tile/repeat_interleave, tril/triu,
diag/diag_embed/diagflat, meshgrid, narrow_copy, rot90 and ``pad`` (``nn.functional.pad``).

Every op copies (PyTorch returns new tensors for all of these); the pure views
(``view``, ``permute``, ``narrow``...) live in ``neetorch/tensor/views.py``.
"""
from __future__ import annotations

import numbers

import numpy as np

from ..tensor import dtypes as _dt
from ..tensor.tensor import Tensor, channels_last, channels_last_3d, contiguous_format
from .memory_format import _cl_like, _cl_order, _laid, _phys_strides, lay_out, run_in, suggest
from .registry import Meta, OpDef, _trace_hook, export, register, run
from .shape_rules import int_arg, wrap_dim, wrap_dims

__all__ = ["cat", "concat", "concatenate", "stack", "hstack", "vstack", "dstack", "column_stack", "row_stack",
           "flip", "fliplr", "flipud", "roll", "rot90", "repeat", "tile", "repeat_interleave", "narrow_copy",
           "tril", "triu", "diag", "diag_embed", "diagflat", "meshgrid", "pad"]


def _sl(s) -> str:
    return str(list(s))


def _check_tensors(op, tensors):
    if isinstance(tensors, Tensor):
        raise TypeError(f"{op}(): argument 'tensors' must be a sequence of Tensors, not Tensor")
    tensors = list(tensors)
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(f"{op}(): expected Tensor as element {i} in argument 0, but got {type(t).__name__}")
    return tensors


def _finish(r: Tensor, out):
    if out is None:
        return r
    from .elementwise import _can_cast, resize_out
    if not _can_cast(r._dtype, out._dtype):
        raise TypeError(f"torch.cat(): input types can't be cast to the desired output type {out._dtype.name} (the "
                        f"concatenation is {r._dtype.name})")
    resize_out(out, r.shape, "out=")
    out.copy_(r)
    return out


# ================================================================ result layouts (torch's strides)
# (ops/memory_format.py: c10's suggest_memory_format and the strided allocation, shared with the nn ops)


# ================================================================ cat / stack
def _infer_cat(metas, attrs):
    d = attrs["dim"]
    dt = metas[0].dtype
    for m in metas[1:]:
        dt = _dt.promote_types(dt, m.dtype)
    shape = list(metas[0].shape)
    shape[d] = sum(m.shape[d] for m in metas)
    return [Meta(tuple(shape), dt)]


CAT = register(OpDef("cat", infer=_infer_cat,
                     reference=lambda xs, a: [np.concatenate(xs, axis=a["dim"])]))


@export(method=False)
def cat(tensors, dim: int = 0, *, axis=None, out=None) -> Tensor:
    """Concatenate along ``dim`` (``axis``: its numpy-style alias) with type promotion; 1-D empty tensors are skipped
    (``torch.cat``)."""
    if axis is not None:
        dim = axis
    tensors = _check_tensors("cat", tensors)
    if not tensors:
        raise ValueError("torch.cat(): expected a non-empty list of Tensors")
    dt = tensors[0]._dtype
    for i, t in enumerate(tensors):
        if t.ndim == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be concatenated")
        dt = _dt.promote_types(dt, t._dtype)
    keep = [(i, t) for i, t in enumerate(tensors) if not (t.ndim == 1 and t.shape[0] == 0)]
    if not keep:
        from ..tensor.creation import empty
        return _finish(empty(0, dtype=dt, device=tensors[0]._device), out)
    ref = keep[0][1]
    d = wrap_dim(dim, ref.ndim, "cat")
    for i, t in keep:
        if t.ndim != ref.ndim:
            raise RuntimeError(f"Tensors must have same number of dimensions: got {ref.ndim} and {t.ndim}")
        for k in range(ref.ndim):
            if k != d and t.shape[k] != ref.shape[k]:
                raise RuntimeError(f"Sizes of tensors must match except in dimension {d}. Expected size "
                                   f"{ref.shape[k]} but got size {t.shape[k]} for tensor number {i} in the list.")
    ts = [t for _, t in keep]
    kdt = ts[0]._dtype
    for t in ts[1:]:
        kdt = _dt.promote_types(kdt, t._dtype)
    if kdt is not dt:  # a skipped empty 1-D tensor still takes part in the type promotion
        ts[0] = ts[0].to(dt)
    # torch's cat_compute_output_memory_format: channels-last(_3d) when every input suggests it (the skipped
    # empty 1-D ones too: they suggest contiguous), else contiguous
    st = None
    if ref.ndim in (4, 5) and all(_cl_like(t) for t in tensors):
        st = _phys_strides([sum(t.shape[d] for t in ts) if k == d else ref.shape[k] for k in range(ref.ndim)],
                           _cl_order(ref.ndim))
    if out is not None:      # (torch: assert_no_overlap(result, each input))
        from .indexing import _check_any_overlap
        for t in tensors:
            _check_any_overlap(out, t)
    r = _laid(CAT, ts, {"dim": d}, st) if out is None else run(CAT, ts, {"dim": d})[0]
    return _finish(r, out)


export(cat, name="concat", method=False)
export(cat, name="concatenate", method=False)


@export(method=False)
def stack(tensors, dim: int = 0, *, axis=None, out=None) -> Tensor:
    """Join equal-shaped tensors along a new dim ``dim`` (``axis``: its alias) (``torch.stack``)."""
    if axis is not None:
        dim = axis
    tensors = _check_tensors("stack", tensors)
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    s0 = tuple(tensors[0].shape)
    for i, t in enumerate(tensors):
        if tuple(t.shape) != s0:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got {_sl(s0)} at entry 0 and "
                               f"{_sl(t.shape)} at entry {i}")
    d = wrap_dim(dim, len(s0) + 1, "stack")
    if out is None and len(s0) in (4, 5) and d < len(s0) and all(_cl_like(t) for t in tensors):
        # (measured on torch 2.13: channels-last inputs stack into a result whose slices are channels-last, the
        # new dim just outside input dim ``d`` in memory; stacked past the last dim, the result is contiguous)
        phys = []
        for k in _cl_order(len(s0)):
            if k == d:
                phys.append(d)
            phys.append(k if k < d else k + 1)
        shape = list(s0)
        shape.insert(d, len(tensors))
        return _laid(CAT, [t.unsqueeze(d) for t in tensors], {"dim": d}, _phys_strides(shape, phys))
    if out is None:     # (row-major otherwise: not cat's rule on the unsqueezed inputs, which may look channels-last)
        return run(CAT, [t.unsqueeze(d) for t in tensors], {"dim": d})[0]
    return cat([t.unsqueeze(d) for t in tensors], d, out=out)


@export(method=False)
def hstack(tensors, *, out=None) -> Tensor:
    """Concatenate column-wise (dim 1; dim 0 for 1-D inputs) (``torch.hstack``)."""
    ts = [t.reshape(1) if t.ndim == 0 else t for t in _check_tensors("hstack", tensors)]
    if not ts:
        raise RuntimeError("hstack expects a non-empty TensorList")
    return cat(ts, 0 if ts[0].ndim == 1 else 1, out=out)


@export(method=False)
def vstack(tensors, *, out=None) -> Tensor:
    """Concatenate row-wise after making every input at least 2-D (``torch.vstack``)."""
    from ..tensor.views import atleast_2d
    ts = [atleast_2d(t) for t in _check_tensors("vstack", tensors)]
    if not ts:
        raise RuntimeError("vstack expects a non-empty TensorList")
    return cat(ts, 0, out=out)


export(vstack, name="row_stack", method=False)


@export(method=False)
def dstack(tensors, *, out=None) -> Tensor:
    """Concatenate depth-wise (dim 2) after making every input at least 3-D (``torch.dstack``)."""
    from ..tensor.views import atleast_3d
    ts = [atleast_3d(t) for t in _check_tensors("dstack", tensors)]
    if not ts:
        raise RuntimeError("dstack expects a non-empty TensorList")
    return cat(ts, 2, out=out)


@export(method=False)
def column_stack(tensors, *, out=None) -> Tensor:
    """Stack 0-D/1-D inputs as columns, concatenate 2-D+ inputs along dim 1 (``torch.column_stack``)."""
    ts = _check_tensors("column_stack", tensors)
    if not ts:
        raise RuntimeError("column_stack expects a non-empty TensorList")
    ts = [t.reshape(-1, 1) if t.ndim <= 1 else t for t in ts]
    return cat(ts, 1, out=out)


# ================================================================ flip / roll / rot90
def _same_meta(metas, attrs):
    return [Meta(metas[0].shape, metas[0].dtype)]


FLIP = register(OpDef("flip", infer=_same_meta, reference=lambda xs, a: [np.flip(xs[0], a["dims"])]))


@export
def flip(input: Tensor, *args, dims=None) -> Tensor:
    """Reverse the order along ``dims`` (a copy, like ``torch.flip``); ``x.flip(0, 1)``, ``flip(x, (0, 1))`` or
    ``flip(x, dims=[0, 1])``."""
    if dims is not None and args:
        raise TypeError("flip() got multiple values for argument 'dims'")
    dims = args if dims is None else ((dims,) if isinstance(dims, int) else (tuple(dims),))
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    dims = wrap_dims(dims, input.ndim, "flip")
    if input.ndim == 0:
        dims = ()
    dims = tuple(d for d in dims if input.shape[d] > 1)
    if not dims:
        return input.clone()
    # torch's flip writes into empty_like(input, preserve_format): a permuted input gives a permuted result
    from ..tensor._layout import like_strides
    st = like_strides(input.shape, input.stride()) if input.ndim >= 2 else None
    return _laid(FLIP, [input], {"dims": tuple(sorted(dims))}, st)


@export
def fliplr(input: Tensor) -> Tensor:
    """Flip left/right (dim 1); input must be at least 2-D."""
    if input.ndim < 2:
        raise RuntimeError("fliplr: Input must be >= 2-d.")
    return flip(input, (1,))


@export
def flipud(input: Tensor) -> Tensor:
    """Flip up/down (dim 0); input must be at least 1-D."""
    if input.ndim < 1:
        raise RuntimeError("flipud: Input must be >= 1-d.")
    return flip(input, (0,))


ROLL = register(OpDef("roll", infer=_same_meta,
                      reference=lambda xs, a: [np.roll(xs[0], a["shifts"], a["dims"])]))


@export
def roll(input: Tensor, shifts, dims=None) -> Tensor:
    """Rotate entries along ``dims`` by ``shifts``; ``dims=None`` rolls the flattened tensor (``torch.roll``)."""
    sh = (shifts,) if isinstance(shifts, (numbers.Integral, np.integer)) else tuple(shifts)
    sh = tuple(int(s) for s in sh)
    if not sh:
        raise RuntimeError("roll: `shifts` required")
    if dims is not None and not isinstance(dims, (numbers.Integral, np.integer)) and len(tuple(dims)) == 0:
        dims = None                     # (torch: no dims and one shift roll the flattened tensor)
    if dims is None:
        if len(sh) != 1:
            raise RuntimeError(f"roll: shifts and dimensions must align. shifts: {len(sh)}, dims:0")
        if input.numel() == 0:
            return input.clone()
        return roll(input.reshape(-1), sh, 0).reshape(tuple(input.shape))
    ds = (dims,) if isinstance(dims, (numbers.Integral, np.integer)) else tuple(dims)
    if len(sh) != len(ds):
        raise RuntimeError(f"roll: shifts and dimensions must align. shifts: {len(sh)}, dims:{len(ds)}")
    if input.numel() == 0:            # (torch returns an empty input's copy before looking at dims)
        return input.clone()
    if input.ndim == 0 and ds:       # (torch refuses any dim of a 0-d tensor here, 0 and -1 included)
        raise IndexError(f"roll: Dimension specified as {ds[0]} but tensor has no dimensions")
    ds = tuple(wrap_dim(d, input.ndim, "roll") for d in ds)
    if input.ndim == 0 or input.numel() == 0:
        return input.clone()
    total: dict = {}
    for d, s in zip(ds, sh):          # a dim named twice rolls by the sum of its shifts (torch)
        total[d] = total.get(d, 0) + s
    pairs = [(d, s % input.shape[d]) for d, s in total.items()]
    pairs = [(d, s) for d, s in pairs if s]
    # torch rolls one dim at a time, each a cat of two narrowed pieces: channels-last(_3d) input stays so, unless
    # some shift is a whole turn (an empty piece suggests contiguous); any other input rolls into a contiguous
    # result (row-major)
    st = None
    if input.ndim in (4, 5) and _cl_like(input) and all(s % input.shape[d] for d, s in zip(ds, sh)):
        st = _phys_strides(input.shape, _cl_order(input.ndim))
    if not pairs:
        keep = st is not None and input._device.type == "cpu" and _trace_hook[0] is None
        return input.clone(memory_format=(channels_last if input.ndim == 4 else channels_last_3d) if keep
                           else contiguous_format)
    return _laid(ROLL, [input], {"shifts": tuple(s for _, s in pairs), "dims": tuple(d for d, _ in pairs)}, st)


@export
def rot90(input: Tensor, k: int = 1, dims=(0, 1)) -> Tensor:
    """Rotate by 90 degrees ``k`` times in the plane ``dims`` (``torch.rot90``)."""
    dims = tuple(dims)
    if len(dims) != 2:
        raise RuntimeError(f"rot90: expected total rotation dims == 2, but got dims = {len(dims)}")
    if input.ndim < 2:
        raise RuntimeError(f"rot90: expected total dims >= 2, but got total dims = {input.ndim}")
    a, b = wrap_dim(dims[0], input.ndim, "rot90"), wrap_dim(dims[1], input.ndim, "rot90")
    if a == b:
        raise RuntimeError(f"rot90: expected rotation dims to be different, but got dim0 = {a} and dim1 = {b}")
    k = int_arg("rot90", "k", k) % 4
    if k == 1:
        return flip(input, (b,)).transpose(a, b)
    if k == 2:
        return flip(input, (a, b))
    if k == 3:
        return flip(input, (a,)).transpose(a, b)
    return input.clone(memory_format=contiguous_format)   # (torch: clone(MemoryFormat::Contiguous))


# ================================================================ repeat / tile / repeat_interleave
def _infer_repeat(metas, attrs):
    reps = attrs["repeats"]
    xs = (1,) * (len(reps) - len(metas[0].shape)) + tuple(metas[0].shape)
    return [Meta(tuple(a * b for a, b in zip(xs, reps)), metas[0].dtype)]


REPEAT = register(OpDef("repeat", infer=_infer_repeat,
                        reference=lambda xs, a: [np.tile(xs[0], a["repeats"])]))


def _sizes(args):
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    return tuple(int(a) for a in args)


@export(function=False)
def repeat(input: Tensor, *sizes, repeats=None) -> Tensor:
    """Tile the tensor ``sizes[i]`` times along each dim (``Tensor.repeat``; ``repeats=`` its keyword)."""
    if repeats is not None:
        if sizes:
            raise TypeError("repeat() got multiple values for argument 'repeats'")
        sizes = (repeats,) if isinstance(repeats, int) else (tuple(repeats),)
    reps = _sizes(sizes)
    if len(reps) < input.ndim:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor")
    for r in reps:
        if r < 0:
            xs = (1,) * (len(reps) - input.ndim) + tuple(input.shape)
            raise RuntimeError(f"Trying to create tensor with negative dimension {r}: "
                               f"{_sl(a * b for a, b in zip(xs, reps))}")
    return run(REPEAT, [input], {"repeats": reps})[0]


@export
def tile(input: Tensor, *args, dims=None) -> Tensor:
    """``repeat`` with ``dims`` left-padded with ones (``torch.tile``)."""
    if dims is not None:
        if args:
            raise TypeError("tile() got multiple values for argument 'dims'")
        args = (dims,) if isinstance(dims, int) else (tuple(dims),)
    reps = _sizes(args)
    reps = (1,) * (input.ndim - len(reps)) + reps
    return repeat(input, reps)


def _infer_repeat_interleave(metas, attrs):
    sh = list(metas[0].shape)
    sh[attrs["dim"]] = attrs["total"]
    return [Meta(tuple(sh), metas[0].dtype)]


REPEAT_INTERLEAVE = register(OpDef("repeat_interleave", infer=_infer_repeat_interleave,
                                   reference=lambda xs, a: [np.repeat(xs[0], xs[1], axis=a["dim"])]))


@export
def repeat_interleave(input: Tensor, repeats=None, dim: int | None = None, *, output_size: int | None = None):
    """Repeat each element ``repeats`` times (int or per-element tensor) along ``dim`` (flattened if None)."""
    from ..tensor.creation import arange, tensor
    if repeats is None:  # repeat_interleave(repeats): indices repeated
        reps = input
        if reps.ndim > 1:
            raise RuntimeError("repeat_interleave: repeats must be 0-dim or 1-dim tensor")
        return repeat_interleave(arange(reps.numel(), device=reps._device), reps.reshape(-1), 0,
                                 output_size=output_size)
    x = input.reshape(-1) if dim is None else input
    if x.ndim == 0 and dim is not None:    # (torch: a 0-d input takes no dim, not even 0 or -1)
        raise IndexError(f"repeat_interleave: Dimension out of range (expected to be in range of [-1, 0], but got "
                         f"{dim}) for a 0-d input")
    d = 0 if dim is None else wrap_dim(dim, x.ndim, "repeat_interleave")
    if x.ndim == 0:
        x = x.reshape(1)
    n = x.shape[d]
    if isinstance(repeats, Tensor):
        if repeats._dtype.category != 1:
            raise RuntimeError(f"repeat_interleave: repeats has to be Long or Int tensor, got {repeats._dtype.name}")
        if repeats.ndim > 1:
            raise RuntimeError("repeat_interleave: repeats must be 0-dim or 1-dim tensor")
        r = repeats.numpy(force=True).astype(np.int64).reshape(-1)
        if r.size == 1:
            r = np.full(n, r[0], np.int64)
        elif r.size != n:
            raise RuntimeError(f"repeat_interleave: repeats must have the same size as input along dim, but got "
                               f"repeats.size(0) = {r.size} and input.size({d}) = {n}")
    else:
        r = np.full(n, int(repeats), np.int64)
    if r.size and r.min() < 0:
        raise RuntimeError("repeat_interleave: repeats can not be negative")
    total = int(r.sum())
    if output_size is not None and output_size != total:
        raise RuntimeError(f"repeat_interleave: allocated size does not match required size (output_size="
                           f"{output_size}, required {total})")
    rt = tensor(r, device=x._device)
    return run(REPEAT_INTERLEAVE, [x, rt], {"dim": d, "total": total})[0]


@export
def narrow_copy(input: Tensor, dim: int, start: int, length: int) -> Tensor:
    """A contiguous copy of ``input.narrow(dim, start, length)``."""
    return input.narrow(dim, start, length).clone()


# ================================================================ tril / triu
TRIL = register(OpDef("tril", infer=_same_meta, reference=lambda xs, a: [np.tril(xs[0], a["diagonal"])]))
TRIU = register(OpDef("triu", infer=_same_meta, reference=lambda xs, a: [np.triu(xs[0], a["diagonal"])]))


def _tri(op, name, input, diagonal):
    if input.ndim < 2:
        raise RuntimeError(f"{name}: input tensor must have at least 2 dimensions")
    return run(op, [input], {"diagonal": int(diagonal)})[0]


@export(inplace=True)
def tril(input: Tensor, diagonal: int = 0) -> Tensor:
    """Lower triangle (entries with ``col - row <= diagonal``) of the last two dims; the rest zero."""
    return _tri(TRIL, "tril", input, int_arg("tril", "diagonal", diagonal))


@export(inplace=True)
def triu(input: Tensor, diagonal: int = 0) -> Tensor:
    """Upper triangle (entries with ``col - row >= diagonal``) of the last two dims; the rest zero."""
    return _tri(TRIU, "triu", input, int_arg("triu", "diagonal", diagonal))


# ================================================================ diag / diag_embed / diagflat
def _infer_diag_embed(metas, attrs):
    x = metas[0]
    off, d1, d2 = attrs["offset"], attrs["dim1"], attrs["dim2"]
    n = x.shape[-1] + abs(off)
    rest = list(x.shape[:-1])
    nd = len(rest) + 2
    out = [None] * nd
    out[d1] = n
    out[d2] = n
    it = iter(rest)
    out = [next(it) if s is None else s for s in out]
    return [Meta(tuple(out), x.dtype)]


DIAG_EMBED = register(OpDef("diag_embed", infer=_infer_diag_embed))


@export
def diag_embed(input: Tensor, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
    """Tensor whose (dim1, dim2) diagonals at ``offset`` hold the last dim of ``input``; zeros elsewhere."""
    nd = input.ndim + 1
    a, b = wrap_dim(dim1, nd, "diag_embed"), wrap_dim(dim2, nd, "diag_embed")
    if a == b:
        raise RuntimeError(f"diag_embed: diagonal dimensions cannot be identical {dim1}, {dim2}")
    x = input.reshape(1) if input.ndim == 0 else input
    return run(DIAG_EMBED, [x], {"offset": int_arg("diag_embed", "offset", offset), "dim1": a, "dim2": b})[0]


@export
def diag(input: Tensor, diagonal: int = 0) -> Tensor:
    """1-D input: a 2-D matrix with it on a diagonal; 2-D input: a copy of that diagonal (``torch.diag``)."""
    if input.ndim == 1:
        return diag_embed(input, diagonal, 0, 1)
    if input.ndim == 2:
        return input.diagonal(diagonal).clone()
    raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {input.ndim}D")


@export
def diagflat(input: Tensor, offset: int = 0) -> Tensor:
    """2-D tensor with the flattened input on diagonal ``offset`` (``torch.diagflat``)."""
    return diag_embed(input.reshape(-1), offset, 0, 1)


# ================================================================ meshgrid
@export(method=False)
def meshgrid(*tensors, indexing: str | None = None):
    """Coordinate grids (expanded views) from 0-D/1-D tensors; ``indexing='ij'`` (default) or ``'xy'``."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing is None:
        indexing = "ij"
    if indexing not in ("ij", "xy"):
        raise RuntimeError(f"torch.meshgrid: indexing must be one of \"xy\" or \"ij\", but received: {indexing}")
    if not tensors:
        raise RuntimeError("meshgrid expects a non-empty TensorList")
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"meshgrid expects Tensors, got {type(t).__name__}")
        if t.ndim > 1:
            raise RuntimeError(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got: {t.ndim}D")
        if t._dtype is not tensors[0]._dtype:
            raise RuntimeError("meshgrid expects all tensors to have the same dtype")
    shape = [t.numel() for t in tensors]
    swap = indexing == "xy" and len(tensors) >= 2
    if swap:
        shape[0], shape[1] = shape[1], shape[0]
    out = []
    for i, t in enumerate(tensors):
        p = (1 - i) if swap and i < 2 else i
        vs = [1] * len(shape)
        vs[p] = -1
        out.append(t.reshape(vs).expand(shape))
    return tuple(out)


# ================================================================ pad (nn.functional.pad)
def _infer_pad(metas, attrs):
    x = metas[0]
    w = attrs["widths"]
    return [Meta(tuple(s + a + b for s, (a, b) in zip(x.shape, w)), x.dtype)]


PAD = register(OpDef("pad", infer=_infer_pad, doc="pad with mode constant/reflect/replicate/circular; "
                                                  "widths: per-dim (before, after), non-negative"))

_PAD_MODES = ("constant", "reflect", "replicate", "circular")


@export(method=False)
def pad(input: Tensor, pad, mode: str = "constant", value=None) -> Tensor:
    """Pad the last ``len(pad) // 2`` dims; ``pad`` lists (left, right) of the last dim first
    (``torch.nn.functional.pad``).  Negative padding crops."""
    pad = tuple(int(p) for p in pad)
    if mode not in _PAD_MODES:
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    if len(pad) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    k = len(pad) // 2
    nd = input.ndim
    if k > nd:
        raise RuntimeError(f"Padding length should be less than or equal to two times the input dimension but got "
                           f"padding length {len(pad)} and input of dimension {nd}")
    if mode != "constant":
        if value is not None and value != 0:
            raise RuntimeError(f"Padding mode \"{mode}\" doesn't take in value argument")
        if not ((k == 1 and nd in (2, 3)) or (k == 2 and nd in (3, 4)) or (k == 3 and nd in (4, 5))):
            raise NotImplementedError(
                f"Padding size {len(pad)} is not supported for {nd}D input tensor.\n"
                "Supported combinations for non-constant padding:\n"
                "  - 2D or 3D input: padding size = 2 (pads last dimension)\n"
                "  - 3D or 4D input: padding size = 4 (pads last 2 dimensions)\n"
                "  - 4D or 5D input: padding size = 6 (pads last 3 dimensions)")
    if mode in ("reflect", "replicate") and input._dtype is _dt.bool_:
        kern = "reflection_pad" if mode == "reflect" else "replication_pad"
        raise NotImplementedError(f"\"{kern}{k}d\" not implemented for 'Bool'")
    if mode in ("reflect", "replicate") and 0 in tuple(input.shape)[max(nd - k - 1, 0):]:
        raise RuntimeError(f"{mode} pad: Expected {k + 1}D or {k + 2}D (batch mode) tensor with possibly 0 batch size "
                           f"and other non-zero dimensions for input, but got {_sl(input.shape)}")
    widths = [(0, 0)] * nd
    x = input
    crops = []  # reflect / replicate: torch pads the original input, then crops the negative sides
    for i in range(k):
        d = nd - 1 - i
        lo, hi = pad[2 * i], pad[2 * i + 1]
        n = x.shape[d]
        if n + lo + hi < 0:
            raise RuntimeError(f"The input size {n}, plus negative padding {lo} and {hi} resulted in a negative "
                               f"output size, which is invalid. Check dimension {d} of your input.")
        if mode == "constant" and n + min(lo, 0) + min(hi, 0) < 0:   # (torch crops each side first)
            raise RuntimeError(f"pad: narrow(): length must be non-negative (cropping ({lo}, {hi}) from size {n} at "
                               f"dimension {d})")
        if mode in ("reflect", "replicate") and k == 1 and n + lo + hi < 1:   # (torch's 1-D pad kernels)
            raise RuntimeError(f"{mode} pad: input (size {n} at dimension {d}) is too small. Calculated output "
                               f"size: {n + lo + hi}")
        if n + lo + hi == 0:   # (torch: an empty dim, e.g. circular (-6, 1) of 5)
            x = x.narrow(d, 0, 0)
            widths[d] = (0, 0)
            continue
        if mode in ("reflect", "replicate") and (lo < 0 or hi < 0):
            crops.append((d, max(-lo, 0), max(-hi, 0)))
            lo, hi = max(lo, 0), max(hi, 0)
        # crop negative padding first
        if lo < 0 or hi < 0:
            s = -lo if lo < 0 else 0
            e = n + hi if hi < 0 else n
            x = x.narrow(d, s, max(e - s, 0))
            lo, hi = max(lo, 0), max(hi, 0)
        widths[d] = (lo, hi)
    if mode == "reflect":
        for d in range(nd - k, nd):
            lo, hi = widths[d]
            n = x.shape[d]
            if (lo or hi) and (lo >= n or hi >= n):
                raise RuntimeError(f"Argument #4: Padding size should be less than the corresponding input dimension, "
                                   f"but got: padding ({lo}, {hi}) at dimension {d} of input {_sl(input.shape)}")
    elif mode == "circular":
        for d in range(nd - k, nd):
            lo, hi = widths[d]
            if lo > x.shape[d] or hi > x.shape[d]:
                raise RuntimeError("Padding value causes wrapping around more than once.")
    elif mode == "replicate":
        for d in range(nd - k, nd):
            if x.shape[d] == 0 and any(widths[d]):
                raise RuntimeError(f"replicate padding: cannot pad an empty dimension {d} of input "
                                   f"{_sl(input.shape)} (Expected {nd}D tensor with possibly 0 batch size and other "
                                   f"non-zero dimensions for input)")
    if mode == "constant" and value is not None and isinstance(value, float) and value != value \
            and input._dtype.category != 2:
        raise RuntimeError("pad: cannot fill an integer tensor with NaN")
    v = 0 if value is None else (value.item() if isinstance(value, Tensor) else value)
    if mode == "constant" and input._dtype.category == 1 and not isinstance(v, bool):
        # (torch: a RuntimeError, a negative value for an unsigned dtype included; numpy's fill: OverflowError)
        _dt.check_scalar(v, input._dtype, "pad")
        if not input._dtype.is_signed and v < 0:
            raise RuntimeError(f"pad: value {v!r} cannot be converted to type {input._dtype.name} without overflow")
    # torch: the input's suggested memory format (channels-last kept, whatever dims are padded), but circular
    # padding's result is row-major
    order = suggest(input) if mode != "circular" else None
    if all(w == (0, 0) for w in widths):
        r = x.clone() if not crops else x
    else:
        r = run_in(PAD, [x], {"widths": tuple(widths), "mode": mode, "value": v}, order)[0]
    for d, a, b in crops:
        r = r.narrow(d, a, r.shape[d] - a - b)
    if not crops:
        return r
    return r.contiguous() if order is None else lay_out(r, order)
