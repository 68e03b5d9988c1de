"""nn / nn.functional parity round (session 16), differential against torch (CPU):

* the normalization functionals (batch_norm / layer_norm / group_norm / instance_norm) refuse parameters of another
  dtype as torch's CPU kernels do ("mixed dtype (CPU)"), except torch's mixed case (float16 / bfloat16 input,
  float32 parameters); ``prelu`` refuses a weight of another dtype;
* ``nll_loss`` / ``cross_entropy`` with a 1-D input take a 1-D target of one element (a 0-d result, as torch);
* ``conv_transpose1d/2d/3d`` whose padding eats the whole output give an empty result instead of raising;
* ``F.multi_head_attention_forward`` supports ``static_k`` / ``static_v``.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import neetorch as nee
import neetorch.nn as nn
import neetorch.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional

R = np.random.default_rng(16)


def rn(*s):
    return R.standard_normal(s).astype(np.float32)


def _np(x):
    if isinstance(x, nee.Tensor):
        if str(x.dtype).endswith("bfloat16"):
            x = x.to(nee.float32)
        return np.array(x.numpy(force=True), copy=True)
    x = x.detach()
    if x.dtype == torch.bfloat16:
        x = x.float()
    return x.numpy().copy()


def _cmp(a, b, tol):
    if isinstance(b, (tuple, list)):
        assert isinstance(a, (tuple, list)) and len(a) == len(b)
        for x, y in zip(a, b):
            _cmp(x, y, tol)
        return
    if b is None:
        assert a is None
        return
    an, bn = _np(a), _np(b)
    assert an.shape == bn.shape, f"shape {an.shape} != torch {bn.shape}"
    assert str(a.dtype).split(".")[-1] == str(b.dtype).split(".")[-1], f"dtype {a.dtype} != torch {b.dtype}"
    np.testing.assert_allclose(an.astype(np.float64), bn.astype(np.float64), rtol=tol, atol=tol)


def _conv(x, f):
    if isinstance(x, (list, tuple)):
        return type(x)(_conv(v, f) for v in x)
    if isinstance(x, dict):
        return {k: _conv(v, f) for k, v in x.items()}
    return f(x)


def _t(a):
    return torch.from_numpy(a.copy()) if isinstance(a, np.ndarray) else a


def _n(a):
    return nee.tensor(a.copy()) if isinstance(a, np.ndarray) else a


def check_pair(tfn, nfn, tol=1e-4):
    """Both raise, or both return the same values / dtypes / shapes."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with torch.no_grad():
                ref = tfn()
        except Exception:  # noqa: BLE001 - raising parity
            with pytest.raises(Exception):
                nfn()
            return None
        got = nfn()
    _cmp(got, ref, tol)
    return got


def check_fn(name, *args, tol=1e-4, **kw):
    return check_pair(lambda: getattr(TF, name)(*_conv(args, _t), **_conv(kw, _t)),
                      lambda: getattr(F, name)(*_conv(args, _n), **_conv(kw, _n)), tol)


# ------------------------------------------------------------------ normalization: parameter dtypes
_DTS = ["float32", "float64", "float16", "bfloat16"]
_X = rn(2, 4, 3, 5)
_P4 = np.abs(rn(4)) + 0.5
_P5 = np.abs(rn(5)) + 0.5

_NORMS = {
    "batch_norm_eval": lambda L, Fm, x, p: Fm.batch_norm(x, p(_P4 * 0), p(_P4), p(_P4), p(_P4), False),
    "batch_norm_train": lambda L, Fm, x, p: Fm.batch_norm(x, p(_P4 * 0), p(_P4), p(_P4), p(_P4), True),
    "batch_norm_no_stats": lambda L, Fm, x, p: Fm.batch_norm(x, None, None, p(_P4), p(_P4), True),
    "layer_norm": lambda L, Fm, x, p: Fm.layer_norm(x, (5,), p(_P5), p(_P5)),
    "layer_norm_weight_only": lambda L, Fm, x, p: Fm.layer_norm(x, (5,), p(_P5)),
    "group_norm": lambda L, Fm, x, p: Fm.group_norm(x, 2, p(_P4), p(_P4)),
    "instance_norm": lambda L, Fm, x, p: Fm.instance_norm(x, weight=p(_P4), bias=p(_P4)),
    "prelu": lambda L, Fm, x, p: Fm.prelu(x, p(_P4)),
}


@pytest.mark.parametrize("fn", sorted(_NORMS))
@pytest.mark.parametrize("xd,pd", [(a, b) for a in _DTS for b in _DTS])
def test_norm_parameter_dtypes(fn, xd, pd):
    """torch (CPU): same dtype everywhere, or the mixed case (low-precision input, float32 parameters); any other
    combination raises (old neetorch: cast the parameters to the input dtype and returned a result)."""
    f = _NORMS[fn]

    def run(L, Fm, mk):
        return f(L, Fm, mk(_X).to(getattr(L, xd)), lambda a: mk(a).to(getattr(L, pd)))

    tol = 1e-5 if xd == "float64" else (1e-4 if xd == "float32" else 3e-2)
    check_pair(lambda: run(torch, TF, _t), lambda: run(nee, F, _n), tol)


