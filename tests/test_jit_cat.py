"""Cat elimination in the jit memory plan (jit/executable.py plan_cats): producers write their
results straight into their slice of a cat's output and the cat copies nothing.

Every program is run three times with new values (the executable reuses its arena across calls, so a
stale-data bug shows only on a later call) and compared with eager and, bit for bit, with the same
program jitted with cat elimination off (NEE_JIT_CAT=0).
"""
import os
import subprocess
import sys
from contextlib import contextmanager

import numpy as np
import pytest

import neetorch as nee
import neetorch.nn.functional as F
from neetorch import _env
from neetorch.jit import fuse_elementwise, passes, plan_memory
from neetorch.trace import trace


@contextmanager
def _cat_elimination(flag):
    old = _env.JIT_CAT
    _env.JIT_CAT = flag
    try:
        yield
    finally:
        _env.JIT_CAT = old


def _np(r):
    return [t.numpy().copy() for t in (r if isinstance(r, tuple) else (r,))]


def _exe(f, *args):
    return f._executable(args, {})[0]


def _check(fn, arg_sets, exact=True, **jit_kw):
    """Run ``fn`` eagerly, jitted, and jitted with cat elimination off on every argument tuple;
    return the executable (cat elimination on) of the last call; ``.off``: the other one."""
    on = nee.jit(fn, **jit_kw)
    off = nee.jit(fn, **jit_kw)
    for args in arg_sets:
        want = _np(fn(*args))
        got = _np(on(*args))
        with _cat_elimination(False):
            ref = _np(off(*args))
        assert len(got) == len(want) == len(ref)
        for g, w, r in zip(got, want, ref):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_array_equal(g, r)     # the plan changes where values live, not one bit
            if exact:
                np.testing.assert_array_equal(g, w)
            else:
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    with _cat_elimination(False):
        off_exe = _exe(off, *arg_sets[-1])
    assert off_exe.plan.cats is None and not off_exe.plan.placed
    exe = _exe(on, *arg_sets[-1])
    exe.off = off_exe
    return exe


def _cat_nodes(exe):
    return [n for n in exe.graph.nodes if n.name == "cat"]


def _rand(*shape, seed):
    return nee.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def _args(*shapes):
    return [tuple(_rand(*s, seed=10 * k + i) for i, s in enumerate(shapes)) for k in range(3)]


# ------------------------------------------------------------------ where a slice is contiguous
@pytest.mark.parametrize("shape,dim,placed", [
    ((1, 3, 4, 5), 1, True),     # batch-1 NCHW along channels
    ((3, 5), 0, True),           # dim 0: always one block
    ((1, 1, 5), -1, True),       # leading ones
    ((2, 3, 4), 1, False),       # batch 2: each input is two blocks of the output
    ((1, 3, 4), 2, False),       # along the last dim of a 3-row tensor
])
def test_cat_along_dims(shape, dim, placed):
    def fn(x):
        return nee.cat([(x * 2).relu(), x.abs() + 1, -x], dim) * 3
    exe = _check(fn, _args(shape))
    (n,) = _cat_nodes(exe)
    assert exe.plan.in_place(n) == ([0, 1, 2] if placed else [])
    assert (n in exe.plan.cats) == placed
    # the copy step is gone, the producers remain
    assert exe.off.num_kernels - exe.num_kernels == (1 if placed else 0)


def test_inputs_read_elsewhere_before_and_after_the_cat():
    def fn(x):
        a = x * 2
        b = x.relu()
        s = a.sum()                  # read before the cat
        c = nee.cat([a, b], 1)
        return c - s, a - b          # and after it
    exe = _check(fn, _args((1, 4, 3)))
    (n,) = _cat_nodes(exe)
    assert exe.plan.in_place(n) == [0, 1]


def test_graph_inputs_parameters_and_outputs_are_copied():
    w = nee.nn.Parameter(_rand(1, 2, 4, seed=99))

    def fn(x):
        a = x * 2                    # returned: not an arena buffer
        b = x.relu()
        c = nee.cat([x, w, a, b], 1)  # input, parameter, output, intermediate
        return c * 3, a
    exe = _check(fn, _args((1, 3, 4)))
    (n,) = _cat_nodes(exe)
    assert exe.plan.in_place(n) == [3]
    assert exe.plan.cats[n][:2] == (1, 4)
    assert exe.num_kernels == exe.off.num_kernels      # the cat still copies three inputs


