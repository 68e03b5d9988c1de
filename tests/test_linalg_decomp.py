"""Matrix decompositions and solvers (neetorch/ops/lapack.py, nee.linalg) against torch."""
import math

import numpy as np
import pytest

import neetorch as nee

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:.*deprecated:UserWarning",   # torch.cholesky, torch.lu_solve ...
                                        "ignore:.*torch.qr:UserWarning", "ignore:.*torch.svd:UserWarning")

RNG = np.random.default_rng(0)
TOL = {np.float32: (2e-4, 2e-4), np.float64: (1e-10, 1e-10)}
DTYPES = [np.float32, np.float64]


def rnd(*shape, dtype=np.float64):
    return RNG.standard_normal(shape).astype(dtype)


def spd(*shape, dtype=np.float64):
    a = rnd(*shape, dtype=np.float64)
    return (a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1])).astype(dtype)


def N(a):
    return nee.from_numpy(np.ascontiguousarray(a))


def T(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def npy(x):
    return x.numpy() if isinstance(x, (nee.Tensor, torch.Tensor)) else np.asarray(x)


def close(got, want, tol=None):
    g, w = npy(got), npy(want)
    assert g.shape == w.shape, (g.shape, w.shape)
    assert g.dtype == w.dtype, (g.dtype, w.dtype)
    if g.dtype.kind in "iub":
        np.testing.assert_array_equal(g, w)
        return
    rtol, atol = tol or TOL[g.dtype.type]
    np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)


def same_error(fn_nee, fn_torch, match_type=True):
    """Both raise; same message (and same exception class family)."""
    with pytest.raises(Exception) as te:
        fn_torch()
    with pytest.raises(Exception) as ne:
        fn_nee()
    assert str(ne.value).splitlines()[0] == str(te.value).splitlines()[0], (str(ne.value), str(te.value))
    if match_type:
        for cls in (NotImplementedError, TypeError, IndexError):
            assert isinstance(ne.value, cls) == isinstance(te.value, cls), (type(ne.value), type(te.value))
    return ne.value


def noncontig(a):
    """The same values in a transposed (non-contiguous) layout."""
    return N(np.swapaxes(a, -1, -2)).transpose(-2, -1) if a.ndim >= 2 else N(a)


SQUARE = [(0, 0), (1, 1), (3, 3), (2, 4, 4), (2, 1, 5, 5), (0, 3, 3)]


# ------------------------------------------------------------------ det / slogdet / logdet / inv
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SQUARE)
def test_det_slogdet_inv(shape, dtype):
    a = rnd(*shape, dtype=dtype) + (2 * np.eye(shape[-1], dtype=dtype) if shape[-1] else 0)
    x = noncontig(a)
    assert not x.is_contiguous() or min(shape[-2:]) <= 1 or x.numel() == 0   # (torch: empty is contiguous)
    close(nee.linalg.det(x), torch.linalg.det(T(a)))
    close(x.det(), torch.det(T(a)))
    s, la = nee.linalg.slogdet(x)
    ts = torch.linalg.slogdet(T(a))
    close(s, ts.sign)
    close(la, ts.logabsdet)
    r = nee.slogdet(x)
    assert type(r).__name__ == "slogdet" and r._fields == ("sign", "logabsdet")
    close(x.slogdet().logabsdet, T(a).slogdet().logabsdet)
    assert type(nee.linalg.slogdet(x)).__name__ == "linalg_slogdet"
    close(nee.logdet(x), torch.logdet(T(a)))
    close(x.logdet(), torch.logdet(T(a)))
    close(nee.linalg.inv(x), torch.linalg.inv(T(a)))
    close(x.inverse(), torch.inverse(T(a)))
    r = nee.linalg.inv_ex(x)
    assert r._fields == ("inverse", "info")
    close(r.info, torch.linalg.inv_ex(T(a)).info)


def test_logdet_signs():
    a = np.array([[[0., 1.], [1., 0.]], [[0., 0.], [0., 0.]], [[2., 0.], [0., 3.]]])
    close(nee.logdet(N(a)), torch.logdet(T(a)))   # nan, -inf, log 6


def test_singular_inverse_errors_and_info():
    s = np.array([[1., 2.], [2., 4.]])
    batch = np.stack([np.eye(2), s])
    same_error(lambda: nee.linalg.inv(N(s)), lambda: torch.linalg.inv(T(s)))
    e = same_error(lambda: nee.linalg.inv(N(batch)), lambda: torch.linalg.inv(T(batch)))
    assert isinstance(e, nee.linalg.LinAlgError) and isinstance(e, RuntimeError)
    r = nee.linalg.inv_ex(N(batch))
    close(r.info, torch.linalg.inv_ex(T(batch)).info)               # [0, 2]
    close(r.inverse[0], np.eye(2))
    z = np.zeros((3, 3))
    close(nee.linalg.inv_ex(N(z)).info, torch.linalg.inv_ex(T(z)).info)
    close(nee.linalg.det(N(batch)), torch.linalg.det(T(batch)))
    same_error(lambda: nee.inverse(N(s)), lambda: torch.inverse(T(s)))


