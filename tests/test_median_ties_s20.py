"""Session 20: median / nanmedian against torch 2.13's CPU kernels (ATen/native/Sorting.cpp) among ties.

With a dim, torch runs std::nth_element on each row's indices under a comparator that breaks ties by index: the
stable sort's element, except for nanmedian's all-NaN rows (NaNs equivalent: nth_element's own choice, emulated by
neetorch/ops/_stl_order.py).  Without a dim, std::nth_element runs on the values of ``input.clone()`` (memory order
of a dense input), so the sign of a zero median and the NaN of an all-NaN nanmedian follow its swaps; median()
with any NaN is quiet_NaN().  Every check compares value bits and indices with torch, on inputs full of ties,
NaNs (of both signs) and signed zeros, through both the plain Python emulation and the compiled kernel."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import neetorch as nee  # noqa: E402
from neetorch.devices.cpu.kernels import reduction as _R  # noqa: E402
from neetorch.ops import _stl_order as S  # noqa: E402
from test_tie_order_s19 import force_stl_path  # noqa: E402

_FUNCS = ("median", "nanmedian")


@pytest.fixture(params=["python", "kernel"])
def path(request, monkeypatch):
    """Both implementations of the emulation: plain Python (small problems) and the compiled kernel (forced)."""
    force_stl_path(request.param, monkeypatch)
    monkeypatch.setattr(_R, "_NTH_EQ", {}, raising=False)     # (nanmedian's all-NaN index, cached per row length)
    return request.param


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view(f"u{a.itemsize}") if a.dtype.kind == "f" or a.dtype.name == "bfloat16" else a


def _np(t):
    """A torch tensor's data as numpy, bfloat16 as its bits (uint16)."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def _pair(a, dtype):
    """The same bits as a neetorch and a torch tensor (``a`` float64, converted by neetorch once; torch gets the
    converted bits: its own float -> bfloat16 conversion drops NaN signs)."""
    x = nee.tensor(a).to(getattr(nee, dtype))
    h = x.numpy()
    t = torch.from_numpy(h.view(np.int16).copy()).view(torch.bfloat16) if dtype == "bfloat16" else \
        torch.from_numpy(h.copy())
    return t, x


def _same(t_res, n_res, what=""):
    """Values equal bit for bit (signed zeros, NaN signs and payloads), indices equal, shapes and dtypes equal."""
    t_res = t_res if isinstance(t_res, tuple) else (t_res,)
    n_res = n_res if isinstance(n_res, tuple) else (n_res,)
    assert len(t_res) == len(n_res), what
    for tt, nn in zip(t_res, n_res):
        t = _np(tt)
        n = nn.numpy()
        n = n.view(np.uint16) if n.dtype.name == "bfloat16" else n
        assert t.shape == n.shape and t.dtype == n.dtype, (what, t.shape, n.shape, t.dtype, n.dtype)
        assert np.array_equal(_bits(t), _bits(n)), (what, t, n)


