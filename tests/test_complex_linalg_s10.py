"""Complex ``nee.linalg`` (complex64 / complex128) and complex ``logsumexp``, checked against torch.

Where torch's result is unique (det, inv, solve, QR and LU from LAPACK's algorithms, singular values,
eigenvalues, norms, Cholesky factors, pseudo-inverses) the values are compared; where it is unique only up
to a phase per column (singular vectors, eigenvectors) the invariants torch documents are checked instead
(reconstruction, unitarity, unit norm) plus agreement with torch's vectors up to that phase.
"""
# ruff: noqa: B023  (the lambdas built in loops are called by check() before the loop moves on)
import math

import numpy as np
import pytest

import neetorch as nee

torch = pytest.importorskip("torch")
from torch_check import make_check  # noqa: E402

RNG = np.random.default_rng(10)
CDT = ("complex64", "complex128")
TOL = {"complex64": 2e-4, "float32": 2e-4, "complex128": 1e-9, "float64": 1e-9}


def _c(shape, dt="complex128", rng=RNG):
    a = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    return a.astype(dt)


def _noncontig(a):
    """The same values as a transposed (non-contiguous) view."""
    return np.swapaxes(np.ascontiguousarray(np.swapaxes(a, -1, -2)), -1, -2)


# the shared harness (tests/torch_check.py): transposed inputs kept transposed, neetorch's exception an instance
# of torch's (or both RuntimeErrors), complex results within the tolerance, atol scaled by torch's magnitudes
check = make_check(torch, {**TOL, "other": 2e-3}, keep_layout=True, same_error="subclass", complex_tol=True,
                   scale_atol=True)


def _np(x):
    return np.array(x.numpy())


def _mh(a):
    return np.conj(np.swapaxes(a, -1, -2))


# ------------------------------------------------------------------ values unique: compared with torch's
SQ = [(3, 3), (2, 4, 4), (1, 1), (2, 0, 0)]


@pytest.mark.parametrize("dt", CDT)
@pytest.mark.parametrize("shape", SQ)
def test_det_slogdet_inv_solve(dt, shape):
    for a in (_c(shape, dt), _noncontig(_c(shape, dt))):
        check(lambda L, x: L.linalg.det(x), a)
        check(lambda L, x: L.det(x), a)
        check(lambda L, x: tuple(L.linalg.slogdet(x)), a)
        check(lambda L, x: L.logdet(x), a)
        check(lambda L, x: L.linalg.inv(x), a)
        check(lambda L, x: tuple(L.linalg.inv_ex(x)), a)
        b = _c(shape[:-1] + (2,), dt)
        check(lambda L, x, y: L.linalg.solve(x, y), a, b)
        check(lambda L, x, y: L.linalg.solve(x, y, left=False), a, _c(shape[:-2] + (2, shape[-1]), dt))
        check(lambda L, x, y: L.linalg.solve(x, y), a, _c(shape[:-1], dt))           # a vector right side
        check(lambda L, x, y: L.linalg.solve(x, y), a, _c((3, 1) + shape[-1:] + (2,), dt))   # batch broadcast


@pytest.mark.parametrize("dt", CDT)
def test_singular_matrices(dt):
    a = _c((2, 3, 3), dt)
    a[1, 2] = a[1, 0] + a[1, 1]                      # batch element 1 singular (exactly or nearly)
    z = np.zeros((2, 3, 3), dt)
    z[0] = np.eye(3)                                 # batch element 1 exactly singular
    check(lambda L, x: L.linalg.det(x), z)
    check(lambda L, x: tuple(L.linalg.slogdet(x)), z)
    check(lambda L, x: L.logdet(x), z)
    check(lambda L, x: L.linalg.inv(x), z)           # raises (LinAlgError in both)
    check(lambda L, x: tuple(L.linalg.inv_ex(x))[1], z)
    check(lambda L, x, y: L.linalg.solve(x, y), z, _c((2, 3, 1), dt))
    check(lambda L, x, y: L.linalg.solve_ex(x, y).info, z, _c((2, 3, 1), dt))
    check(lambda L, x: L.linalg.matrix_rank(x), a)
    check(lambda L, x: L.linalg.matrix_rank(x, hermitian=True), a @ _mh(a))
    check(lambda L, x: L.linalg.pinv(x), a, tol=1e-3 if dt == "complex64" else 1e-7)
    check(lambda L, x: tuple(L.linalg.lu_factor_ex(x)), z)
    r = nee.linalg.det(nee.tensor(z))
    assert r.dtype == getattr(nee, dt) and _np(r)[1] == 0


