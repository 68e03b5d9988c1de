"""Round 6 of the differential fuzzing against PyTorch (the reference, tests only; ``tests/torch_check.py``): Tensor
methods on non-contiguous views (transposed, stepped, flipped, expanded / 0-stride, diagonal, unfolded, permuted),
in-place ops on views writing through to their base, the type promotion of every binary op over tensor-scalar and
tensor-0-d-tensor pairs of every dtype, integer wraparound and integer division by zero, and the ``nn`` modules'
``state_dict`` (keys, shapes, a torch ``state_dict`` loaded and the forward outputs compared).

Findings fixed: ``Tensor.relu_`` / ``nee.relu_`` raised "relu() got an unexpected keyword argument 'out'" (round 5
took ``relu``'s out= away, the in-place method still passed one); ops refusing a dtype raised TypeError where torch
raises NotImplementedError (bitwise / shift ops on floats, floor_divide / remainder / fmod / pow on bool, hypot /
logaddexp / nextafter / logcumsumexp / histc on integers, matmul / trace on bool, a complex32 result): they raise
``DTypeNotImplementedError``, both a TypeError and a NotImplementedError (so a RuntimeError); ``where(c, int8, 300)``
wrapped the scalar to 44 instead of refusing it; a 0-d CPU tensor next to a tensor on another device (OpenCL) was
refused ("expected all tensors on the same device") where torch treats it as a scalar; ``flip(x, dims=...)``
raised TypeError (no ``dims`` keyword), and so did torch's other keyword names: ``permute(dims=)``,
``reshape(shape=)``, ``view(size=)`` / ``view(dtype=)``, ``expand(size=)``, ``tile(dims=)``, ``repeat(repeats=)``,
``cat`` / ``concat`` / ``concatenate`` / ``stack(axis=)``, ``zeros`` / ``ones`` / ``empty`` / ``rand`` /
``randn(size=)``; ``kthvalue`` over an empty dim raised RuntimeError (torch: IndexError).
"""
# ruff: noqa: B023  (the lambdas built in loops are called by check() before the loop moves on)
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch_check import make_check, split_special

import neetorch as nee

_RTOLS = {"float16": 2e-3, "bfloat16": 2e-2, "float32": 2e-6, "other": 1e-12}
DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
          "complex64"]
_EXC_OK = {  # neetorch's dual exception classes, accepted where torch raises one of their bases
    "IndexOutOfRangeError": (IndexError, RuntimeError),
    "IntegerDivisionByZero": (ZeroDivisionError, RuntimeError),
    "DTypeNotImplementedError": (TypeError, NotImplementedError, RuntimeError),
}


# (tests/torch_check.py) bfloat16 results checked as float32, complex ones as their real and imaginary parts, also
# inside tuples
check = make_check(torch, _RTOLS, same_error="subclass", post=lambda r: split_special(r, True))


def _d(L, name):
    return getattr(L, name)


def _vals(L, x, dt):
    t = x.to(_d(L, dt))
    return t


_BASE = {"bool": np.array([True, False, True]), "uint8": np.array([3, 0, 7]), "float": np.array([1.5, -2.25, 0.5])}


def _base(dt):
    if dt == "bool":
        return _BASE["bool"]
    if dt in ("uint8", "int8", "int16", "int32", "int64"):
        return np.array([3, -2, 7]) if dt != "uint8" else _BASE["uint8"]
    return _BASE["float"]


# --------------------------------------------------------------------------------------------- fixed findings
def test_relu_inplace():
    a = np.random.RandomState(0).randn(4, 6).astype(np.float32)
    for view in (lambda t: t, lambda t: t.t(), lambda t: t[::2, 1::2], lambda t: t.diagonal()):
        check(lambda L, x: (view(x).relu_(), x)[1], a)
    check(lambda L, x: (L.relu_(x[1:]), x)[1], a)
    check(lambda L, x: (L.nn.functional.relu(x.t(), inplace=True), x)[1], a)
    check(lambda L, x: x[:1].expand(3, 6).relu_(), a)    # an expanded self: both refuse


@pytest.mark.parametrize("op", ["bitwise_and", "bitwise_or", "bitwise_left_shift", "floor_divide", "remainder",
                                "fmod", "pow", "hypot", "logaddexp", "nextafter"])