def test_shape_and_dtype_errors():
    ns = np.ones((2, 3))
    for name in ["det", "slogdet", "inv", "cholesky", "eigh", "matrix_exp"]:
        f, tf = getattr(nee.linalg, name), getattr(torch.linalg, name)
        same_error(lambda f=f: f(N(ns)), lambda tf=tf: tf(T(ns)))
        same_error(lambda f=f: f(N(np.ones(3))), lambda tf=tf: tf(T(np.ones(3))))
    same_error(lambda: nee.linalg.matrix_power(N(ns), 2), lambda: torch.linalg.matrix_power(T(ns), 2))
    same_error(lambda: nee.logdet(N(ns)), lambda: torch.logdet(T(ns)))
    same_error(lambda: nee.linalg.qr(N(np.ones(3))), lambda: torch.linalg.qr(T(np.ones(3))))
    same_error(lambda: nee.linalg.qr(N(ns), mode="x"), lambda: torch.linalg.qr(T(ns), mode="x"))
    same_error(lambda: nee.linalg.svd(N(np.ones(3))), lambda: torch.linalg.svd(T(np.ones(3))))
    same_error(lambda: nee.linalg.eigh(N(np.eye(2)), UPLO="X"), lambda: torch.linalg.eigh(T(np.eye(2)), UPLO="X"))


L_FNS = {
    "det": lambda L, a: L.linalg.det(a), "slogdet": lambda L, a: L.linalg.slogdet(a),
    "inv": lambda L, a: L.linalg.inv(a), "inv_ex": lambda L, a: L.linalg.inv_ex(a),
    "solve": lambda L, a: L.linalg.solve(a, a), "lstsq": lambda L, a: L.linalg.lstsq(a, a),
    "cholesky": lambda L, a: L.linalg.cholesky(a), "qr": lambda L, a: L.linalg.qr(a),
    "svd": lambda L, a: L.linalg.svd(a), "svdvals": lambda L, a: L.linalg.svdvals(a),
    "eigh": lambda L, a: L.linalg.eigh(a), "eigvalsh": lambda L, a: L.linalg.eigvalsh(a),
    "matrix_rank": lambda L, a: L.linalg.matrix_rank(a), "pinv": lambda L, a: L.linalg.pinv(a),
    "mpow_neg": lambda L, a: L.linalg.matrix_power(a, -1), "matrix_exp": lambda L, a: L.linalg.matrix_exp(a),
    "solve_triangular": lambda L, a: L.linalg.solve_triangular(a, a, upper=True),
    "lu_factor": lambda L, a: L.linalg.lu_factor(a), "lu": lambda L, a: L.linalg.lu(a),
    "cond": lambda L, a: L.linalg.cond(a), "cond1": lambda L, a: L.linalg.cond(a, 1),
    "logdet": lambda L, a: L.logdet(a), "pinverse": lambda L, a: L.pinverse(a),
    "cholesky_solve": lambda L, a: L.cholesky_solve(a, a), "cholesky_inverse": lambda L, a: L.cholesky_inverse(a),
    "triangular_solve": lambda L, a: L.triangular_solve(a, a), "svd_old": lambda L, a: L.svd(a),
    "qr_old": lambda L, a: L.qr(a), "vecdot": lambda L, a: L.linalg.vecdot(a, a),
    "matrix_norm2": lambda L, a: L.linalg.matrix_norm(a, 2), "tensorinv": lambda L, a: L.linalg.tensorinv(a, 1),
}


@pytest.mark.parametrize("dtype", ["float16", "int64", "bool"])
@pytest.mark.parametrize("name", sorted(L_FNS))
def test_dtype_rules_match_torch(name, dtype):
    fn = L_FNS[name]
    a = np.eye(2).astype(np.float16 if dtype == "float16" else np.int64 if dtype == "int64" else bool)
    if name == "matrix_exp" and dtype == "float16":
        # torch 2.13's CPU half matrix_exp is wrong (exp(I) -> -20896 I); ours is computed in float64
        close(fn(nee, N(a)), np.e * a, (1e-3, 1e-3))
        return
    try:
        want = fn(torch, T(a))
    except Exception:  # noqa: BLE001 - then neetorch must raise the same error
        same_error(lambda: fn(nee, N(a)), lambda: fn(torch, T(a)))
        return
    got = fn(nee, N(a))
    close(got, want, (1e-2, 1e-2))


def test_low_precision_ops_torch_allows():
    a = (np.eye(3) * 0.5 + 0.1).astype(np.float16)
    close(nee.linalg.matrix_exp(N(a)), torch.linalg.matrix_exp(T(a.astype(np.float32))).numpy().astype(np.float16),
          (2e-3, 2e-3))
    close(nee.linalg.matrix_power(N(a), 3), torch.linalg.matrix_power(T(a), 3), (2e-3, 2e-3))
    i = np.arange(9).reshape(3, 3)
    close(nee.linalg.matrix_power(N(i), 5), torch.linalg.matrix_power(T(i), 5))
    close(nee.linalg.matrix_power(N(i), 0), torch.linalg.matrix_power(T(i), 0))


# ------------------------------------------------------------------ solve
SOLVE_SHAPES = [((3, 3), (3,)), ((3, 3), (3, 2)), ((2, 3, 3), (3,)), ((2, 3, 3), (2, 3)), ((2, 1, 3, 3), (4, 3, 2)),
                ((3, 3), (4, 3, 2)), ((0, 0), (0, 2)), ((2, 4, 4), (2, 4, 0))]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sa,sb", SOLVE_SHAPES)
