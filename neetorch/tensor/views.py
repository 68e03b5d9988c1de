"""Views: new shape/strides/offset over the same storage (no data is copied).

Every view goes through :func:`make_view`, which asks the tensor's backend for an
``as_strided`` array; ``reshape`` copies only when no view exists, like PyTorch.
"""
from __future__ import annotations

import numpy as np

from ..ops.shape_rules import wrap_dim, numel
from .tensor import Tensor, _is_contiguous

__all__ = ["make_view", "view", "reshape", "permute", "transpose", "squeeze", "unsqueeze", "expand", "narrow",
           "flatten", "unflatten", "select", "unbind", "movedim", "as_strided", "t", "view_as", "reshape_as",
           "expand_as", "swapaxes", "diagonal", "unfold", "split", "chunk", "tensor_split", "ravel", "atleast_1d",
           "atleast_2d", "atleast_3d", "broadcast_to", "swapdims", "moveaxis", "hsplit", "vsplit"]


def _strides(t: Tensor):
    isz = t._dtype.itemsize
    return [s // isz for s in t._data.strides]


def make_view(t: Tensor, shape, strides, offset: int = 0) -> Tensor:
    data = t._data
    if t._device.type == "cpu":
        from ..devices.cpu import CPUBackend
        arr = CPUBackend.as_strided(None, data, shape, strides, offset)
    else:
        arr = t._backend().as_strided(data, shape, strides, offset)
    return Tensor._make(arr, t._device, t._dtype)


def _infer_size(shape, n: int, op: str) -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    shape = [int(s) for s in shape]
    neg = [i for i, s in enumerate(shape) if s == -1]
    if len(neg) > 1:
        raise RuntimeError(f"{op}: only one dimension can be inferred, got shape {shape}")
    for s in shape:
        if s < -1:
            raise RuntimeError(f"{op}: invalid shape dimension {s} in {shape}")
    if neg:
        rest = numel([s for s in shape if s != -1])
        if rest == 0 or n % rest:
            raise RuntimeError(f"{op}: shape '{shape}' is invalid for input of size {n}")
        shape[neg[0]] = n // rest
    if numel(shape) != n:
        raise RuntimeError(f"{op}: shape '{shape}' is invalid for input of size {n}")
    return tuple(shape)


def _compute_stride(oldshape, oldstride, newshape):
    """PyTorch's computeStride: strides for a view with ``newshape``, or None if impossible."""
    if numel(oldshape) == 0 or not oldshape:  # empty, or 0-d (one element: any all-ones shape)
        return list(_contig_strides(newshape))
    newstride = [0] * len(newshape)
    view_d = len(newshape) - 1
    chunk_base_stride = oldstride[-1] if oldstride else 1
    tensor_numel = 1
    view_numel = 1
    for tensor_d in range(len(oldshape) - 1, -1, -1):
        tensor_numel *= oldshape[tensor_d]
        if tensor_d == 0 or (oldshape[tensor_d - 1] != 1 and
                             oldstride[tensor_d - 1] != tensor_numel * chunk_base_stride):
            while view_d >= 0 and (view_numel < tensor_numel or newshape[view_d] == 1):
                newstride[view_d] = view_numel * chunk_base_stride
                view_numel *= newshape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base_stride = oldstride[tensor_d - 1]
                tensor_numel = 1
                view_numel = 1
    if view_d != -1:
        return None
    return newstride


def _contiguous_reshape(t: Tensor, new):
    """numpy's reshape of t's (C-contiguous) array where it gives torch's strides, else None (make_view with
    _compute_stride's).  They differ only in the strides of size-1 dims (numpy's own rule for them; torch's from the
    input's strides, size-1 ones included: ``x.t().reshape(1, 3, 1)`` of an x of shape (1, 3))"""
    if 1 not in new:
        return Tensor._make(t._data.reshape(new), t._device, t._dtype)
    st = _compute_stride(tuple(t.shape), _strides(t), new)
    return None if st is None else _reshaped_as(t, new, st)


def _reshaped_as(t: Tensor, shape, strides):
    """numpy's reshape of t's C-contiguous array to ``shape`` where it has these (element) strides, else None."""
    r = t._data.reshape(shape)
    isz = t._dtype.itemsize
    if any(a != b * isz for a, b in zip(r.strides, strides)):
        return None
    return Tensor._make(r, t._device, t._dtype)


def _contig_strides(shape):
    st = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        st[i] = st[i + 1] * max(shape[i + 1], 1)
    return st


def _kw_sizes(op, args, kw, name):
    """torch's keyword form of a sizes argument (``x.view(size=(2, 3))``, ``x.permute(dims=(1, 0))``)."""
    bad = [k for k in kw if k != name]
    if bad:
        raise TypeError(f"{op}() got an unexpected keyword argument '{bad[0]}'")
    if args:
        raise TypeError(f"{op}() got multiple values for argument '{name}'")
    v = kw[name]
    return (v,) if isinstance(v, int) else (tuple(v),)


def view(t: Tensor, *shape, **kw) -> Tensor:
    """Same data, new shape; errors when the strides make that impossible (use reshape)."""
    if kw:
        shape = (kw["dtype"],) if set(kw) == {"dtype"} and not shape else _kw_sizes("view", shape, kw, "size")
    if len(shape) == 1 and not isinstance(shape[0], (int, tuple, list)):
        from .dtypes import to_dtype
        return _view_dtype(t, to_dtype(shape[0]))
    new = _infer_size(shape, t.numel(), "view")
    if t._device.type == "cpu" and t._data.flags.c_contiguous:
        r = _contiguous_reshape(t, new)
        if r is not None:
            return r
    st = _compute_stride(tuple(t.shape), _strides(t), new)
    if st is None:
        raise RuntimeError(f"view size is not compatible with input tensor's size and stride (at least one dimension "
                           f"spans across two contiguous subspaces): shape {tuple(t.shape)}, strides {tuple(_strides(t))}"
                           f" -> {new}. Use .reshape(...) instead.")
    return make_view(t, new, st)


_bany = any


def _view_dtype(t: Tensor, dt) -> Tensor:
    if dt.itemsize != t._dtype.itemsize:
        # torch: the last dim (stride 1) is rescaled, e.g. (2, 3) float32 -> (2, 6) float16
        if t.ndim == 0:
            raise RuntimeError(f"view(dtype): self.dim() cannot be 0 when viewing {t._dtype.name} as {dt.name} "
                               f"(different element sizes)")
        ratio = dt.itemsize // t._dtype.itemsize
        if ratio > 1 and (t.storage_offset() % ratio or _bany(st % ratio for st in _strides(t)[:-1])):
            raise RuntimeError(f"view(dtype): the storage offset ({t.storage_offset()}) and the strides "
                               f"{tuple(_strides(t))} must be divisible by {ratio} to view {t._dtype.name} as {dt.name}")
        if t._device.type == "cpu" and (t._data.strides[-1] == t._dtype.itemsize or t.shape[-1] == 1):
            try:
                return Tensor._make(t._data.view(dt.np), t._device, dt)
            except ValueError as e:
                raise RuntimeError(f"view(dtype): cannot view {t._dtype.name} {tuple(t.shape)} with strides "
                                   f"{tuple(_strides(t))} as {dt.name}: {e}") from None
        raise RuntimeError(f"view(dtype): {t._dtype.name} -> {dt.name} needs equal element sizes, or a last dim "
                           f"of stride 1 on the cpu (shape {tuple(t.shape)}, strides {tuple(_strides(t))})")
    if t._device.type == "cpu":
        return Tensor._make(t._data.view(dt.np), t._device, dt)
    bk = t._backend()
    fn = getattr(bk, "view_dtype", None)
    if fn is None:
        raise RuntimeError(f"view(dtype): {t._dtype.name} -> {dt.name} on {t._device}: the {t._device.type} backend "
                           f"has no view_dtype (reinterpreting its storage); move the tensor to the cpu first")
    return Tensor._make(fn(t._data, dt.np), t._device, dt)


def reshape(t: Tensor, *shape, **kw) -> Tensor:
    """A view when the strides allow it, else a contiguous copy (``torch.reshape``)."""
    if kw:
        shape = _kw_sizes("reshape", shape, kw, "shape")
    new = _infer_size(shape, t.numel(), "reshape")
    if t._device.type == "cpu" and t._data.flags.c_contiguous:
        r = _contiguous_reshape(t, new)
        if r is not None:
            return r
    st = _compute_stride(tuple(t.shape), _strides(t), new)
    if st is not None:
        return make_view(t, new, st)
    return view(t.contiguous(), new)


def view_as(t, other):
    return view(t, tuple(other.shape))


def reshape_as(t, other):
    return reshape(t, tuple(other.shape))


def permute(t: Tensor, *dims, **kw) -> Tensor:
    if kw:
        dims = _kw_sizes("permute", dims, kw, "dims")
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = dims[0]
    nd = t.ndim
    if len(dims) != nd:
        raise RuntimeError(f"permute(sparse_coo): number of dimensions in the tensor input does not match the length "
                           f"of the desired ordering of dimensions i.e. input.dim() = {nd} is not equal to "
                           f"len(dims) = {len(dims)}")
    p = [wrap_dim(d, nd, "permute") for d in dims]
    if len(set(p)) != nd:
        raise RuntimeError(f"permute: repeated dim in {tuple(dims)}")
    if t._device.type == "cpu":
        return Tensor._make(t._data.transpose(p), t._device, t._dtype)
    sh, st = tuple(t.shape), _strides(t)
    return make_view(t, [sh[i] for i in p], [st[i] for i in p])


def transpose(t: Tensor, dim0: int, dim1: int) -> Tensor:
    nd = t.ndim
    if nd == 0:
        wrap_dim(dim0, 0, "transpose"), wrap_dim(dim1, 0, "transpose")
        return t
    a, b = wrap_dim(dim0, nd, "transpose"), wrap_dim(dim1, nd, "transpose")
    p = list(range(nd))
    p[a], p[b] = p[b], p[a]
    return permute(t, p)


swapaxes = swapdims = transpose


def t(x: Tensor) -> Tensor:
    if x.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {x.ndim}D")
    return transpose(x, 0, 1) if x.ndim == 2 else x


def movedim(t: Tensor, source, destination) -> Tensor:
    nd = t.ndim
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    if len(src) != len(dst):
        raise RuntimeError(f"movedim: Invalid source or destination dims: source ({src} dims) should contain the same "
                           f"number of dims as destination ({dst} dims)")
    src = [wrap_dim(d, nd, "movedim") for d in src]
    dst = [wrap_dim(d, nd, "movedim") for d in dst]
    for name, ds in (("source", src), ("destination", dst)):
        if len(set(ds)) != len(ds):
            raise RuntimeError(f"movedim: repeated dim in `{name}` ({ds})")
    if nd == 0:
        return permute(t, [])  # a 0-d tensor: dims 0 / -1 name the tensor itself
    order = [None] * nd
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter([i for i in range(nd) if i not in src])
    order = [o if o is not None else next(rest) for o in order]
    return permute(t, order)


moveaxis = movedim


def squeeze(t: Tensor, dim=None) -> Tensor:
    sh, st = tuple(t.shape), _strides(t)
    if dim is None:
        keep = [i for i, s in enumerate(sh) if s != 1]
    else:
        dims = [dim] if isinstance(dim, int) else list(dim)
        wrapped = [wrap_dim(d, t.ndim, "squeeze") for d in dims]
        if len(set(wrapped)) != len(wrapped):
            dup = next(d for i, d in enumerate(wrapped) if d in wrapped[:i])
            raise RuntimeError(f"squeeze: dim {dup} appears multiple times in the list of dims")
        dims = set(wrapped)
        keep = [i for i in range(len(sh)) if not (i in dims and sh[i] == 1)]
    return make_view(t, [sh[i] for i in keep], [st[i] for i in keep])


def unsqueeze(t: Tensor, dim: int) -> Tensor:
    nd = t.ndim
    d = wrap_dim(dim, nd + 1, "unsqueeze")
    sh, st = list(t.shape), _strides(t)
    # torch's stride for the new dim: the next dim's extent (size x stride), 1 at the end; the other dims' strides
    # kept, size-1 ones included (numpy's reshape of a C-contiguous array rewrites those: only where it gives the
    # same strides is it the fast path)
    new_st = st[d] * sh[d] if d < nd else 1
    sh.insert(d, 1)
    st.insert(d, new_st)
    if t._device.type == "cpu" and t._data.flags.c_contiguous:
        r = _reshaped_as(t, sh, st)
        if r is not None:
            return r
    return make_view(t, sh, st)


def expand(t: Tensor, *sizes, **kw) -> Tensor:
    """Broadcast size-1 dims to ``sizes`` without copying (-1 keeps a size)."""
    if kw:
        sizes = _kw_sizes("expand", sizes, kw, "size")
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    sizes = tuple(int(s) for s in sizes)
    sh, st = tuple(t.shape), _strides(t)
    if len(sizes) < len(sh):
        raise RuntimeError(f"expand: the number of sizes provided ({len(sizes)}) must be greater or equal to the "
                           f"number of dimensions in the tensor ({len(sh)})")
    off = len(sizes) - len(sh)
    nsh, nst = [], []
    for i, s in enumerate(sizes):
        if i < off:
            if s < 0:
                raise RuntimeError(f"expand: the expanded size of the tensor ({s}) isn't allowed in a leading, "
                                   f"non-existing dimension {i}")
            nsh.append(s)
            nst.append(0)
            continue
        cur = sh[i - off]
        if s == -1:
            s = cur
        if cur == s:
            nsh.append(s)
            nst.append(st[i - off])
        elif cur == 1:
            nsh.append(s)
            nst.append(0)
        else:
            raise RuntimeError(f"The expanded size of the tensor ({s}) must match the existing size ({cur}) at "
                               f"non-singleton dimension {i}.  Target sizes: {list(sizes)}.  Tensor sizes: {list(sh)}")
    if tuple(nsh) == sh:
        return t
    return make_view(t, nsh, nst)


def expand_as(t, other):
    return expand(t, tuple(other.shape))


def broadcast_to(t, shape):
    return expand(t, tuple(shape))


def narrow(t: Tensor, dim: int, start, length: int) -> Tensor:
    d = wrap_dim(dim, t.ndim, "narrow")
    start = int(start)
    n = t.shape[d]
    if not -n <= start <= n:  # torch: IndexError for the start, RuntimeError for the length
        raise IndexError(f"narrow(): start out of range (expected to be in range of [{-n}, {n}], but got {start}) "
                         f"for dim {dim} of shape {tuple(t.shape)}")
    if start < 0:
        start += n
    if length < 0:
        raise RuntimeError(f"narrow(): length must be non-negative, got {length} (dim {dim} of shape "
                           f"{tuple(t.shape)})")
    if start + length > n:
        raise RuntimeError(f"narrow(): start ({start}) + length ({length}) exceeds dimension size ({n}) of dim {dim} "
                           f"for shape {tuple(t.shape)}")
    sh, st = list(t.shape), _strides(t)
    sh[d] = length
    return make_view(t, sh, st, start * st[d])


def select(t: Tensor, dim: int, index: int) -> Tensor:
    if t.ndim == 0:
        raise IndexError("select() cannot be applied to a 0-dim tensor.")
    d = wrap_dim(dim, t.ndim, "select")
    n = t.shape[d]
    i = int(index)
    if not -n <= i < n:
        raise IndexError(f"select(): index {i} out of range for tensor of size {tuple(t.shape)} at dimension {d}")
    if i < 0:
        i += n
    sh, st = list(t.shape), _strides(t)
    off = i * st[d]
    del sh[d], st[d]
    return make_view(t, sh, st, off)


def unbind(t: Tensor, dim: int = 0):
    d = wrap_dim(dim, t.ndim, "unbind")
    return tuple(select(t, d, i) for i in range(t.shape[d]))


def flatten(t: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    if t.ndim == 0:   # torch: a 0-d tensor takes dims in [-1, 0] like a 1-d one
        wrap_dim(start_dim, 0, "flatten")
        wrap_dim(end_dim, 0, "flatten")
        return reshape(t, 1)
    s = wrap_dim(start_dim, t.ndim, "flatten")
    e = wrap_dim(end_dim, t.ndim, "flatten")
    if s > e:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    sh = list(t.shape)
    return reshape(t, sh[:s] + [numel(sh[s:e + 1])] + sh[e + 1:])


def ravel(t):
    """``torch.ravel``: ``contiguous().view(-1)``: a view of a contiguous tensor, else a copy (even where a
    strided view could exist, as for a 1-D slice with a step)."""
    return reshape(t.contiguous(), -1)


def unflatten(t: Tensor, dim: int, sizes) -> Tensor:
    d = wrap_dim(dim, t.ndim, "unflatten")
    sh = list(t.shape)
    sizes = list(sizes)
    if -1 in sizes:
        known = numel([s for s in sizes if s != -1])
        sizes[sizes.index(-1)] = sh[d] // known if known else 0
    if numel(sizes) != sh[d]:
        raise RuntimeError(f"unflatten: Provided sizes {list(sizes)} don't multiply up to the size of dim {dim} "
                           f"({sh[d]}) in the input tensor")
    return view(t, sh[:d] + sizes + sh[d + 1:]) if _view_ok(t) else reshape(t, sh[:d] + sizes + sh[d + 1:])


def _view_ok(t):
    return _is_contiguous(tuple(t.shape), _strides(t))


def _cpu_storage(a: np.ndarray):
    """(start address, size in bytes) of the buffer that owns CPU array ``a`` (numpy views and as_strided spans
    followed to their root; a pooled output's root is its pool block, a bound at least as wide as its storage)."""
    from ..devices.cpu.layout import root_array
    base = root_array(a)
    return base.__array_interface__["data"][0], base.nbytes


def as_strided(t: Tensor, size, stride, storage_offset=None) -> Tensor:
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    if len(size) != len(stride):
        raise RuntimeError(f"mismatch in length of strides and shape: as_strided got size {list(size)} and stride "
                           f"{list(stride)}")
    if any(s < 0 for s in size):
        raise RuntimeError(f"as_strided: negative size in {list(size)}")
    if any(s < 0 for s in stride):
        raise RuntimeError(f"as_strided: Negative strides are not supported at the moment, got strides: "
                           f"{list(stride)}")
    if storage_offset is not None and storage_offset < 0:
        raise RuntimeError(f"as_strided: Tensor: invalid storage offset {storage_offset}")
    off = 0 if storage_offset is None else storage_offset - t.storage_offset()
    first = None
    isz = t._dtype.itemsize
    if t._device.type == "cpu" and numel(size):
        # a view past the storage would read (or write) foreign memory: refuse it as torch does
        start, nbytes = _cpu_storage(t._data)
        first = t._data.__array_interface__["data"][0] + off * isz - start
    elif numel(size) and isinstance(getattr(getattr(t._data, "storage", None), "nbytes", None), int):
        # device arrays over one buffer (OpenCL's CLArray: storage.nbytes, offset in elements): the same check
        nbytes, first = t._data.storage.nbytes, (t._data.offset + off) * isz
    if first is not None:
        need = first + (sum((n - 1) * st for n, st in zip(size, stride)) + 1) * isz
        if first < 0 or need > nbytes:
            raise RuntimeError(f"setStorage: sizes {list(size)}, strides {list(stride)}, storage offset "
                               f"{t.storage_offset() + off}, and itemsize {isz} requiring a storage size of "
                               f"{need} are out of bounds for storage of size {nbytes}")
    return make_view(t, size, stride, off)


def diagonal(t: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    a, b = wrap_dim(dim1, t.ndim, "diagonal"), wrap_dim(dim2, t.ndim, "diagonal")
    if a == b:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    sh, st = list(t.shape), _strides(t)
    if offset >= 0:
        n = max(min(sh[a], sh[b] - offset), 0)
        off = offset * st[b] if n else 0
    else:
        n = max(min(sh[a] + offset, sh[b]), 0)
        off = -offset * st[a] if n else 0
    nsh = [s for i, s in enumerate(sh) if i not in (a, b)] + [n]
    nst = [s for i, s in enumerate(st) if i not in (a, b)] + [st[a] + st[b]]
    return make_view(t, nsh, nst, off)


def unfold(t: Tensor, dimension: int, size: int, step: int) -> Tensor:
    d = wrap_dim(dimension, t.ndim, "unfold")
    sh, st = list(t.shape), _strides(t)
    if t.ndim == 0:  # torch: a 0-d tensor unfolds to shape (size,) (size must be 1)
        if size > 1:
            raise RuntimeError(f"unfold: maximum size for tensor at dimension 0 is 1 but size is {size}")
        if step <= 0:
            raise RuntimeError(f"unfold: step is {step} but must be > 0")
        return make_view(t, [size], [1])
    if size < 0:
        raise RuntimeError(f"unfold: size is {size} but must be >= 0")
    if size > sh[d]:
        raise RuntimeError(f"unfold: maximum size for tensor at dimension {d} is {sh[d]} but size is {size}")
    if step <= 0:
        raise RuntimeError(f"unfold: step is {step} but must be > 0")
    n = (sh[d] - size) // step + 1
    nsh = sh[:d] + [n] + sh[d + 1:] + [size]
    nst = st[:d] + [st[d] * step] + st[d + 1:] + [st[d]]
    return make_view(t, nsh, nst)


def split(t: Tensor, split_size_or_sections, dim: int = 0):
    """Views of ``t`` along ``dim``: equal chunks of a size, or the given sizes."""
    d = wrap_dim(dim, t.ndim, "split")
    n = t.shape[d]
    if isinstance(split_size_or_sections, int):
        s = split_size_or_sections
        if s <= 0 and not (s == 0 and n == 0):
            raise RuntimeError(f"split: split_size can only be 0 if dimension size is 0, but got {s}")
        sizes = ([s] * (n // s) + ([n % s] if n % s else [])) if s else [0]
        if not sizes:  # an empty dim splits into one empty chunk, like torch
            sizes = [0]
    else:
        sizes = [int(x) for x in split_size_or_sections]
        if sum(sizes) != n:
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's size at "
                               f"dimension {d}), but got split_sizes={sizes}")
    out, start = [], 0
    for s in sizes:
        out.append(narrow(t, d, start, s))
        start += s
    return tuple(out)


def chunk(t: Tensor, chunks: int, dim: int = 0):
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    d = wrap_dim(dim, t.ndim, "chunk")
    n = t.shape[d]
    size = -(-n // chunks) if n else 0
    if size == 0:
        return tuple(narrow(t, d, 0, 0) for _ in range(chunks)) if n == 0 else split(t, 1, d)
    return split(t, size, d)


def tensor_split(t: Tensor, indices_or_sections, dim: int = 0):
    d = wrap_dim(dim, t.ndim, "tensor_split")
    n = t.shape[d]
    if isinstance(indices_or_sections, Tensor):   # torch: a 0-d tensor is the number of sections, 1-d the indices
        if indices_or_sections._dtype.name != "int64" or indices_or_sections.ndim > 1:
            raise RuntimeError(f"tensor_split expected tensor_indices_or_sections to be a zero-dimensional or "
                               f"one-dimensional tensor of dtype long, but got a {indices_or_sections.ndim}-d "
                               f"{indices_or_sections._dtype.name} tensor")
        indices_or_sections = int(indices_or_sections.item()) if indices_or_sections.ndim == 0 \
            else indices_or_sections.tolist()
    if isinstance(indices_or_sections, int):
        k = indices_or_sections
        if k <= 0:
            raise RuntimeError(f"number of sections must be larger than 0, got {k}")
        q, r = divmod(n, k)
        sizes = [q + 1] * r + [q] * (k - r)
        return split(t, sizes, d)
    idx = [int(i) for i in indices_or_sections]
    bounds = [0] + [min(max(i + n if i < 0 else i, 0), n) for i in idx] + [n]  # negative indices wrap
    return tuple(narrow(t, d, bounds[i], max(bounds[i + 1] - bounds[i], 0)) for i in range(len(bounds) - 1))


def _hv_split(t, sections, d, need, name):
    """torch.hsplit / vsplit: ``tensor_split`` along ``d``; the tensor needs ``need`` dims, an int section count
    must divide that dim evenly."""
    if t.ndim < need:
        raise RuntimeError(f"torch.{name} requires a tensor with at least {need} dimension, but got a tensor with "
                           f"{t.ndim} dimensions!")
    if isinstance(sections, (int, np.integer)) and not isinstance(sections, bool) and \
            (sections == 0 or t.shape[d] % sections):
        raise RuntimeError(f"torch.{name} attempted to split along dimension {d}, but the size of the dimension "
                           f"{t.shape[d]} is not divisible by the split_size {sections}!")
    return tensor_split(t, sections, d)


def hsplit(t, sections):
    return _hv_split(t, sections, 1 if t.ndim > 1 else 0, 1, "hsplit")


def vsplit(t, sections):
    return _hv_split(t, sections, 0, 2, "vsplit")


def _atleast_many(fn, t, more):
    """torch.atleast_Nd(*tensors): several tensors (or one list / tuple of them) give a tuple."""
    if more:
        return tuple(fn(x) for x in (t,) + more)
    if isinstance(t, (list, tuple)):
        return tuple(fn(x) for x in t)
    return fn(t)


def atleast_1d(t, *more):
    if more or isinstance(t, (list, tuple)):
        return _atleast_many(atleast_1d, t, more)
    return reshape(t, 1) if t.ndim == 0 else t


def atleast_2d(t, *more):
    if more or isinstance(t, (list, tuple)):
        return _atleast_many(atleast_2d, t, more)
    return reshape(t, 1, 1) if t.ndim == 0 else (unsqueeze(t, 0) if t.ndim == 1 else t)


def atleast_3d(t, *more):
    if more or isinstance(t, (list, tuple)):
        return _atleast_many(atleast_3d, t, more)
    if t.ndim == 0:
        return reshape(t, 1, 1, 1)
    if t.ndim == 1:
        return reshape(t, 1, -1, 1)
    if t.ndim == 2:
        return unsqueeze(t, -1)
    return t