@pytest.mark.parametrize("dt", ["bool", "int64", "float16", "float32"])
def test_dtype_refusals_are_not_implemented_errors(op, dt):
    x = _base(dt)
    n = check(lambda L, a: getattr(L, op)(a.to(_d(L, dt)), a.to(_d(L, dt))), x)
    if isinstance(n, Exception):  # what torch raises (NotImplementedError) and what neetorch raised (TypeError)
        assert isinstance(n, NotImplementedError) and isinstance(n, TypeError), type(n).__mro__
        assert op in str(n), n


def test_other_dtype_refusals():
    for f in (lambda L, a: L.matmul(a.bool().reshape(1, 3), a.bool().reshape(3, 1)),
              lambda L, a: L.trace(a.bool().reshape(1, 3)),
              lambda L, a: L.logcumsumexp(a.long(), 0),
              lambda L, a: L.histc(a.long(), 3)):
        n = check(f, np.array([1.0, 2.0, 3.0]))
        assert isinstance(n, NotImplementedError) and isinstance(n, TypeError), n
    with pytest.raises(NotImplementedError, match="complex32"):  # torch has complex32, neetorch refuses it
        nee.ones(2, dtype=nee.float16) + 1j


def test_where_scalar_overflow():
    c = np.array([True, False])
    for dt, v in (("int8", 300), ("int8", -129), ("uint8", -1), ("uint8", -256), ("int16", 40000), ("int8", 2.5),
                  ("float16", 1e10), ("bool", 2), ("int64", 2 ** 40)):
        check(lambda L, m: L.where(m, L.tensor([1, 0], dtype=_d(L, dt)), v), c)
        check(lambda L, m: L.where(m, v, L.tensor([1, 0], dtype=_d(L, dt))), c)
    check(lambda L, m: L.where(m, 1, 2 ** 40), c)


def test_flip_dims_keyword_and_empty_kthvalue():
    a = np.arange(6.0).reshape(2, 3)
    for f in (lambda L, x: L.flip(x, dims=[0]), lambda L, x: x.flip(dims=(0, 1)), lambda L, x: L.flip(x, dims=(1,)),
              lambda L, x: x.flip(0, dims=1), lambda L, x: L.flip(x[:0], dims=[0]), lambda L, x: x.flip((0, 1))):
        check(f, a)
    for shape in ((0, 3), (3, 0)):
        check(lambda L, x: L.kthvalue(x, 1, 0), np.zeros(shape))   # torch: IndexError for an empty dim


def test_torch_keyword_names():
    a = np.arange(12.0).reshape(3, 4)
    for f in (lambda L, x: L.permute(x, dims=(1, 0)), lambda L, x: x.permute(dims=[1, 0]),
              lambda L, x: L.reshape(x, shape=(4, 3)), lambda L, x: x.reshape(shape=[-1]),
              lambda L, x: x.view(size=(2, 6)), lambda L, x: x.view(dtype=L.int64),
              lambda L, x: x[:1].expand(size=(2, 4)), lambda L, x: L.tile(x, dims=(2,)), lambda L, x: x.tile(dims=(1, 2)),
              lambda L, x: x.repeat(repeats=(2, 1)), lambda L, x: L.cat([x, x], axis=1),
              lambda L, x: L.concatenate([x, x], axis=0), lambda L, x: L.concat([x, x], axis=1),
              lambda L, x: L.stack([x, x], axis=2), lambda L, x: L.zeros(size=(2, 3), dtype=x.dtype),
              lambda L, x: L.ones(size=[2]), lambda L, x: L.empty(size=(0, 2)), lambda L, x: L.rand(size=(2, 3)).shape,
              lambda L, x: L.randn(size=(4,)).shape,
              lambda L, x: x.view(3, size=(4, 3)), lambda L, x: L.zeros(2, size=(2,)),       # both refuse
              lambda L, x: x.reshape(2, shape=(6,)), lambda L, x: x.permute(1, 0, dims=(1, 0))):
        check(f, a)


def test_cpu_scalar_tensor_next_to_a_device_tensor():
    if not any(i.type == "opencl" and i.available for i in nee.devices()):
        pytest.skip("no OpenCL device")
    x = nee.tensor([[1.0, -2.0, 3.0]]).to("opencl")
    for r, ref in ((x + nee.tensor(2.0), [[3.0, 0.0, 5.0]]), (nee.tensor(1.0) - x, [[0.0, 3.0, -2.0]]),
                   (nee.where(x > 0, x, nee.tensor(0.5)), [[1.0, 0.5, 3.0]]),
                   (x.clone().mul_(nee.tensor(3)), [[3.0, -6.0, 9.0]])):
        assert r.device.type == "opencl" and r.cpu().tolist() == ref
    with pytest.raises(RuntimeError, match="same device"):   # a CPU tensor that is not 0-d: still refused
        x + nee.ones(3)