def _data(shape, rng, *, hi=3, nan=0.0, zeros=False, allnan=0.0, negnan=True, dtype="float32"):
    """Heavy ties: integers in [0, hi); NaNs (half of them negative), signed zeros, all-NaN rows along the last
    dim (``allnan``: their share)."""
    a = rng.integers(0, hi, shape).astype(np.float64)
    if dtype == "uint8" or not (dtype.startswith("float") or dtype == "bfloat16"):
        return a - (hi // 2 if dtype != "uint8" else 0)
    if zeros:
        a[(a == 0) & (rng.random(shape) < 0.5)] = -0.0
    if nan:
        a[rng.random(shape) < nan] = np.nan
    if allnan and a.ndim:
        rows = rng.random(shape[:-1]) < allnan
        a[rows] = np.nan
    if negnan:
        a[np.isnan(a) & (rng.random(shape) < 0.5)] = -np.nan
    return a


_FLOATS = ("float16", "bfloat16", "float32", "float64")
_INTS = ("uint8", "int8", "int16", "int32", "int64")


# ---------------------------------------------------------------- rows of every length
@pytest.mark.parametrize("dtype", _FLOATS + _INTS)
def test_rows_match_torch(path, dtype):
    """Rows of 1..~300 along the last dim: the lower median, its index and (no dim) the value of the whole."""
    rng = np.random.default_rng((_FLOATS + _INTS).index(dtype))
    sizes = list(range(1, 41)) + [47, 63, 64, 65, 100, 127, 128, 129, 200, 255, 256, 257, 300]
    if path == "kernel":
        sizes = sizes[::3]
    for n in sizes:
        for hi, nan, zeros, allnan in ((1, 0.0, False, 0.0), (3, 0.0, True, 0.0), (2, 0.3, True, 0.3),
                                       (3, 0.8, False, 0.5), (n + 1, 0.1, True, 0.0)):
            a = _data((4, n), rng, hi=hi, nan=nan, zeros=zeros, allnan=allnan, dtype=dtype)
            t, x = _pair(a, dtype)
            for f in _FUNCS:
                _same(getattr(torch, f)(t, -1), getattr(nee, f)(x, -1), f"{f} {dtype} n={n}")
                _same(getattr(torch, f)(t), getattr(nee, f)(x), f"{f}() {dtype} n={n}")
                _same(getattr(torch, f)(t[1]), getattr(nee, f)(x[1]), f"{f}() row {dtype} n={n}")


def test_all_nan_rows_every_length(path):
    """nanmedian's all-NaN rows: the index nth_element leaves in front among n equivalent elements (not the first
    NaN: 2 of 5, 8 of 10, ...), the value that NaN's bits; median: the first NaN, its bits."""
    rng = np.random.default_rng(5)
    for n in list(range(1, 70)) + [99, 150, 301, 1000, 4097]:
        a = np.full((2, n), np.nan)
        a[:, rng.random(n) < 0.5] = -np.nan
        a[1, rng.integers(0, n)] = 1.0           # (row 1 holds one number: its index, whatever the NaNs)
        for dtype in ("float32", "float64", "float16"):
            t, x = _pair(a, dtype)
            for f in _FUNCS:
                _same(getattr(torch, f)(t, 1), getattr(nee, f)(x, 1), f"{f} {dtype} n={n}")
                _same(getattr(torch, f)(t[0]), getattr(nee, f)(x[0]), f"{f}() {dtype} n={n}")


# ---------------------------------------------------------------- dims, keepdim, views, methods
@pytest.mark.parametrize("dtype", ("float32", "float16", "bfloat16", "float64", "int64", "uint8"))
def test_every_dim_keepdim_and_views(dtype):
    rng = np.random.default_rng(11)
    a = _data((5, 6, 7), rng, hi=3, nan=0.3, zeros=True, allnan=0.3, dtype=dtype)
    t, x = _pair(a, dtype)
    views = [(t, x), (t.permute(2, 0, 1), x.permute(2, 0, 1)), (t.transpose(0, 2), x.transpose(0, 2)),
             (t[:, ::2, 1:], x[:, ::2, 1:]), (t[1:4], x[1:4]),
             (t[:, :1].expand(5, 4, 7), x[:, :1].expand(5, 4, 7)), (t[2], x[2]), (t[2, 3], x[2, 3])]
    for tv, xv in views:
        for f in _FUNCS:
            _same(getattr(torch, f)(tv), getattr(nee, f)(xv), f"{f}() {tuple(tv.shape)} {tv.stride()}")
            _same(getattr(tv, f)(), getattr(xv, f)(), f"Tensor.{f}() {tuple(tv.shape)}")
            for d in range(-tv.ndim, tv.ndim):
                if tv.stride(d) == 0 and tv.shape[d] > 1:
                    # (torch 2.13 bug: a stride-0 reduced dim is read as if unit-stride, past the view:
                    # median(tensor([[1., 5., 3., 7., 9.]])[:, :3].expand(3, 3), 0) gives 3, 5, 7)
                    continue
                for kd in (False, True):
                    what = f"{f} dim={d} keepdim={kd} {tuple(tv.shape)} {tv.stride()}"
                    _same(getattr(torch, f)(tv, d, kd), getattr(nee, f)(xv, d, kd), what)
                    _same(getattr(tv, f)(d, keepdim=kd), getattr(xv, f)(d, keepdim=kd), "Tensor." + what)


def _view_chain(t, x, rng):
    """The same random chain of views (permute, strided slices, unsqueeze + expand, transpose) on both."""
    for _ in range(int(rng.integers(0, 4))):
        op = rng.integers(0, 4)
        if op == 0 and t.ndim > 1:
            p = [int(v) for v in rng.permutation(t.ndim)]
            t, x = t.permute(*p), x.permute(*p)
        elif op == 1:
            sl = [slice(None)] * t.ndim
            sl[int(rng.integers(0, t.ndim))] = slice(int(rng.integers(0, 2)), None, int(rng.integers(1, 3)))
            t, x = t[tuple(sl)], x[tuple(sl)]
        elif op == 2:
            d = int(rng.integers(0, t.ndim + 1))
            t, x = t.unsqueeze(d), x.unsqueeze(d)
            if rng.random() < 0.5:
                sh = list(t.shape)
                sh[d] = int(rng.integers(2, 4))
                t, x = t.expand(*sh), x.expand(*sh)
        elif t.ndim > 1:
            t, x = t.transpose(0, -1), x.transpose(0, -1)
    return t, x


def test_no_dim_value_follows_the_clone_layout():
    """Without a dim torch's nth_element runs on ``input.clone()``, laid out by empty_like's preserve_format (a
    dense input's strides, infer_dense_strides' permutation for other strided ones): the zero sign of the median
    follows that memory order (transposed, permuted, sliced, expanded inputs)."""
    rng = np.random.default_rng(3)
    zero = checked = 0
    for trial in range(1500):
        shape = tuple(int(s) for s in rng.integers(1, 6, int(rng.integers(1, 4))))
        a = _data(shape, rng, hi=2, zeros=True, nan=0.2 if trial % 2 else 0.0)
        a[(a == 1) & (rng.random(shape) < 0.6)] = -1.0     # (zeros in the middle, both signs)
        t, x = _view_chain(*_pair(a, "float32"), rng)
        if t.numel() == 0 or tuple(t.stride()) != tuple(x.stride()):
            continue    # (neetorch's strides of size-1 dims can differ from torch's; the layout follows them)
        checked += 1
        _same(torch.nanmedian(t), nee.nanmedian(x), f"nanmedian() {tuple(t.shape)} {t.stride()}")
        _same(torch.median(t), nee.median(x), f"median() {tuple(t.shape)} {t.stride()}")
        zero += bool(torch.nanmedian(t) == 0)
    assert checked > 1000 and zero > 300        # (the case under test: zero medians)


def test_large_inputs_compiled_path():
    """Beyond the plain Python emulation's limit (ops/_stl_order.small): the compiled kernel decides."""
    if S._kernel("i64") is None:
        pytest.skip("no LLVM native target")
    rng = np.random.default_rng(7)
    a = _data((6, 2500), rng, hi=3, nan=0.4, zeros=True, allnan=0.5)
    a[0] = np.nan
    assert not S.small(1, a.shape[1])
    for dtype in ("float32", "float64"):
        t, x = _pair(a, dtype)
        for f in _FUNCS:
            _same(getattr(torch, f)(t, 1), getattr(nee, f)(x, 1), f"{f} {dtype}")
            _same(getattr(torch, f)(t, 0, True), getattr(nee, f)(x, 0, True), f"{f} dim 0 {dtype}")
            for tv, xv in ((t, x), (t.t(), x.t()), (t[1:], x[1:]), (t[0], x[0])):
                _same(getattr(torch, f)(tv), getattr(nee, f)(xv), f"{f}() {dtype} {tuple(tv.shape)}")
    b = np.where(rng.random(20000) < 0.5, 0.0, -0.0)
    b[rng.random(20000) < 0.2] = 1.0
    b[rng.random(20000) < 0.2] = -1.0
    t, x = _pair(b, "float32")
    for f in _FUNCS:
        _same(getattr(torch, f)(t), getattr(nee, f)(x), f"{f}() 20000 signed zeros")


# ---------------------------------------------------------------- edge cases and errors
def _outcome(fn):
    try:
        return "ok", fn()
    except Exception as e:      # noqa: BLE001 - the exception type is what is compared
        return type(e), None


@pytest.mark.parametrize("f", _FUNCS)
def test_edge_cases_and_errors_as_torch(f):
    cases = [
        (lambda m: m.tensor(2.5), (0,)), (lambda m: m.tensor(float("nan")), (-1, True)),
        (lambda m: m.tensor(-0.0), ()), (lambda m: m.tensor(float("nan")), ()),
        (lambda m: m.tensor(2.5), (1,)), (lambda m: m.zeros((3, 0)), (1,)), (lambda m: m.zeros((3, 0)), (0,)),
        (lambda m: m.zeros((3, 0)), (0, True)), (lambda m: m.zeros((3, 0)), ()),
        (lambda m: m.zeros((0,), dtype=m.int32), ()), (lambda m: m.zeros((0,), dtype=m.int64), ()),
        (lambda m: m.tensor([True, False]), (0,)), (lambda m: m.tensor([True, False]), ()),
        (lambda m: m.zeros((3, 2)), (2,)), (lambda m: m.zeros((3, 2)), (-3,)),
        (lambda m: m.tensor([[-0.0, 0.0, 0.0, -0.0]]), (1,)),
    ]
    for mk, args in cases:
        (kt, rt), (kn, rn) = _outcome(lambda: getattr(torch, f)(mk(torch), *args)), \
            _outcome(lambda: getattr(nee, f)(mk(nee), *args))
        assert kt == kn, (f, args, kt, kn)
        if kt == "ok":
            _same(tuple(rt) if isinstance(rt, tuple) else rt, tuple(rn) if isinstance(rn, tuple) else rn, f"{args}")
