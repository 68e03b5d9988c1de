"""Matrix products (neetorch/ops/linalg.py) against numpy and torch."""
import numpy as np
import pytest

import neetorch as nee

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)


def rnd(*shape, dtype=np.float32):
    if np.dtype(dtype).kind in "iu":
        return RNG.integers(-9, 10, size=shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def N(a):
    return nee.from_numpy(a)


def T(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def close(got, want, dtype=np.float32):
    want = want.numpy() if isinstance(want, torch.Tensor) else np.asarray(want)
    got = got.numpy()
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    if got.dtype.kind in "iu":
        np.testing.assert_array_equal(got, want)
    else:
        rtol, atol = {np.float16: (2e-2, 2e-2), np.float32: (1e-5, 1e-5), np.float64: (1e-12, 1e-12)}[got.dtype.type]
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)


SHAPES = [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)), ((5, 2, 3), (3, 4)), ((5, 2, 3), (3,)),
          ((3,), (5, 3, 4)), ((2, 1, 4, 3), (5, 3, 2)), ((4, 3), (2, 3, 5)), ((0, 2, 3), (3, 4)), ((2, 0), (0, 3)),
          ((1, 5, 3), (4, 3, 2)), ((7, 1), (1, 9)), ((3, 5, 4), (3, 4, 1))]


