"""nee.jit against the eager function where a differential sweep found another answer: a constant fill of a traced
value (``zero_`` / ``fill_`` / ``copy_`` of a constant) read afterwards, and outputs that are constants (the same
storage at every call)."""
from __future__ import annotations

import numpy as np
import pytest

import neetorch as nee


def _fill_then_use(x):
    v = x * 2
    v.zero_()
    return v + 1


def _fill_slice_then_use(x):
    y = x * 2
    y[1:].fill_(3.0)
    return y * x


def _copy_const_then_use(x):
    y = x * 2
    y.copy_(nee.tensor([1., 2., 3.]))
    return y + x


def _fill_input_then_use(x):
    x.fill_(2.0)
    return x * 3


@pytest.mark.parametrize("fn", [_fill_then_use, _fill_slice_then_use, _copy_const_then_use, _fill_input_then_use])
def test_constant_fill_of_a_traced_value_then_read(fn):
    j = nee.jit(fn)
    for v in (1.0, 5.0, -2.0, 5.0):
        xa, xb = nee.full((3,), v), nee.full((3,), v)
        want = fn(xa)
        got = j(xb)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        np.testing.assert_array_equal(xb.numpy(), xa.numpy())      # an input written as eagerly


def test_constant_outputs_are_fresh_each_call():
    W = nee.ones(3)

    def f(x):
        return x + 1, nee.zeros(3), W * 2, W[1:]

    j = nee.jit(f)
    x = nee.ones(3)
    for _ in range(3):
        a, z, w2, wv = j(x)
        assert z.tolist() == [0., 0., 0.] and w2.tolist() == [2., 2., 2.] and wv.tolist() == [1., 1.]
        z.add_(5)
        w2.mul_(10)
        wv.fill_(7)                  # (a view of a captured constant: a copy, as eager's ... the next call's own)
    assert W.tolist() == [1., 1., 1.]


def test_returned_constant_is_not_the_graphs_operand():
    W = nee.ones(3)

    def g(x):
        c = W * 2
        return x + c, c

    j = nee.jit(g)
    x = nee.ones(3)
    for _ in range(3):
        y, c = j(x)
        assert y.tolist() == [3., 3., 3.]
        c.zero_()


def test_keyword_tensors_in_another_order_feed_their_own_inputs():
    def f(x, *, a, b):
        return x - a * 10 + b

    j = nee.jit(f)
    x, a, b = nee.zeros(2), nee.ones(2), nee.full((2,), 2.0)
    assert j(x, a=a, b=b).tolist() == [-8.0, -8.0]
    assert j(x, b=b, a=a).tolist() == [-8.0, -8.0]


def test_dict_argument_in_another_order():
    def f(d, x):
        return d["a"] * 10 + d["b"] - x, {"q": d["b"], "p": x * 2}

    j = nee.jit(f)
    a, b, x = nee.ones(2), nee.full((2,), 2.0), nee.full((2,), 0.5)
    for dd in ({"a": a, "b": b}, {"b": b, "a": a}):
        r, e = j(dd, x), f(dd, x)
        assert r[0].tolist() == e[0].tolist() == [11.5, 11.5]
        assert list(r[1]) == ["q", "p"] and r[1]["q"].tolist() == [2.0, 2.0] and r[1]["p"].tolist() == [1.0, 1.0]


_EMPTY_FNS = [lambda x: x[1:].sum(1), lambda x: x[::2][1:].sum(-1), lambda x: x.sum(-1, keepdim=True),
              lambda x: x.cumsum(0), lambda x: x.transpose(0, 1)[:, 1:].mean(0), lambda x: x[1:].softmax(-1),
              lambda x: x[1:].prod(1)]


@pytest.mark.parametrize("k", range(len(_EMPTY_FNS)))
@pytest.mark.parametrize("dyn", [True, {0: -1}, "static"])
def test_empty_results_keep_their_shape_under_dynamic_dims(k, dyn):
    """A reduction of an empty tensor was traced as a constant of the bucket's size ((0, 8) for (0, 6))."""
    f = _EMPTY_FNS[k]
    j = nee.jit(f) if dyn == "static" else nee.jit(f, dynamic=dyn)
    for sh in ((1, 4, 6), (0, 6, 6), (1, 3, 5), (2, 4, 6)):
        x = nee.randn(*sh)
        e, r = f(x), j(x)
        assert tuple(r.shape) == tuple(e.shape), (sh, tuple(r.shape), tuple(e.shape))
        np.testing.assert_allclose(r.numpy(), e.numpy(), rtol=1e-5, atol=1e-6)


def test_dynamic_dim_out_of_range_is_named():
    with pytest.raises(IndexError, match="dynamic dim 2 of argument 0"):
        nee.jit(lambda x: x * 2, dynamic={0: 2})(nee.ones(2, 3))


@pytest.mark.parametrize("op", [lambda x: x.t_(), lambda x: x.unsqueeze_(0), lambda x: x.transpose_(0, 1),
                                lambda x: x.resize_(3, 2), lambda x: x.squeeze_()])
def test_in_place_view_op_on_an_input_is_refused(op):
    """The compiled graph cannot change the caller's tensor's shape: a clear TraceError, the input untouched (it
    returned uninitialised memory on its first call, then stopped changing the caller's tensor)."""
    from neetorch.trace.tracer import TraceError

    def f(x):
        op(x)
        return x + 0

    x = nee.arange(6.).reshape(2, 3)
    with pytest.raises(TraceError, match="shape / strides"):
        nee.jit(f)(x)
    assert tuple(x.shape) == (2, 3) and x.tolist() == [[0., 1., 2.], [3., 4., 5.]]


def test_in_place_view_op_on_an_intermediate_still_traces():
    def f(x):
        y = x + 1
        y.t_()
        y.unsqueeze_(0)
        return y * 2

    j = nee.jit(f)
    b = nee.arange(6.).reshape(2, 3)
    for _ in range(3):
        assert j(b.clone()).tolist() == f(b.clone()).tolist()


def test_in_place_write_through_a_detach_alias():
    """``x.detach()`` shares x's storage: writing through it writes x (and the caller's input), as eagerly."""
    def f(x):
        x.detach().mul_(2)
        return x * 1

    def g(x):
        y = x * 1
        y.detach().fill_(1.5)
        return y + 1

    for fn in (f, g):
        j = nee.jit(fn)
        for v in (1.0, 3.0):
            xe, xj = nee.full((3,), v), nee.full((3,), v)
            assert j(xj).tolist() == fn(xe).tolist()
            assert xj.tolist() == xe.tolist()


def _fill_exp(x):
    x.fill_(1.5)
    x.exp_()
    return x + 1


def _zero_add(x):
    x.zero_()
    x.add_(2)
    x.mul_(3)
    return x * 1


def _fill_mul(x, y):
    x.fill_(2.0)
    x.mul_(y)
    return x + y


@pytest.mark.parametrize("fn,nargs", [(_fill_exp, 1), (_zero_add, 1), (_fill_mul, 2)])
def test_fill_of_an_input_then_in_place_ops(fn, nargs):
    """An input filled with a constant, then written in place again: it raised "the captured tensors it writes keep
    changing" (the input looked captured once it held a constant); now the result and the caller's input are eager's."""
    j = nee.jit(fn)
    for v in (1.0, 4.0, -2.0):
        ae = [nee.full((3,), v + i) for i in range(nargs)]
        aj = [a.clone() for a in ae]
        assert j(*aj).tolist() == fn(*ae).tolist()
        assert [a.tolist() for a in aj] == [a.tolist() for a in ae]