@pytest.mark.parametrize("dt", CDT)
@pytest.mark.parametrize("shape", [(4, 3), (3, 5), (2, 3, 3), (2, 1, 4), (0, 3), (3, 0)])
@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
def test_qr(dt, shape, mode):
    a = _c(shape, dt)
    for x in (a, _noncontig(a)):
        n = check(lambda L, y: tuple(L.linalg.qr(y, mode=mode)), x)
        if mode != "r" and x.size:
            q, r = (_np(t) for t in n)
            np.testing.assert_allclose(q @ r, x, atol=TOL[dt] * 10)
            np.testing.assert_allclose(_mh(q) @ q, np.broadcast_to(np.eye(q.shape[-1]), q.shape[:-2] + (q.shape[-1],) * 2),
                                       atol=TOL[dt] * 10)
    check(lambda L, y: tuple(L.qr(y, some=False)), a)


@pytest.mark.parametrize("dt", CDT)
@pytest.mark.parametrize("shape", [(4, 3), (3, 5), (2, 4, 4), (0, 3), (2, 2, 0)])
def test_svd(dt, shape):
    a = _noncontig(_c(shape, dt))
    check(lambda L, x: L.linalg.svdvals(x), a)
    for full in (True, False):
        t = torch.linalg.svd(torch.from_numpy(a.copy()), full_matrices=full)
        n = nee.linalg.svd(nee.tensor(a.copy()), full_matrices=full)
        for tt, nn in zip(t, n):
            assert str(tt.dtype).split(".")[-1] == nn.dtype.name and tuple(tt.shape) == tuple(nn.shape)
        u, s, vh = (_np(x) for x in n)
        assert s.dtype == np.dtype(dt.replace("complex64", "float32").replace("complex128", "float64"))
        np.testing.assert_allclose(s, t.S.numpy(), rtol=TOL[dt], atol=TOL[dt] * 10)
        k = s.shape[-1]
        if a.size:
            np.testing.assert_allclose((u[..., :k] * s[..., None, :]) @ vh[..., :k, :], a, atol=TOL[dt] * 20)
            # each singular vector is torch's up to a phase: |<u_n, u_t>| = 1
            ut, vt = t.U.numpy()[..., :k], t.Vh.numpy()[..., :k, :]
            np.testing.assert_allclose(np.abs(np.sum(np.conj(u[..., :k]) * ut, -2)), 1, atol=1e-3)
            np.testing.assert_allclose(np.abs(np.sum(np.conj(vh[..., :k, :]) * vt, -1)), 1, atol=1e-3)
    # the old API: V (the conjugate transpose of Vh)
    u, s, v = nee.svd(nee.tensor(a.copy()))
    if a.size:
        np.testing.assert_allclose((_np(u) * _np(s)[..., None, :]) @ _mh(_np(v)), a, atol=TOL[dt] * 20)


@pytest.mark.parametrize("dt", CDT)
@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (0, 0)])
def test_eigh_eigvalsh(dt, shape):
    a = _c(shape, dt)
    h = a + _mh(a)
    for uplo in ("L", "U"):
        # only the UPLO triangle is read: garbage in the other one changes nothing
        g = h.copy()
        if g.size:
            g[..., np.triu_indices(shape[-1], 1)[0], np.triu_indices(shape[-1], 1)[1]] += 5j if uplo == "L" else 0
        check(lambda L, x: L.linalg.eigvalsh(x, UPLO=uplo), g)
        w, v = nee.linalg.eigh(nee.tensor(g), UPLO=uplo)
        wt, vt = torch.linalg.eigh(torch.from_numpy(g), UPLO=uplo)
        assert w.dtype.name == str(wt.dtype).split(".")[-1] and v.dtype.name == dt
        np.testing.assert_allclose(_np(w), wt.numpy(), atol=TOL[dt] * 10)
        if h.size:
            vn = _np(v)
            np.testing.assert_allclose(h @ vn, vn * _np(w)[..., None, :], atol=TOL[dt] * 50)
            np.testing.assert_allclose(np.abs(np.sum(np.conj(vn) * vt.numpy(), -2)), 1, atol=1e-3)