@pytest.mark.parametrize("sa,sb", SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matmul_shapes(sa, sb, dtype):
    a, b = rnd(*sa, dtype=dtype), rnd(*sb, dtype=dtype)
    close(nee.matmul(N(a), N(b)), np.matmul(a, b).astype(dtype))
    close(N(a) @ N(b), torch.matmul(T(a), T(b)))


def test_matmul_noncontiguous():
    a = rnd(6, 8)
    b = rnd(10, 6)
    # transposed, stepped and negatively strided operands
    for x, y in [(a.T, b.T), (a[::2, ::-1], rnd(8, 4)[::-1]), (a[:, ::2], rnd(4, 3)[::-1]),
                 (a[::-1], rnd(3, 8)[:, ::-1].T)]:
        close(N(x) @ N(y), x @ y)
    # a broadcast (stride-0) batch
    x = rnd(4, 3)
    xe = np.broadcast_to(x, (5, 4, 3))
    y = rnd(5, 6, 3).transpose(0, 2, 1)
    close(N(xe) @ N(y), np.matmul(xe, y))
    yt, wb = y.transpose(0, 2, 1), np.broadcast_to(rnd(3, 2), (5, 3, 2))
    close(N(yt) @ N(wb), np.matmul(yt, wb))
    big = rnd(64, 96)
    close(N(big.T) @ N(big), big.T @ big)
    close(N(big[::-1, ::-1]) @ N(big.T[::-1]), big[::-1, ::-1] @ big.T[::-1])
    # strided / reversed batches with a shared matrix (the folded single-GEMM path and its fallbacks)
    w = rnd(7, 5)
    for s in (rnd(4, 6, 7)[:, ::2], rnd(4, 6, 7)[::-1], rnd(4, 6, 7).transpose(1, 0, 2),
              rnd(4, 7, 6).transpose(0, 2, 1)):
        close(N(s) @ N(w), np.matmul(s, w))
    q = rnd(4, 6, 7)
    close(N(q) @ N(np.broadcast_to(w, (4, 7, 5))), np.matmul(q, w))


def test_matmul_half_and_int():
    a, b = rnd(17, 33, dtype=np.float16), rnd(33, 9, dtype=np.float16)
    close(N(a) @ N(b), torch.matmul(T(a), T(b)))
    x, y = rnd(2, 5, 4, dtype=np.float16), rnd(4, 3, dtype=np.float16)
    close(N(x) @ N(y), torch.matmul(T(x), T(y)))
    for dt in (np.int32, np.int64):
        a, b = rnd(6, 7, dtype=dt), rnd(3, 7, 5, dtype=dt)
        close(N(a) @ N(b), np.matmul(a, b))
        close(nee.mm(N(a), N(b[0])), T(a) @ T(b[0]))
    big = (np.arange(4, dtype=np.int64) + 2 ** 40).reshape(2, 2)
    close(N(big) @ N(big), big @ big)   # exact, no float detour


def test_mm_bmm_mv_dot():
    a, b, v = rnd(4, 5, dtype=np.float64), rnd(5, 3, dtype=np.float64), rnd(5, dtype=np.float64)
    close(nee.mm(N(a), N(b)), a @ b)
    close(N(a).mm(N(b)), a @ b)
    close(N(a).matmul(N(b)), a @ b)
    close(nee.mv(N(a), N(v)), a @ v)
    close(nee.dot(N(v), N(v[::-1])), np.dot(v, v[::-1]))
    close(nee.vdot(N(v), N(v)), np.vdot(v, v))
    q = rnd(2, 5, dtype=np.float64)
    close(nee.inner(N(a), N(q)), np.inner(a, q))
    x, y = rnd(3, 4, 5), rnd(3, 5, 2)
    close(nee.bmm(N(x), N(y)), torch.bmm(T(x), T(y)))
    close(nee.outer(N(v), N(v[:3])), np.outer(v, v[:3]))
    close(nee.ger(N(v), N(v[:3])), np.outer(v, v[:3]))
    close(nee.bmm(N(rnd(0, 2, 3)), N(rnd(0, 3, 4))), np.zeros((0, 2, 4), np.float32))
    close(nee.mm(N(rnd(3, 0)), N(rnd(0, 4))), np.zeros((3, 4), np.float32))


def test_scaled_products():
    a, m1, m2 = rnd(3), rnd(2, 4), rnd(4, 3)
    close(nee.addmm(N(a), N(m1), N(m2)), torch.addmm(T(a), T(m1), T(m2)))
    c = rnd(2, 3)
    close(nee.addmm(N(c), N(m1), N(m2), beta=0.5, alpha=-2), torch.addmm(T(c), T(m1), T(m2), beta=0.5, alpha=-2))
    nan = np.full((2, 3), np.nan, np.float32)
    close(nee.addmm(N(nan), N(m1), N(m2), beta=0), torch.addmm(T(nan), T(m1), T(m2), beta=0))
    v, one = rnd(4), np.ones(2, np.float32)
    close(nee.addmv(N(one), N(m1), N(v), alpha=3), torch.addmv(T(one), T(m1), T(v), alpha=3))
    b1, b2, inp = rnd(3, 2, 4), rnd(3, 4, 5), rnd(2, 5)
    close(nee.baddbmm(N(inp), N(b1), N(b2), beta=2, alpha=0.5), torch.baddbmm(T(inp), T(b1), T(b2), beta=2, alpha=0.5))
    close(nee.addbmm(N(inp), N(b1), N(b2)), torch.addbmm(T(inp), T(b1), T(b2)))
    v1, v2 = rnd(2), rnd(3)
    close(nee.addr(N(c), N(v1), N(v2), beta=2), torch.addr(T(c), T(v1), T(v2), beta=2))


def test_linear():
    x, w, b = rnd(2, 3, 7), rnd(5, 7), rnd(5)
    close(nee.linear(N(x), N(w), N(b)), torch.nn.functional.linear(T(x), T(w), T(b)))
    close(nee.linear(N(x), N(w)), torch.nn.functional.linear(T(x), T(w)))
    close(nee.linear(N(x[0, 0]), N(w), N(b)), torch.nn.functional.linear(T(x[0, 0]), T(w), T(b)))
    xt = rnd(7, 4).T
    close(nee.linear(N(xt), N(w), N(b)), xt @ w.T + b)
    close(nee.linear(N(rnd(0, 7)), N(w), N(b)), np.zeros((0, 5), np.float32))


EINSUM = [("ij,jk->ik", [(2, 3), (3, 4)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ii->i", [(3, 3)]),
          ("ii", [(4, 4)]), ("i,j->ij", [(3,), (2,)]), ("ij->ji", [(2, 5)]), ("...ij,...jk", [(2, 2, 3), (3, 4)]),
          ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]), ("i,i", [(5,), (5,)]), ("ij,ij->", [(3, 2), (3, 2)]),
          ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]), ("bi,bi->b", [(3, 1), (3, 4)])]


@pytest.mark.parametrize("eq,shapes", EINSUM)
def test_einsum(eq, shapes):
    ops = [rnd(*s, dtype=np.float64) for s in shapes]
    close(nee.einsum(eq, *[N(o) for o in ops]), torch.einsum(eq, *[T(o) for o in ops]))
    close(nee.einsum(eq, [N(o) for o in ops]), torch.einsum(eq, [T(o) for o in ops]))


