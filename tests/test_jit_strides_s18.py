"""``nee.jit`` returns what eager execution returns, memory layout included (as torch.compile guarantees):

* an elementwise result of permuted / transposed / channels-last / sliced inputs has the strides eager gives it
  (torch's TensorIterator layout, which eager neetorch follows: checked against torch here too), also for values
  returned through views (``(x + 1).t()``) and fused chains;
* outputs that are views of inputs or of other outputs in eager are views in jit too (and only those: ``x * 1``
  or two equal expressions returned are distinct tensors, not one merged by the passes);
* in-place updates of inputs land in the caller's tensor as eagerly;
* the guard key holds the inputs' layouts: a permuted call after a contiguous one specializes again;
  shape-polymorphic executables keep the layout at every size.
"""
import random

import numpy as np
import pytest
import torch

import neetorch as nee
from neetorch.tensor import _storage

NF = nee.nn.functional
TF = torch.nn.functional
F32 = "float32"


def _mk(shape, dtype, perm=None, sl=None, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        a = rng.random(shape) > 0.5
    elif dtype == "int64":
        a = rng.integers(-5, 6, shape).astype(np.int64)
    else:
        a = rng.standard_normal(shape).astype(dtype)
    t, n = torch.from_numpy(a.copy()), nee.tensor(a.copy())
    if perm is not None:
        t, n = t.permute(*perm), n.permute(*perm)
    if sl is not None:
        t, n = t[sl], n[sl]
    return n, t


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    return _storage.same(a._data, b._data)


def _aliases(outs, ins) -> list:
    """Per output: ("in", k) when it shares memory with input k, ("out", j) with an earlier output, else None."""
    res = []
    for i, o in enumerate(outs):
        r = next((("in", k) for k, x in enumerate(ins) if _same(o, x)), None)
        if r is None:
            r = next((("out", j) for j in range(i) if _same(o, outs[j])), None)
        res.append(r)
    return res


def _tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _layout(o):
    return tuple(o.shape), tuple(o.stride())


# (name, inputs: [(shape, dtype, perm, slice, seed)], neetorch program, torch program or None: the same source)
CASES = [
    ("add_scalar_perm3", [((2, 3, 4), F32, (2, 0, 1))], lambda x: x + 1, None),
    ("exp_perm3", [((2, 3, 4), F32, (1, 2, 0))], lambda x: x.exp(), None),
    ("mul_bcast_T", [((3, 4), F32, (1, 0)), ((3,), F32)], lambda x, y: x * y, None),
    ("add_two_perm", [((3, 4, 5), F32, (2, 1, 0)), ((3, 4, 5), F32, (2, 1, 0))], lambda x, y: x + y, None),
    ("add_T_contig", [((4, 5), F32, (1, 0)), ((5, 4), F32)], lambda x, y: x + y, None),
    ("chlast_relu", [((2, 4, 5, 3), F32, (0, 3, 1, 2))], lambda x: x.relu(), None),
    ("chlast_bias_relu", [((2, 4, 5, 3), F32, (0, 3, 1, 2)), ((3, 1, 1), F32)], lambda x, b: (x + b).relu(), None),
    ("chain_T", [((3, 4), F32, (1, 0))], lambda x: (x * 2 + 1).sigmoid(), None),
    ("f64_T", [((3, 4), "float64", (1, 0))], lambda x: x * x - 1, None),
    ("i64_T", [((3, 4), "int64", (1, 0))], lambda x: x * 3 + 1, None),
    ("bool_T", [((3, 4), "bool", (1, 0))], lambda x: ~x, None),
    ("bool_and_T", [((3, 4), "bool", (1, 0)), ((4, 3), "bool")], lambda x, y: x & y, None),
    ("cmp_T", [((3, 4), F32, (1, 0))], lambda x: x > 0, None),
    ("int_div_T", [((3, 4), "int64", (1, 0))], lambda x: x / 2, None),
    ("where_T", [((3, 4), F32, (1, 0))], lambda x: nee.where(x > 0, x, x * 0.1),
     lambda x: torch.where(x > 0, x, x * 0.1)),
    ("step_slice", [((6, 8), F32, None, (slice(None, None, 2), slice(1, None, 3)))], lambda x: x * 2, None),
    ("step_slice_T", [((6, 8), F32, (1, 0), (slice(None, None, 2), slice(1, None, 3)))], lambda x: x - 1, None),
    ("gelu_T", [((3, 4), F32, (1, 0))], lambda x: NF.gelu(x), lambda x: TF.gelu(x)),
    ("leaky_T", [((3, 4), F32, (1, 0))], lambda x: NF.leaky_relu(x, 0.1), lambda x: TF.leaky_relu(x, 0.1)),
    ("clamp_T", [((3, 4), F32, (1, 0))], lambda x: x.clamp(-0.5, 0.5), None),
    ("clone_T", [((3, 4), F32, (1, 0))], lambda x: x.clone(), None),
    ("contiguous_T", [((3, 4), F32, (1, 0))], lambda x: x.contiguous(), None),
    ("to_f64_T", [((3, 4), F32, (1, 0))], lambda x: x.to(nee.float64), lambda x: x.to(torch.float64)),
    ("unsqueeze_bcast", [((3, 4), F32, (1, 0)), ((4, 3), F32)], lambda x, y: x.unsqueeze(0) + y.unsqueeze(1), None),
    ("mixed_dtype_T", [((3, 4), F32, (1, 0)), ((4, 3), "float64")], lambda x, y: x + y, None),
    ("size1_perm", [((3, 1, 4), F32, (2, 1, 0))], lambda x: x * 2, None),
    ("sub_mean_perm", [((2, 3, 4), F32, (0, 2, 1))], lambda x: x - x.mean(-1, keepdim=True), None),
    ("ew_sum_keep_perm", [((3, 4, 5), F32, (2, 0, 1))], lambda x: (x + 1).sum(1, keepdim=True), None),
    ("ew_softmax_T", [((3, 4), F32, (1, 0))], lambda x: (x * 2).softmax(-1), None),
    ("ew_matmul_T", [((3, 4), F32, (1, 0)), ((3, 5), F32)], lambda x, w: (x + 1) @ w, None),
    ("ew_cat_T", [((3, 4), F32, (1, 0))], lambda x: nee.cat([x + 1, x * 2], 1),
     lambda x: torch.cat([x + 1, x * 2], 1)),
    ("y_and_reshape_T", [((3, 4), F32, (1, 0))], lambda x: (lambda y: (y, y.reshape(-1)))(x + 1), None),
    ("y_and_views_T", [((3, 4), F32, (1, 0))], lambda x: (lambda y: (y, y.t(), y[1:]))(x + 1), None),
    ("fused_T_out", [((3, 4), F32)], lambda x: (x * 2 + 1).t(), None),
    ("fused_perm_out", [((2, 3, 4), F32)], lambda x: (x.exp() + 1).permute(2, 0, 1), None),
    ("T_plus_1", [((3, 4), F32)], lambda x: x.t() + 1, None),
    ("matmul_out_T", [((3, 4), F32), ((4, 5), F32)], lambda x, y: (x @ y).t(), None),
    ("reshape_input_T", [((3, 4), F32, (1, 0))], lambda x: x.reshape(-1), None),
    ("expand_ew", [((3, 1), F32)], lambda x: (x * 2).expand(3, 4), None),
    ("ret_t", [((3, 4), F32)], lambda x: x.t(), None),
    ("ret_view", [((3, 4), F32)], lambda x: x.view(-1), None),
    ("ret_input", [((3, 4), F32)], lambda x: x, None),
    ("ret_input_and_ew", [((3, 4), F32)], lambda x: (x, x + 1), None),
    ("ret_y_y0", [((3, 4), F32)], lambda x: (lambda y: (y, y[0]))(x * 2), None),
    ("ret_slice_input", [((6, 8), F32)], lambda x: x[::2, 1:], None),
    ("mul1_T", [((3, 4), F32, (1, 0))], lambda x: x * 1, None),
    ("mul1_view", [((3, 4), F32)], lambda x: x.t() * 1, None),
    ("cse_two_outs", [((3, 4), F32)], lambda x: (x + 1, x + 1), None),
    ("cse_view_out", [((3, 4), F32)], lambda x: ((x + 1).t(), x + 1), None),
    ("inplace_input", [((3, 4), F32)], lambda x: x.add_(1), None),
    ("inplace_input_T", [((3, 4), F32, (1, 0))], lambda x: x.add_(1), None),
    ("inplace_row", [((3, 4), F32)], lambda x: (x[0].add_(1), x)[1], None),
    ("inplace_ew_T", [((3, 4), F32, (1, 0))], lambda x: (lambda y: (y.mul_(3), y)[1])(x + 1), None),
    ("three_outs_T", [((3, 4), F32, (1, 0))], lambda x: (x.exp(), x.exp() + 1, (x + 2).t()), None),
    ("neg_chlast_f64", [((2, 3, 4, 5), "float64", (0, 2, 3, 1))], lambda x: -x, None),
    ("copying_reshape_of_returned", [((3, 4), F32, (1, 0))],
     lambda x: (lambda y: (y, y.t().reshape(-1)[::2]))(x + 1), None),
    ("mask_index_eager_trace", [((3, 4), F32, (1, 0))], lambda x: (lambda y: (y, y[y > 0]))(x + 1), None),
    ("matmul_epilogue_T_out", [((3, 4), F32), ((4, 5), F32)], lambda x, w: ((x @ w) * 2 + 1).t(), None),
]


def _inputs(spec, seed0=0):
    out = []
    for k, s in enumerate(spec):
        shape, dt = s[0], s[1]
        perm = s[2] if len(s) > 2 else None
        sl = s[3] if len(s) > 3 else None
        out.append(_mk(shape, dt, perm, sl, seed=seed0 + k))
    return out


@pytest.mark.parametrize("name,spec,fn,tfn", CASES, ids=[c[0] for c in CASES])
def test_jit_layout_and_aliases_match_eager_and_torch(name, spec, fn, tfn):
    jf = nee.jit(fn)
    for call in range(2):     # the tracing call, then the compiled fast path
        pe, pj = _inputs(spec, 10 * call), _inputs(spec, 10 * call)
        ein, jin, tin = [n for n, _ in pe], [n for n, _ in pj], [t for _, t in pe]
        eo, jo, to = _tuple(fn(*ein)), _tuple(jf(*jin)), _tuple((tfn or fn)(*tin))
        assert len(eo) == len(jo) == len(to)
        for k, (e, j, t) in enumerate(zip(eo, jo, to)):
            assert _layout(e) == _layout(t), (name, k, "eager vs torch")
            assert _layout(j) == _layout(e), (name, k, call)
            assert j.is_contiguous() == e.is_contiguous()
            assert j.dtype == e.dtype
            np.testing.assert_allclose(j.numpy().astype(np.float64), e.numpy().astype(np.float64), rtol=1e-5,
                                       atol=1e-6, err_msg=name)
        assert _aliases(jo, jin) == _aliases(eo, ein) == _aliases(to, tin), name
        for a, b in zip(ein, jin):     # (in-place writes into the inputs)
            np.testing.assert_array_equal(b.numpy(), a.numpy())
        # a write into a returned view reaches what it views, as eagerly
        for k, (e, j) in enumerate(zip(eo, jo)):
            if e.dtype == nee.float32 and _aliases(eo, ein)[k] is not None:
                e.add_(100)
                j.add_(100)
                for a, b in zip(ein + list(eo), jin + list(jo)):
                    np.testing.assert_array_equal(b.numpy(), a.numpy())
                break


def test_contiguous_inputs_keep_row_major_plan():
    """The common case: no output is given a layout of its own (the plain allocation, no extra work)."""
    jf = nee.jit(lambda x, y: ((x * y + 1).relu(), (x - y).t()))
    x, y = nee.randn(5, 6), nee.randn(5, 6)
    jf(x, y)
    (exe, _), = {id(e[0]): e for e in jf._fast.values()}.values()
    assert exe._layouts == {}
    xt = nee.randn(6, 5).t()
    r = jf(xt, y)                      # another layout: specialized again, laid out as eager
    assert jf.stats["specializations"] == 2
    e = (xt * y + 1).relu()
    assert r[0].stride() == e.stride() == (1, 5)


@pytest.mark.parametrize("dynamic", [{0: 1}, True, "auto"])
def test_layouts_under_dynamic_shapes(dynamic):
    def f(x):
        return x * 2 + 1, (x + 1).t(), (x - 1)[:, ::2]
    jf = nee.jit(f, dynamic=dynamic)
    rng = np.random.default_rng(1)
    for n in (6, 7, 8, 5, 16, 6):
        x = nee.tensor(rng.standard_normal((n, 3)).astype(np.float32)).t()     # (3, n), strides (1, 3)
        for e, j in zip(f(x), jf(x)):
            assert _layout(j) == _layout(e), (dynamic, n)
            np.testing.assert_allclose(j.numpy(), e.numpy(), rtol=1e-6)
    x = nee.randn(3, 7)                 # row-major again
    for e, j in zip(f(x), jf(x)):
        assert _layout(j) == _layout(e)


_UNARY = ["{a} + 1", "{a} * 2.5", "({a}).exp()", "({a}).relu()", "-({a})", "({a}).sigmoid()", "({a}) > 0"]
_BINARY = ["{a} + {b}", "{a} * {b}", "nee.where({a} > 0, {a}, {b})", "{a} - {b}"]
_VIEWS = ["({a}).transpose(0, 1)", "({a})[1:]", "({a})[:, ::2]", "({a}).unsqueeze(0)", "({a}).flatten()",
          "({a}).sum(-1, keepdim=True)", "({a}).reshape(-1)"]


def _random_program(rng):
    """``f(x, y)`` (3-D, equal shapes): elementwise ops (over values of the inputs' shape, or broadcasting a
    keepdim sum), views of those, several values returned (also views of the inputs)."""
    lines, full, bcast, other = ["def f(x, y):"], ["x", "y"], [], []
    for k in range(rng.randint(2, 6)):
        kind = rng.random()
        a = rng.choice(full)
        v = f"v{k}"
        if kind < 0.35:
            lines.append(f"    {v} = " + rng.choice(_UNARY).format(a=rng.choice(full + bcast + other)))
            other.append(v)
        elif kind < 0.7:
            lines.append(f"    {v} = " + rng.choice(_BINARY).format(a=a, b=rng.choice(full + bcast)))
            full.append(v)
        else:
            e = rng.choice(_VIEWS)
            lines.append(f"    {v} = " + e.format(a=a))
            (bcast if "keepdim" in e else other).append(v)
    vals = full[2:] + bcast + other
    ret = rng.sample(vals, min(len(vals), rng.randint(1, 3))) if vals else ["x + y"]
    if rng.random() < 0.3:
        ret.append(rng.choice(["x", "x.transpose(0, 1)", "y[0]"]))
    lines.append("    return " + ", ".join(ret) + ",")
    return "\n".join(lines)


def _mk3(seed, p, shape=(3, 4, 5)):
    """A tensor of logical shape ``shape`` laid out in memory so that it is ``base.permute(p)``."""
    if p is None:
        return _mk(shape, F32, seed=seed)[0]
    inv = [0] * len(p)
    for i, d in enumerate(p):
        inv[d] = i
    return _mk(tuple(shape[inv[j]] for j in range(len(p))), F32, p, seed=seed)[0]


@pytest.mark.parametrize("seed", range(3))
def test_random_programs_layouts_match_eager(seed):
    rng = random.Random(seed)
    perms = [None, (1, 0, 2), (2, 1, 0), (0, 2, 1), (2, 0, 1)]
    checked = 0
    for _ in range(12):
        src = _random_program(rng)
        g: dict = {"nee": nee}
        exec(src, g)
        f = g["f"]
        jf = nee.jit(f)
        px, py = rng.choice(perms), rng.choice(perms)
        for call in range(2):
            ein, jin = [_mk3(call, px), _mk3(call + 5, py)], [_mk3(call, px), _mk3(call + 5, py)]
            try:
                eo = _tuple(f(*ein))
            except RuntimeError:
                with pytest.raises(Exception):
                    jf(*jin)
                break
            jo = _tuple(jf(*jin))
            for e, j in zip(eo, jo):
                assert _layout(j) == _layout(e), src
                np.testing.assert_allclose(j.numpy().astype(np.float64), e.numpy().astype(np.float64),
                                           rtol=1e-5, atol=1e-6, err_msg=src)
            assert _aliases(jo, jin) == _aliases(eo, ein), src
            checked += 1
    assert checked >= 20


@pytest.mark.parametrize("fn", [lambda x, b: ((x + b) * 2).relu(), lambda x, b: x.exp()], ids=["fused", "single"])
def test_permuted_outputs_written_in_their_own_order(fn):
    """A returned elementwise result of channels-last inputs is written through views of its operands in the
    layout's dim order (unit-stride writes, as eager's elementwise.apply; not a strided scatter): the step's
    order is the NHWC one, values and strides those of eager at every call (bound launch included)."""
    jf = nee.jit(fn)
    b = nee.randn(6, 1, 1)
    for seed in range(3):
        x = _mk3(seed, (0, 3, 1, 2), (2, 6, 5, 7))     # (N, C, H, W) over NHWC memory
        e, j = fn(x, b), jf(x, b)
        assert _layout(j) == _layout(e) and j.stride()[1] == 1
        np.testing.assert_allclose(j.numpy(), e.numpy(), rtol=1e-6)
    (exe, g), = {id(v[0]): v for v in jf._fast.values()}.values()
    orders = {exe._perm_order(n) for n in g.nodes if n.outputs and n.outputs[0] in g.outputs}
    assert orders == {(0, 2, 3, 1)}