@pytest.mark.parametrize("dt", ["float32", "float64"] + list(CDT))
@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (1, 1), (2, 0, 0)])
def test_eig_eigvals(dt, shape):
    a = _c(shape, dt) if dt in CDT else RNG.standard_normal(shape).astype(dt)
    t = check(lambda L, x: L.linalg.eigvals(x), a)
    check(lambda L, x: L.linalg.eigvals(x), _noncontig(a))
    assert t.dtype.name == ("complex64" if dt in ("float32", "complex64") else "complex128")
    n = nee.linalg.eig(nee.tensor(a))
    tw, tv = torch.linalg.eig(torch.from_numpy(a))
    assert n.eigenvalues.dtype.name == str(tw.dtype).split(".")[-1] == n.eigenvectors.dtype.name
    np.testing.assert_allclose(_np(n.eigenvalues), tw.numpy(), atol=TOL[dt] * 10)   # LAPACK's (geev) order
    if a.size:
        w, v = _np(n.eigenvalues), _np(n.eigenvectors)
        np.testing.assert_allclose(a @ v, v * w[..., None, :], atol=TOL[dt] * 50)
        np.testing.assert_allclose(np.linalg.norm(v, axis=-2), 1, atol=TOL[dt] * 10)    # unit norm
        # geev's normalization, as torch's: the largest component of each eigenvector is real
        big = np.take_along_axis(v, np.abs(v).argmax(-2)[..., None, :], -2)
        np.testing.assert_allclose(big.imag, 0, atol=TOL[dt] * 10)
        # torch's eigenvectors up to a sign / phase (LAPACK builds may differ there)
        np.testing.assert_allclose(np.abs(np.sum(np.conj(v) * tv.numpy(), -2)), 1, atol=1e-3)


def test_eig_errors():
    for dt in ("complex64", "float64"):
        a = np.full((2, 2), np.nan).astype(dt)
        check(lambda L, x: L.linalg.eig(x), a)
    check(lambda L, x: L.linalg.eig(x), np.ones((2, 3), np.complex64))
    check(lambda L, x: L.linalg.eig(x), np.ones((2, 2), np.int64))
    with pytest.raises(RuntimeError, match="should not contain infs or NaNs"):
        nee.linalg.eigvals(nee.tensor(np.array([[1, np.inf], [0, 1]], np.complex128)))


@pytest.mark.parametrize("dt", CDT)
@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (4, 3), (2, 3, 5)])
def test_matrix_norm_cond(dt, shape):
    a = _noncontig(_c(shape, dt))
    for o in ("fro", "nuc", 2, -2, 1, -1, math.inf, -math.inf):
        check(lambda L, x: L.linalg.matrix_norm(x, o), a)
        check(lambda L, x: L.linalg.matrix_norm(x, o, dim=(0, -1), keepdim=True), a)
        check(lambda L, x: L.linalg.norm(x, o, dim=(-2, -1)), a)
        if shape[-1] == shape[-2] or o in (2, -2):
            check(lambda L, x: L.linalg.cond(x, o), a, tol=1e-3 if dt == "complex64" else 1e-7)
    check(lambda L, x: L.linalg.cond(x), a, tol=1e-3 if dt == "complex64" else 1e-7)
    check(lambda L, x: L.linalg.matrix_norm(x, "fro", dtype=torch.complex128 if L is torch else nee.complex128), a)
    check(lambda L, x: L.linalg.matrix_norm(x, 2, dtype=torch.float64 if L is torch else nee.float64), a)  # raises
    check(lambda L, x: L.linalg.matrix_norm(x, dtype=torch.complex64 if L is torch else nee.complex64),
          a.real.copy())                                                                               # raises
    check(lambda L, x: L.nuclear_norm(x), a)