def test_norm_modules_mixed_dtype_raise():
    """A float32 module fed float64 input raises (torch: mixed dtype); a bfloat16 input through float32
    parameters runs and keeps the input dtype."""
    x = rn(3, 4, 5)
    for cls, args in [("BatchNorm1d", (4,)), ("LayerNorm", (5,)), ("GroupNorm", (2, 4)),
                      ("InstanceNorm1d", (4,)), ]:
        kw = {"affine": True} if cls == "InstanceNorm1d" else {}
        tm, nm = getattr(torch.nn, cls)(*args, **kw).eval(), getattr(nn, cls)(*args, **kw).eval()
        nm.load_state_dict({k: v.numpy() for k, v in tm.state_dict().items()})
        check_pair(lambda: tm(_t(x).double()), lambda: nm(_n(x).to(nee.float64)))
        check_pair(lambda: tm(_t(x).to(torch.bfloat16)), lambda: nm(_n(x).to(nee.bfloat16)), 3e-2)


# ------------------------------------------------------------------ nll / cross entropy: 1-D input, 1-element target
@pytest.mark.parametrize("name", ["nll_loss", "cross_entropy"])
@pytest.mark.parametrize("red", ["none", "sum", "mean"])
@pytest.mark.parametrize("target", [np.array([1]), np.array(1), np.array([1, 2]), np.array([[1]])],
                         ids=["1-elem", "0-d", "2-elem", "2-D"])
@pytest.mark.parametrize("kw", [{}, {"weight": np.abs(rn(3)) + 0.1}, {"ignore_index": 1}],
                         ids=["plain", "weight", "ignore"])
def test_loss_1d_input_one_element_target(name, red, target, kw):
    """torch: F.nll_loss(x (3,), tensor([1])) is x's class-1 term, 0-d (old neetorch: raised "expected a 0-d
    target for a 1-D input"); a longer 1-D target raises."""
    check_fn(name, rn(3), target, reduction=red, **kw)


# ------------------------------------------------------------------ conv_transpose: empty output
@pytest.mark.parametrize("nd,cin,shape,kw", [
    (1, 2, (2, 2, 3), {"padding": 2}),
    (2, 2, (2, 2, 3, 3), {"padding": 2}),
    (2, 2, (2, 2, 3, 3), {"padding": (2, 0)}),
    (3, 2, (2, 2, 6, 5, 3), {"padding": (1, 2, 2), "groups": 2}),
    (3, 2, (2, 6, 5, 3), {"padding": (1, 2, 2), "groups": 2}),
    (1, 2, (2, 2, 2), {"padding": 2}),                                  # negative size: raises
])
def test_conv_transpose_empty_output(nd, cin, shape, kw):
    """torch: ConvTranspose{1,2,3}d(2, 4, 2, padding=2) on a 3-wide input gives an empty (N, 4, 0) result (old
    neetorch raised "Output size is too small"); a negative size still raises."""
    torch.manual_seed(0)
    tm = getattr(torch.nn, f"ConvTranspose{nd}d")(cin, 4, 2, **kw)
    nm = getattr(nn, f"ConvTranspose{nd}d")(cin, 4, 2, **kw)
    nm.load_state_dict({k: v.numpy() for k, v in tm.state_dict().items()})
    x = rn(*shape)
    check_pair(lambda: tm(_t(x)), lambda: nm(_n(x)))


# ------------------------------------------------------------------ multi_head_attention_forward: static_k / static_v
_E, _H = 8, 2
_Q, _K, _V = rn(4, 3, _E), rn(5, 3, _E), rn(5, 3, _E)
_IPW, _IPB, _OW, _OB = rn(3 * _E, _E), rn(3 * _E), rn(_E, _E), rn(_E)


@pytest.mark.parametrize("case", [
    {"static_k": rn(6, 5, 4)},
    {"static_v": rn(6, 5, 4)},
    {"static_k": rn(6, 7, 4), "static_v": rn(6, 7, 4)},
    {"static_k": rn(6, 6, 4), "static_v": rn(6, 6, 4), "bias_k": rn(1, 1, _E), "bias_v": rn(1, 1, _E),
     "add_zero_attn": True, "key_padding_mask": np.zeros((3, 7), bool)},
    {"static_k": rn(6, 7, 4), "static_v": rn(6, 7, 4), "need_weights": False, "average_attn_weights": False},
    {"static_k": rn(6, 7, 4), "static_v": rn(6, 7, 4),
     "key_padding_mask": np.array([[0, 0, 0, 1, 1, 1, 1]] * 3, bool)},
    {"static_k": rn(5, 6, 4), "static_v": rn(5, 6, 4)},                 # wrong N*H: raises
    {"static_k": rn(6, 6, 4), "static_v": rn(6, 5, 4)},                 # k / v lengths differ: raises
], ids=lambda c: "-".join(sorted(c)))
def test_mha_forward_static_kv(case):
    """torch's F.multi_head_attention_forward(..., static_k=, static_v=) (N*H, S, head_dim) replace the projected
    keys / values (old neetorch: NotImplementedError)."""
    kw = dict(case)
    bk, bv, azo = kw.pop("bias_k", None), kw.pop("bias_v", None), kw.pop("add_zero_attn", False)
    check_fn("multi_head_attention_forward", _Q, _K, _V, _E, _H, _IPW, _IPB, bk, bv, azo, 0.0, _OW, _OB,
             training=False, tol=2e-4, **kw)


def test_mha_forward_static_kv_unbatched():
    check_fn("multi_head_attention_forward", _Q[:, 0], _K[:, 0], _V[:, 0], _E, _H, _IPW, _IPB, None, None, False,
             0.0, _OW, _OB, training=False, static_k=rn(2, 7, 4), static_v=rn(2, 7, 4), tol=2e-4)
