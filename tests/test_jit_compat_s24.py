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
