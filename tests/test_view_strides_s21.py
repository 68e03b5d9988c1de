"""Views' strides are torch's, size-1 dims included (session 21).

``unsqueeze`` / ``view`` / ``reshape`` of a C-contiguous array went through numpy's reshape, whose strides for size-1
dims follow numpy's rule, not torch's (the new dim's stride from the next dim's extent; a view's from the input's
strides, size-1 ones included): ``x.t().unsqueeze(0).stride()`` of an x of shape (1, 2) was (2, 1, 1), torch (2, 1, 2).
Strides are visible (``stride()``, ``is_contiguous``) and set the memory order of what is made from them (``clone``'s
layout and, through it, torch's tie orders: tests/test_median_ties_s20.py).  Random chains of views against torch.
"""
import random

import numpy as np
import pytest

import neetorch as nee

torch = pytest.importorskip("torch")


def _step(t, n, rng):
    d = t.dim()
    r = rng.random()
    if r < 0.15:
        i = rng.randint(-d - 1, d)
        return t.unsqueeze(i), n.unsqueeze(i)
    if r < 0.25 and d > 0:
        i = rng.randint(-d, d - 1)
        return t.squeeze(i), n.squeeze(i)
    if r < 0.35 and d >= 2:
        p = list(range(d))
        rng.shuffle(p)
        return t.permute(*p), n.permute(*p)
    if r < 0.45 and d > 0:
        sh = [s if s != 1 else rng.choice([1, 3]) for s in t.shape]
        return t.expand(*sh), n.expand(*sh)
    if r < 0.55 and d > 0:
        i = rng.randint(0, d - 1)
        if t.shape[i] > 1:
            return t.narrow(i, 1, t.shape[i] - 1), n.narrow(i, 1, n.shape[i] - 1)
    if r < 0.62 and d > 0:
        i = rng.randint(0, d - 1)
        if t.shape[i] > 0:
            return t.select(i, 0), n.select(i, 0)
    if r < 0.7 and d > 0:
        return t.flatten(), n.flatten()
    if r < 0.8:
        sh = [t.numel()] if rng.random() < 0.5 else [1, t.numel(), 1]
        return t.reshape(sh), n.reshape(sh)
    if r < 0.9 and t.is_contiguous():
        sh = [1, t.numel()] if rng.random() < 0.5 else [t.numel(), 1, 1]
        return t.view(sh), n.view(sh)
    if d >= 1:
        i = rng.randint(0, d - 1)
        return t.movedim(i, 0), n.movedim(i, 0)
    return t, n


@pytest.mark.parametrize("seed", range(4))
def test_random_view_chains_match_torch(seed):
    rng = random.Random(seed)
    for _ in range(800):
        shape = [rng.choice([1, 2, 3]) for _ in range(rng.randint(1, 4))]
        a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
        t, n = torch.from_numpy(a.copy()), nee.tensor(a.copy())
        chain = []
        for _ in range(rng.randint(1, 4)):
            t, n = _step(t, n, rng)
            chain.append((tuple(t.shape), tuple(t.stride())))
            assert tuple(n.shape) == tuple(t.shape), (shape, chain)
            assert tuple(n.stride()) == tuple(t.stride()), (shape, chain, tuple(n.stride()))
            assert n.is_contiguous() == t.is_contiguous(), (shape, chain)
        np.testing.assert_array_equal(n.numpy(), t.numpy())


@pytest.mark.parametrize("make,want", [
    (lambda x: x.t().unsqueeze(0), (2, 1, 2)),
    (lambda x: x.t().reshape(1, 2, 1), (2, 1, 2)),
    (lambda x: x.t().view(2, 1, 1), (1, 2, 2)),
    (lambda x: x.t().unsqueeze(-1), (1, 2, 1)),
])
def test_examples(make, want):
    x = np.ones((1, 2), np.float32)
    assert tuple(make(torch.from_numpy(x)).stride()) == want
    assert tuple(make(nee.tensor(x)).stride()) == want
