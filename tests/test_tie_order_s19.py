"""Session 19: torch's CPU order among equal values for topk, sort(stable=False) / argsort, kthvalue and mode
(neetorch/ops/_stl_order.py: libstdc++'s std::sort / partial_sort / nth_element and TH's quickselect, emulated on
order-preserving int64 keys; plain Python for small problems, an LLVM IR kernel above).  Every check compares
indices and value bits with torch on inputs full of ties, NaNs and signed zeros."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import neetorch as nee  # noqa: E402
from neetorch.ops import _stl_order as S  # noqa: E402


def force_stl_path(kind, monkeypatch):
    """One of the emulation's implementations: "python" (the plain one, small problems) or "kernel" (compiled,
    forced; skipped where llvmlite has no native target)."""
    if kind == "kernel":
        if S._kernel("i64") is None:
            pytest.skip("no LLVM native target")
        monkeypatch.setattr(S, "_PY_WORK", -1)
    else:
        monkeypatch.setattr(S, "_PY_WORK", 1 << 62)


@pytest.fixture(params=["python", "kernel"])
def path(request, monkeypatch):
    """Both implementations: the plain Python one (small problems) and the compiled kernel (forced)."""
    force_stl_path(request.param, monkeypatch)
    return request.param


def _same(t_res, n_res):
    """Indices equal, values equal bit for bit (signed zeros, NaNs; bfloat16: NaN's sign and payload aside, which
    differ already in the inputs: torch's vectorized float32 -> bfloat16 conversion)."""
    for tt, nn in zip(t_res, n_res):
        bf = tt.dtype == torch.bfloat16
        t = tt.float().numpy() if bf else tt.numpy()
        n = nn.to(nee.float32).numpy() if bf else nn.numpy()
        assert t.shape == n.shape and t.dtype == n.dtype, (t.shape, n.shape, t.dtype, n.dtype)
        if bf:
            assert np.array_equal(np.isnan(t), np.isnan(n))
            t, n = np.nan_to_num(t, nan=7.0), np.nan_to_num(n, nan=7.0)
        if t.dtype.kind == "f":
            t, n = (np.ascontiguousarray(z).view(f"u{z.itemsize}") for z in (t, n))
        assert np.array_equal(t, n), (t, n)


def _tie_data(shape, seed, dtype="float32", nan=0.0, zeros=False, hi=3):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, hi, shape).astype(np.float64)
    if zeros:
        a[(a == 0) & (rng.random(a.shape) < 0.5)] = -0.0
    if nan:
        a[rng.random(shape) < nan] = np.nan
    return a.astype(dtype)


def _pair(a):
    t = torch.from_numpy(a)
    n = nee.tensor(a)
    return t, n


_SIZES = (1, 2, 3, 5, 15, 16, 17, 18, 33, 64, 65, 130, 400)