def test_solve(sa, sb, dtype):
    a = rnd(*sa, dtype=dtype) + 3 * np.eye(sa[-1], dtype=dtype)
    b = rnd(*sb, dtype=dtype)
    close(nee.linalg.solve(noncontig(a), N(b)), torch.linalg.solve(T(a), T(b)))
    r, tr = nee.linalg.solve_ex(N(a), N(b)), torch.linalg.solve_ex(T(a), T(b))
    assert r._fields == ("result", "info")
    close(r.result, tr.result)
    close(r.info, tr.info)
    if len(sb) >= len(sa) and sb[-1] == sa[-1]:
        bl = np.swapaxes(b, -1, -2).copy()   # X A = B with B (..., k, n)
        close(nee.linalg.solve(N(a), N(bl), left=False), torch.linalg.solve(T(a), T(bl), left=False))


def test_solve_left_false_and_errors():
    a, b = rnd(3, 3) + 3 * np.eye(3), rnd(2, 3)
    close(nee.linalg.solve(N(a), N(b), left=False), torch.linalg.solve(T(a), T(b), left=False))
    same_error(lambda: nee.linalg.solve(N(a), N(rnd(3)), left=False),
               lambda: torch.linalg.solve(T(a), T(rnd(3)), left=False))
    same_error(lambda: nee.linalg.solve(N(a), N(rnd(2))), lambda: torch.linalg.solve(T(a), T(rnd(2))))
    same_error(lambda: nee.linalg.solve(N(a), N(rnd(2, 2))), lambda: torch.linalg.solve(T(a), T(rnd(2, 2))))
    same_error(lambda: nee.linalg.solve(N(a), N(rnd(3, dtype=np.float32))),
               lambda: torch.linalg.solve(T(a), T(rnd(3, dtype=np.float32))))
    s = np.stack([np.eye(2), [[1., 2.], [2., 4.]]])
    same_error(lambda: nee.linalg.solve(N(s), N(np.ones(2))), lambda: torch.linalg.solve(T(s), T(np.ones(2))))
    same_error(lambda: nee.linalg.solve(N(s[1]), N(np.ones(2))), lambda: torch.linalg.solve(T(s[1]), T(np.ones(2))))
    close(nee.linalg.solve_ex(N(s), N(np.ones(2))).info, torch.linalg.solve_ex(T(s), T(np.ones(2))).info)


# ------------------------------------------------------------------ cholesky
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(0, 0), (1, 1), (4, 4), (2, 3, 5, 5)])
def test_cholesky(shape, dtype):
    a = spd(*shape, dtype=dtype)
    for upper in (False, True):
        close(nee.linalg.cholesky(noncontig(a), upper=upper), torch.linalg.cholesky(T(a), upper=upper))
        close(nee.cholesky(N(a), upper), torch.cholesky(T(a), upper))
        r = nee.linalg.cholesky_ex(N(a), upper=upper)
        assert r._fields == ("L", "info")
        close(r.info, torch.linalg.cholesky_ex(T(a), upper=upper).info)
    close(N(a).cholesky(), torch.cholesky(T(a)))


def test_cholesky_reads_one_triangle():
    a = spd(4, 4)
    junk = a + np.triu(rnd(4, 4), 1)           # the upper triangle is not read for upper=False
    close(nee.linalg.cholesky(N(junk)), torch.linalg.cholesky(T(junk)))
    junk = a + np.tril(rnd(4, 4), -1)
    close(nee.linalg.cholesky(N(junk), upper=True), torch.linalg.cholesky(T(junk), upper=True))


def test_cholesky_not_pd():
    p = np.array([[1., 2.], [2., 1.]])
    batch = np.stack([np.eye(2), p, -np.eye(2)])
    same_error(lambda: nee.linalg.cholesky(N(p)), lambda: torch.linalg.cholesky(T(p)))
    same_error(lambda: nee.linalg.cholesky(N(batch)), lambda: torch.linalg.cholesky(T(batch)))
    same_error(lambda: nee.cholesky(N(p)), lambda: torch.cholesky(T(p)))
    r, tr = nee.linalg.cholesky_ex(N(batch)), torch.linalg.cholesky_ex(T(batch))
    close(r.info, tr.info)                        # [0, 2, 1]
    close(r.L[0], tr.L[0])