def test_tensordot_kron_chain():
    a, b = rnd(2, 3, 4), rnd(3, 4, 5)
    close(nee.tensordot(N(a), N(b)), torch.tensordot(T(a), T(b)))
    c = rnd(3, 2, 5)
    close(nee.tensordot(N(a), N(c), dims=([1, 0], [0, 1])), torch.tensordot(T(a), T(c), dims=([1, 0], [0, 1])))
    close(nee.tensordot(N(a), N(c), dims=0), torch.tensordot(T(a), T(c), dims=0))
    x, y = rnd(2, 3), rnd(4, 1)
    close(nee.kron(N(x), N(y)), torch.kron(T(x), T(y)))
    m = [rnd(2, 3), rnd(3, 4), rnd(4, 2)]
    close(nee.chain_matmul(*[N(q) for q in m]), m[0] @ m[1] @ m[2])


def _err(fn, msg, exc=RuntimeError):
    with pytest.raises(exc) as e:
        fn()
    assert msg in str(e.value), str(e.value)


def test_errors_match_torch():
    f32, f64 = N(rnd(2, 3)), N(rnd(3, 5, dtype=np.float64))
    _err(lambda: nee.mm(N(rnd(2, 3)), N(rnd(4, 5))), "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)")
    _err(lambda: nee.matmul(N(rnd(2, 3)), N(rnd(4, 5))), "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)")
    _err(lambda: N(rnd(6, 2, 3)) @ N(rnd(4, 5)), "mat1 and mat2 shapes cannot be multiplied (12x3 and 4x5)")
    _err(lambda: N(rnd(3)) @ N(rnd(4, 5)), "mat1 and mat2 shapes cannot be multiplied (1x3 and 4x5)")
    _err(lambda: N(rnd(3)) @ N(rnd(4)), "inconsistent tensor size, expected tensor [3] and src [4] to have the same "
                                        "number of elements, but got 3 and 4 elements respectively")
    _err(lambda: N(rnd(2, 3)) @ N(rnd(4)), "size mismatch, got input (2), mat (2x3), vec (4)")
    _err(lambda: N(rnd(6, 2, 3)) @ N(rnd(6, 4, 5)),
         "Expected size for first two dimensions of batch2 tensor to be: [6, 3] but got: [6, 4].")
    _err(lambda: N(rnd(6, 2, 3)) @ N(rnd(5, 3, 5)),
         "The size of tensor a (6) must match the size of tensor b (5) at non-singleton dimension 0")
    _err(lambda: nee.bmm(N(rnd(6, 2, 3)), N(rnd(5, 3, 5))),
         "Expected size for first two dimensions of batch2 tensor to be: [6, 3] but got: [5, 3].")
    _err(lambda: nee.bmm(N(rnd(2, 3)), N(rnd(3, 5))), "batch1 must be a 3D tensor")
    _err(lambda: nee.mm(N(rnd(2, 3, 1)), N(rnd(3, 5))), "self must be a matrix")
    _err(lambda: nee.mm(f32, f64), "expected m1 and m2 to have the same dtype, but got: float != double")
    _err(lambda: f32 @ f64, "expected m1 and m2 to have the same dtype, but got: float != double")
    _err(lambda: N(rnd(3)) @ N(rnd(3, dtype=np.float64)),
         "dot : expected both vectors to have same dtype, but found Float and Double")
    _err(lambda: nee.dot(N(rnd(3, 1)), N(rnd(3))), "1D tensors expected, but got 2D and 1D tensors")
    _err(lambda: nee.matmul(nee.tensor(1.0), N(rnd(3))),
         "both arguments to matmul need to be at least 1D, but they are 0D and 1D")
    _err(lambda: nee.linear(N(rnd(2, 3)), N(rnd(4, 5))), "mat1 and mat2 shapes cannot be multiplied (2x3 and 5x4)")
    _err(lambda: nee.einsum("ij,jk->ik", N(rnd(2, 3)), N(rnd(4, 5))),
         "einsum(): subscript j has size 4 for operand 1 which does not broadcast with previously seen size 3")
