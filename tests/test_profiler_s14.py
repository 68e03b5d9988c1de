"""nee.profile(): flop counts of products (eager and compiled; a product with its fused epilogue counts the
product's flops), so the table's GFLOP/s column is filled; ops without a flop model count 0."""
import numpy as np
import pytest

import neetorch as nee
from neetorch import profiler

F = nee.nn.functional
RNG = np.random.default_rng(5)


def _t(*shape):
    return nee.from_numpy(RNG.standard_normal(shape).astype(np.float32))


@pytest.mark.parametrize("sa,sb", [((7, 5), (5, 3)), ((2, 4, 6), (6, 9)), ((6,), (6, 4)), ((4, 6), (6,)),
                                   ((3, 1, 4, 5), (2, 5, 7))])
def test_matmul_flops(sa, sb):
    a, b = _t(*sa), _t(*sb)
    with nee.profile() as prof:
        out = a @ b
    (ev,) = [e for e in prof.kernels() if e.name == "matmul"]
    assert ev.flops == 2 * out.numel() * sa[-1]


def test_conv_flops_eager_and_jit():
    x, w, b = _t(2, 6, 11, 9), _t(8, 3, 3, 3), _t(8)
    with nee.profile() as prof:
        y = F.conv2d(x, w, b, 2, 1, 1, 2)
    (ev,) = [e for e in prof.kernels() if e.name == "conv2d"]
    assert ev.flops == 2 * y.numel() * 3 * 3 * 3
    jf = nee.jit(lambda t: F.relu(F.conv2d(t, w, b, 2, 1, 1, 2)))
    jf(x)
    with nee.profile() as prof:
        jf(x)
    (ev,) = prof.kernels()
    assert ev.name.startswith("conv2d") and ev.flops == 2 * y.numel() * 27
    assert "GFLOP/s" in prof.table() and f"{ev.flops / ev.dur / 1e9:9.2f}"[:5].strip() in prof.table()


def test_matmul_epilogue_and_other_ops():
    a, w, bias = _t(16, 32), _t(32, 24), _t(24)
    jf = nee.jit(lambda t: F.gelu(t @ w + bias).sum(-1))
    jf(a)
    with nee.profile() as prof:
        jf(a)
    evs = prof.kernels()
    mm = [e for e in evs if e.name.startswith("matmul")]
    assert len(mm) == 1 and mm[0].flops == 2 * 16 * 24 * 32
    assert all(e.flops == 0 for e in evs if not e.name.startswith("matmul"))
    assert profiler.op_flops("add", [(3,), (3,)], (3,)) == 0
    assert profiler.op_flops("matmul", [("n", 4), (4, 2)], ("n", 2)) == 0     # symbolic: no count