# ------------------------------------------------------------------ qr / svd / eigh
QR_SHAPES = [(0, 3), (3, 0), (4, 4), (5, 3), (3, 5), (2, 6, 4), (2, 1, 3, 4)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", QR_SHAPES)
def test_qr(shape, dtype):
    a = rnd(*shape, dtype=dtype)
    for mode in ("reduced", "complete", "r"):
        q, r = nee.linalg.qr(noncontig(a), mode=mode)
        tq, tr = torch.linalg.qr(T(a), mode=mode)
        assert tuple(q.shape) == tuple(tq.shape) and tuple(r.shape) == tuple(tr.shape)
        close(r, tr)                         # LAPACK's Householder convention on both sides
        if mode != "r":
            close(q, tq)
            close(nee.matmul(q, r), a)       # the invariant
    q, r = nee.qr(N(a), some=False)
    tq, tr = torch.qr(T(a), some=False)
    assert type(nee.qr(N(a))).__name__ == "qr"
    close(q, tq)
    close(r, tr)
    close(N(a).qr().R, T(a).qr().R)


SVD_SHAPES = [(0, 3), (3, 0), (4, 4), (5, 3), (3, 5), (2, 6, 4), (2, 1, 3, 4)]


def _sign_fix(u, vh):
    """Singular vectors up to sign: flip so each column of U has a positive largest-|.| entry."""
    u, vh = npy(u).copy(), npy(vh).copy()
    if u.size == 0:
        return u, vh
    k = min(u.shape[-1], vh.shape[-2])
    idx = np.argmax(np.abs(u[..., :, :k]), axis=-2)[..., None, :]
    s = np.sign(np.take_along_axis(u[..., :, :k], idx, axis=-2))
    u[..., :, :k] *= s
    vh[..., :k, :] *= np.swapaxes(s, -1, -2)
    return u, vh


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SVD_SHAPES)
def test_svd(shape, dtype):
    a = rnd(*shape, dtype=dtype)
    k = min(shape[-2:])
    for full in (True, False):
        u, s, vh = nee.linalg.svd(noncontig(a), full_matrices=full)
        tu, ts, tvh = torch.linalg.svd(T(a), full_matrices=full)
        assert tuple(u.shape) == tuple(tu.shape) and tuple(vh.shape) == tuple(tvh.shape)
        close(s, ts)
        us = npy(u)[..., :, :k] * npy(s)[..., None, :]
        close(us @ npy(vh)[..., :k, :], a)
        close(np.swapaxes(npy(u), -1, -2) @ npy(u), np.broadcast_to(np.eye(u.shape[-1], dtype=dtype), u.shape[:-2] +
                                                                    (u.shape[-1],) * 2))
        close(npy(vh) @ np.swapaxes(npy(vh), -1, -2), np.broadcast_to(np.eye(vh.shape[-2], dtype=dtype),
                                                                      vh.shape[:-2] + (vh.shape[-2],) * 2))
        if not full:
            gu, gv = _sign_fix(u, vh)
            wu, wv = _sign_fix(tu, tvh)
            close(gu, wu)
            close(gv, wv)
    close(nee.linalg.svdvals(N(a)), torch.linalg.svdvals(T(a)))
    r, tr = nee.svd(N(a)), torch.svd(T(a))
    assert r._fields == ("U", "S", "V") and tuple(r.V.shape) == tuple(tr.V.shape)
    close(npy(r.U) * npy(r.S)[..., None, :] @ np.swapaxes(npy(r.V), -1, -2), a)
    for x, y in zip(nee.svd(N(a), compute_uv=False), torch.svd(T(a), compute_uv=False)):
        close(x, y)
    assert tuple(N(a).svd(some=False).U.shape) == tuple(torch.svd(T(a), some=False).U.shape)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(0, 0), (1, 1), (5, 5), (2, 3, 4, 4)])
def test_eigh(shape, dtype):
    a = rnd(*shape, dtype=dtype)
    for uplo in ("L", "U"):
        w, v = nee.linalg.eigh(noncontig(a), UPLO=uplo)
        tw, tv = torch.linalg.eigh(T(a), UPLO=uplo)
        close(w, tw)
        close(nee.linalg.eigvalsh(N(a), UPLO=uplo), torch.linalg.eigvalsh(T(a), UPLO=uplo))
        tri = np.tril(a) if uplo == "L" else np.triu(a)
        sym = (tri + np.swapaxes(tri, -1, -2) - tri * np.eye(shape[-1])).astype(dtype) if shape[-1] else tri
        close(sym @ npy(v), npy(v) * npy(w)[..., None, :])          # A V = V diag(w)
        # eigenvectors up to sign (the eigenvalues of random matrices are distinct)
        g, t = npy(v), npy(tv)
        if g.size:
            sg = np.sign(np.sum(g * t, axis=-2, keepdims=True))
            close(g * sg, t)
    assert nee.linalg.eigh(N(a))._fields == ("eigenvalues", "eigenvectors")


def test_eig_of_real_input_is_complex():
    w = nee.linalg.eig(N(np.eye(2)))
    assert w.eigenvalues.dtype == nee.complex128 and w.eigenvectors.dtype == nee.complex128
    assert nee.linalg.eigvals(N(np.eye(2))).dtype == nee.complex128
    np.testing.assert_allclose(w.eigenvalues.numpy(), [1, 1])


# ------------------------------------------------------------------ lstsq
@pytest.mark.parametrize("driver", [None, "gels", "gelsd", "gelss"])
@pytest.mark.parametrize("sa,sb", [((5, 3), (5, 2)), ((5, 3), (5,)), ((3, 5), (3, 2)), ((4, 5, 3), (1, 5, 2)),
                                   ((2, 4, 4), (2, 4)), ((0, 3), (0, 2))])
def test_lstsq(sa, sb, driver):
    dtype = np.float64
    a, b = rnd(*sa, dtype=dtype), rnd(*sb, dtype=dtype)
    r = nee.linalg.lstsq(N(a), N(b), driver=driver)
    t = torch.linalg.lstsq(T(a), T(b), driver=driver)
    assert r._fields == ("solution", "residuals", "rank", "singular_values")
    for x, y in zip(r, t):
        close(x, y, (1e-8, 1e-8))
    f = nee.linalg.lstsq(N(a.astype(np.float32)), N(b.astype(np.float32)), driver=driver)
    tf = torch.linalg.lstsq(T(a.astype(np.float32)), T(b.astype(np.float32)), driver=driver)
    for x, y in zip(f, tf):
        close(x, y, (2e-3, 2e-3))


