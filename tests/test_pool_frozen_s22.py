"""Frozen constants in recycled pool memory (session 22): a wrong-answer bug found while testing the step chain.

``nee.jit(freeze=True)`` copies its captured constants into buffers carved from the CPU backend's large-buffer pool
and marks them frozen (winograd.freeze); their packed / transformed forms are cached by address (winograd.weights).
The marks and cache entries went with the object owning the memory, but a pool block outlives the arrays carved from
it: a second graph's frozen copy made in the same block (same address, shape, dtype) found its predecessor's packed
weights, and every bound product after the first call was wrong (max error ~5 on unit-scale outputs).  Now the pool
forgets a block's marks and entries when it hands the block out again (winograd.release).  Checked for products
(linalg's packed kernel), direct convs and Winograd convs, one graph after another, against numpy / torch.
"""
import gc

import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu.kernels import winograd

F = nee.nn.functional



def _graphs_in_turn(make, rounds=3, calls=4):
    """``make(rng)`` -> (fn, reference(x array)); a fresh frozen graph per round, each dropped before the next."""
    rng = np.random.default_rng(5)
    for r in range(rounds):
        fn, ref, shape = make(rng)
        f = nee.jit(fn, freeze=True)
        xa = rng.standard_normal(shape).astype(np.float32)
        x = nee.from_numpy(xa)
        for k in range(calls):
            xa[...] = rng.standard_normal(shape)
            got = f(x).numpy()
            want = ref(xa)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(want).max()),
                                       err_msg=f"graph {r}, call {k}")
        del f, fn, x
        gc.collect()


def test_products_of_successive_frozen_graphs(nthreads):
    def make(rng):
        W = nee.from_numpy(rng.standard_normal((1000, 512)).astype(np.float32) * 0.03)
        b = nee.from_numpy(rng.standard_normal(512).astype(np.float32))
        Wn, bn = W.numpy().astype(np.float64), b.numpy().astype(np.float64)
        return (lambda x: F.relu(x @ W + b)), (lambda xa: np.maximum(xa @ Wn + bn, 0)), (64, 1000)
    _graphs_in_turn(make)


@pytest.mark.parametrize("C,O,H", [(128, 128, 14), (96, 192, 28)])   # (weights of 256 KiB and up: pooled)
def test_convs_of_successive_frozen_graphs(nthreads, C, O, H):
    torch = pytest.importorskip("torch")

    def make(rng):
        w = nee.from_numpy(rng.standard_normal((O, C, 3, 3)).astype(np.float32) * 0.1)
        b = nee.from_numpy(rng.standard_normal(O).astype(np.float32))
        tw, tb = (torch.from_numpy(t.numpy().astype(np.float64)) for t in (w, b))

        def ref(xa):
            return torch.nn.functional.conv2d(torch.from_numpy(xa.astype(np.float64)), tw, tb, padding=1).relu().numpy()
        return (lambda x: F.relu(F.conv2d(x, w, b, padding=1))), ref, (1, C, H, H)
    _graphs_in_turn(make)


def test_release_forgets_marks_and_entries_in_the_block():
    block = np.empty(1 << 20, np.uint8)
    w = block[4096:4096 + 4 * 64 * 64].view(np.float32).reshape(64, 64)
    w[...] = 1.0
    assert winograd.freeze(w) and winograd.is_frozen(w)
    u = winograd.weights(w, ("test", 1), lambda a, m: a * 2)
    assert u is not None and id(block) in winograd.marked_owners
    w[...] = 3.0            # (new arrays in the same memory, as a recycled block gets)
    winograd.release(block)
    assert not winograd.is_frozen(w) and id(block) not in winograd.marked_owners
    np.testing.assert_array_equal(winograd.weights(w, ("test", 1), lambda a, m: a * 2), 6.0)