@pytest.mark.parametrize("dt", CDT)
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky(dt, upper):
    a = _c((2, 4, 4), dt)
    pd = (a @ _mh(a) + 0.5 * np.eye(4)).astype(dt)
    g = pd.copy()
    iu = np.triu_indices(4, 1) if not upper else np.tril_indices(4, -1)
    g[..., iu[0], iu[1]] = 7 + 3j                    # the unread triangle
    check(lambda L, x: L.linalg.cholesky(x, upper=upper), g)
    check(lambda L, x: L.linalg.cholesky(x, upper=upper), _noncontig(pd))
    check(lambda L, x: L.cholesky(x, upper=upper), pd)
    n = nee.linalg.cholesky(nee.tensor(pd), upper=upper)
    f = _np(n)
    np.testing.assert_allclose(_mh(f) @ f if upper else f @ _mh(f), pd, atol=TOL[dt] * 50)
    bad = pd.copy()
    bad[1] = -np.eye(4)                              # batch element 1 not positive-definite
    check(lambda L, x: L.linalg.cholesky(x, upper=upper), bad)
    check(lambda L, x: L.linalg.cholesky_ex(x, upper=upper).info, bad)
    b = _c((2, 4, 2), dt)
    check(lambda L, x, y: L.cholesky_solve(y, L.linalg.cholesky(x, upper=upper), upper=upper), pd, b,
          tol=1e-3 if dt == "complex64" else 1e-8)
    check(lambda L, x: L.cholesky_inverse(L.linalg.cholesky(x, upper=upper), upper=upper), pd,
          tol=1e-3 if dt == "complex64" else 1e-8)


@pytest.mark.parametrize("dt", CDT)
def test_pinv_matrix_rank(dt):
    tol = 1e-3 if dt == "complex64" else 1e-8
    a = _c((2, 5, 3), dt)
    low = _c((2, 5, 2), dt) @ _c((2, 2, 4), dt)      # rank 2
    for x in (a, _noncontig(_c((3, 3), dt))):
        check(lambda L, y: L.linalg.pinv(y), x, tol=tol)
        check(lambda L, y: L.pinverse(y), x, tol=tol)
    for x in (a, low):
        check(lambda L, y: L.linalg.matrix_rank(y), x)
    # rank-deficient: the rounding-noise singular values are cut off by a tolerance above them
    check(lambda L, y: L.linalg.pinv(y, rtol=1e-4), low, tol=tol)
    check(lambda L, y: L.linalg.pinv(y, atol=1e-3), low, tol=tol)
    h = low @ _mh(low)
    check(lambda L, y: L.linalg.pinv(y, hermitian=True, rtol=1e-4), h, tol=tol)
    check(lambda L, y: L.linalg.matrix_rank(y, hermitian=True), h)
    check(lambda L, y: L.linalg.pinv(y), np.zeros((0, 3), dt))


@pytest.mark.parametrize("dt", CDT)
@pytest.mark.parametrize("driver", [None, "gelsd", "gelss", "gels"])
def test_lstsq(dt, driver):
    tol = 1e-3 if dt == "complex64" else 1e-8
    a, b = _c((2, 5, 3), dt), _c((2, 5, 2), dt)
    check(lambda L, x, y: L.linalg.lstsq(x, y, driver=driver).solution, a, b, tol=tol)
    if driver in ("gelsd", "gelss"):
        check(lambda L, x, y: tuple(L.linalg.lstsq(x, y, driver=driver)), a, b, tol=tol)
    check(lambda L, x, y: L.linalg.lstsq(x, y, driver=driver).solution, a, b[..., 0], tol=tol)   # vector B
    if driver != "gels":
        low = _c((5, 2), dt) @ _c((2, 3), dt)        # rank-deficient: the minimum-norm solution
        check(lambda L, x, y: L.linalg.lstsq(x, y, driver=driver).solution, low, b[0], tol=tol)
        check(lambda L, x, y: L.linalg.lstsq(x, y, driver=driver).rank, low, b[0])