def test_lstsq_rank_deficient_and_errors():
    a = rnd(5, 3)
    a[:, 2] = a[:, 1]
    b = rnd(5, 2)
    for driver in ("gelsy", "gelsd", "gelss"):
        r, t = nee.linalg.lstsq(N(a), N(b), driver=driver), torch.linalg.lstsq(T(a), T(b), driver=driver)
        for x, y in zip(r, t):
            close(x, y, (1e-8, 1e-8))          # the minimum-norm solution, rank 2, no residuals
    e = np.array([[1., 0.], [0., 0.], [0., 0.]])
    same_error(lambda: nee.linalg.lstsq(N(e), N(b[:3]), driver="gels"),
               lambda: torch.linalg.lstsq(T(e), T(b[:3]), driver="gels"))
    nan = np.array([[1., np.nan], [0., 1.]])
    for fn in (lambda L, x: L.linalg.svd(x), lambda L, x: L.linalg.svdvals(x), lambda L, x: L.linalg.pinv(x),
               lambda L, x: L.linalg.svd(L.stack([x * 0, x]))):
        same_error(lambda fn=fn: fn(nee, N(nan)), lambda fn=fn: fn(torch, T(nan)))
    same_error(lambda: nee.linalg.lstsq(N(a), N(b), driver="foo"), lambda: torch.linalg.lstsq(T(a), T(b), driver="foo"))
    same_error(lambda: nee.linalg.lstsq(N(a), N(rnd(4, 2))), lambda: torch.linalg.lstsq(T(a), T(rnd(4, 2))))
    same_error(lambda: nee.linalg.lstsq(N(a), N(rnd(3))), lambda: torch.linalg.lstsq(T(a), T(rnd(3))))
    same_error(lambda: nee.linalg.lstsq(N(a), N(b.astype(np.float32))),
               lambda: torch.linalg.lstsq(T(a), T(b.astype(np.float32))))


# ------------------------------------------------------------------ LU family
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(0, 0), (1, 1), (4, 4), (5, 3), (3, 5), (2, 3, 6, 6), (3, 4, 5, 5), (2, 45, 45),
                                   (70, 37), (37, 70)])
def test_lu_factor_lu_unpack(shape, dtype):
    a = rnd(*shape, dtype=dtype)
    r, t = nee.linalg.lu_factor(noncontig(a)), torch.linalg.lu_factor(T(a))
    assert r._fields == ("LU", "pivots")
    close(r.pivots, t.pivots)
    close(r.LU, t.LU)
    p, l, u = nee.linalg.lu(N(a))
    tp, tl, tu = torch.linalg.lu(T(a))
    close(p, tp)
    close(l, tl)
    close(u, tu)
    close(nee.matmul(p, nee.matmul(l, u)), a)
    up = nee.lu_unpack(r.LU, r.pivots)
    assert type(up).__name__ == "lu_unpack"
    for x, y in zip(up, torch.lu_unpack(t.LU, t.pivots)):
        close(x, y)
    for kw in ({"unpack_data": False}, {"unpack_pivots": False}):
        for x, y in zip(nee.lu_unpack(r.LU, r.pivots, **kw), torch.lu_unpack(t.LU, t.pivots, **kw)):
            close(x, y)


def test_lu_zero_pivot_info_in_the_recursive_blocks():
    # a zero pivot found past the first column block, and one in the Schur complement's block
    for col in (3, 20, 45):
        a = rnd(2, 50, 50)
        a[1, :, col] = 0
        r, t = nee.linalg.lu_factor_ex(N(a)), torch.linalg.lu_factor_ex(T(a))
        close(r.info, t.info)
        close(r.pivots, t.pivots)
        close(r.LU, t.LU)


def test_lu_singular_and_errors():
    s = np.stack([np.eye(3), np.zeros((3, 3)), [[1., 2., 3.], [2., 4., 6.], [1., 0., 1.]]])
    r, t = nee.linalg.lu_factor_ex(N(s)), torch.linalg.lu_factor_ex(T(s))
    for x, y in zip(r, t):
        close(x, y)
    same_error(lambda: nee.linalg.lu_factor(N(s)), lambda: torch.linalg.lu_factor(T(s)))
    same_error(lambda: nee.linalg.lu_factor(N(s[1])), lambda: torch.linalg.lu_factor(T(s[1])))
    same_error(lambda: nee.linalg.lu_factor(N(s), pivot=False), lambda: torch.linalg.lu_factor(T(s), pivot=False))
    piv = np.array([1, 5], np.int32)
    same_error(lambda: nee.lu_unpack(N(np.eye(2)), N(piv)), lambda: torch.lu_unpack(T(np.eye(2)), T(piv)))
    same_error(lambda: nee.lu_unpack(N(np.eye(2)), N(piv.astype(np.int64))),
               lambda: torch.lu_unpack(T(np.eye(2)), T(piv.astype(np.int64))))
    with pytest.raises(RuntimeError, match="pivots must be between 1 and"):   # torch reads out of bounds here
        nee.linalg.lu_solve(N(np.eye(2)), N(np.array([0, 2], np.int32)), N(np.ones((2, 1))))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sa,sb", [((3, 3), (3, 2)), ((2, 4, 4), (4, 1, 4, 3)), ((4, 4), (2, 4, 0)),
                                   ((0, 0), (0, 2)), ((150, 150), (150, 3)), ((12, 5, 5), (5, 2))])