def test_cat_of_views_and_a_returned_cat():
    def fn(x):
        a = x + 1
        d = (x - 1).reshape(1, 4, 3).abs()
        c = nee.cat([a.reshape(1, 4, 3), d, a[:, :, ::2]], 1)   # views are copied, d is placed
        e = nee.cat([d, x.reshape(1, 4, 3).relu()], 1)          # returned through a view: not placed
        return c * 2, e.reshape(-1)
    exe = _check(fn, _args((1, 2, 6)))
    c, e = _cat_nodes(exe)
    assert exe.plan.in_place(c) == [1] and exe.plan.in_place(e) == []


def test_repeated_inputs():
    def fn(x):
        a = x * 2
        b = x - 3
        return nee.cat([a, a], 0) + 1, nee.cat([a, b, a], 0) * 2
    exe = _check(fn, _args((3, 4)))
    c1, c2 = _cat_nodes(exe)
    # a is placed once, in the first cat; the repeats are copies of it
    assert exe.plan.in_place(c1) == [0] and exe.plan.in_place(c2) == [1]


def test_mixed_dtypes_are_copied():
    def fn(x):
        i = (x * 4).to(nee.int32)
        return nee.cat([i, x * 2], 1) + 1    # promotes to float32: the int32 input is cast by the copy
    exe = _check(fn, _args((1, 3)))
    (n,) = _cat_nodes(exe)
    assert exe.plan.in_place(n) == [1]


def test_inplace_updates_after_the_cat():
    def fn(x):
        a = x * 2
        b = x.abs()
        c = nee.cat([a, b], 1)
        a.add_(1)                    # recorded as new values: the cat's slice keeps the old ones
        a.relu_()
        b.mul_(-1)
        c.mul_(3)
        return c, a + b
    exe = _check(fn, _args((1, 2, 5)))
    (n,) = _cat_nodes(exe)
    assert exe.plan.in_place(n) == [0, 1]


# ------------------------------------------------------------------ nested chains (DenseNet)
def _dense_block(layers, c0=4, growth=3, seed=0):
    rng = np.random.default_rng(seed)
    w0 = nee.tensor(rng.standard_normal((c0, 2, 3, 3)).astype(np.float32) * 0.3)
    ws = [nee.tensor(rng.standard_normal((growth, c0 + k * growth, 3, 3)).astype(np.float32) * 0.3)
          for k in range(layers)]
    scale = [nee.tensor(rng.standard_normal((1, c0 + k * growth, 1, 1)).astype(np.float32)) for k in range(layers)]

    def fn(x):
        cur = F.conv2d(x, w0, padding=1)
        for w, s in zip(ws, scale):
            y = F.conv2d(F.relu(cur * s + 0.5), w, padding=1).relu()   # cur is read here and by the cat
            cur = nee.cat([cur, y], 1)
        return F.relu(cur) * 2
    return fn


def test_densenet_chain_shares_one_buffer_and_drops_every_copy():
    fn = _dense_block(3)
    args = _args((1, 2, 6, 6))
    exe = _check(fn, args, exact=False)
    cats = _cat_nodes(exe)
    assert len(cats) == 3 and all(exe.plan.in_place(n) == [0, 1] for n in cats)
    off_exe = exe.off
    # the copy steps are gone: three fewer launches and three fewer runners on the fast path
    assert off_exe.num_kernels - exe.num_kernels == 3
    assert not any(s[1].name == "cat" and s[0] != "cat" for s in exe.steps)
    assert all(s[2] == [] for s in exe.steps if s[0] == "cat")
    fast_on = exe._build_fast(exe._arena())[2]
    fast_off = off_exe._build_fast(off_exe._arena())[2]
    assert len(fast_off) - len(fast_on) == 3
    # one buffer: every layer's output sits right after its predecessors in the last cat's output
    off_of = exe.plan.offsets
    last = cats[-1].outputs[0]
    for n in cats:
        a, b = n.inputs
        assert off_of[a] == off_of[n.outputs[0]]
        assert off_of[b] == off_of[a] + a.shape[1] * 6 * 6 * 4
        assert off_of[last] <= off_of[b] < off_of[last] + 13 * 6 * 6 * 4
    assert exe.plan.cats[cats[-1]][2] == (4 + 3 + 3) * 36 * 4 + 3 * 36 * 4   # inner cat + the new layer


def test_nested_cat_read_by_other_nodes():
    def fn(x):
        a, b, c = x * 2, x + 1, x.relu()
        c1 = nee.cat([a, b], 0)
        c2 = nee.cat([c1, c], 0)
        return c2 * 2, c1.sum(0) + a.sum(0)
    exe = _check(fn, _args((2, 3)))
    c1, c2 = _cat_nodes(exe)
    assert exe.plan.in_place(c1) == [0, 1] and exe.plan.in_place(c2) == [0, 1]


