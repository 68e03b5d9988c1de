"""Core tensor semantics against torch (session 25's differential sweep of promotion, in-place ops, views, indexing
and reductions): a Python bool inside an index, masked_fill's result layout, clamp with one tensor bound and one
number bound, negative-order norms over an empty dim."""
import numpy as np
import pytest

import neetorch as nee

torch = pytest.importorskip("torch")

A = np.arange(24, dtype=np.float32).reshape(2, 3, 4)


def _pair(a=A):
    return torch.tensor(a.copy()), nee.tensor(a.copy())


def _idx(lib, spec):
    out = []
    for s in spec:
        if isinstance(s, tuple) and s and s[0] == "mask":
            out.append(lib.tensor(np.array(s[1])))
        else:
            out.append(s)
    return tuple(out)


# torch records a Python bool as an index tensor (boolToIndexingTensor): an advanced index that broadcasts with
# the other advanced indices (numpy's rule too), and x[True] is a copy
BOOL_INDICES = [
    ([1], True), (True, [1]), (True, [0, 1]), (("mask", [True, False]), True), (True, 0, ("mask", [1, 0, 1, 1])),
    (True, True), (True, False), (False, [1]), (Ellipsis, True), ([0, 1], True, slice(None), [2, 3]),
    (None, slice(None), False, True), (True,), (1, True),
]


@pytest.mark.parametrize("spec", BOOL_INDICES, ids=[str(i) for i in range(len(BOOL_INDICES))])
def test_python_bool_index_is_advanced(spec):
    t, e = _pair()
    tr, er = t[_idx(torch, spec)], e[_idx(nee, spec)]
    assert tuple(er.shape) == tuple(tr.shape)
    np.testing.assert_array_equal(er.numpy(), tr.numpy())


def test_lone_true_index_is_a_copy():
    t, e = _pair()
    tr, er = t[True], e[True]
    assert tuple(er.shape) == tuple(tr.shape) == (1, 2, 3, 4)
    assert tr.data_ptr() != t.data_ptr()
    er.fill_(-1.0)
    np.testing.assert_array_equal(e.numpy(), A)


@pytest.mark.parametrize("spec, value", [
    (([1], True), -np.ones((1, 3, 4), np.float32)),
    ((True, [0, 1]), np.float32(-3)),
    ((True,), -np.ones((2, 3, 4), np.float32)),
    ((0, True), -np.ones((1, 3, 4), np.float32)),
])
def test_python_bool_index_setitem(spec, value):
    t, e = _pair()
    tv = torch.tensor(value) if isinstance(value, np.ndarray) else float(value)
    ev = nee.tensor(value) if isinstance(value, np.ndarray) else float(value)
    t[_idx(torch, spec)] = tv
    e[_idx(nee, spec)] = ev
    np.testing.assert_array_equal(e.numpy(), t.numpy())


def test_lone_true_setitem_casts_like_a_view_copy():
    # a lone True is torch's copy into an unsqueezed view: no index_put dtype check
    t, e = _pair()
    t[True] = torch.tensor(-3.0, dtype=torch.float64)
    e[True] = nee.tensor(-3.0, dtype=nee.float64)
    np.testing.assert_array_equal(e.numpy(), t.numpy())


@pytest.mark.parametrize("perm", [(2, 0, 1), (1, 2, 0), (0, 2, 1)])
def test_masked_fill_result_is_contiguous(perm):
    # torch: masked_fill = a contiguous clone, then masked_fill_ (unlike TensorIterator ops, which keep the layout)
    t, e = _pair()
    t, e = t.permute(*perm), e.permute(*perm)
    tr, er = t.masked_fill(t > 5, 0.0), e.masked_fill(e > 5, 0.0)
    assert er.stride() == tr.stride()
    assert er.is_contiguous() and tr.is_contiguous()
    np.testing.assert_array_equal(er.view(-1).numpy(), tr.view(-1).numpy())


@pytest.mark.parametrize("xdt, lo, hi", [
    ("int32", True, ("t0", "int64")),       # a 0-d bound beside a number promotes as a number
    ("int8", -2, ("t0", "int64")),
    ("bool", ("t0", "float16"), 1.5),
    ("bool", ("t0", "float64"), 1),
    ("float16", ("t0", "float64"), 2.5),
    ("uint8", ("t0", "int32"), 7),
    ("float32", 1, ("t0", "int64")),
])
@pytest.mark.parametrize("zero_d", [False, True])
def test_clamp_mixed_bounds_take_the_scalar_overload(xdt, lo, hi, zero_d):
    def conv(lib, b):
        if isinstance(b, tuple):
            return lib.tensor(3, dtype=getattr(lib, b[1]))
        return b
    x = np.array(5 if zero_d else [0, 1, 2, 5, 9, 3], dtype=np.float32)
    tx = torch.tensor(x).to(getattr(torch, xdt))
    ex = nee.tensor(x).to(getattr(nee, xdt))
    tr = torch.clamp(tx, conv(torch, lo), conv(torch, hi))
    er = nee.clamp(ex, conv(nee, lo), conv(nee, hi))
    assert er.dtype.name == str(tr.dtype).split(".")[-1]
    np.testing.assert_array_equal(er.to(nee.float64).numpy(), tr.double().numpy())
    if xdt != "bool":
        tc, ec = tx.clone(), ex.clone()
        tc.clamp_(conv(torch, lo), conv(torch, hi))
        ec.clamp_(conv(nee, lo), conv(nee, hi))
        np.testing.assert_array_equal(ec.to(nee.float64).numpy(), tc.double().numpy())


def test_clamp_refuses_a_tensor_bound_with_dims_beside_a_number():
    x = np.arange(4, dtype=np.float32)
    with pytest.raises(TypeError):
        torch.clamp(torch.tensor(x), torch.tensor(x), 2.0)
    with pytest.raises(TypeError):
        nee.clamp(nee.tensor(x), nee.tensor(x), 2.0)
    with pytest.raises(TypeError):
        nee.tensor(x).clamp(1.0, nee.tensor(x))


@pytest.mark.parametrize("ord", [-1, -2.5, -0.5, float("-inf"), float("inf"), 0, 1, 2, 0.5])
@pytest.mark.parametrize("shape, dim", [((0, 4), None), ((0, 4), 0), ((0, 4), 1), ((3, 0), 1), ((2, 0, 3), (0, 2)),
                                        ((0,), None)])
def test_vector_norm_of_an_empty_dim(ord, shape, dim):
    # torch: the inf and negative-order norms have no identity, so an empty reduced dim is refused
    def go(lib, fn):
        try:
            return fn(lib.zeros(*shape), ord, dim=dim).tolist()
        except RuntimeError:
            return "error"
    for name in ("linalg.vector_norm", "norm"):
        tf = torch.linalg.vector_norm if name != "norm" else torch.norm
        ef = nee.linalg.vector_norm if name != "norm" else nee.norm
        assert go(nee, ef) == go(torch, tf), name