def test_lu_solve(sa, sb, dtype):
    # entries ~1/sqrt(n) + 2 I: well conditioned at every size (float32 tolerances)
    a = (rnd(*sa) / math.sqrt(max(1, sa[-1] / 4)) + 2 * np.eye(sa[-1])).astype(dtype)
    b = rnd(*sb, dtype=dtype)
    lu, piv = nee.linalg.lu_factor(N(a))
    tlu, tpiv = torch.linalg.lu_factor(T(a))
    for adj in (False, True):
        close(nee.linalg.lu_solve(lu, piv, noncontig(b), adjoint=adj),
              torch.linalg.lu_solve(tlu, tpiv, T(b), adjoint=adj))
        bl = np.swapaxes(b, -1, -2).copy()
        close(nee.linalg.lu_solve(lu, piv, N(bl), left=False, adjoint=adj),
              torch.linalg.lu_solve(tlu, tpiv, T(bl), left=False, adjoint=adj))
    close(nee.lu_solve(N(b), lu, piv), torch.lu_solve(T(b), tlu, tpiv))
    close(N(b).lu_solve(lu, piv), T(b).lu_solve(tlu, tpiv))
    bad = np.ones(sa[-1] + 1, dtype)
    same_error(lambda: nee.linalg.lu_solve(lu, piv, N(bad)), lambda: torch.linalg.lu_solve(tlu, tpiv, T(bad)))
    same_error(lambda: nee.linalg.lu_solve(lu, piv, N(bad[:, None])),
               lambda: torch.linalg.lu_solve(tlu, tpiv, T(bad[:, None])))


# ------------------------------------------------------------------ triangular solves, cholesky_solve
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sa,sb", [((3, 3), (3, 2)), ((2, 4, 4), (3, 1, 4, 2)), ((0, 0), (0, 1)), ((5, 5), (5, 0)),
                                   ((2, 150, 150), (150, 3))])
def test_solve_triangular(sa, sb, dtype):
    # off-diagonal entries ~1/n: a random unit triangular matrix is exponentially ill-conditioned otherwise
    a = (rnd(*sa) / max(1, sa[-1] / 4) + 3 * np.eye(sa[-1])).astype(dtype)
    b = rnd(*sb, dtype=dtype)
    bl = np.swapaxes(b, -1, -2).copy()
    for upper in (True, False):
        for unit in (False, True):
            close(nee.linalg.solve_triangular(noncontig(a), N(b), upper=upper, unitriangular=unit),
                  torch.linalg.solve_triangular(T(a), T(b), upper=upper, unitriangular=unit))
            close(nee.linalg.solve_triangular(N(a), N(bl), upper=upper, left=False, unitriangular=unit),
                  torch.linalg.solve_triangular(T(a), T(bl), upper=upper, left=False, unitriangular=unit))
            for trans in (False, True):
                r = nee.triangular_solve(N(b), N(a), upper, trans, unit)
                t = torch.triangular_solve(T(b), T(a), upper, trans, unit)
                assert r._fields == ("solution", "cloned_coefficient")
                close(r.solution, t.solution)
                close(r.cloned_coefficient, t.cloned_coefficient)


def test_solve_triangular_zero_diagonal_and_errors():
    a = np.array([[0., 1.], [0., 1.]])
    close(nee.linalg.solve_triangular(N(a), N(np.ones((2, 1))), upper=True),
          torch.linalg.solve_triangular(T(a), T(np.ones((2, 1))), upper=True))      # nan, like trsm
    same_error(lambda: nee.linalg.solve_triangular(N(np.eye(2)), N(np.ones(2)), upper=True),
               lambda: torch.linalg.solve_triangular(T(np.eye(2)), T(np.ones(2)), upper=True))
    same_error(lambda: nee.linalg.solve_triangular(N(np.eye(3)), N(np.ones((2, 3))), upper=True),
               lambda: torch.linalg.solve_triangular(T(np.eye(3)), T(np.ones((2, 3))), upper=True))
    same_error(lambda: nee.linalg.solve_triangular(N(np.eye(3)), N(np.ones((3, 2))), upper=True, left=False),
               lambda: torch.linalg.solve_triangular(T(np.eye(3)), T(np.ones((3, 2))), upper=True, left=False))


@pytest.mark.parametrize("dtype", DTYPES)
def test_cholesky_solve_and_inverse(dtype):
    a = spd(2, 4, 4, dtype=dtype)
    b = rnd(3, 1, 4, 2, dtype=dtype)
    for upper in (False, True):
        f = nee.linalg.cholesky(N(a), upper=upper)
        tf = torch.linalg.cholesky(T(a), upper=upper)
        close(nee.cholesky_solve(N(b), f, upper), torch.cholesky_solve(T(b), tf, upper))
        close(N(b).cholesky_solve(f, upper), T(b).cholesky_solve(tf, upper))
        close(nee.cholesky_inverse(f, upper), torch.cholesky_inverse(tf, upper))
    same_error(lambda: nee.cholesky_solve(N(np.ones(3)), N(np.eye(3))),
               lambda: torch.cholesky_solve(T(np.ones(3)), T(np.eye(3))))
    same_error(lambda: nee.cholesky_solve(N(np.ones((2, 3))), N(np.eye(3))),
               lambda: torch.cholesky_solve(T(np.ones((2, 3))), T(np.eye(3))))