# --------------------------------------------------------------------------------------------- views
_VIEWS = {
    "t": lambda t: t.t(),
    "step": lambda t: t[::2, ::3],
    "flip": lambda t: t.flip(1),
    "expand": lambda t: t[:1].expand(3, 6),
    "stride0": lambda t: t[:, :1].expand(4, 5),
    "diag": lambda t: t.diagonal(),
    "unfold": lambda t: t.unfold(1, 3, 2),
    "perm3": lambda t: t.reshape(2, 2, 6).permute(2, 0, 1),
}
_METHODS = {
    "exp": lambda L, x: x.exp(), "sign": lambda L, x: x.sign(), "cumsum": lambda L, x: x.cumsum(-1),
    "sum0": lambda L, x: x.sum(0), "max": lambda L, x: x.max(-1).values, "argmax": lambda L, x: x.argmax(0),
    "sort": lambda L, x: x.sort(dim=-1, stable=True), "softmax": lambda L, x: x.softmax(-1),
    "log_softmax": lambda L, x: x.log_softmax(0), "reshape": lambda L, x: x.reshape(-1),
    "prod": lambda L, x: x.prod(-1), "std": lambda L, x: x.std(0), "roll": lambda L, x: x.roll(1, 0),
    "tril": lambda L, x: x.tril() if x.ndim >= 2 else x, "nonzero": lambda L, x: (x > 0).nonzero(),
    "where": lambda L, x: L.where(x > 0, x, -x), "masked_fill": lambda L, x: x.masked_fill(x > 0, 9.0),
    "logsumexp": lambda L, x: x.logsumexp(-1), "cummax": lambda L, x: x.cummax(-1),
    "unique": lambda L, x: x.round().unique(return_counts=True), "repeat": lambda L, x: x.repeat(*([2] * x.ndim)),
    "diff": lambda L, x: x.diff(dim=-1), "matmul": lambda L, x: x @ x.transpose(-1, -2),
    "binary": lambda L, x: x * 2 + x.flip(-1),
}


