"""A bound one-launch softmax (devices/cpu/kernels/nn.py ``bind_softmax``) carries its native call, so a classifier's
closing softmax replays in the step chain with the steps before it: the same bits as the unchained steps, and
new contents of the same input array followed."""
import numpy as np
import pytest

import neetorch as nee
from neetorch.jit import executable as E

F = nee.nn.functional


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape", [(1, 1000), (3, 37), (2, 5, 64)])
def test_softmax_chained_bitwise(monkeypatch, log, shape):
    rng = np.random.default_rng(shape[1])
    sm = F.log_softmax if log else F.softmax

    def fn(x):
        return sm(x, dim=-1) * 3.0    # (the softmax feeds another step: its output in the arena)
    xa = rng.standard_normal(shape).astype(np.float32)
    n0 = nee.get_num_threads()
    try:
        nee.set_num_threads(1)
        monkeypatch.setattr(E, "_CHAIN", [1 << 62])
        ref = nee.jit(fn)
        want = [ref(nee.from_numpy(xa)).numpy() for _ in range(4)][-1]
        monkeypatch.setattr(E, "_CHAIN", [3])
        f = nee.jit(fn)
        x = nee.from_numpy(xa)
        for _ in range(5):
            got = f(x).numpy()
        (ex,) = [e[0] for e in f._fast.values() if isinstance(e, tuple)]
        ch = ex._local.chain
        assert isinstance(ch, E._Chain)
        assert not [s for s in ch.plan if not isinstance(s, list) and getattr(s, "step", (None, None))[1] is not None
                    and "softmax" in str(s.step[1])]
        np.testing.assert_array_equal(got, want)
        xa[...] = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_array_equal(f(x).numpy(), ref(nee.from_numpy(xa.copy())).numpy())
    finally:
        nee.set_num_threads(n0)