# ------------------------------------------------------------------ composed: pinv, rank, power, exp, ...
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(0, 3), (4, 4), (5, 3), (3, 5), (2, 4, 6)])
def test_pinv_matrix_rank(shape, dtype):
    a = rnd(*shape, dtype=dtype)
    if min(shape[-2:]) > 1 and dtype == np.float64:
        # rank deficient (in float32 the duplicate's singular value, ~eps*|A|, sits at the default tolerance)
        a[..., -1] = a[..., 0]
    close(nee.linalg.pinv(noncontig(a)), torch.linalg.pinv(T(a)))
    close(nee.pinverse(N(a)), torch.pinverse(T(a)))
    close(N(a).pinverse(), T(a).pinverse())
    close(nee.linalg.matrix_rank(N(a)), torch.linalg.matrix_rank(T(a)))
    for kw in ({"atol": 0.5}, {"rtol": 0.3}, {"atol": 0.1, "rtol": 0.2}, {"atol": 0.0}):
        close(nee.linalg.matrix_rank(N(a), **kw), torch.linalg.matrix_rank(T(a), **kw))
        close(nee.linalg.pinv(N(a), **kw), torch.linalg.pinv(T(a), **kw))
    if shape[-1] == shape[-2]:
        s = a + np.swapaxes(a, -1, -2)
        close(nee.linalg.pinv(N(s), hermitian=True), torch.linalg.pinv(T(s), hermitian=True))
        close(nee.linalg.matrix_rank(N(s), hermitian=True), torch.linalg.matrix_rank(T(s), hermitian=True))
    close(nee.linalg.matrix_rank(N(a), 0.5), torch.linalg.matrix_rank(T(a), 0.5))        # the old tol
    close(nee.linalg.pinv(N(a), 0.3), torch.linalg.pinv(T(a), 0.3))                    # the old rcond
    atol = rnd(*shape[:-2]) ** 2 if len(shape) > 2 else None
    if atol is not None:
        close(nee.linalg.matrix_rank(N(a), atol=N(atol)), torch.linalg.matrix_rank(T(a), atol=T(atol)))


@pytest.mark.parametrize("n", [-3, -1, 0, 1, 2, 3, 5, 6])
def test_matrix_power(n):
    a = rnd(2, 3, 3) + 2 * np.eye(3)
    close(nee.linalg.matrix_power(noncontig(a), n), torch.linalg.matrix_power(T(a), n))
    close(N(a).matrix_power(n), T(a).matrix_power(n))
    close(nee.matrix_power(N(a.astype(np.float32)), n), torch.matrix_power(T(a.astype(np.float32)), n))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scale", [0.0, 1e-3, 1.0, 30.0])
def test_matrix_exp(dtype, scale):
    a = (rnd(2, 5, 5) * scale / 2).astype(dtype)
    got, want = nee.linalg.matrix_exp(noncontig(a)), torch.linalg.matrix_exp(T(a))
    rtol = 1e-4 if dtype == np.float32 else 1e-9
    np.testing.assert_allclose(npy(got), npy(want), rtol=rtol, atol=rtol * np.abs(npy(want)).max())
    assert npy(got).dtype == dtype
    close(N(a).matrix_exp(), npy(got))
    close(nee.matrix_exp(N(np.zeros((0, 0)))), torch.matrix_exp(T(np.zeros((0, 0)))))
    close(nee.linalg.matrix_exp(N(np.diag([1.0, 2.0]))), np.diag(np.exp([1.0, 2.0])))


def test_multi_dot_vecdot_diagonal():
    ms = [rnd(3), rnd(3, 7), rnd(7, 2), rnd(2, 9), rnd(9)]
    close(nee.linalg.multi_dot([N(m) for m in ms]), torch.linalg.multi_dot([T(m) for m in ms]))
    ms = [rnd(10, 100), rnd(100, 5), rnd(5, 50)]
    close(nee.linalg.multi_dot([N(m) for m in ms]), torch.linalg.multi_dot([T(m) for m in ms]))
    close(nee.linalg.multi_dot([N(ms[0]), N(ms[1])]), torch.linalg.multi_dot([T(ms[0]), T(ms[1])]))
    for bad in ([N(rnd(2))], [N(rnd(3, 4)), N(rnd(3, 2))], [N(rnd(3, 4)), N(rnd(4, 2, 1)), N(rnd(1, 2))],
                [N(rnd(3, 4)), N(rnd(4, 2).astype(np.float32))], []):
        same_error(lambda bad=bad: nee.linalg.multi_dot(bad),
                   lambda bad=bad: torch.linalg.multi_dot([T(x.numpy()) for x in bad]))
    x, y = rnd(2, 3), rnd(4, 1, 3)
    close(nee.linalg.vecdot(N(x), N(y)), torch.linalg.vecdot(T(x), T(y)))
    x2, y2 = rnd(3, 2), rnd(3, 1)
    close(nee.linalg.vecdot(N(x2), N(y2), dim=0), torch.linalg.vecdot(T(x2), T(y2), dim=0))
    same_error(lambda: nee.linalg.vecdot(N(x), N(y.astype(np.float32))),
               lambda: torch.linalg.vecdot(T(x), T(y.astype(np.float32))))
    x3 = rnd(2, 3, 4)
    close(nee.linalg.diagonal(N(x3)), torch.linalg.diagonal(T(x3)))
    close(nee.linalg.diagonal(N(x3), offset=1, dim1=0, dim2=2), torch.linalg.diagonal(T(x3), offset=1, dim1=0, dim2=2))