@pytest.mark.parametrize("dt", CDT)
def test_lu_triangular_matrix_exp(dt):
    tol = 1e-3 if dt == "complex64" else 1e-8
    a, b = _c((2, 4, 4), dt), _c((2, 4, 3), dt)
    check(lambda L, x: tuple(L.linalg.lu_factor(x)), a, tol=tol)     # izamax pivots: |re| + |im|
    check(lambda L, x: tuple(L.linalg.lu(x)), _c((3, 5), dt), tol=tol)
    # |3| > |2 + 2i| but |re| + |im| picks row 1, as LAPACK's izamax does
    p = check(lambda L, x: L.linalg.lu_factor(x).pivots, np.array([[3, 1], [2 + 2j, 5]], dt))
    assert _np(p).tolist() == [2, 2]
    for adj in (False, True):
        check(lambda L, x, y: L.linalg.lu_solve(*L.linalg.lu_factor(x), y, adjoint=adj), a, b, tol=tol)
        check(lambda L, x, y: L.linalg.lu_solve(*L.linalg.lu_factor(x), y, left=False, adjoint=adj), a,
              _c((2, 3, 4), dt), tol=tol)
    for up in (True, False):
        t = np.triu(a) if up else np.tril(a)
        t = (t + 3 * np.eye(4)).astype(dt)
        check(lambda L, x, y: L.linalg.solve_triangular(x, y, upper=up), t, b, tol=tol)
        check(lambda L, x, y: L.linalg.solve_triangular(x, y, upper=up, left=False), t, _c((2, 3, 4), dt), tol=tol)
        check(lambda L, x, y: tuple(L.triangular_solve(y, x, upper=up, transpose=True)), t, b, tol=tol)
    check(lambda L, x: L.linalg.matrix_exp(x), 0.5 * a, tol=tol)
    check(lambda L, x: L.linalg.matrix_exp(x), 3 * a, tol=tol)           # scaled and squared
    check(lambda L, x: L.linalg.matrix_power(x, -2), a, tol=tol)


@pytest.mark.parametrize("dt", CDT)
def test_geqrf_householder_ormqr(dt):
    tol = 1e-3 if dt == "complex64" else 1e-8
    a = _c((2, 5, 3), dt)
    check(lambda L, x: tuple(L.geqrf(x)), a, tol=tol)
    check(lambda L, x: L.linalg.householder_product(*L.geqrf(x)), a, tol=tol)
    c = _c((2, 5, 2), dt)
    for tr in (False, True):
        check(lambda L, x, y: L.ormqr(*L.geqrf(x), y, transpose=tr), a, c, tol=tol)
    check(lambda L, x: L.linalg.vander(x), _c((2, 3), dt), tol=tol)


def test_svd_lowrank_complex():
    nee.manual_seed(0)
    a = _c((6, 2), "complex128") @ _c((2, 5), "complex128")             # rank 2: recovered exactly
    u, s, v = nee.svd_lowrank(nee.tensor(a), q=2)
    assert u.dtype == nee.complex128 and s.dtype == nee.float64
    np.testing.assert_allclose(_np(s), np.linalg.svd(a, compute_uv=False)[:2], rtol=1e-8)
    np.testing.assert_allclose((_np(u) * _np(s)) @ _mh(_np(v)), a, atol=1e-8)


def test_ldl_takes_complex():
    # (complex ldl_factor / ldl_solve against torch: tests/test_torch_parity_s12.py)
    a = _c((3, 3))
    a = a + a.T
    ld, piv = nee.linalg.ldl_factor(nee.tensor(a))
    b = _c((3, 2))
    np.testing.assert_allclose(a @ nee.linalg.ldl_solve(ld, piv, nee.tensor(b)).numpy(), b, atol=1e-10)


# ------------------------------------------------------------------ logsumexp
@pytest.mark.parametrize("dt", CDT)
def test_logsumexp_complex(dt):
    a = _c((3, 4), dt)
    check(lambda L, x: L.logsumexp(x, 1), a)
    check(lambda L, x: L.logsumexp(x, (0, 1), keepdim=True), a)
    check(lambda L, x: L.logsumexp(x, 0), (a * 400).astype(dt))         # large real parts: shifted
    inf = np.array([[complex(-math.inf, 0), complex(-math.inf, 1)], [complex(math.inf, 1), 1 + 2j]], dt)
    check(lambda L, x: L.logsumexp(x, 1), inf)
    check(lambda L, x: L.logsumexp(x, 0), np.zeros((0, 2), dt))