@pytest.mark.parametrize("view", list(_VIEWS))
def test_methods_on_views(view):
    a = np.random.RandomState(1).randn(4, 6).astype(np.float32)
    for m in _METHODS.values():
        check(lambda L, x: m(L, _VIEWS[view](x)), a, tol=1e-5)
    ai = np.random.RandomState(2).randint(-5, 6, (4, 6))
    for m in (lambda L, x: x.abs(), lambda L, x: x.cumsum(-1), lambda L, x: x.clamp(-2, 2), lambda L, x: ~x,
              lambda L, x: x << 2, lambda L, x: x.sort(dim=-1, stable=True), lambda L, x: x // 3):
        check(lambda L, x: m(L, _VIEWS[view](x)), ai)


_INPLACE = [
    lambda L, b: b.t().add_(1), lambda L, b: b[::2, 1::2].mul_(10), lambda L, b: b.diagonal().fill_(7),
    lambda L, b: b[:, 2].copy_(L.arange(4.0)), lambda L, b: b.unfold(1, 2, 2).add_(100),
    lambda L, b: b.narrow(1, 1, 3).clamp_(-0.1, 0.1), lambda L, b: b.view(24)[::5].sub_(50),
    lambda L, b: b.__setitem__((slice(None, None, 2), slice(1, None, 2)), -1.0),
    lambda L, b: b[1:3].__setitem__(b[1:3] > 0, 0.0), lambda L, b: b.t().__setitem__(L.tensor([0, 2]), 5.0),
    lambda L, b: b[:, 1:].index_add_(1, L.tensor([0, 0]), L.ones(4, 2)),
    lambda L, b: b.t().scatter_(0, L.tensor([[0, 1, 2, 3]]), 9.0),
    lambda L, b: b.t().masked_fill_(b.t() > 0.5, 3.0), lambda L, b: b[:, ::2].sigmoid_(),
    lambda L, b: b[:, 1].pow_(2), lambda L, b: b[0].lerp_(L.ones(6), 0.5),
    lambda L, b: b.t()[0].addcmul_(L.ones(4), L.ones(4), value=2), lambda L, b: b.t().exp_(),
    lambda L, b: b[0].add_(L.tensor([1, 2, 3, 4, 5, 6])), lambda L, b: b[0, 0].add_(5),
    lambda L, b: L.add(b[:, 0], 1, out=b[:, 1]),
]


@pytest.mark.parametrize("k", range(len(_INPLACE)))
def test_inplace_on_views_write_through(k):
    a = np.random.RandomState(1).randn(4, 6).astype(np.float32)
    check(lambda L, b: (_INPLACE[k](L, b), b)[1], a)


def test_inplace_refusals_on_views():
    a = np.random.RandomState(1).randn(4, 6).astype(np.float32)
    check(lambda L, b: b[:1].expand(3, 6).add_(1), a)            # internal overlap
    check(lambda L, b: b[:1].expand(3, 6).fill_(1), a)
    check(lambda L, b: b.long()[0].add_(1.5), a)                  # float result into an int view
    check(lambda L, b: b.long().mul_(b), a)
    check(lambda L, b: b[0].add_(b), a)                           # broadcast past self


# --------------------------------------------------------------------------------------------- promotion
_SCALARS = {"i": 2, "f": 2.5, "b": True, "c": 1 + 2j, "neg": -3, "zero": 0, "fz": 0.0}
_BINOPS = ["add", "sub", "mul", "div", "floor_divide", "remainder", "fmod", "pow", "atan2", "maximum", "eq", "lt",
           "bitwise_and", "bitwise_xor", "bitwise_left_shift", "logical_and", "hypot", "copysign", "xlogy", "fmax",
           "float_power", "heaviside", "gcd"]


@pytest.mark.parametrize("dt", DTYPES)
def test_tensor_scalar_promotion(dt):
    x = _base(dt)
    for s in _SCALARS.values():
        if dt == "float16" and isinstance(s, complex):
            continue   # torch makes complex32, which neetorch refuses (tests/test_complex_fft.py)
        for op in _BINOPS:
            check(lambda L, a: getattr(L, op)(a.to(_d(L, dt)), s), x, tol=1e-5)
        for opn in ("__radd__", "__rsub__", "__rtruediv__", "__rfloordiv__", "__rmod__", "__rpow__", "__or__",
                    "__rshift__"):
            check(lambda L, a: getattr(a.to(_d(L, dt)), opn)(s), x, tol=1e-5)
        check(lambda L, a: L.div(a.to(_d(L, dt)), s, rounding_mode="floor"), x)
        check(lambda L, a: L.div(a.to(_d(L, dt)), s, rounding_mode="trunc"), x)


@pytest.mark.parametrize("da", DTYPES)
def test_tensor_0d_tensor_promotion(da):
    for db in DTYPES:
        if {da, db} == {"float16", "complex64"}:
            continue   # (complex32 in torch, refused by neetorch)
        for op in ("add", "mul", "div", "floor_divide", "remainder", "maximum", "eq", "bitwise_and", "atan2"):
            check(lambda L, a, b: getattr(L, op)(a.to(_d(L, da)), b.to(_d(L, db))[0]), _base(da), _base(db),
                  tol=1e-5)
        check(lambda L, a, b: L.where(a.to(_d(L, da)).real != 0, a.to(_d(L, da)), b.to(_d(L, db))[0]),
              _base(da), _base(db))


# --------------------------------------------------------------------------------------------- integers
_EXTREMES = {"uint8": [250, 3, 0], "int8": [120, -128, 127], "int16": [32767, -32768, 5],
             "int32": [2 ** 31 - 1, -2 ** 31, 7], "int64": [2 ** 63 - 1, -2 ** 63, 9]}
_WRAP = [
    lambda L, x: x + x, lambda L, x: x * 3, lambda L, x: -x, lambda L, x: x.abs(), lambda L, x: x.sum(),
    lambda L, x: x.sum(dtype=x.dtype), lambda L, x: x.cumsum(0), lambda L, x: x.prod(), lambda L, x: x ** 3,
    lambda L, x: x << 3, lambda L, x: x << 70, lambda L, x: x >> 70, lambda L, x: x // -1, lambda L, x: x % -1,
    lambda L, x: L.fmod(x, -1), lambda L, x: x - x.flip(0), lambda L, x: x + 1000, lambda L, x: x + 2 ** 40,
    lambda L, x: x.clamp(-1000, 1000), lambda L, x: x.clamp(-1.5, 2.5), lambda L, x: x.fill_(1000),
    lambda L, x: L.full((2,), 1000, dtype=x.dtype), lambda L, x: x.to(L.float16), lambda L, x: x.float().mean(),
]
# (torch's div(INT_MIN, -1, rounding_mode='trunc') dies of SIGFPE: not compared)


@pytest.mark.parametrize("dt", list(_EXTREMES))
def test_integer_wraparound(dt):
    v = np.array(_EXTREMES[dt], dtype=dt)
    for f in _WRAP:
        check(f, v)
    n = nee.div(nee.tensor(v), -1, rounding_mode="trunc")       # wraps like the other integer divisions
    assert n.tolist() == (nee.tensor(v) // -1).tolist()


_DIV0 = [
    lambda L, x: x / 0, lambda L, x: x // 0, lambda L, x: x // L.zeros(3, dtype=x.dtype), lambda L, x: x % 0,
    lambda L, x: x % L.zeros(3, dtype=x.dtype), lambda L, x: L.fmod(x, 0),
    lambda L, x: L.fmod(x, L.zeros(3, dtype=x.dtype)), lambda L, x: L.div(x, 0, rounding_mode="trunc"),
    lambda L, x: L.div(x, L.zeros(3, dtype=x.dtype), rounding_mode="floor"), lambda L, x: 1 / (x * 0),
    lambda L, x: 5 // (x * 0), lambda L, x: 5 % (x * 0), lambda L, x: x.floor_divide_(0),
    lambda L, x: x.remainder_(0), lambda L, x: L.gcd(x, x * 0),
]


@pytest.mark.parametrize("dt", list(_EXTREMES) + ["float32"])
def test_division_by_zero(dt):
    v = np.array(_EXTREMES.get(dt, [1.0, -1.0, 0.0]), dtype=dt)
    for f in _DIV0:
        n = check(f, v)
        if isinstance(n, Exception) and dt != "float32":   # (float32: only gcd raises, for the dtype)
            assert isinstance(n, ZeroDivisionError) and isinstance(n, RuntimeError), n


# --------------------------------------------------------------------------------------------- nn state_dicts
_X2 = np.random.RandomState(0).randn(3, 8).astype(np.float32)
_SEQ = np.random.RandomState(1).randn(5, 2, 8).astype(np.float32)
_SEQB = np.ascontiguousarray(_SEQ.transpose(1, 0, 2))
_IMG = np.random.RandomState(2).randn(2, 4, 9, 9).astype(np.float32)
_KPM = np.array([[False, False, True, False, True], [False] * 5])
_CAUSAL = np.triu(np.ones((5, 5), bool), 1)
_MODULES = {
    "Linear": (lambda L: L.nn.Linear(8, 5), [_X2], {}, False),
    "Conv2d_same_groups": (lambda L: L.nn.Conv2d(4, 6, 3, groups=2, dilation=2, padding="same"), [_IMG], {}, False),
    "Conv2d_reflect": (lambda L: L.nn.Conv2d(4, 6, 3, padding=2, padding_mode="reflect"), [_IMG], {}, False),
    "ConvTranspose2d": (lambda L: L.nn.ConvTranspose2d(4, 6, 3, stride=2, groups=2, dilation=2), [_IMG], {}, False),
    "Conv1d": (lambda L: L.nn.Conv1d(2, 4, 3, padding=1, stride=2), [_SEQB[:, :2]], {}, False),
    "BatchNorm2d_train": (lambda L: L.nn.BatchNorm2d(4, momentum=None), [_IMG], {}, True),
    "BatchNorm1d": (lambda L: L.nn.BatchNorm1d(8), [_X2], {}, False),
    "InstanceNorm2d_train": (lambda L: L.nn.InstanceNorm2d(4, affine=True, track_running_stats=True), [_IMG], {},
                             True),
    "LayerNorm_nobias": (lambda L: L.nn.LayerNorm([2, 8], bias=False), [_SEQ], {}, False),
    "GroupNorm": (lambda L: L.nn.GroupNorm(2, 4), [_IMG], {}, False),
    "Embedding": (lambda L: L.nn.Embedding(10, 4, padding_idx=2), [np.array([[1, 2, 9]])], {}, False),
    "LSTM_proj_bi": (lambda L: L.nn.LSTM(8, 6, proj_size=3, num_layers=2, bidirectional=True), [_SEQ], {}, False),
    "GRU_bf_bi": (lambda L: L.nn.GRU(8, 6, num_layers=2, bidirectional=True, batch_first=True), [_SEQB], {}, False),
    "RNN_relu_nobias": (lambda L: L.nn.RNN(8, 6, nonlinearity="relu", bias=False), [_SEQ], {}, False),
    "LSTMCell": (lambda L: L.nn.LSTMCell(8, 6), [_X2], {}, False),
    "MHA_kdim_vdim": (lambda L: L.nn.MultiheadAttention(8, 2, batch_first=True, kdim=5, vdim=3),
                      [_SEQB, _SEQB[..., :5], _SEQB[..., :3]], {}, False),
    "MHA_bias_kv": (lambda L: L.nn.MultiheadAttention(8, 2, add_bias_kv=True, add_zero_attn=True, bias=False),
                    [_SEQ, _SEQ, _SEQ], {}, False),
    "MHA_masks": (lambda L: L.nn.MultiheadAttention(8, 2, batch_first=True), [_SEQB, _SEQB, _SEQB],
                  {"attn_mask": _CAUSAL, "key_padding_mask": _KPM, "average_attn_weights": False}, False),
    "TransformerEncoderLayer": (lambda L: L.nn.TransformerEncoderLayer(8, 2, 16, 0.0, activation="gelu",
                                                                       batch_first=True, norm_first=True),
                                [_SEQB], {"src_key_padding_mask": _KPM}, False),
    "TransformerDecoderLayer": (lambda L: L.nn.TransformerDecoderLayer(8, 2, 16, 0.0, bias=False),
                                [_SEQ, _SEQ[:3]], {}, False),
    "Transformer": (lambda L: L.nn.Transformer(8, 2, 1, 1, 16, 0.0), [_SEQ, _SEQ[:3]], {}, False),
}


def _flat(o):
    if isinstance(o, (tuple, list)):
        return [y for z in o for y in _flat(z)]
    return [] if o is None else [o]


@pytest.mark.parametrize("name", list(_MODULES))
def test_module_state_dict_from_torch(name):
    ctor, inputs, kw, train = _MODULES[name]
    torch.manual_seed(0)
    tm, nm = ctor(torch), ctor(nee)
    tsd = tm.state_dict()
    assert [(k, tuple(v.shape)) for k, v in nm.state_dict().items()] == [(k, tuple(v.shape)) for k, v in tsd.items()]
    nm.load_state_dict({k: nee.tensor(v.numpy()) for k, v in tsd.items()})
    tm.train(train)
    nm.train(train)
    with torch.no_grad():
        to = tm(*[torch.from_numpy(np.ascontiguousarray(i)) for i in inputs],
                **{k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()})
    no = nm(*[nee.tensor(np.ascontiguousarray(i)) for i in inputs],
            **{k: nee.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()})
    fo, fn = _flat(to), _flat(no)
    assert len(fo) == len(fn)
    for a, b in zip(fo, fn):
        np.testing.assert_allclose(np.asarray(b.numpy()), a.detach().numpy(), rtol=2e-4, atol=2e-5)
    for k, v in tm.state_dict().items():   # the running statistics a training step updated
        np.testing.assert_allclose(np.asarray(nm.state_dict()[k].numpy()), v.numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=k)


# --------------------------------------------------------------------------------------------- known, not fixed here
def test_log_softmax_large_logits():
    x = np.full((2, 4), 1e4, np.float32)
    x[:, 1] += 0.5
    check(lambda L, a: L.log_softmax(a, 1), x, tol=1e-6)
    check(lambda L, a: L.nn.functional.cross_entropy(a, L.tensor([1, 0])), x, tol=1e-6)
    # long rows (the vectorised row kernels), float64, a strided (column) layout, and under nee.jit
    r = np.random.default_rng(0)
    y = (1e4 + r.standard_normal((3, 1037))).astype(np.float32)
    check(lambda L, a: L.log_softmax(a, 1), y, tol=1e-6)
    check(lambda L, a: L.log_softmax(a.double() * 1e8, 1), y, tol=1e-12)
    check(lambda L, a: L.log_softmax(a.t(), 0), y, tol=1e-6)
    check(lambda L, a: L.log_softmax(a.reshape(3, 17, 61), 1), y, tol=1e-6)
    np.testing.assert_array_equal(nee.jit(lambda a: nee.log_softmax(a, 1))(nee.tensor(y)).numpy(),
                                  nee.log_softmax(nee.tensor(y), 1).numpy())


def test_out_of_memory_error_is_public_like_torch():
    import torch
    assert issubclass(nee.OutOfMemoryError, RuntimeError) and issubclass(torch.OutOfMemoryError, RuntimeError)
    with pytest.raises(nee.OutOfMemoryError, match="shape"):
        nee.empty(1 << 40, 1 << 20)