@pytest.mark.parametrize("p", [None, 2, -2, 1, -1, math.inf, -math.inf, "fro", "nuc"])
def test_cond_and_matrix_norm(p):
    a = rnd(2, 4, 4)
    s = np.array([[1., 2.], [2., 4.]])
    close(nee.linalg.cond(N(a), p), torch.linalg.cond(T(a), p), (1e-8, 1e-8))
    got, want = float(nee.linalg.cond(N(s), p)), float(torch.linalg.cond(T(s), p))
    assert math.isinf(got) == math.isinf(want), (got, want)   # singular: inf from inv_ex's info, or
    assert (got < 1e-15) == (want < 1e-15) and (got > 1e15) == (want > 1e15), (got, want)  # a rounding-level ratio
    if p is not None:
        for keepdim in (False, True):
            close(nee.linalg.matrix_norm(N(a), p, keepdim=keepdim), torch.linalg.matrix_norm(T(a), p, keepdim=keepdim))
            close(nee.linalg.matrix_norm(N(a), p, dim=(0, 2), keepdim=keepdim),
                  torch.linalg.matrix_norm(T(a), p, dim=(0, 2), keepdim=keepdim))
        close(nee.linalg.norm(N(a[0]), p), torch.linalg.norm(T(a[0]), p))
    if p in (None, 2, -2):
        r = rnd(3, 5)
        close(nee.linalg.cond(N(r), p), torch.linalg.cond(T(r), p))
    else:
        same_error(lambda: nee.linalg.cond(N(rnd(3, 5)), p), lambda: torch.linalg.cond(T(rnd(3, 5)), p))


def test_tensorinv_tensorsolve():
    a = (rnd(24, 24) + 5 * np.eye(24)).reshape(4, 6, 8, 3)
    close(nee.linalg.tensorinv(N(a), 2), torch.linalg.tensorinv(T(a), 2))
    b = rnd(4, 6)
    close(nee.linalg.tensorsolve(N(a), N(b)), torch.linalg.tensorsolve(T(a), T(b)))
    a2 = np.moveaxis(a, 3, 0).copy()       # dims=(0,) moves it back to the end
    close(nee.linalg.tensorsolve(N(a2), N(b), dims=(0,)), torch.linalg.tensorsolve(T(a2), T(b), dims=(0,)))
    same_error(lambda: nee.linalg.tensorinv(N(rnd(2, 3, 5)), 2), lambda: torch.linalg.tensorinv(T(rnd(2, 3, 5)), 2))


# ------------------------------------------------------------------ jit, devices
def test_jit_matches_eager():
    def f(a, b):
        lu, piv = nee.linalg.lu_factor(a)
        x = nee.linalg.lu_solve(lu, piv, b)
        q, r = nee.linalg.qr(a)
        s = nee.linalg.svdvals(a)
        return x + nee.linalg.solve(a, b), nee.linalg.inv(a) @ q, r.abs().sum() + s.sum() + nee.linalg.det(a), \
            nee.linalg.pinv(a), nee.linalg.matrix_exp(a * 0.1)

    a, b = N(rnd(2, 4, 4) + 3 * np.eye(4)), N(rnd(2, 4, 3))
    jf = nee.jit(f)
    want = f(a, b)
    for _ in range(2):
        for g, w in zip(jf(a, b), want):
            close(g, w, (1e-12, 1e-12))
    # a value error is raised by the compiled graph too
    s = N(np.stack([np.eye(4), np.zeros((4, 4))]))
    jg = nee.jit(lambda x: nee.linalg.inv(x) * 2)
    jg(a)
    with pytest.raises(nee.linalg.LinAlgError, match="Batch element 1"):
        jg(s)


def _opencl():
    try:
        d = nee.device("opencl:0")
        nee.zeros(1, device=d)
        return d
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"no OpenCL device: {e}")


def test_opencl_falls_back_visibly_and_strict_raises():
    dev = _opencl()
    a, b = rnd(3, 3) + 3 * np.eye(3), rnd(3, 2)
    nee.reset_fallbacks()
    x = nee.linalg.solve(N(a).to(dev), N(b).to(dev))
    assert x.device == dev
    close(x.cpu(), np.linalg.solve(a, b))
    p = nee.linalg.pinv(N(a).to(dev))
    close(p.cpu(), np.linalg.pinv(a), (1e-6, 1e-6))
    ops = {r.op for r in nee.fallback_report().records.values() if r.device == str(dev)}
    assert {"linalg_solve_ex", "linalg_svd"} <= ops, ops
    nee.set_strict(True)
    try:
        with pytest.raises(nee.FallbackError, match="linalg_inv_ex"):
            nee.linalg.inv(N(a).to(dev))
    finally:
        nee.set_strict(False)
        nee.reset_fallbacks()


def test_names_where_torch_has_them():
    from neetorch.ops import lapack
    for name in lapack.__all__[1:]:
        assert callable(getattr(nee, name)), name
        assert hasattr(nee.Tensor, name) == hasattr(torch.Tensor, name), name
    for name in ("det", "slogdet", "inv", "inv_ex", "solve", "solve_ex", "lstsq", "cholesky", "cholesky_ex", "qr",
                 "svd", "svdvals", "eigh", "eigvalsh", "eig", "eigvals", "matrix_rank", "pinv", "matrix_power",
                 "matrix_exp", "multi_dot", "solve_triangular", "lu_factor", "lu_factor_ex", "lu", "lu_solve",
                 "vecdot", "diagonal", "cond", "matrix_norm", "norm", "tensorinv", "tensorsolve"):
        assert hasattr(torch.linalg, name) and callable(getattr(nee.linalg, name)), name
    assert issubclass(nee.linalg.LinAlgError, RuntimeError)
