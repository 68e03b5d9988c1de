"""CPU kernels of the matrix decompositions and solvers (``neetorch/ops/lapack.py``).

numpy.linalg's batched LAPACK gufuncs do the work where they exist (det, slogdet, inv, solve,
cholesky, qr, svd, eigh, lstsq).  LAPACK's error codes (the ``info`` of ``*_ex``) are not
exposed by numpy, so they come from the small batched numpy factorizations below
(:func:`lu_factor` is LAPACK's getf2 and :func:`_cholesky_info` potf2, vectorized over the
batch), run only on the matrices numpy refused.  ``lu_factor`` is also the LU the ops return
(numpy has no getrf), and :func:`trsm` the triangular solver (numpy has no trsm).

Every kernel gets float32/float64/complex64/complex128 inputs (the frontends reject the rest with
PyTorch's messages) of any layout, and writes into C-contiguous outputs.  For complex values the
routines are LAPACK's z/c ones (numpy's) and the hand-written parts follow them: the LU pivots on
the first largest |re| + |im| (izamax), Cholesky reads the Hermitian matrix of one triangle, an
adjoint solve is with the conjugate transpose.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from ....ops.lapack import LinAlgError
from .. import kernel, threads


def _batch_prefix(i: int, nb: int) -> str:
    return f"(Batch element {i}): " if nb > 1 else ""


def _flat(a: np.ndarray) -> np.ndarray:
    """a as a (batch, m, n) array (a copy only when the batch dims do not merge)."""
    return a.reshape((math.prod(a.shape[:-2]),) + a.shape[-2:])


# ------------------------------------------------------------------ LU (getrf), batched
_LU_BLOCK = 32     # panels this narrow are factored column by column (getf2), wider ones recursively


def lu_factor(a: np.ndarray):
    """(LU, pivots int32 1-based, info int32) of every matrix of ``a`` (..., m, n): partial
    pivoting on the first largest |value| (LAPACK's idamax), info = 1-based index of the
    first exactly-zero pivot (0: none).  LAPACK's recursive getrf2: the left half of the
    columns, then the Schur complement of the right half, so the bulk of the work is matmuls."""
    shape = a.shape
    m, n = shape[-2:]
    k = min(m, n)
    lu = np.array(_flat(a), dtype=a.dtype, copy=True, order="C")
    nb = lu.shape[0]
    piv = np.zeros((nb, k), np.int64)
    info = np.zeros(nb, np.int32)
    if nb and k:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            _getrf(lu, 0, k, piv, info)
            if n > k:   # a wide matrix: U's columns right of the square part
                lu[:, :k, k:] = trsm(lu[:, :k, :k], lu[:, :k, k:], lower=True, unit=True)
    return lu.reshape(shape), (piv + 1).astype(np.int32).reshape(shape[:-2] + (k,)), info.reshape(shape[:-2])


def _getrf(a, j0, j1, piv, info):
    """Factor columns j0:j1 of a (batch, m, n) in place (rows j0:), the pivot rows (0-based)
    into piv[:, j0:j1], a zero pivot (1-based) into info where it is still 0.  Row swaps move
    whole rows, so the columns right of j1 are permuted already when their turn comes."""
    w = j1 - j0
    if w <= _LU_BLOCK:
        _getf2(a, j0, j1, piv, info)
        return
    jm = j0 + w // 2
    _getrf(a, j0, jm, piv, info)
    a[:, j0:jm, jm:j1] = trsm(a[:, j0:jm, j0:jm], a[:, j0:jm, jm:j1], lower=True, unit=True)
    a[:, jm:, jm:j1] -= np.matmul(a[:, jm:, j0:jm], a[:, j0:jm, jm:j1])
    _getrf(a, jm, j1, piv, info)


@njit(cache=True, nogil=True, inline="always")
def _cabs1(x):
    return abs(x.real) + abs(x.imag)


@njit(cache=True, nogil=True)
def _getf2(lu, j0, j1, piv, info):
    """The unblocked LU (LAPACK's getf2) of columns j0:j1, rows j0:, of every matrix of lu
    (batch, m, n; C-contiguous, float32 or float64: two specializations): the first largest
    |pivot| (idamax; |re| + |im| for complex values, izamax), swaps of whole rows, a zero pivot's
    column left unscaled."""
    nb, m, n = lu.shape
    for b in range(nb):
        for j in range(j0, j1):
            p = j
            best = _cabs1(lu[b, j, j])
            for i in range(j + 1, m):
                v = _cabs1(lu[b, i, j])
                if v > best:
                    best = v
                    p = i
            piv[b, j] = p
            if p != j:
                for c in range(n):
                    t = lu[b, j, c]
                    lu[b, j, c] = lu[b, p, c]
                    lu[b, p, c] = t
            d = lu[b, j, j]
            if d == 0:
                if info[b] == 0:
                    info[b] = j + 1
            else:
                for i in range(j + 1, m):
                    lu[b, i, j] /= d
            for i in range(j + 1, m):
                f = lu[b, i, j]
                for c in range(j + 1, j1):
                    lu[b, i, c] -= f * lu[b, j, c]


def _perm(piv: np.ndarray, m: int) -> np.ndarray:
    """The row permutations (batch, m) that LAPACK's sequential swaps ``piv`` (batch, k, 1-based) make."""
    nb, k = piv.shape
    if nb <= 8:
        # few matrices: the swaps on Python ints (~0.1 us each, vs ~10 us per vectorized step)
        out = np.empty((nb, m), np.intp)
        for b, row in enumerate(piv.tolist()):
            perm = list(range(m))
            for i, p in enumerate(row):
                perm[i], perm[p - 1] = perm[p - 1], perm[i]
            out[b] = perm
        return out
    perm = np.broadcast_to(np.arange(m), (nb, m)).copy()
    bi = np.arange(nb)
    for i in range(k):
        p = piv[:, i].astype(np.intp) - 1
        a = perm[bi, i].copy()
        perm[bi, i] = perm[bi, p]
        perm[bi, p] = a
    return perm


# ------------------------------------------------------------------ triangular solve (trsm), batched
def trsm(t: np.ndarray, b: np.ndarray, lower: bool, unit: bool, trans: bool = False) -> np.ndarray:
    """X with op(T) X = B for triangular T (..., n, n) and B (..., n, k) (batch dims broadcast);
    only T's ``lower`` / upper triangle is read, its diagonal taken as ones when ``unit``;
    op(T) = T^H (the conjugate transpose) when ``trans``.  Blocks of _TRSM_BLOCK rows: LAPACK's solve on each diagonal
    block, a matmul for the rest.  A zero on the diagonal gives inf/nan as LAPACK's trsm does
    (no error): such a block is solved row by row."""
    if trans:
        t = np.swapaxes(t, -1, -2)
        if np.iscomplexobj(t):
            t = np.conj(t)
        lower = not lower
    n = t.shape[-1]
    bshape = np.broadcast_shapes(t.shape[:-2], b.shape[:-2])
    dt = np.result_type(t.dtype, b.dtype)
    x = np.array(np.broadcast_to(b, bshape + b.shape[-2:]), dtype=dt, copy=True)
    t = np.broadcast_to(t, bshape + t.shape[-2:])
    if n == 0 or x.size == 0:
        return x
    starts = list(range(0, n, _TRSM_BLOCK))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for s in (starts if lower else starts[::-1]):
            e = min(s + _TRSM_BLOCK, n)
            if lower and s > 0:
                x[..., s:e, :] -= np.matmul(t[..., s:e, :s], x[..., :s, :])
            elif not lower and e < n:
                x[..., s:e, :] -= np.matmul(t[..., s:e, e:], x[..., e:, :])
            _trsm_block(t[..., s:e, s:e], x[..., s:e, :], lower, unit)
    return x


_TRSM_BLOCK = 64


def _trsm_block(t, x, lower, unit):
    """x (a view) <- T^-1 x for one diagonal block T."""
    w = t.shape[-1]
    tri = np.tril(t) if lower else np.triu(t)
    idx = np.arange(w)
    if unit:
        tri[..., idx, idx] = 1
    if unit or bool(np.all(tri[..., idx, idx] != 0)):
        # LAPACK's LU of an upper triangular matrix is the matrix itself (no pivoting, no fill), so
        # its solve is back substitution; a lower one is solved as the upper one it is reversed
        try:
            if lower:
                x[...] = np.linalg.solve(tri[..., ::-1, ::-1], x[..., ::-1, :])[..., ::-1, :]
            else:
                x[...] = np.linalg.solve(tri, x)
            return
        except np.linalg.LinAlgError:   # a diagonal that under/overflows in the LU: substitute
            pass
    for i in (range(w) if lower else range(w - 1, -1, -1)):
        if lower and i > 0:
            x[..., i, :] -= np.matmul(tri[..., i:i + 1, :i], x[..., :i, :])[..., 0, :]
        elif not lower and i < w - 1:
            x[..., i, :] -= np.matmul(tri[..., i:i + 1, i + 1:], x[..., i + 1:, :])[..., 0, :]
        x[..., i, :] /= tri[..., i, i][..., None]


# ------------------------------------------------------------------ kernels
def _serial(fn):
    """Run the kernel with BLAS on the calling thread.  LAPACK's Householder-based routines (QR,
    SVD, eigh, lstsq) and the many small products of the LU / triangular solves here synchronize
    OpenBLAS's threads at every step: measured on the shared 2-core box under load (same process,
    interleaved, min of 7), 256x256 float64 qr 98 ms threaded vs 3.2 serial, svd 102 vs 38, eigh 57 vs
    18, lstsq 139 vs 16; getrf-based inv (level-3 blocked) was even (2.2 vs 2.8) and stays threaded."""
    def run(backend, outs, ins, attrs):
        with threads.serial_blas():
            fn(backend, outs, ins, attrs)
    run.__name__ = run.__qualname__ = fn.__name__
    run.__doc__ = fn.__doc__
    return run


@kernel("linalg_det")
def det_kernel(backend, outs, ins, attrs):
    np.copyto(outs[0], np.linalg.det(ins[0]) if ins[0].size else np.ones(outs[0].shape), casting="unsafe")


@kernel("linalg_slogdet")
def slogdet_kernel(backend, outs, ins, attrs):
    if ins[0].size == 0:
        outs[0].fill(1)
        outs[1].fill(0)
        return
    s, l = np.linalg.slogdet(ins[0])
    np.copyto(outs[0], s, casting="unsafe")
    np.copyto(outs[1], l, casting="unsafe")


def _raise_lu(op: str, info: np.ndarray, msg) -> None:
    flat = info.reshape(-1)
    bad = np.flatnonzero(flat)
    if bad.size:
        i = int(bad[0])
        raise LinAlgError(f"{op}: {_batch_prefix(i, flat.size)}{msg(int(flat[i]))}")


def _inv_msg(k):
    return (f"The diagonal element {k} is zero, the inversion could not be completed because the input matrix is "
            f"singular.")


@kernel("linalg_inv_ex")
def inv_kernel(backend, outs, ins, attrs):
    a = ins[0]
    out, info = outs
    info.fill(0)
    if a.size == 0:
        return
    try:
        np.copyto(out, np.linalg.inv(a))
        return
    except np.linalg.LinAlgError:
        pass
    # some matrix is singular: LAPACK's info per matrix, numpy's inverse for the others
    _, _, inf = lu_factor(a)
    np.copyto(info, inf)
    if attrs["check_errors"]:
        _raise_lu("linalg.inv", inf, _inv_msg)
    o, fa, fi = _flat(out), _flat(a), inf.reshape(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        for i in range(fa.shape[0]):
            if fi[i] == 0:
                o[i] = np.linalg.inv(fa[i])
            else:
                lu, piv, _ = lu_factor(fa[i])
                o[i] = _lu_solve(lu, piv, np.eye(fa.shape[-1], dtype=o.dtype), False)


def _lu_solve(lu, piv, b, adjoint):
    """X with A X = B (A^H X = B when ``adjoint``) from A's LU (..., n, n) and pivots; batch dims broadcast."""
    n = lu.shape[-1]
    bshape = np.broadcast_shapes(lu.shape[:-2], piv.shape[:-1], b.shape[:-2])
    pv = np.broadcast_to(piv, bshape + piv.shape[-1:]).reshape(math.prod(bshape), piv.shape[-1])
    perm = _perm(pv, n).reshape(bshape + (n,))
    b = np.broadcast_to(b, bshape + b.shape[-2:])
    if not adjoint:
        pb = np.take_along_axis(b, perm[..., None], axis=-2)
        y = trsm(lu, pb, lower=True, unit=True)
        return trsm(lu, y, lower=False, unit=False)
    y = trsm(lu, b, lower=False, unit=False, trans=True)
    x = trsm(lu, y, lower=True, unit=True, trans=True)
    out = np.empty_like(x)
    np.put_along_axis(out, np.broadcast_to(perm[..., None], x.shape), x, axis=-2)
    return out


@kernel("linalg_solve_ex")
def solve_kernel(backend, outs, ins, attrs):
    a, b = ins
    out, info = outs
    info.fill(0)
    if a.size == 0:
        return
    if out.size:
        try:
            np.copyto(out, np.linalg.solve(a, b))
            return
        except np.linalg.LinAlgError:
            pass
    # a singular matrix (or no right-hand side to solve): the info of A's LU, as torch computes it
    lu, piv, inf = lu_factor(a)
    np.copyto(info, inf)
    if attrs["check_errors"]:
        _raise_lu("torch.linalg.solve", inf, lambda k: "The solver failed because the input matrix is singular.")
    if out.size:
        np.copyto(out, _lu_solve(lu, piv, b, False))


def _cholesky_info(a: np.ndarray):
    """(L, info) of the lower-triangle Cholesky (potf2) of every matrix of a (batch, n, n); complex a is
    Hermitian (A = L L^H, the diagonal's imaginary part ignored, as LAPACK's zpotf2 does)."""
    nb, n, _ = a.shape
    L = np.tril(a).astype(a.dtype, copy=True)
    info = np.zeros(nb, np.int32)
    live = np.ones(nb, bool)
    cplx = np.iscomplexobj(L)
    with np.errstate(invalid="ignore", divide="ignore"):
        for j in range(n):
            d = L[:, j, j].real - np.einsum("bk,bk->b", L[:, j, :j], L[:, j, :j].conj()).real
            bad = live & ~(d > 0)
            info[bad] = j + 1
            L[bad, j, j] = d[bad]   # potf2 stores the failed pivot and stops
            live &= ~bad
            if not live.any():
                break
            r = np.sqrt(np.where(live, d, 1))
            L[live, j, j] = r[live]
            if j + 1 < n:
                lj = L[:, j, :j].conj() if cplx else L[:, j, :j]
                col = (L[:, j + 1:, j] - np.einsum("bik,bk->bi", L[:, j + 1:, :j], lj)) / r[:, None]
                L[live, j + 1:, j] = col[live]
    return L, info


@kernel("linalg_cholesky_ex")
def cholesky_kernel(backend, outs, ins, attrs):
    a = ins[0]
    out, info = outs
    info.fill(0)
    if a.size == 0:
        return
    upper = attrs["upper"]
    # only one triangle is read (LAPACK's uplo): the factor of the symmetric (Hermitian) matrix it defines
    cplx = np.iscomplexobj(a)
    t = np.swapaxes(a, -1, -2) if upper else a
    if cplx:
        t = np.conj(t) if upper else t
        sym = np.tril(t, -1) + np.conj(np.swapaxes(np.tril(t, -1), -1, -2))
        idx = np.arange(a.shape[-1])
        sym[..., idx, idx] = t[..., idx, idx].real    # (potrf reads only the diagonal's real part)
    else:
        sym = np.tril(t) + np.swapaxes(np.tril(t, -1), -1, -2)
    try:
        L = np.linalg.cholesky(sym)
    except np.linalg.LinAlgError:
        fs = _flat(sym)
        L = np.empty_like(fs)
        inf = np.zeros(fs.shape[0], np.int32)
        for i in range(fs.shape[0]):
            try:
                L[i] = np.linalg.cholesky(fs[i])
            except np.linalg.LinAlgError:
                li, ii = _cholesky_info(fs[i:i + 1])
                L[i], inf[i] = li[0], ii[0]
        inf = inf.reshape(info.shape)
        np.copyto(info, inf)
        if attrs["check_errors"]:
            _raise_lu(attrs["name"], inf, lambda k: (
                f"The factorization could not be completed because the input is not positive-definite (the leading "
                f"minor of order {k} is not positive-definite)."))
        L = L.reshape(sym.shape)
    if upper:      # U = L^H
        L = np.swapaxes(L, -1, -2)
        L = np.conj(L) if cplx else L
    np.copyto(out, L)


@kernel("linalg_qr")
@_serial
def qr_kernel(backend, outs, ins, attrs):
    a = ins[0]
    mode = attrs["mode"]
    q, r = outs
    if a.size == 0:
        if q.size:
            q[...] = np.eye(q.shape[-2], q.shape[-1], dtype=q.dtype)
        r.fill(0)
        return
    if mode == "r":
        np.copyto(r, np.linalg.qr(a, mode="r"))
        return
    qq, rr = np.linalg.qr(a, mode=mode)
    np.copyto(q, qq)
    np.copyto(r, rr)


def _empty_svd(a, u, s, vh):
    """SVD of matrices with a zero dimension: identity / empty singular vectors (as LAPACK gives)."""
    for x in (u, vh):
        if x is not None and x.size:
            x[...] = np.eye(x.shape[-2], x.shape[-1], dtype=x.dtype)


def _not_converged(op: str, a: np.ndarray, e: Exception, what: str):
    """numpy's LinAlgError of an iterative algorithm as torch's (naming the batch element)."""
    bad = ~np.isfinite(_flat(a)).all(axis=(-2, -1))
    nb = bad.size
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        return LinAlgError(f"{op}: {_batch_prefix(i, nb)}The algorithm failed to converge because the input matrix "
                           f"contained non-finite values.")
    return LinAlgError(f"{op}: The algorithm failed to converge {what} ({e})")


def _svd(a, **kw):
    try:
        return np.linalg.svd(a, **kw)
    except np.linalg.LinAlgError as e:
        raise _not_converged("linalg.svd", a, e, "") from None


@kernel("linalg_svd")
@_serial
def svd_kernel(backend, outs, ins, attrs):
    a = ins[0]
    u, s, vh = outs
    if a.size == 0:
        _empty_svd(a, u, s, vh)
        return
    uu, ss, vv = _svd(a, full_matrices=attrs["full_matrices"])
    np.copyto(u, uu)
    np.copyto(s, ss)
    np.copyto(vh, vv)


@kernel("linalg_svdvals")
@_serial
def svdvals_kernel(backend, outs, ins, attrs):
    if ins[0].size:
        np.copyto(outs[0], _svd(ins[0], compute_uv=False))


@kernel("linalg_eigh")
@_serial
def eigh_kernel(backend, outs, ins, attrs):
    if ins[0].size:
        try:
            w, v = np.linalg.eigh(ins[0], UPLO=attrs["UPLO"])
        except np.linalg.LinAlgError as e:
            raise _not_converged("linalg.eigh", ins[0], e, "") from None
        np.copyto(outs[0], w)
        np.copyto(outs[1], v)


@kernel("linalg_eigvalsh")
@_serial
def eigvalsh_kernel(backend, outs, ins, attrs):
    if ins[0].size:
        try:
            np.copyto(outs[0], np.linalg.eigvalsh(ins[0], UPLO=attrs["UPLO"]))
        except np.linalg.LinAlgError as e:
            raise _not_converged("linalg.eigh", ins[0], e, "") from None


def _eig_finite(a: np.ndarray, op: str) -> None:
    if not np.isfinite(a).all():     # (LAPACK's geev would fail on them; torch checks first)
        raise RuntimeError(f"torch.{op}: input tensor should not contain infs or NaNs.")


@kernel("linalg_eig")
@_serial
def eig_kernel(backend, outs, ins, attrs):
    """LAPACK's geev (numpy's): eigenvalues in its order, unit-norm eigenvectors with the largest component
    real (real input: dgeev's pairs of conjugate eigenvectors), as torch returns them."""
    a = ins[0]
    if a.size == 0:
        return
    _eig_finite(a, "linalg.eig")
    try:
        w, v = np.linalg.eig(a)
    except np.linalg.LinAlgError as e:
        raise _not_converged("linalg.eig", a, e, "") from None
    np.copyto(outs[0], w, casting="unsafe")
    np.copyto(outs[1], v, casting="unsafe")


@kernel("linalg_eigvals")
@_serial
def eigvals_kernel(backend, outs, ins, attrs):
    a = ins[0]
    if a.size == 0:
        return
    _eig_finite(a, "linalg.eigvals")
    try:
        w = np.linalg.eigvals(a)
    except np.linalg.LinAlgError as e:
        raise _not_converged("linalg.eigvals", a, e, "") from None
    np.copyto(outs[0], w, casting="unsafe")


@kernel("linalg_lstsq")
@_serial
def lstsq_kernel(backend, outs, ins, attrs):
    a, b = ins
    sol, res, rank, sv = outs
    m, n = a.shape[-2:]
    k = b.shape[-1]
    driver = attrs["driver"]
    rcond = attrs["rcond"]
    bshape = sol.shape[:-2]
    fa = _flat(np.broadcast_to(a, bshape + (m, n)))
    fb = _flat(np.broadcast_to(b, bshape + (m, k)))
    fsol = _flat(sol)
    rk = np.zeros(fa.shape[0], np.int64)
    fsv = np.zeros((fa.shape[0], min(m, n)), sv.dtype)
    if rcond is None:
        rcond = np.finfo(a.dtype).eps * max(m, n)
    for i in range(fa.shape[0]):
        if m == 0 or n == 0:
            fsol[i] = 0
            continue
        if driver == "gels":
            # full rank assumed (LAPACK's QR solve): no rank, no singular values
            q, r = np.linalg.qr(fa[i]) if m >= n else (None, None)
            if m >= n:
                zero = np.flatnonzero(np.diagonal(r) == 0)
                if zero.size:
                    raise LinAlgError(f"torch.linalg.lstsq: {_batch_prefix(i, fa.shape[0])}The least squares solution "
                                      f"could not be computed because the input matrix does not have full rank (error "
                                      f"code: {int(zero[0]) + 1}).")
                with np.errstate(all="ignore"):
                    fsol[i] = trsm(r, q.conj().T @ fb[i], lower=False, unit=False)
                continue
        try:
            x, _, rnk, s = np.linalg.lstsq(fa[i], fb[i], rcond=rcond)
        except np.linalg.LinAlgError as e:
            raise _not_converged("torch.linalg.lstsq", fa[i:i + 1], e, "") from None
        fsol[i] = x
        rk[i] = rnk
        fsv[i] = s
    if res.size:
        r = np.matmul(np.broadcast_to(a, bshape + (m, n)), sol) - np.broadcast_to(b, bshape + (m, k))
        np.copyto(res, np.sum((r * r.conj()).real if np.iscomplexobj(r) else r * r, axis=-2), casting="unsafe")
    if rank.size:
        np.copyto(rank, rk.reshape(rank.shape))
    if sv.size:
        np.copyto(sv, fsv.reshape(sv.shape))


@kernel("linalg_lu_factor_ex")
@_serial
def lu_factor_kernel(backend, outs, ins, attrs):
    lu, piv, info = lu_factor(ins[0])
    np.copyto(outs[0], lu)
    np.copyto(outs[1], piv)
    np.copyto(outs[2], info)
    if attrs["check_errors"]:
        _raise_lu("torch.linalg.lu_factor", info, lambda j: (
            f"U[{j},{j}] is zero and using it on lu_solve would result in a division by zero. If you still want to "
            f"perform the factorization, consider calling linalg.lu(A, pivot) or linalg.lu_factor_ex(A, pivot)"))


@kernel("lu_unpack")
def lu_unpack_kernel(backend, outs, ins, attrs):
    lu, piv = ins
    p, l, u = outs
    m, n = lu.shape[-2:]
    k = min(m, n)
    if attrs["unpack_data"]:
        np.copyto(l, np.tril(lu[..., :, :k], -1))
        idx = np.arange(k)
        l[..., idx, idx] = 1
        np.copyto(u, np.triu(lu[..., :k, :]))
    if attrs["unpack_pivots"]:
        bshape = p.shape[:-2]
        pv = np.broadcast_to(piv, bshape + piv.shape[-1:]).reshape(math.prod(bshape), piv.shape[-1])
        perm = _perm(pv, m)
        fp = _flat(p)
        fp.fill(0)
        fp[np.arange(fp.shape[0])[:, None], perm, np.arange(m)[None, :]] = 1


@kernel("linalg_lu_solve")
@_serial
def lu_solve_kernel(backend, outs, ins, attrs):
    lu, piv, b = ins
    if outs[0].size:
        np.copyto(outs[0], _lu_solve(lu, piv, b, attrs["adjoint"]), casting="unsafe")


@kernel("linalg_solve_triangular")
@_serial
def solve_triangular_kernel(backend, outs, ins, attrs):
    if outs[0].size:
        np.copyto(outs[0], trsm(ins[0], ins[1], lower=not attrs["upper"], unit=attrs["unitriangular"]),
                  casting="unsafe")


# ------------------------------------------------------------------ matrix exponential
# Higham (2005), "The scaling and squaring method for the matrix exponential revisited": the
# degree-13 Pade approximant after scaling by 2^-s so that ||A/2^s||_1 <= theta_13, then s
# squarings.  Computed in float64 / complex128 (float32/float16/complex64 results are rounded once at the end).
_THETA13 = 5.371920351148152
_B13 = (64764752532480000., 32382376266240000., 7771770303897600., 1187353796428800., 129060195264000.,
        10559470521600., 670442572800., 33522128640., 1323241920., 40840800., 960960., 16380., 182., 1.)


def matrix_exp(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, np.complex128 if np.iscomplexobj(a) else np.float64)
    n = a.shape[-1]
    if a.size == 0:
        return a.copy()
    norm = np.abs(a).sum(axis=-2).max(axis=-1)
    with np.errstate(divide="ignore"):
        s = np.where(norm > _THETA13, np.ceil(np.log2(np.where(norm > 0, norm, 1) / _THETA13)), 0)
    s = np.where(np.isfinite(s), s, 0).astype(np.int64)
    a = a / np.exp2(s)[..., None, None]
    b = _B13
    ident = np.eye(n)
    a2 = a @ a
    a4 = a2 @ a2
    a6 = a2 @ a4
    u = a @ (a6 @ (b[13] * a6 + b[11] * a4 + b[9] * a2) + b[7] * a6 + b[5] * a4 + b[3] * a2 + b[1] * ident)
    v = a6 @ (b[12] * a6 + b[10] * a4 + b[8] * a2) + b[6] * a6 + b[4] * a4 + b[2] * a2 + b[0] * ident
    with np.errstate(all="ignore"):
        try:
            r = np.linalg.solve(v - u, v + u)
        except np.linalg.LinAlgError:   # only for non-finite input: nan, like torch
            r = np.full(a.shape, np.nan)
        for i in range(int(s.max()) if s.size else 0):
            sq = r @ r
            r = np.where((s > i)[..., None, None], sq, r)
    return r


@kernel("linalg_matrix_exp")
def matrix_exp_kernel(backend, outs, ins, attrs):
    np.copyto(outs[0], matrix_exp(ins[0]), casting="unsafe")


# ------------------------------------------------------------------ QR in LAPACK's compact form (geqrf)
@kernel("geqrf")
def geqrf_kernel(backend, outs, ins, attrs):
    a = ins[0]
    if a.size == 0:
        return
    h, tau = np.linalg.qr(a, mode="raw")        # LAPACK's geqrf: h is the transposed (Fortran) factor
    np.copyto(outs[0], np.swapaxes(h, -1, -2), casting="unsafe")
    np.copyto(outs[1], tau, casting="unsafe")


# ------------------------------------------------------------------ LDL^T with Bunch-Kaufman pivoting (sytf2 / sytrs)
@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _sy_update_1x1(A, k, n):
    """dsyr / zsyr (uplo='L') after a 1x1 pivot at k: the trailing lower triangle minus
    ``A[j:, k] * A[j, k] / A[k, k]``, then column k scaled to L's.  Shared by :func:`_sytf2_lower` (real) and
    the complex symmetric form of :func:`_hetf2_lower_c` (the Hermitian one conjugates: zher)."""
    d11 = 1.0 / A[k, k]
    for j in range(k + 1, n):
        xj = A[j, k]
        if xj != 0.0:
            t = -d11 * xj
            for i in range(j, n):
                A[i, j] += A[i, k] * t
    for i in range(k + 1, n):
        A[i, k] *= d11


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _sy_update_2x2(A, k, n):
    """dsytf2's / zsytf2's update after a 2x2 pivot block at (k, k+1): the trailing lower triangle minus
    ``[A[:, k] A[:, k+1]] D^-1 [...]^T`` and columns k, k+1 replaced by L's.  Shared like
    :func:`_sy_update_1x1`."""
    d21 = A[k + 1, k]
    d11 = A[k + 1, k + 1] / d21
    d22 = A[k, k] / d21
    t = 1.0 / (d11 * d22 - 1.0)
    d21 = t / d21
    for j in range(k + 2, n):
        wk = d21 * (d11 * A[j, k] - A[j, k + 1])
        wkp1 = d21 * (d22 * A[j, k + 1] - A[j, k])
        for i in range(j, n):
            A[i, j] -= A[i, k] * wk + A[i, k + 1] * wkp1
        A[j, k] = wk
        A[j, k + 1] = wkp1


@njit(cache=True, nogil=True, error_model="numpy")
def _sytf2_lower(a, ipiv, info):
    """LAPACK's dsytf2 (uplo='L') on every matrix of a (batch, n, n), in place: a's lower triangle becomes L and
    the 1x1 / 2x2 blocks of D; ipiv 1-based (a 2x2 block: both entries -p); info the first zero pivot (1-based).
    Only the lower triangle is read."""
    nb, n, _ = a.shape
    alpha = (1.0 + math.sqrt(17.0)) / 8.0
    for b in range(nb):
        A = a[b]
        k = 0
        while k < n:
            kstep = 1
            absakk = abs(A[k, k])
            imax = k
            colmax = 0.0
            if k < n - 1:
                imax = k + 1
                colmax = abs(A[k + 1, k])
                for i in range(k + 2, n):
                    if abs(A[i, k]) > colmax:
                        colmax = abs(A[i, k])
                        imax = i
            kp = k
            if max(absakk, colmax) == 0.0 or math.isnan(absakk):
                if info[b] == 0:
                    info[b] = k + 1
                kp = k
            else:
                if absakk >= alpha * colmax:
                    kp = k
                else:
                    rowmax = 0.0
                    for j in range(k, imax):
                        rowmax = max(rowmax, abs(A[imax, j]))
                    for i in range(imax + 1, n):
                        rowmax = max(rowmax, abs(A[i, imax]))
                    if absakk >= alpha * colmax * (colmax / rowmax):
                        kp = k
                    elif abs(A[imax, imax]) >= alpha * rowmax:
                        kp = imax
                    else:
                        kp = imax
                        kstep = 2
                kk = k + kstep - 1
                if kp != kk:
                    for i in range(kp + 1, n):
                        t = A[i, kk]
                        A[i, kk] = A[i, kp]
                        A[i, kp] = t
                    for j in range(kk + 1, kp):
                        t = A[j, kk]
                        A[j, kk] = A[kp, j]
                        A[kp, j] = t
                    t = A[kk, kk]
                    A[kk, kk] = A[kp, kp]
                    A[kp, kp] = t
                    if kstep == 2:
                        t = A[k + 1, k]
                        A[k + 1, k] = A[kp, k]
                        A[kp, k] = t
                if kstep == 1:
                    if k < n - 1:
                        _sy_update_1x1(A, k, n)
                else:
                    if k < n - 2:
                        _sy_update_2x2(A, k, n)
            if kstep == 1:
                ipiv[b, k] = kp + 1
            else:
                ipiv[b, k] = -(kp + 1)
                ipiv[b, k + 1] = -(kp + 1)
            k += kstep


@njit(cache=True, nogil=True, error_model="numpy")
def _sytrs_lower(a, ipiv, bm):
    """LAPACK's dsytrs (uplo='L'): solve A X = B in place of bm (batch, n, nrhs) from sytf2's (a, ipiv)."""
    nb, n, _ = a.shape
    nr = bm.shape[2]
    for b in range(nb):
        A = a[b]
        B = bm[b]
        k = 0
        while k < n:                                     # L D Y = B
            if ipiv[b, k] > 0:
                kp = ipiv[b, k] - 1
                if kp != k:
                    for c in range(nr):
                        t = B[k, c]
                        B[k, c] = B[kp, c]
                        B[kp, c] = t
                for i in range(k + 1, n):
                    for c in range(nr):
                        B[i, c] -= A[i, k] * B[k, c]
                for c in range(nr):
                    B[k, c] /= A[k, k]
                k += 1
            else:
                kp = -ipiv[b, k] - 1
                if kp != k + 1:
                    for c in range(nr):
                        t = B[k + 1, c]
                        B[k + 1, c] = B[kp, c]
                        B[kp, c] = t
                for i in range(k + 2, n):
                    for c in range(nr):
                        B[i, c] -= A[i, k] * B[k, c] + A[i, k + 1] * B[k + 1, c]
                akm1k = A[k + 1, k]
                akm1 = A[k, k] / akm1k
                ak = A[k + 1, k + 1] / akm1k
                denom = akm1 * ak - 1.0
                for c in range(nr):
                    bkm1 = B[k, c] / akm1k
                    bk = B[k + 1, c] / akm1k
                    B[k, c] = (ak * bkm1 - bk) / denom
                    B[k + 1, c] = (akm1 * bk - bkm1) / denom
                k += 2
        k = n - 1
        while k >= 0:                                    # L^T X = Y
            if ipiv[b, k] > 0:
                for c in range(nr):
                    s = 0.0
                    for i in range(k + 1, n):
                        s += A[i, k] * B[i, c]
                    B[k, c] -= s
                kp = ipiv[b, k] - 1
                if kp != k:
                    for c in range(nr):
                        t = B[k, c]
                        B[k, c] = B[kp, c]
                        B[kp, c] = t
                k -= 1
            else:
                for c in range(nr):
                    s0 = 0.0
                    s1 = 0.0
                    for i in range(k + 1, n):
                        s0 += A[i, k] * B[i, c]
                        s1 += A[i, k - 1] * B[i, c]
                    B[k, c] -= s0
                    B[k - 1, c] -= s1
                kp = -ipiv[b, k] - 1
                if kp != k:
                    for c in range(nr):
                        t = B[k, c]
                        B[k, c] = B[kp, c]
                        B[kp, c] = t
                k -= 2


@njit(cache=True, nogil=True)
def _cabs1(z):
    return abs(z.real) + abs(z.imag)


@njit(cache=True, nogil=True, error_model="numpy")
def _hetf2_lower_c(a, ipiv, info, herm):
    """LAPACK's zsytf2 (``herm`` False: complex symmetric, A = L D L^T) or zhetf2 (``herm`` True: Hermitian,
    A = L D L^H, D's diagonal real) with uplo='L', as :func:`_sytf2_lower` for complex (batch, n, n) ``a``:
    pivot magnitudes by cabs1 = |re| + |im| (LAPACK's izamax), the Hermitian form's interchanges and updates
    conjugated as zhetf2's (zher rank-1 update, 2x2 block with conj(d21))."""
    nb, n, _ = a.shape
    alpha = (1.0 + math.sqrt(17.0)) / 8.0
    for b in range(nb):
        A = a[b]
        k = 0
        while k < n:
            kstep = 1
            absakk = abs(A[k, k].real) if herm else _cabs1(A[k, k])
            imax = k
            colmax = 0.0
            if k < n - 1:
                imax = k + 1
                colmax = _cabs1(A[k + 1, k])
                for i in range(k + 2, n):
                    v = _cabs1(A[i, k])
                    if v > colmax:
                        colmax = v
                        imax = i
            kp = k
            if max(absakk, colmax) == 0.0 or math.isnan(absakk):
                if info[b] == 0:
                    info[b] = k + 1
                kp = k
                if herm:
                    A[k, k] = A[k, k].real
            else:
                if absakk >= alpha * colmax:
                    kp = k
                else:
                    rowmax = 0.0
                    for j in range(k, imax):
                        rowmax = max(rowmax, _cabs1(A[imax, j]))
                    for i in range(imax + 1, n):
                        rowmax = max(rowmax, _cabs1(A[i, imax]))
                    if absakk >= alpha * colmax * (colmax / rowmax):
                        kp = k
                    elif (abs(A[imax, imax].real) if herm else _cabs1(A[imax, imax])) >= alpha * rowmax:
                        kp = imax
                    else:
                        kp = imax
                        kstep = 2
                kk = k + kstep - 1
                if kp != kk:
                    for i in range(kp + 1, n):
                        t = A[i, kk]
                        A[i, kk] = A[i, kp]
                        A[i, kp] = t
                    if herm:
                        for j in range(kk + 1, kp):
                            t = A[j, kk].conjugate()
                            A[j, kk] = A[kp, j].conjugate()
                            A[kp, j] = t
                        A[kp, kk] = A[kp, kk].conjugate()
                        r1 = A[kk, kk].real
                        A[kk, kk] = A[kp, kp].real
                        A[kp, kp] = r1
                        if kstep == 2:
                            A[k, k] = A[k, k].real
                    else:
                        for j in range(kk + 1, kp):
                            t = A[j, kk]
                            A[j, kk] = A[kp, j]
                            A[kp, j] = t
                        t = A[kk, kk]
                        A[kk, kk] = A[kp, kp]
                        A[kp, kp] = t
                    if kstep == 2:
                        t = A[k + 1, k]
                        A[k + 1, k] = A[kp, k]
                        A[kp, k] = t
                elif herm:
                    A[k, k] = A[k, k].real
                    if kstep == 2:
                        A[k + 1, k + 1] = A[k + 1, k + 1].real
                if kstep == 1:
                    if k < n - 1:
                        if herm:
                            r1 = 1.0 / A[k, k].real
                            for j in range(k + 1, n):        # zher: the trailing lower triangle
                                xj = A[j, k]
                                if xj != 0.0:
                                    t = -r1 * xj.conjugate()
                                    A[j, j] = A[j, j].real + (xj * t).real
                                    for i in range(j + 1, n):
                                        A[i, j] += A[i, k] * t
                                else:
                                    A[j, j] = A[j, j].real
                            for i in range(k + 1, n):
                                A[i, k] *= r1
                        else:
                            _sy_update_1x1(A, k, n)         # zsyr
                else:
                    if k < n - 2:
                        if herm:
                            d = abs(A[k + 1, k])
                            hd11 = A[k + 1, k + 1].real / d
                            hd22 = A[k, k].real / d
                            tt = 1.0 / (hd11 * hd22 - 1.0)
                            hd21 = A[k + 1, k] / d
                            d = tt / d
                            for j in range(k + 2, n):
                                wk = d * (hd11 * A[j, k] - hd21 * A[j, k + 1])
                                wkp1 = d * (hd22 * A[j, k + 1] - hd21.conjugate() * A[j, k])
                                for i in range(j, n):
                                    A[i, j] -= A[i, k] * wk.conjugate() + A[i, k + 1] * wkp1.conjugate()
                                A[j, k] = wk
                                A[j, k + 1] = wkp1
                                A[j, j] = A[j, j].real
                        else:
                            _sy_update_2x2(A, k, n)
            if kstep == 1:
                ipiv[b, k] = kp + 1
            else:
                ipiv[b, k] = -(kp + 1)
                ipiv[b, k + 1] = -(kp + 1)
            k += kstep


@njit(cache=True, nogil=True, error_model="numpy")
def _hetrs_lower_c(a, ipiv, bm, herm):
    """LAPACK's zsytrs (``herm`` False) / zhetrs (``herm`` True), uplo='L': solve A X = B in place of complex bm
    (batch, n, nrhs) from :func:`_hetf2_lower_c`'s (a, ipiv)."""
    nb, n, _ = a.shape
    nr = bm.shape[2]
    for b in range(nb):
        A = a[b]
        B = bm[b]
        k = 0
        while k < n:                                     # L D Y = B
            if ipiv[b, k] > 0:
                kp = ipiv[b, k] - 1
                if kp != k:
                    for c in range(nr):
                        t = B[k, c]
                        B[k, c] = B[kp, c]
                        B[kp, c] = t
                for i in range(k + 1, n):
                    for c in range(nr):
                        B[i, c] -= A[i, k] * B[k, c]
                if herm:
                    s = 1.0 / A[k, k].real
                    for c in range(nr):
                        B[k, c] *= s
                else:
                    for c in range(nr):
                        B[k, c] /= A[k, k]
                k += 1
            else:
                kp = -ipiv[b, k] - 1
                if kp != k + 1:
                    for c in range(nr):
                        t = B[k + 1, c]
                        B[k + 1, c] = B[kp, c]
                        B[kp, c] = t
                for i in range(k + 2, n):
                    for c in range(nr):
                        B[i, c] -= A[i, k] * B[k, c] + A[i, k + 1] * B[k + 1, c]
                akm1k = A[k + 1, k]
                ck = akm1k.conjugate() if herm else akm1k
                akm1 = A[k, k] / ck
                ak = A[k + 1, k + 1] / akm1k
                denom = akm1 * ak - 1.0
                for c in range(nr):
                    bkm1 = B[k, c] / ck
                    bk = B[k + 1, c] / akm1k
                    B[k, c] = (ak * bkm1 - bk) / denom
                    B[k + 1, c] = (akm1 * bk - bkm1) / denom
                k += 2
        k = n - 1
        while k >= 0:                                    # L^T X = Y (L^H for the Hermitian form)
            step = 1 if ipiv[b, k] > 0 else 2
            for q in range(step):
                col = k - q
                for c in range(nr):
                    s0 = B[k, c] * 0.0
                    for i in range(k + 1, n):
                        s0 += (A[i, col].conjugate() if herm else A[i, col]) * B[i, c]
                    B[col, c] -= s0
            kp = (ipiv[b, k] if step == 1 else -ipiv[b, k]) - 1
            if kp != k:
                for c in range(nr):
                    t = B[k, c]
                    B[k, c] = B[kp, c]
                    B[kp, c] = t
            k -= step


@kernel("linalg_ldl_factor_ex")
def ldl_factor_kernel(backend, outs, ins, attrs):
    a = ins[0]
    ld, piv, info = outs
    n = a.shape[-1]
    # (complex64 is factored in complex128, rounded once: one compiled complex kernel)
    work = np.array(_flat(a), dtype=np.complex128 if a.dtype.kind == "c" else a.dtype, copy=True, order="C")
    p = np.zeros((work.shape[0], n), np.int32)
    inf = np.zeros(work.shape[0], np.int32)
    if work.size:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            if work.dtype.kind == "c":
                _hetf2_lower_c(work, p, inf, bool(attrs.get("hermitian", False)))
            else:
                _sytf2_lower(work, p, inf)
    np.copyto(ld, np.tril(work).reshape(ld.shape))       # (torch zeroes the unused upper triangle)
    np.copyto(piv, p.reshape(piv.shape))
    np.copyto(info, inf.reshape(info.shape))
    if attrs["check_errors"] and inf.size and inf.max() > 0:
        b = int(np.flatnonzero(inf.reshape(-1))[0])
        raise LinAlgError(f"torch.linalg.ldl_factor: {_batch_prefix(b, inf.size)}The factorization could not be "
                          f"completed because the input is singular (D[{int(inf.reshape(-1)[b]) - 1}] is exactly "
                          f"zero).")


@kernel("linalg_ldl_solve")
def ldl_solve_kernel(backend, outs, ins, attrs):
    ld, piv, b = ins
    out = outs[0]
    if out.size == 0:
        return
    bshape = out.shape[:-2]
    n = ld.shape[-1]
    a = np.ascontiguousarray(np.broadcast_to(ld, bshape + ld.shape[-2:])).reshape(-1, n, n)
    p = np.ascontiguousarray(np.broadcast_to(piv, bshape + piv.shape[-1:])).reshape(-1, n).astype(np.int64)
    x = np.array(np.broadcast_to(b, out.shape), dtype=np.complex128 if out.dtype.kind == "c" else out.dtype,
                 copy=True, order="C").reshape((-1,) + out.shape[-2:])
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if x.dtype.kind == "c":
            _hetrs_lower_c(a.astype(np.complex128, copy=False), p, x, bool(attrs.get("hermitian", False)))
        else:
            _sytrs_lower(a, p, x)
    np.copyto(out, x.reshape(out.shape))
