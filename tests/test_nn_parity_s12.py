"""nn module / functional parity round (session 12): torch modules built, their state_dict copied into the neetorch
module through numpy (load_state_dict), forward outputs compared (values, dtype, shape, tuple structure) together
with state_dict keys / shapes, parameter / buffer names, reprs, train-mode side effects and raising behaviour.

Also the fixes of this round: ``F.linear_cross_entropy`` / ``nn.LinearCrossEntropyLoss`` (new), the zeroed padded
positions of ``TransformerEncoder``'s nested-tensor path (eval), ``F.prelu`` on inputs below 2-D (one channel),
and the rank rules of ``dropout1d/2d/3d``."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import neetorch as nee
import neetorch.nn as nn

torch = pytest.importorskip("torch")
tnn = torch.nn


def _np(x):
    if isinstance(x, nee.Tensor):
        return np.array(x.numpy(force=True), copy=True)
    return x.detach().numpy().copy()


def _cmp(a, b, tol, path="out"):
    if isinstance(b, (tuple, list)):
        assert isinstance(a, (tuple, list)) and len(a) == len(b), f"{path}: structure {type(a)} vs {type(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            _cmp(x, y, tol, f"{path}[{i}]")
        return
    if b is None:
        assert a is None, f"{path}: expected None"
        return
    assert isinstance(a, nee.Tensor), f"{path}: got {type(a).__name__}"
    an, bn = _np(a), _np(b)
    assert an.shape == bn.shape, f"{path}: shape {an.shape} != torch {bn.shape}"
    assert str(a.dtype).split(".")[-1] == str(b.dtype).split(".")[-1], f"{path}: dtype {a.dtype} != {b.dtype}"
    np.testing.assert_allclose(an.astype(np.float64), bn.astype(np.float64), rtol=tol, atol=tol, equal_nan=True,
                               err_msg=path)


def _t(a):
    return torch.from_numpy(a.copy()) if isinstance(a, np.ndarray) else a


def _n(a):
    return nee.tensor(a.copy()) if isinstance(a, np.ndarray) else a


def check_module(name, targs=(), tkw=None, inputs=(), fkw=None, nkw=None, nargs=None, tol=1e-4, train=False,
                 dtype=None, repr_check=True):
    """Build torch's and neetorch's ``name`` with the same arguments, copy the weights, compare everything."""
    tkw = tkw or {}
    fkw = fkw or {}
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tm = getattr(tnn, name)(*targs, **tkw)
        nm = getattr(nn, name)(*(targs if nargs is None else nargs), **(tkw if nkw is None else nkw))
    if dtype is not None:
        tm, nm = tm.to(getattr(torch, dtype)), nm.to(getattr(nee, dtype))
    if not train:
        tm.eval()
        nm.eval()
    tsd, nsd = tm.state_dict(), nm.state_dict()
    assert list(nsd) == list(tsd)
    assert [tuple(v.shape) for v in nsd.values()] == [tuple(v.shape) for v in tsd.values()]
    assert [n for n, _ in nm.named_parameters()] == [n for n, _ in tm.named_parameters()]
    assert [n for n, _ in nm.named_buffers()] == [n for n, _ in tm.named_buffers()]
    if repr_check:
        assert repr(nm) == repr(tm)
    nm.load_state_dict({k: v.detach().numpy() for k, v in tsd.items()})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        terr = None
        try:
            with torch.no_grad():
                to = tm(*[_t(a) for a in inputs], **{k: _t(v) for k, v in fkw.items()})
        except Exception as e:  # noqa: BLE001 - raising parity is checked
            terr = e
        if terr is not None:
            with pytest.raises(Exception):
                nm(*[_n(a) for a in inputs], **{k: _n(v) for k, v in fkw.items()})
            return tm, nm
        no = nm(*[_n(a) for a in inputs], **{k: _n(v) for k, v in fkw.items()})
    _cmp(no, to, tol)
    if train:
        for k, v in tm.state_dict().items():
            _cmp(nm.state_dict()[k], v, tol, f"state after train-mode forward: {k}")
    return tm, nm


R = np.random.default_rng(12)


def rn(*s, dt=np.float32):
    return R.standard_normal(s).astype(dt)


# ------------------------------------------------------------------ new: linear_cross_entropy
W5 = np.abs(rn(5)) + 0.1
P45 = np.exp(rn(4, 5))
P45 = (P45 / P45.sum(1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("red", ["mean", "sum", "none"])
@pytest.mark.parametrize("case", ["plain", "weighted", "kdim", "unbatched", "probs", "probs_ignore_raises"])
def test_linear_cross_entropy_loss_module(red, case):
    kw = {"reduction": red}
    if case == "plain":
        check_module("LinearCrossEntropyLoss", (6, 5), kw, inputs=(rn(4, 6), np.array([0, 3, 4, -100])))
    elif case == "weighted":
        tkw = dict(kw, bias=True, ignore_index=3, label_smoothing=0.2)
        check_module("LinearCrossEntropyLoss", (6, 5), dict(tkw, weight=torch.from_numpy(W5)),
                     nkw=dict(tkw, weight=nee.tensor(W5)), inputs=(rn(4, 6), np.array([0, 3, 4, 1])))
    elif case == "kdim":
        check_module("LinearCrossEntropyLoss", (6, 5), dict(kw, out_features=(2, 3), bias=True),
                     inputs=(rn(4, 6), R.integers(0, 5, (4, 2, 3))))
    elif case == "unbatched":
        check_module("LinearCrossEntropyLoss", (6, 5), kw, inputs=(rn(6), np.array(2)))
    elif case == "probs":
        check_module("LinearCrossEntropyLoss", (6, 5), dict(kw, label_smoothing=0.1), inputs=(rn(4, 6), P45))
    else:
        check_module("LinearCrossEntropyLoss", (6, 5), dict(kw, ignore_index=1), inputs=(rn(4, 6), P45))


@pytest.mark.parametrize("args,kw", [
    ((rn(4, 6), rn(5, 6), np.array([0, 1, 2, 3])), {"linear_bias": rn(5), "reduction": "sum"}),
    ((rn(4, 6, dt=np.float64), rn(5, 2, 6, dt=np.float64), R.integers(0, 5, (4, 2))), {"label_smoothing": 0.3}),
    ((rn(6), rn(5, 6), np.array(4)), {"weight": W5, "reduction": "none"}),
    ((rn(4, 6), rn(5, 6), np.array([0, 1, 2, 3])), {"linear_bias": rn(4)}),           # bias shape: raises
    ((rn(4, 7), rn(5, 6), np.array([0, 1, 2, 3])), {}),                               # in_features: raises
    ((rn(2, 4, 6), rn(5, 6), np.array([0, 1, 2, 3])), {}),                            # 3-D input: raises
    ((rn(6), rn(5, 2, 6), np.array([0, 1])), {}),                                     # K-dim unbatched: raises
])
def test_linear_cross_entropy_functional(args, kw):
    terr = None
    try:
        to = torch.nn.functional.linear_cross_entropy(*[_t(a) for a in args], **{k: _t(v) for k, v in kw.items()})
    except Exception as e:  # noqa: BLE001
        terr = e
    if terr is not None:
        with pytest.raises(RuntimeError, match="linear_cross_entropy"):
            nn.functional.linear_cross_entropy(*[_n(a) for a in args], **{k: _n(v) for k, v in kw.items()})
        return
    _cmp(nn.functional.linear_cross_entropy(*[_n(a) for a in args], **{k: _n(v) for k, v in kw.items()}), to, 1e-5)


# ------------------------------------------------------------------ fix: TransformerEncoder nested-tensor path
@pytest.mark.parametrize("layer_kw,float_mask,aligned", [
    ({}, False, True), ({}, True, True), ({"activation": "gelu"}, False, True), ({"norm_first": True}, False, True),
    ({}, False, False), ({"batch_first": False}, False, True)])
def test_transformer_encoder_padded_positions(layer_kw, float_mask, aligned):
    E, H = 8, 2
    kpm = np.array([[0, 0, 0, 0, 0], [0, 0, 0, 1, 1], [0, 1, 1, 1, 1]], bool)
    if not aligned:
        kpm[2] = [0, 1, 0, 1, 0]
    mask = np.where(kpm, -np.inf, 0).astype(np.float32) if float_mask else kpm
    kw = dict({"batch_first": True}, **layer_kw)
    x = rn(3, 5, E) if kw["batch_first"] else rn(5, 3, E)
    tl, nl = tnn.TransformerEncoderLayer(E, H, 16, 0.0, **kw), nn.TransformerEncoderLayer(E, H, 16, 0.0, **kw)
    tm, nm = check_module("TransformerEncoder", (tl, 2), {"norm": tnn.LayerNorm(E)}, nargs=(nl, 2),
                          nkw={"norm": nn.LayerNorm(E)}, inputs=(x,), fkw={"src_key_padding_mask": mask})
    assert nm.use_nested_tensor == tm.use_nested_tensor
    assert nm.layers[0].activation_relu_or_gelu == tm.layers[0].activation_relu_or_gelu


def test_transformer_encoder_train_mode_keeps_padded_positions():
    E, H = 8, 2
    kpm = np.array([[0, 0, 0, 0], [0, 0, 1, 1]], bool)
    tl, nl = tnn.TransformerEncoderLayer(E, H, 16, 0.0, batch_first=True), \
        nn.TransformerEncoderLayer(E, H, 16, 0.0, batch_first=True)
    check_module("TransformerEncoder", (tl, 1), nargs=(nl, 1), inputs=(rn(2, 4, E),),
                 fkw={"src_key_padding_mask": kpm}, train=True)


# ------------------------------------------------------------------ fix: prelu below 2-D
@pytest.mark.parametrize("xs,ws", [((4,), (4,)), ((4,), (1,)), ((), (1,)), ((2, 4), (4,)), ((2, 3, 4), (3,)),
                                   ((2, 3, 4), (4,))])
def test_prelu_channel_rule(xs, ws):
    x, w = rn(*xs), np.abs(rn(*ws))
    try:
        to = torch.nn.functional.prelu(torch.from_numpy(x), torch.from_numpy(w))
    except RuntimeError:
        with pytest.raises(RuntimeError, match="channel size"):
            nn.functional.prelu(nee.tensor(x), nee.tensor(w))
        return
    _cmp(nn.functional.prelu(nee.tensor(x), nee.tensor(w)), to, 1e-6)


# ------------------------------------------------------------------ fix: dropout1d/2d/3d rank rules
def _channel_pattern(y, noise_shape):
    """True where ``y`` (all-ones input through a dropout) is constant over the dims that noise_shape has as 1."""
    red = tuple(i for i, s in enumerate(noise_shape) if s == 1)
    return np.all(y.max(axis=red, keepdims=True) == y.min(axis=red, keepdims=True))


@pytest.mark.parametrize("fn,shape,noise", [
    ("dropout2d", (6, 40, 7), (6, 40, 1)),       # torch: 3-D input to dropout2d is (N, C, L)
    ("dropout2d", (40, 5, 3, 2), (40, 5, 1, 1)),
    ("dropout2d", (30, 40), (30, 40)),
    ("dropout3d", (40, 3, 2, 2), (40, 1, 1, 1)),
    ("dropout3d", (30, 4), (30, 1)),              # unbatched: one draw per dim-0 entry
    ("dropout3d", (50,), (50,)),
    ("dropout1d", (40, 7), (40, 1)),
    ("dropout1d", (6, 40, 7), (6, 40, 1)),
])
def test_feature_dropout_rank_rules(fn, shape, noise):
    nee.manual_seed(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = getattr(nn.functional, fn)(nee.ones(*shape), 0.5, training=True).numpy()
        t = getattr(torch.nn.functional, fn)(torch.ones(*shape), 0.5, training=True).numpy()
    assert y.shape == t.shape == shape
    assert set(np.unique(y).tolist()) == {0.0, 2.0}
    assert _channel_pattern(y, noise) and _channel_pattern(t, noise)
    # the draws differ along every dim of noise_shape that is not 1 (not one draw reused)
    for d, s in enumerate(noise):
        if s > 1:
            assert len(np.unique(np.moveaxis(y, d, 0).reshape(s, -1)[:, 0])) == 2


@pytest.mark.parametrize("fn,shape,training", [("dropout1d", (3,), False), ("dropout1d", (2, 3, 4, 5), True),
                                                ("dropout2d", (3,), True), ("dropout2d", (3,), False),
                                                ("dropout3d", (2, 3), True)])
def test_feature_dropout_raising(fn, shape, training):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            r = getattr(torch.nn.functional, fn)(torch.ones(*shape), 0.5, training=training)
        except RuntimeError:
            with pytest.raises(RuntimeError):
                getattr(nn.functional, fn)(nee.ones(*shape), 0.5, training=training)
            return
        assert tuple(getattr(nn.functional, fn)(nee.ones(*shape), 0.5, training=training).shape) == tuple(r.shape)


# ------------------------------------------------------------------ differential sweep of module classes
E_, H_ = 8, 2
_KPM = np.zeros((3, 4), bool)
_KPM[1, 2:] = True
_CASES = [
    ("Bilinear", (4, 5, 3), {}, (rn(2, 4), rn(2, 5)), {}),
    ("Conv1d", (4, 6, 4), {"padding": "same", "padding_mode": "reflect", "dilation": 2, "groups": 2},
     (rn(2, 4, 9),), {}),
    ("Conv2d", (4, 6, (3, 2)), {"padding": (1, 2), "padding_mode": "circular", "stride": (2, 1)}, (rn(4, 7, 8),), {}),
    ("Conv3d", (2, 4, 3), {"padding": 1, "padding_mode": "replicate", "stride": 2}, (rn(1, 2, 5, 6, 7),), {}),
    ("Conv2d", (4, 6, 3), {}, (rn(2, 5, 7, 8),), {}),                                       # channel mismatch: raises
    ("ConvTranspose2d", (4, 6, (3, 2)), {"stride": 2, "output_padding": 1, "groups": 2, "dilation": 2, "padding": 1},
     (rn(2, 4, 5, 6),), {}),
    ("ConvTranspose1d", (4, 6, 3), {"stride": 2}, (rn(2, 4, 7),), {"output_size": [16]}),
    ("BatchNorm2d", (4,), {"momentum": None}, (rn(3, 4, 5, 2),), {}),
    ("InstanceNorm1d", (4,), {"affine": True, "track_running_stats": True}, (rn(2, 4, 7),), {}),
    ("LayerNorm", (5,), {"bias": False}, (rn(3, 4, 5),), {}),
    ("RMSNorm", ((4, 5),), {"eps": None}, (rn(3, 4, 5),), {}),
    ("GroupNorm", (3, 6), {"affine": False}, (rn(3, 6, 2),), {}),
    ("LocalResponseNorm", (3,), {"alpha": 1e-2, "beta": 0.7, "k": 2.0}, (rn(2, 5, 4, 3),), {}),
    ("Embedding", (5, 3), {"padding_idx": -1, "max_norm": 1.0, "norm_type": 1.5},
     (np.array([[0, 2, 4], [4, 3, 1]]),), {}),
    ("EmbeddingBag", (5, 3), {"mode": "max", "padding_idx": 2},
     (np.array([0, 2, 4, 4, 3, 1, 2]), np.array([0, 3, 3, 5])), {}),
    ("EmbeddingBag", (5, 3), {"mode": "sum"}, (np.array([0, 2, 4, 4, 3, 1, 2]), np.array([0, 3, 3, 5])),
     {"per_sample_weights": rn(7)}),
    ("MultiheadAttention", (E_, H_), {"add_bias_kv": True, "add_zero_attn": True, "kdim": 5, "vdim": 6},
     (rn(5, 3, E_), rn(4, 3, 5), rn(4, 3, 6)),
     {"key_padding_mask": _KPM, "attn_mask": np.triu(np.ones((5, 4), bool), 1)}),
    ("MultiheadAttention", (E_, H_), {"batch_first": True}, (rn(3, 5, E_), rn(3, 4, E_), rn(3, 4, E_)),
     {"attn_mask": rn(3 * H_, 5, 4), "average_attn_weights": False}),
    ("TransformerDecoderLayer", (E_, H_, 16, 0.0), {"norm_first": True, "activation": "gelu"},
     (rn(5, 3, E_), rn(4, 3, E_)), {"tgt_mask": np.triu(np.ones((5, 5), bool), 1), "tgt_is_causal": True}),
    ("LSTM", (4, 6, 2), {"proj_size": 3, "bidirectional": True, "batch_first": True}, (rn(3, 5, 4),), {}),
    ("GRU", (4, 6, 2), {"bidirectional": True}, (rn(5, 4), rn(4, 6)), {}),
    ("RNN", (4, 6), {"nonlinearity": "relu", "num_layers": 2}, (rn(5, 3, 5),), {}),            # input_size: raises
    ("MaxPool2d", ((3, 2),), {"stride": 2, "padding": 1, "dilation": (1, 2), "ceil_mode": True, "return_indices": True},
     (rn(2, 3, 9, 10),), {}),
    ("AvgPool3d", ((2, 3, 2),), {"stride": (2, 1, 2), "padding": 1, "ceil_mode": True, "count_include_pad": False,
                                 "divisor_override": 3}, (rn(2, 7, 8, 9),), {}),
    ("Upsample", (), {"scale_factor": (2, 0.6), "mode": "bicubic", "align_corners": True}, (rn(2, 3, 5, 7),), {}),
    ("Fold", (), {"output_size": (5, 6), "kernel_size": (2, 3), "dilation": (2, 1), "padding": 1, "stride": (1, 2)},
     (rn(2, 18, 12),), {}),
    ("ChannelShuffle", (3,), {}, (rn(2, 6, 3, 2),), {}),
    ("PairwiseDistance", (1.5, 1e-3, True), {}, (rn(5), rn(3, 5)), {}),
    ("AdaptiveLogSoftmaxWithLoss", (8, 20, [5, 12]), {"div_value": 2.0, "head_bias": True},
     (rn(6, 8), np.array([0, 4, 5, 11, 12, 19])), {}),
    ("PReLU", (4,), {}, (rn(4),), {}),                                                   # 1-D, 4 weights: raises
]


@pytest.mark.parametrize("case", _CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(_CASES)])
def test_module_sweep(case):
    name, targs, tkw, inputs, fkw = case
    check_module(name, targs, tkw, inputs=inputs, fkw=fkw)


@pytest.mark.parametrize("name,shape", [("BatchNorm1d", (3, 4, 5)), ("BatchNorm3d", (2, 4, 3, 2, 2)),
                                        ("InstanceNorm2d", (2, 4, 5, 3))])
def test_norm_train_mode_updates_running_stats(name, shape):
    kw = {"track_running_stats": True, "affine": True} if name.startswith("Instance") else {"momentum": 0.3}
    check_module(name, (4,), kw, inputs=(rn(*shape, dt=np.float64),), dtype="float64", train=True)


# ------------------------------------------------------------------ new: nn.utils fusion / weight_norm / norms
def _copy(tm, nm):
    nm.load_state_dict({k: np.asarray(v.detach().numpy()) for k, v in tm.state_dict().items()})


@pytest.mark.parametrize("transpose,bias", [(False, False), (False, True), (True, True)])
def test_fuse_conv_bn_eval(transpose, bias):
    torch.manual_seed(1)
    tc = (tnn.ConvTranspose2d(3, 4, 3, bias=bias) if transpose else tnn.Conv2d(3, 4, 3, bias=bias)).eval()
    tb = tnn.BatchNorm2d(4).eval()
    with torch.no_grad():
        tb.running_mean.uniform_(-1, 1)
        tb.running_var.uniform_(0.5, 2)
        tb.weight.uniform_(0.5, 2)
        tb.bias.uniform_(-1, 1)
    nc = (nn.ConvTranspose2d(3, 4, 3, bias=bias) if transpose else nn.Conv2d(3, 4, 3, bias=bias)).eval()
    nb = nn.BatchNorm2d(4).eval()
    _copy(tc, nc)
    _copy(tb, nb)
    tf = torch.nn.utils.fuse_conv_bn_eval(tc, tb, transpose=transpose)
    nf = nn.utils.fuse_conv_bn_eval(nc, nb, transpose=transpose)
    assert isinstance(nf.weight, nn.Parameter) and isinstance(nf.bias, nn.Parameter) and nf is not nc
    assert list(nf.state_dict()) == list(tf.state_dict())
    x = rn(2, 3, 6, 5)
    with torch.no_grad():
        _cmp(nf(nee.tensor(x)), tf(torch.from_numpy(x)), 1e-4)
    _cmp(nb(nc(nee.tensor(x))), tb(tc(torch.from_numpy(x))).detach(), 1e-4)   # unfused pair, same values
    with pytest.raises(AssertionError, match="eval"):
        nn.utils.fuse_conv_bn_eval(nc.train(), nb)


def test_fuse_linear_bn_eval():
    torch.manual_seed(2)
    tl, tb = tnn.Linear(5, 4).eval(), tnn.BatchNorm1d(4).eval()
    with torch.no_grad():
        tb.running_mean.uniform_(-1, 1)
        tb.running_var.uniform_(0.5, 2)
    nl, nb = nn.Linear(5, 4).eval(), nn.BatchNorm1d(4).eval()
    _copy(tl, nl)
    _copy(tb, nb)
    x = rn(3, 5)
    with torch.no_grad():
        _cmp(nn.utils.fuse_linear_bn_eval(nl, nb)(nee.tensor(x)),
             torch.nn.utils.fuse_linear_bn_eval(tl, tb)(torch.from_numpy(x)), 1e-5)
    w, b = nn.utils.fuse_linear_bn_weights(nl.weight, None, nb.running_mean, nb.running_var, nb.eps, nb.weight,
                                           nb.bias)
    tw, tb_ = torch.nn.utils.fuse_linear_bn_weights(tl.weight, None, tb.running_mean, tb.running_var, tb.eps,
                                                    tb.weight, tb.bias)
    _cmp(w, tw.detach(), 1e-6)
    _cmp(b, tb_.detach(), 1e-6)


@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("dim", [0, 1, None])
def test_weight_norm_hook_form(dim):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        tm = torch.nn.utils.weight_norm(tnn.Conv1d(3, 4, 3), dim=dim)
        nm = nn.utils.weight_norm(nn.Conv1d(3, 4, 3), dim=dim)
    tsd, nsd = tm.state_dict(), nm.state_dict()
    assert list(nsd) == list(tsd) == ["bias", "weight_g", "weight_v"]
    assert [tuple(v.shape) for v in nsd.values()] == [tuple(v.shape) for v in tsd.values()]
    sd = {k: np.asarray(v.numpy() * 1.3, np.float32) for k, v in tsd.items()}    # g no longer the norm of v
    tm.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()})
    nm.load_state_dict(sd)
    x = rn(2, 3, 7)
    with torch.no_grad():
        _cmp(nm(nee.tensor(x)), tm(torch.from_numpy(x)), 1e-5)
        with pytest.raises(RuntimeError, match="two weight_norm"):
            nn.utils.weight_norm(nm, dim=dim)
        torch.nn.utils.remove_weight_norm(tm)
        nn.utils.remove_weight_norm(nm)
        assert list(nm.state_dict()) == list(tm.state_dict())
        _cmp(nm(nee.tensor(x)), tm(torch.from_numpy(x)), 1e-5)
    with pytest.raises(ValueError, match="not found"):
        nn.utils.remove_weight_norm(nm)


@pytest.mark.parametrize("p", [2.0, 1, float("inf")])
def test_get_total_norm_and_skip_init(p):
    ts = [rn(3, 4), rn(5)]
    _cmp(nn.utils.get_total_norm([nee.tensor(a) for a in ts], p),
         torch.nn.utils.get_total_norm([torch.from_numpy(a) for a in ts], p), 1e-5)
    m = nn.utils.skip_init(nn.Linear, 3, 4, bias=False)
    assert tuple(m.weight.shape) == (4, 3) and m.bias is None


def test_parameter_dict_repr_uses_type_names():
    t = tnn.ParameterDict({"x": tnn.Parameter(torch.zeros(2, 3, dtype=torch.float64)),
                           "a": tnn.Parameter(torch.zeros(2, dtype=torch.bfloat16))})
    n = nn.ParameterDict({"x": nn.Parameter(nee.zeros(2, 3, dtype=nee.float64)),
                          "a": nn.Parameter(nee.zeros(2, dtype=nee.bfloat16))})
    assert repr(n).replace("neetorch.", "torch.") == repr(t)
    tl = tnn.ParameterList([tnn.Parameter(torch.zeros(2, 3))])
    nl = nn.ParameterList([nn.Parameter(nee.zeros(2, 3))])
    assert repr(nl).replace("neetorch.", "torch.") == repr(tl)


@pytest.mark.parametrize("dim", [0, 2, None])
def test_parametrizations_weight_norm(dim):
    import copy
    P, NP = torch.nn.utils.parametrizations, nn.utils.parametrizations
    torch.manual_seed(0)
    tm, nm = P.weight_norm(tnn.Conv1d(3, 4, 3), dim=dim), NP.weight_norm(nn.Conv1d(3, 4, 3), dim=dim)
    assert repr(nm) == repr(tm)                                   # ParametrizedConv1d(... (parametrizations) ...)
    tsd = tm.state_dict()
    assert list(nm.state_dict()) == list(tsd)                    # bias, parametrizations.weight.original0/1
    assert [n for n, _ in nm.named_parameters()] == [n for n, _ in tm.named_parameters()]
    sd = {k: np.asarray(v.numpy() * 1.3, np.float32) for k, v in tsd.items()}
    tm.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()})
    nm.load_state_dict(sd)
    x = rn(2, 3, 7)
    with torch.no_grad():
        _cmp(nm(nee.tensor(x)), tm(torch.from_numpy(x)), 1e-5)
        _cmp(copy.deepcopy(nm)(nee.tensor(x)), tm(torch.from_numpy(x)), 1e-5)
        assert nn.utils.parametrize.is_parametrized(nm, "weight")
        assert not nn.utils.parametrize.is_parametrized(nm, "bias")
        assert nn.utils.parametrize.type_before_parametrizations(nm) is nn.Conv1d
        torch.nn.utils.parametrize.remove_parametrizations(tm, "weight")
        nn.utils.parametrize.remove_parametrizations(nm, "weight")
        assert type(nm) is nn.Conv1d and repr(nm) == repr(tm) and list(nm.state_dict()) == list(tm.state_dict())
        _cmp(nm(nee.tensor(x)), tm(torch.from_numpy(x)), 1e-5)


@pytest.mark.parametrize("cls,args,shape", [("Linear", (5, 4), (3, 5)), ("Conv2d", (3, 4, 3), (1, 3, 5, 5)),
                                            ("ConvTranspose2d", (3, 4, 3), (1, 3, 5, 5))])
def test_parametrizations_spectral_norm(cls, args, shape):
    P, NP = torch.nn.utils.parametrizations, nn.utils.parametrizations
    torch.manual_seed(0)
    tm, nm = P.spectral_norm(getattr(tnn, cls)(*args)), NP.spectral_norm(getattr(nn, cls)(*args))
    tsd = tm.state_dict()
    assert list(nm.state_dict()) == list(tsd)                    # ... original, parametrizations.weight.0._u/_v
    assert [tuple(v.shape) for v in nm.state_dict().values()] == [tuple(v.shape) for v in tsd.values()]
    assert repr(nm) == repr(tm)
    nm.load_state_dict({k: v.numpy() for k, v in tsd.items()})
    x = rn(*shape)
    with torch.no_grad():
        _cmp(nm.eval()(nee.tensor(x)), tm.eval()(torch.from_numpy(x)), 1e-5)
        _cmp(nm.train()(nee.tensor(x)), tm.train()(torch.from_numpy(x)), 1e-4)   # one power step, u / v updated
        _cmp(nm.parametrizations.weight[0]._u, tm.parametrizations.weight[0]._u, 1e-4)
    # the spectral norm of the result is ~1 (after the 15 power steps at registration)
    w = nn.utils.parametrizations.spectral_norm(nn.Linear(6, 5)).eval().weight.numpy()
    assert abs(np.linalg.norm(w, 2) - 1.0) < 1e-2


@pytest.mark.parametrize("train,shape", [(False, (2, 3, 4)), (True, (4, 3)), (True, (2, 3, 2, 2, 2)), (False, (3,))])
def test_sync_batch_norm_single_process(train, shape):
    check_module("SyncBatchNorm", (3,), {"momentum": 0.2}, inputs=(rn(*shape),), train=train)


def test_convert_sync_batchnorm():
    tm = tnn.Sequential(tnn.Conv2d(2, 3, 1), tnn.BatchNorm2d(3), tnn.Sequential(tnn.BatchNorm2d(3, affine=False)))
    nm = nn.Sequential(nn.Conv2d(2, 3, 1), nn.BatchNorm2d(3), nn.Sequential(nn.BatchNorm2d(3, affine=False)))
    ts, ns = tnn.SyncBatchNorm.convert_sync_batchnorm(tm), nn.SyncBatchNorm.convert_sync_batchnorm(nm)
    assert repr(ns) == repr(ts) and list(ns.state_dict()) == list(ts.state_dict())
    _copy(ts, ns)
    x = rn(2, 2, 3, 3)
    with torch.no_grad():
        _cmp(ns.eval()(nee.tensor(x)), ts.eval()(torch.from_numpy(x)), 1e-5)


@pytest.mark.parametrize("mem_mask", [False, True])
def test_transformer_eval_src_padding(mem_mask):
    """nn.Transformer's encoder takes torch's nested-tensor path too: zeroed padded memory rows reach the decoder."""
    E = 8
    kpm = np.zeros((3, 5), bool)
    kpm[1, 3:] = True
    kpm[2, 1:] = True
    fkw = {"src_key_padding_mask": kpm}
    if mem_mask:
        fkw["memory_key_padding_mask"] = kpm
    check_module("Transformer", (), dict(d_model=E, nhead=2, num_encoder_layers=2, num_decoder_layers=1,
                                         dim_feedforward=16, dropout=0.0, batch_first=True),
                 inputs=(rn(3, 5, E), rn(3, 4, E)), fkw=fkw)


@pytest.mark.parametrize("cls,args,shape", [("Linear", (5, 4), (3, 5)), ("ConvTranspose2d", (3, 4, 3), (1, 3, 5, 5))])
def test_spectral_norm_hook_form(cls, args, shape):
    torch.manual_seed(0)
    tm, nm = torch.nn.utils.spectral_norm(getattr(tnn, cls)(*args)), nn.utils.spectral_norm(getattr(nn, cls)(*args))
    tsd = tm.state_dict()
    assert list(nm.state_dict()) == list(tsd)                    # bias, weight_orig, weight_u, weight_v
    assert [tuple(v.shape) for v in nm.state_dict().values()] == [tuple(v.shape) for v in tsd.values()]
    nm.load_state_dict({k: v.numpy() for k, v in tsd.items()})
    x = rn(*shape)
    with torch.no_grad():
        for mode in ("eval", "train", "train", "eval"):                # power steps only in training mode
            _cmp(getattr(nm, mode)()(nee.tensor(x)), getattr(tm, mode)()(torch.from_numpy(x)), 1e-4)
            _cmp(nm.weight_u, tm.weight_u, 1e-4)
        torch.nn.utils.remove_spectral_norm(tm)
        nn.utils.remove_spectral_norm(nm)
        assert list(nm.state_dict()) == list(tm.state_dict())
        _cmp(nm(nee.tensor(x)), tm(torch.from_numpy(x)), 1e-4)