# ------------------------------------------------------------------ dynamic shapes, profiling, switches
def test_bucketed_dynamic_dim_outside_the_cat_dim():
    def fn(x):
        a = x * 2
        b = x.relu()
        return nee.cat([a, b, -x], 1) + 1, b * 3
    sizes = (6, 8, 5, 7, 8, 6)    # the bucket (4, 8]: 8 runs at the planned shapes, the others not
    arg_sets = [(_rand(1, 3, n, seed=n + k),) for k, n in enumerate(sizes)]
    f = _check(fn, arg_sets, dynamic={0: 2})
    assert f.dynamic and f.plan.placed


def test_bucketed_dynamic_dim_is_the_cat_dim():
    def fn(x):
        a = x * 2
        b = x + 1
        return nee.cat([a, x, b], 1) * 2, b * 3    # b is read after the cat
    sizes = (12, 16, 9, 16, 13)
    arg_sets = [(_rand(1, n, seed=n + k),) for k, n in enumerate(sizes)]
    on = nee.jit(fn, dynamic={0: 1})
    exe = _check(fn, arg_sets, dynamic={0: 1})
    on(*arg_sets[0])
    assert exe.dynamic and on.stats["bucket_specializations"] == 1
    (n,) = _cat_nodes(exe)
    assert exe.plan.in_place(n) == [0, 2]


def test_profiled_calls_run_the_generic_path_without_the_copy():
    fn = _dense_block(2, seed=1)
    f = nee.jit(fn)
    args = _args((1, 2, 5, 5))
    for x, in args:
        want = _np(f(x))[0]
        with nee.profile() as prof:
            got = _np(f(x))[0]
        np.testing.assert_array_equal(got, want)
        assert not [e for e in prof.kernels() if e.name == "cat"]
    with _cat_elimination(False):
        off = nee.jit(fn)
        off(*args[0])
        with nee.profile() as prof:
            off(*args[0])
    assert len([e for e in prof.kernels() if e.name == "cat"]) == 2


def test_partial_cat_is_profiled():
    def fn(x):
        return nee.cat([x, x.relu()], 1) * 2
    f = nee.jit(fn)
    x = _rand(1, 3, 4, seed=3)
    f(x)
    with nee.profile() as prof:
        got = _np(f(x))[0]
    np.testing.assert_array_equal(got, _np(fn(x))[0])
    (ev,) = [e for e in prof.kernels() if e.name == "cat"]
    assert ev.nbytes == 2 * x.numel() * 4     # only the graph input is copied


def test_explain_reports_the_eliminated_cats():
    fn = _dense_block(2, seed=2)
    x = _rand(1, 2, 5, 5, seed=4)
    text = nee.jit(fn).explain(x)
    assert "cat elimination: 2 of 2 cats eliminated (no copy step), 0 partly" in text
    with _cat_elimination(False):
        text = nee.jit(fn).explain(x)
    assert "cat elimination: off (NEE_JIT_CAT=0), 2 cat copies run" in text


def test_env_switch_turns_it_off():
    script = ("import neetorch as nee, neetorch._env as e; "
              "f = nee.jit(lambda x: nee.cat([x * 2, x + 1], 0) - 1); x = nee.ones(3); "
              "print(e.JIT_CAT, f(x).numpy().tolist(), f._executable((x,), {})[0].plan.cats)")
    env = dict(os.environ, NEE_JIT_CAT="0")
    out = subprocess.run([sys.executable, "-c", script], env=env, check=True, capture_output=True, text=True)
    assert out.stdout.split() == ["False", "[1.0,", "1.0,", "1.0,", "1.0,", "1.0,", "1.0]", "None"]


def test_only_cpu_values_are_placed():
    # the arena is host memory: a graph on another device keeps its cats
    def fn(x):
        return nee.cat([x * 2, x + 1], 0) - 1
    g = fuse_elementwise(passes.run_pipeline(trace(fn, nee.ones(3))))
    assert plan_memory(g).placed

    class _Dev:
        type = "opencl"
    for n in g.nodes:
        for v in n.outputs:
            v.device = _Dev()
    plan = plan_memory(g)
    assert not plan.placed and plan.cats == {}


def test_threads_have_their_own_buffers():
    from concurrent.futures import ThreadPoolExecutor
    fn = _dense_block(2, seed=5)
    f = nee.jit(fn)
    xs = [_rand(1, 2, 5, 5, seed=20 + k) for k in range(8)]
    want = [_np(fn(x))[0] for x in xs]
    f(xs[0])

    def call(k):
        return np.abs(_np(f(xs[k]))[0] - want[k]).max()
    with ThreadPoolExecutor(4) as pool:
        errs = list(pool.map(call, list(range(8)) * 3))
    assert max(errs) < 1e-5
    assert _exe(f, xs[0]).plan.cats