# ---------------------------------------------------------------- topk
@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("sorted_", [True, False])
def test_topk_rows_match_torch(path, largest, sorted_):
    seed = 0
    for n in _SIZES:
        for dt, nan, zeros in (("float32", 0.0, False), ("float64", 0.3, False), ("float32", 0.0, True),
                               ("int64", 0.0, False), ("float16", 0.2, True)):
            seed += 1
            a = _tie_data((3, n), seed, dt, nan, zeros, hi=1 + seed % 4)
            t, x = _pair(a)
            for k in sorted({1, 2, n // 2, n - 1, n, n // 64, max(1, n // 64 + 1)}):
                if 0 <= k <= n:
                    _same(torch.topk(t, k, largest=largest, sorted=sorted_),
                          nee.topk(x, k, largest=largest, sorted=sorted_))


def test_topk_every_dim_views_and_dtypes(path):
    a = _tie_data((6, 7, 5), 1, "float32", 0.1, True)
    t, x = _pair(a)
    for d in (0, 1, 2, -1):
        for largest in (True, False):
            for sorted_ in (True, False):
                _same(torch.topk(t, 3, dim=d, largest=largest, sorted=sorted_),
                      nee.topk(x, 3, dim=d, largest=largest, sorted=sorted_))
                _same(torch.topk(t.transpose(0, 2), 4, dim=d, largest=largest, sorted=sorted_),
                      nee.topk(x.transpose(0, 2), 4, dim=d, largest=largest, sorted=sorted_))
    rng = np.random.default_rng(2)
    for dt in (np.int8, np.int16, np.int32, np.uint8, np.int64):
        b = rng.integers(0, 3, (4, 40)).astype(dt)
        for k in (1, 7, 40):
            _same(torch.topk(torch.from_numpy(b), k, sorted=False), nee.topk(nee.tensor(b), k, sorted=False))
            _same(torch.topk(torch.from_numpy(b), k, largest=False), nee.topk(nee.tensor(b), k, largest=False))
    bf = _tie_data((50,), 3, "float32", 0.1)
    _same(torch.topk(torch.from_numpy(bf).bfloat16(), 20, sorted=False),
          nee.topk(nee.tensor(bf).to(nee.bfloat16), 20, sorted=False))
    _same(torch.topk(torch.tensor(2.0), 1), nee.topk(nee.tensor(2.0), 1))
    _same(torch.topk(t, 0, dim=1), nee.topk(x, 0, dim=1))


def test_topk_partial_sort_threshold(path):
    # torch: std::partial_sort when k * 64 <= n, else nth_element (+ sort of the first k - 1)
    a = _tie_data((2, 2000), 5, "float32", 0.05, hi=20)
    t, x = _pair(a)
    for k in (1, 5, 31, 32, 33, 200):
        for largest in (True, False):
            for sorted_ in (True, False):
                _same(torch.topk(t, k, largest=largest, sorted=sorted_),
                      nee.topk(x, k, largest=largest, sorted=sorted_))


def test_onnx_topk_keeps_index_order():
    from neetorch.ops.indexing import _topk
    a = np.array([[1., 3, 3, 2, 3, 1, 1, 3] * 5])
    v, i = _topk(nee.tensor(a), 6, -1, True, True, "index")
    assert i.numpy().tolist() == [[1, 2, 4, 7, 9, 10]]
    v, i = _topk(nee.tensor(a), 3, -1, False, True, "index")
    assert i.numpy().tolist() == [[0, 5, 6]]


# ---------------------------------------------------------------- sort / argsort
@pytest.mark.parametrize("descending", [False, True])
def test_sort_unstable_rows_match_torch(path, descending):
    seed = 100
    for n in _SIZES + (1000,):
        for dt, nan, zeros in (("float32", 0.0, False), ("float64", 0.3, True), ("int64", 0.0, False),
                               ("float16", 0.2, False)):
            seed += 1
            a = _tie_data((2, n), seed, dt, nan, zeros, hi=1 + seed % 5)
            t, x = _pair(a)
            _same(torch.sort(t, descending=descending), nee.sort(x, descending=descending))
            _same(torch.sort(t, descending=descending, stable=False),
                  nee.sort(x, descending=descending, stable=False))
            _same(torch.sort(t, descending=descending, stable=True),
                  nee.sort(x, descending=descending, stable=True))
            assert np.array_equal(torch.argsort(t, descending=descending).numpy(),
                                  nee.argsort(x, descending=descending).numpy())
            assert np.array_equal(torch.argsort(t, stable=True, descending=descending).numpy(),
                                  nee.argsort(x, stable=True, descending=descending).numpy())


def test_sort_dims_dtypes_views(path):
    rng = np.random.default_rng(7)
    b = rng.random((3, 40)) < 0.5
    for desc in (False, True):
        _same(torch.sort(torch.from_numpy(b), descending=desc), nee.sort(nee.tensor(b), descending=desc))
    for dt in (np.int8, np.int16, np.int32, np.uint8):
        m = rng.integers(0, 4, (5, 30)).astype(dt)
        for d in (0, 1):
            _same(torch.sort(torch.from_numpy(m), dim=d), nee.sort(nee.tensor(m), dim=d))
            _same(torch.sort(torch.from_numpy(m), dim=d, descending=True),
                  nee.sort(nee.tensor(m), dim=d, descending=True))
    a = _tie_data((5, 6, 20), 8, "float32", 0.1, True)
    t, x = _pair(a)
    for d in (0, 1, 2):
        _same(torch.sort(t, d), nee.sort(x, d))
        _same(torch.sort(t.transpose(1, 2), d, True), nee.sort(x.transpose(1, 2), d, True))
    bf = _tie_data((3, 40), 9, "float32", 0.2)
    _same(torch.sort(torch.from_numpy(bf).bfloat16()), nee.sort(nee.tensor(bf).to(nee.bfloat16)))
    _same(torch.sort(torch.tensor(1.0).expand(40)), nee.sort(nee.tensor(1.0).expand(40)))
    _same(torch.sort(torch.tensor(5)), nee.sort(nee.tensor(5)))


def test_sort_large_integer_1d_is_radix_stable():
    # torch's 1-D ascending integer sort from GRAIN_SIZE (32768) elements is fbgemm's stable radix sort
    rng = np.random.default_rng(3)
    for n in (32767, 32768):
        for dt in (np.int64, np.int32, np.uint8):
            a = rng.integers(0, 50, n).astype(dt)
            _same(torch.sort(torch.from_numpy(a)), nee.sort(nee.tensor(a)))
        a = rng.integers(-5, 50, n)
        _same(torch.sort(torch.from_numpy(a), descending=True), nee.sort(nee.tensor(a), descending=True))
    f = rng.integers(0, 50, 33000).astype(np.float32)
    _same(torch.sort(torch.from_numpy(f)), nee.sort(nee.tensor(f)))


# ---------------------------------------------------------------- kthvalue / mode
def test_kthvalue_and_mode_rows_match_torch(path):
    seed = 200
    for n in _SIZES:
        for dt, nan, zeros in (("float32", 0.0, True), ("float64", 0.3, False), ("int64", 0.0, False),
                               ("float16", 0.2, True), ("uint8", 0.0, False)):
            seed += 1
            a = _tie_data((3, n), seed, dt, nan, zeros, hi=1 + seed % 4)
            t, x = _pair(a)
            for k in sorted({1, 2, (n + 1) // 2, n}):
                if k <= n:
                    _same(torch.kthvalue(t, k), nee.kthvalue(x, k))
            _same(torch.mode(t), nee.mode(x))


def test_kthvalue_and_mode_dims_keepdim(path):
    a = _tie_data((6, 7, 4), 11, "float32", 0.1, True)
    t, x = _pair(a)
    for d in (0, 1, 2, -1):
        for kd in (False, True):
            _same(torch.kthvalue(t, 3, d, kd), nee.kthvalue(x, 3, d, kd))
            _same(torch.mode(t, d, kd), nee.mode(x, d, kd))
            _same(torch.kthvalue(t.transpose(0, 1), 2, d, kd), nee.kthvalue(x.transpose(0, 1), 2, d, kd))
            _same(torch.mode(t.transpose(0, 2), d, kd), nee.mode(x.transpose(0, 2), d, kd))
    b = np.random.default_rng(12).random((4, 30)) < 0.5
    _same(torch.mode(torch.from_numpy(b)), nee.mode(nee.tensor(b)))
    _same(torch.kthvalue(torch.tensor(2.0), 1), nee.kthvalue(nee.tensor(2.0), 1))
    _same(torch.mode(torch.tensor(2.0)), nee.mode(nee.tensor(2.0)))
    e = torch.tensor(1.0).expand(40)
    _same(torch.kthvalue(e, 20), nee.kthvalue(nee.tensor(1.0).expand(40), 20))
    _same(torch.mode(e), nee.mode(nee.tensor(1.0).expand(40)))


# ---------------------------------------------------------------- the introsort's depth limit
class _Adversary:
    """McIlroy's "killer adversary for quicksort": values decided lazily by the comparisons themselves, so that
    median-of-three quicksort goes quadratic (and introsort / introselect fall back to their heap algorithms)."""

    def __init__(self, n):
        self.gas, self.val, self.solid, self.cand = n, [n] * n, 0, -1

    def cmp(self, x, y):
        g = self.gas
        if self.val[x] == g and self.val[y] == g:
            self._freeze(x if x == self.cand else y)
        if self.val[x] == g:
            self.cand = x
        elif self.val[y] == g:
            self.cand = y
        return self.val[x] - self.val[y]

    def _freeze(self, i):
        self.val[i] = self.solid
        self.solid += 1


class _Item:
    __slots__ = ("adv", "i")

    def __init__(self, adv, i):
        self.adv, self.i = adv, i

    def __lt__(self, other):
        return self.adv.cmp(self.i, other.i) < 0


def _killer(n, op, k=0):
    adv = _Adversary(n)
    keys = np.empty((1, n), object)
    for j in range(n):
        keys[0, j] = _Item(adv, j)
    S.rows(keys, op, k)
    return np.array(adv.val, np.int64)


@pytest.mark.parametrize("n", [200, 700])
def test_depth_limit_heap_fallback_matches_torch(path, monkeypatch, n):
    calls = []
    real_ps, real_hs = S._partial_sort, S._heap_select
    monkeypatch.setattr(S, "_partial_sort", lambda *a: (calls.append("ps"), real_ps(*a))[1])
    monkeypatch.setattr(S, "_heap_select", lambda *a: (calls.append("hs"), real_hs(*a))[1])
    a = _killer(n, S.SORT)
    b = _killer(n, S.TOPK_NTH_SORTED, n // 2)
    calls.clear()
    S.rows(a[None], S.SORT, 0)
    assert "ps" in calls                          # (the input does reach std::sort's heap sort)
    calls.clear()
    S.rows(b[None], S.TOPK_NTH_SORTED, n // 2)
    assert "hs" in calls                          # (and nth_element's heap select)
    for arr in (a, b, a.astype(np.float32), (b % 7).astype(np.float64)):
        t, x = _pair(arr)
        _same(torch.sort(t), nee.sort(x))
        _same(torch.sort(t, descending=True), nee.sort(x, descending=True))
        for k in (1, n // 2, n - 3):
            _same(torch.topk(t, k, largest=False, sorted=False), nee.topk(x, k, largest=False, sorted=False))
            _same(torch.topk(t, k, largest=False), nee.topk(x, k, largest=False))
            _same(torch.kthvalue(t, k), nee.kthvalue(x, k))
        _same(torch.mode(t), nee.mode(x))


def test_kernel_matches_reference_fuzz():
    """The compiled kernel against the plain Python reference, every op, random tie-heavy rows."""
    if S._kernel("i64") is None:
        pytest.skip("no LLVM native target")
    rng = np.random.default_rng(13)
    for trial in range(60):
        n = int(rng.integers(1, 300))
        keys = rng.integers(-3, 1 + trial % 9, (3, n)).astype(np.int64)
        fl = keys.astype(np.float64)
        fl[rng.random(fl.shape) < 0.2] = np.nan
        for op in (S.SORT, S.TOPK_PARTIAL, S.TOPK_NTH, S.TOPK_NTH_SORTED, S.KTH, S.MODE):
            k = int(rng.integers(1, n + 1))
            m = n if op == S.SORT else (k if op < S.KTH else 1)
            for kk, kern in ((keys, S._kernel("i64")), (fl, S._kernel("f64"))):
                if kk is fl and op != S.MODE:
                    continue
                out = np.empty((3, m), np.int64)
                kern(kk, out, np.array([3, n, op, k, m], np.int64), np.empty(2 * n + 3 * S._STACK, np.int64))
                assert np.array_equal(out, S.rows(kk, op, k)), (trial, op, n, k)


def test_keys_order_every_dtype():
    """keys_of's ``<`` is torch's comparator (NaN largest, NaNs equal, -0.0 == +0.0; descending reversed), pair by
    pair, and the input is left as it was."""
    import ml_dtypes
    rng = np.random.default_rng(14)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 5e-324, -5e-324, 1e-40, -1e-40]
    for dt in (np.float16, np.float32, np.float64, ml_dtypes.bfloat16):
        with np.errstate(over="ignore", under="ignore"):
            v = np.concatenate([rng.normal(size=120) * 10.0 ** rng.integers(-40, 40, 120), special]).astype(dt)
        v0, f = v.copy(), v.astype(np.float64)
        nan = np.isnan(f)
        for desc in (False, True):
            k = S.keys_of(v, desc)
            if desc:
                lt = np.where(nan[:, None], ~nan[None, :], np.where(nan[None, :], False, f[:, None] > f[None, :]))
            else:
                lt = np.where(nan[:, None], False, np.where(nan[None, :], True, f[:, None] < f[None, :]))
            assert np.array_equal(k[:, None] < k[None, :], lt), (dt, desc)
        assert np.array_equal(v.view(np.uint8), v0.view(np.uint8))
    for dt in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.bool_):
        if dt is np.bool_:
            v = rng.integers(0, 2, 60).astype(bool)
        else:
            info = np.iinfo(dt)
            v = np.concatenate([rng.integers(info.min, info.max, 60, dtype=dt, endpoint=True),
                                np.array([info.min, info.max], dt)])
        v0 = v.copy()
        for desc in (False, True):
            k = S.keys_of(v, desc)
            assert np.array_equal(k[:, None] < k[None, :], (v[:, None] > v[None, :]) if desc else
                                  (v[:, None] < v[None, :])), (dt, desc)
        assert np.array_equal(v, v0)


def test_run_rows_refuses_what_the_kernels_cannot_read():
    with pytest.raises(TypeError, match="int64 or float64"):
        S.run_rows(np.zeros((2, 3), np.float32), S.SORT)
    with pytest.raises(TypeError, match="int64 or float64"):
        S.run_rows(np.zeros(3, np.int64), S.SORT)
    for op, k in ((S.KTH, 0), (S.KTH, 4), (S.TOPK_PARTIAL, -1), (S.TOPK_NTH, 4), (9, 1)):
        with pytest.raises(ValueError, match="run_rows"):
            S.run_rows(np.zeros((2, 3), np.int64), op, k)
