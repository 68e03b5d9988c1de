"""nee.nn modules against torch.nn: weights copied through numpy with load_state_dict, outputs compared.

Also the Module plumbing (registration, iteration, state_dict, hooks, to/half/eval), containers, init,
reprs (compared verbatim with torch's) and weight files (safetensors, nee.save/load).
"""
from __future__ import annotations

import copy
import math
import pickle
from collections import OrderedDict

import numpy as np
import pytest

import neetorch as nee
import neetorch.nn as nn
from neetorch import serialization

torch = pytest.importorskip("torch")
tnn = torch.nn

RTOL, ATOL = 1e-4, 1e-5


# ------------------------------------------------------------------ helpers
def _np(x):
    if isinstance(x, nee.Tensor):
        return np.array(x.numpy(force=True), copy=True)
    return x.detach().cpu().numpy().copy()


def copy_weights(tm, nm, strict=True):
    """torch module -> neetorch module through numpy (the documented interop path)."""
    return nm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()}, strict=strict)


def close(a, b, rtol=RTOL, atol=ATOL, msg=""):
    if isinstance(b, tuple):
        assert isinstance(a, tuple) and len(a) == len(b)
        for x, y in zip(a, b):
            close(x, y, rtol, atol, msg)
        return
    if b is None:
        assert a is None, msg
        return
    assert isinstance(a, nee.Tensor), f"{msg}: got {type(a).__name__}"
    an, bn = _np(a), _np(b)
    assert an.shape == bn.shape, f"{msg}: shape {an.shape} != torch {bn.shape}"
    np.testing.assert_allclose(an.astype(np.float64), bn.astype(np.float64), rtol=rtol, atol=atol, err_msg=msg)


def both(tm, nm, *arrays, rtol=RTOL, atol=ATOL, kwargs=None, copy=True):
    """Copy tm's weights into nm, run both on the same inputs, compare; returns the neetorch output."""
    if copy:
        copy_weights(tm, nm)
    kwargs = kwargs or {}
    tin = [torch.from_numpy(np.array(a, order="C")) if isinstance(a, np.ndarray) else a for a in arrays]
    nin = [nee.tensor(a) if isinstance(a, np.ndarray) else a for a in arrays]
    tk = {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    nk = {k: nee.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    with torch.no_grad():
        ref = tm(*tin, **tk)
    out = nm(*nin, **nk)
    close(out, ref, rtol, atol, msg=type(nm).__name__)
    return out


def rnd(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape).astype(dtype)


# ================================================================== Module plumbing (no compute kernels)
class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(nee.ones(3))
        self.register_buffer("scale", nee.full((3,), 2.0))
        self.register_buffer("tmp", nee.zeros(3), persistent=False)
        self.child = nn.Identity()

    def forward(self, x):
        return self.child(x * self.w * self.scale)


def test_parameter_basics():
    t = nee.arange(4.0)
    p = nn.Parameter(t)
    assert isinstance(p, nee.Tensor) and isinstance(p, nn.Parameter)
    assert p.requires_grad and p.shape == (4,)
    assert np.shares_memory(p.numpy(), t.numpy())  # like torch: no copy
    assert repr(p) == "Parameter containing:\ntensor([0., 1., 2., 3.], requires_grad=True)"
    assert repr(nn.Parameter(nee.ones(2), requires_grad=False)) == "Parameter containing:\ntensor([1., 1.])"
    assert type(p + 1) is nee.Tensor
    assert type(p.detach()) is nee.Tensor
    d = p.data
    assert type(d) is nee.Tensor and np.shares_memory(d.numpy(), p.numpy())
    q = copy.deepcopy(p)
    assert isinstance(q, nn.Parameter) and q.requires_grad and not np.shares_memory(q.numpy(), p.numpy())
    r = pickle.loads(pickle.dumps(p))
    assert isinstance(r, nn.Parameter) and r.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert nn.Parameter().shape == (0,)


def test_registration_and_setattr():
    m = Tiny()
    assert list(m._parameters) == ["w"] and list(m._buffers) == ["scale", "tmp"] and list(m._modules) == ["child"]
    assert m.w is m._parameters["w"]
    # plain tensor assigned to a parameter name is refused, None is allowed
    with pytest.raises(TypeError, match="cannot assign"):
        m.w = nee.zeros(3)
    m.w = None
    assert m._parameters["w"] is None and m.w is None and list(m.state_dict()) == ["scale"]
    m.w = nn.Parameter(nee.ones(3))
    # a buffer name accepts tensors
    m.scale = nee.full((3,), 3.0)
    assert m._buffers["scale"].tolist() == [3.0, 3.0, 3.0]
    # reassigning a name to another kind moves it
    m.child = nn.ReLU()
    assert isinstance(m.child, nn.ReLU)
    m.extra = 5
    assert m.extra == 5 and "extra" not in m._parameters
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        m.nope
    with pytest.raises(KeyError, match="already exists"):
        m.register_buffer("extra", nee.zeros(1))
    with pytest.raises(KeyError):
        m.register_parameter("a.b", nn.Parameter(nee.zeros(1)))
    with pytest.raises(TypeError):
        m.register_buffer("x", [1, 2])
    with pytest.raises(TypeError):
        m.add_module("x", 3)
    del m.child
    assert "child" not in m._modules
    m.buf2 = nn.Buffer(nee.zeros(2), persistent=False)
    assert "buf2" in m._buffers and "buf2" in m._non_persistent_buffers_set
    assert type(m.buf2) is nee.Tensor

    class NoInit(nn.Module):
        def __init__(self):
            self.p = nn.Parameter(nee.ones(1))

    with pytest.raises(AttributeError, match="before Module.__init__"):
        NoInit()


def test_iteration_dedupe_and_names():
    shared = nn.Linear(2, 2)
    net = nn.Sequential(shared, nn.ReLU(), shared, nn.Sequential(nn.Linear(2, 3)))
    assert [n for n, _ in net.named_modules()] == ["", "0", "1", "3", "3.0"]
    assert len(list(net.named_modules(remove_duplicate=False))) == 6
    assert [n for n, _ in net.named_parameters()] == ["0.weight", "0.bias", "3.0.weight", "3.0.bias"]
    assert len(list(net.named_parameters(remove_duplicate=False))) == 6
    assert [n for n, _ in net.named_parameters(prefix="m")][0] == "m.0.weight"
    assert list(net.named_parameters(recurse=False)) == []
    assert [n for n, _ in net.named_children()] == ["0", "1", "3"]
    assert len(list(net.children())) == 3 and len(list(net.modules())) == 5
    # tied weights in state_dict appear under every name (like torch)
    assert list(net.state_dict().keys()) == ["0.weight", "0.bias", "2.weight", "2.bias", "3.0.weight", "3.0.bias"]
    m = Tiny()
    assert [n for n, _ in m.named_buffers()] == ["scale", "tmp"]
    assert list(m.state_dict().keys()) == ["w", "scale"]  # non-persistent buffer left out
    assert m.get_submodule("child") is m.child and m.get_submodule("") is m
    assert m.get_parameter("w") is m.w
    assert m.get_buffer("scale") is m.scale
    with pytest.raises(AttributeError, match="has no attribute `zz`"):
        m.get_submodule("zz")
    with pytest.raises(AttributeError, match="not an nn.Parameter"):
        m.get_parameter("scale")
    d = dir(m)
    assert "w" in d and "scale" in d and "child" in d and "forward" in d


def test_train_eval_apply_hooks():
    net = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.3), nn.Sequential(nn.BatchNorm1d(2)))
    assert all(m.training for m in net.modules())
    assert net.eval() is net and not any(m.training for m in net.modules())
    net.train()
    assert all(m.training for m in net.modules())
    net.train(False)
    assert not net[2][0].training
    with pytest.raises(ValueError):
        net.train("yes")
    seen = []
    assert net.apply(lambda m: seen.append(type(m).__name__)) is net
    assert seen == ["Linear", "Dropout", "BatchNorm1d", "Sequential", "Sequential"]
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())
    net.zero_grad()

    m = Tiny()
    calls = []
    h1 = m.register_forward_pre_hook(lambda mod, args: (args[0] + 1,))
    h2 = m.register_forward_hook(lambda mod, args, out: out * 10)
    h3 = m.register_forward_hook(lambda mod, args, kwargs, out: calls.append(kwargs), with_kwargs=True)
    x = nee.ones(3)
    assert m(x).tolist() == [40.0, 40.0, 40.0]  # ((1+1) * 1 * 2) * 10
    assert calls == [{}]
    h1.remove()
    h2.remove()
    h3.remove()
    assert m(x).tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(NotImplementedError, match="missing the required \"forward\""):
        nn.Module()(x)


def test_misc_module_api():
    m = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU()))
    m.set_submodule("1.0", nn.Tanh())
    assert isinstance(m[1][0], nn.Tanh)
    m.register_module("extra", nn.Identity())
    assert m.extra is m._modules["extra"]
    w = m[0].weight
    m.to_empty(device="cpu")
    assert m[0].weight is w and tuple(w.shape) == (2, 2)
    assert m.share_memory() is m

    class WithScalar(nn.Module):
        def __init__(self):
            super().__init__()
            self.s = nn.Parameter(nee.tensor(1.0))

    ws = WithScalar()
    ws.load_state_dict({"s": np.array([3.0], np.float32)})  # 0-d params saved as 1-d still load (like torch)
    assert ws.s.item() == 3.0 and ws.s.ndim == 0


def test_to_dtype_and_device():
    m = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2), nn.Embedding(4, 2))
    w = m[0].weight
    m.double()
    assert m[0].weight is w and w.dtype is nee.float64  # same Parameter object, new storage
    assert m[1].running_mean.dtype is nee.float64
    assert m[1].num_batches_tracked.dtype is nee.int64  # integer buffers keep their dtype
    m.half()
    assert all(p.dtype is nee.float16 for p in m.parameters())
    m.float()
    assert all(p.dtype is nee.float32 for p in m.parameters())
    m.to(nee.float64)
    assert m[2].weight.dtype is nee.float64
    m.to("cpu", nee.float32)
    m.to(dtype=nee.float16)
    assert m[0].bias.dtype is nee.float16
    m.to(device="cpu")
    m.cpu()
    m.to(nee.zeros(1, dtype=nee.float32))
    assert m[0].weight.dtype is nee.float32
    with pytest.raises(TypeError, match="only accepts floating point"):
        m.to(nee.int64)
    assert m[1].num_batches_tracked.dtype is nee.int64


# ================================================================== state dict
class Net(nn.Module):
    def __init__(self, mod=nn):
        super().__init__()
        self.fc = mod.Linear(4, 3)
        self.bn = mod.BatchNorm1d(3)
        self.blocks = mod.ModuleList([mod.Linear(3, 3), mod.Linear(3, 3, bias=False)])

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


class TNet(tnn.Module):
    def __init__(self):
        super().__init__()
        self.fc = tnn.Linear(4, 3)
        self.bn = tnn.BatchNorm1d(3)
        self.blocks = tnn.ModuleList([tnn.Linear(3, 3), tnn.Linear(3, 3, bias=False)])


def test_state_dict_keys_match_torch_and_round_trip():
    t, n = TNet(), Net()
    assert list(n.state_dict().keys()) == list(t.state_dict().keys())
    for k, v in n.state_dict().items():
        assert tuple(v.shape) == tuple(t.state_dict()[k].shape), k
    with torch.no_grad():
        t.bn.running_mean.uniform_()
        t.bn.num_batches_tracked.fill_(7)
    res = copy_weights(t, n)
    assert res.missing_keys == [] and res.unexpected_keys == []
    assert repr(res) == "<All keys matched successfully>"
    for k, v in t.state_dict().items():
        np.testing.assert_array_equal(_np(n.state_dict()[k]), v.numpy())
    assert n.bn.num_batches_tracked.item() == 7 and n.bn.num_batches_tracked.dtype is nee.int64
    # torch tensors themselves (with requires_grad) are accepted too
    n2 = Net()
    n2.load_state_dict(t.state_dict())
    np.testing.assert_array_equal(_np(n2.fc.weight), t.fc.weight.detach().numpy())
    # neetorch -> neetorch, state_dict values are detached plain tensors sharing storage
    sd = n.state_dict()
    assert type(sd["fc.weight"]) is nee.Tensor and np.shares_memory(sd["fc.weight"].numpy(), n.fc.weight.numpy())
    assert isinstance(n.state_dict(keep_vars=True)["fc.weight"], nn.Parameter)
    n3 = Net()
    w = n3.fc.weight
    n3.load_state_dict(sd)
    assert n3.fc.weight is w  # copied in place
    np.testing.assert_array_equal(_np(n3.fc.weight), _np(n.fc.weight))
    assert not np.shares_memory(n3.fc.weight.numpy(), n.fc.weight.numpy())
    # and back into torch
    t2 = TNet()
    t2.load_state_dict({k: torch.from_numpy(_np(v)) for k, v in n.state_dict().items()})
    np.testing.assert_array_equal(t2.fc.weight.detach().numpy(), _np(n.fc.weight))


def test_load_state_dict_casts_and_assign():
    n = Net()
    sd = {k: _np(v).astype(np.float64) if _np(v).dtype == np.float32 else _np(v) for k, v in n.state_dict().items()}
    n.load_state_dict(sd)
    assert n.fc.weight.dtype is nee.float32  # copy_ keeps the model's dtype
    n.load_state_dict(sd, assign=True)
    assert n.fc.weight.dtype is nee.float64 and isinstance(n.fc.weight, nn.Parameter)
    assert n.bn.running_var.dtype is nee.float64


def test_load_state_dict_strict_errors():
    n = Net()
    sd = {k: _np(v) for k, v in n.state_dict().items()}
    bad = dict(sd)
    del bad["fc.bias"]
    bad["fc.extra"] = np.zeros(1, np.float32)
    bad["ghost.weight"] = np.zeros(1, np.float32)
    with pytest.raises(RuntimeError) as ei:
        n.load_state_dict(bad)
    msg = str(ei.value)
    assert msg.startswith("Error(s) in loading state_dict for Net:")
    assert 'Missing key(s) in state_dict: "fc.bias".' in msg
    assert 'Unexpected key(s) in state_dict: "ghost.weight", "fc.extra".' in msg
    with pytest.raises(RuntimeError) as tei:
        TNet().load_state_dict({k: torch.from_numpy(v) for k, v in bad.items()})
    assert msg == str(tei.value).replace("TNet", "Net")  # same message as torch, verbatim
    res = n.load_state_dict(bad, strict=False)
    assert res.missing_keys == ["fc.bias"] and res.unexpected_keys == ["ghost.weight", "fc.extra"]
    missing, unexpected = res
    assert missing == ["fc.bias"]
    bad2 = dict(sd)
    bad2["fc.weight"] = np.zeros((3, 5), np.float32)
    with pytest.raises(RuntimeError, match=r"size mismatch for fc\.weight: copying a param with shape "
                                           r"torch\.Size\(\[3, 5\]\) from checkpoint, the shape in current model "
                                           r"is torch\.Size\(\[3, 4\]\)\."):
        n.load_state_dict(bad2)
    # a shape mismatch is an error even when not strict
    with pytest.raises(RuntimeError, match="size mismatch") as ei:
        n.load_state_dict(bad2, strict=False)
    with pytest.raises(RuntimeError) as tei:
        TNet().load_state_dict({k: torch.from_numpy(v) for k, v in bad2.items()}, strict=False)
    assert str(ei.value) == str(tei.value).replace("TNet", "Net")
    with pytest.raises(TypeError):
        n.load_state_dict([1, 2])
    # num_batches_tracked may be missing from old checkpoints (torch fills it in)
    old = dict(sd)
    del old["bn.num_batches_tracked"]
    assert n.load_state_dict(old).missing_keys == []


def test_load_state_dict_non_persistent_and_none():
    m = Tiny()
    assert list(m.state_dict()) == ["w", "scale"]
    with pytest.raises(RuntimeError, match="Unexpected key"):
        m.load_state_dict({"w": np.ones(3, np.float32), "scale": np.ones(3, np.float32), "tmp": np.ones(3)})
    lin = nn.Linear(2, 2, bias=False)
    assert list(lin.state_dict()) == ["weight"]
    lin.load_state_dict({"weight": np.eye(2, dtype=np.float32)})
    assert _np(lin.weight).tolist() == [[1, 0], [0, 1]]


def test_state_dict_hooks_and_metadata():
    n = Net()
    sd = n.state_dict()
    assert sd._metadata["bn"]["version"] == 2
    got = []
    n.register_load_state_dict_post_hook(lambda mod, keys: got.append(tuple(keys.missing_keys)))
    n.load_state_dict(sd)
    assert got == [()]


# ================================================================== containers
def test_sequential_container():
    a, b, c = nn.ReLU(), nn.Tanh(), nn.Sigmoid()
    s = nn.Sequential(a, b)
    assert len(s) == 2 and s[0] is a and s[-1] is b
    s.append(c)
    assert list(s) == [a, b, c]
    sl = s[1:]
    assert isinstance(sl, nn.Sequential) and list(sl) == [b, c] and list(sl._modules) == ["1", "2"]
    del s[0]
    assert list(s._modules) == ["0", "1"] and s[0] is b
    s.insert(0, a)
    assert list(s) == [a, b, c]
    s[1] = nn.GELU()
    assert isinstance(s[1], nn.GELU)
    with pytest.raises(IndexError):
        s[5]
    od = nn.Sequential(OrderedDict([("act", a), ("out", c)]))
    assert od.act is a and list(od._modules) == ["act", "out"]
    assert len(s + od) == 5
    assert od.pop(0) is a and len(od) == 1
    x = nee.tensor([-1.0, 0.5])
    np.testing.assert_allclose(_np(nn.Sequential(nn.ReLU(), nn.Tanh())(x)), np.tanh(np.maximum([-1.0, 0.5], 0)),
                               rtol=1e-6)


def test_module_list_dict_param_containers():
    ml = nn.ModuleList([nn.ReLU(), nn.Tanh()])
    ml.append(nn.Sigmoid())
    ml.extend([nn.GELU()])
    ml.insert(1, nn.SiLU())
    assert [type(m).__name__ for m in ml] == ["ReLU", "SiLU", "Tanh", "Sigmoid", "GELU"]
    assert isinstance(ml[1:3], nn.ModuleList) and len(ml[1:3]) == 2
    del ml[0]
    assert list(ml._modules) == ["0", "1", "2", "3"] and isinstance(ml[0], nn.SiLU)
    assert isinstance(ml[-1], nn.GELU)
    with pytest.raises(IndexError):
        ml[10]
    with pytest.raises(TypeError):
        ml.extend(nn.ReLU())
    md = nn.ModuleDict({"a": nn.ReLU(), "b": nn.Tanh()})
    md["c"] = nn.Linear(1, 1)
    assert list(md.keys()) == ["a", "b", "c"] and "a" in md and len(md) == 3
    assert [n for n, _ in md.named_parameters()] == ["c.weight", "c.bias"]
    assert isinstance(md.pop("a"), nn.ReLU) and len(md) == 2
    pl = nn.ParameterList([nn.Parameter(nee.ones(2)), nee.zeros(3)])
    assert isinstance(pl[1], nn.Parameter) and len(pl) == 2
    pl.append(nee.ones(1))
    assert [n for n, _ in pl.named_parameters()] == ["0", "1", "2"]
    assert list(pl.state_dict().keys()) == ["0", "1", "2"]
    pd = nn.ParameterDict({"w": nee.ones(2)})
    pd["b"] = nn.Parameter(nee.zeros(2))
    assert list(pd.keys()) == ["w", "b"] and isinstance(pd["w"], nn.Parameter) and "b" in pd
    assert list(pd.state_dict().keys()) == ["w", "b"]
    # the same containers in torch give the same state_dict keys -> loadable
    tpl = tnn.ParameterList([tnn.Parameter(torch.ones(2)), tnn.Parameter(torch.zeros(3)),
                             tnn.Parameter(torch.full((1,), 5.0))])
    copy_weights(tpl, pl)
    assert pl[2].tolist() == [5.0]


# ================================================================== reprs (verbatim vs torch)
def _repr_eq(nm, tm):
    assert repr(nm) == repr(tm).replace("torch.", "neetorch.")


def test_repr_nested_model_matches_torch():
    def build(m):
        return m.Sequential(OrderedDict([
            ("stem", m.Sequential(m.Conv2d(3, 8, 3, stride=2, padding=1, bias=False), m.BatchNorm2d(8), m.ReLU(inplace=True))),
            ("blocks", m.ModuleList([m.Conv2d(8, 8, 3, padding=1, groups=2) for _ in range(3)] + [m.Identity()])),
            ("pool", m.AdaptiveAvgPool2d((1, 1))),
            ("flat", m.Flatten()),
            ("drop", m.Dropout(0.2)),
            ("head", m.Linear(8, 10)),
            ("attn", m.MultiheadAttention(8, 2, batch_first=True)),
            ("enc", m.TransformerEncoderLayer(8, 2, 16, activation="gelu", norm_first=True)),
            ("emb", m.Embedding(5, 8, padding_idx=0)),
            ("norms", m.ModuleDict({"ln": m.LayerNorm([4, 8]), "gn": m.GroupNorm(2, 8), "rms": m.RMSNorm(8, eps=1e-6)})),
        ]))
    _repr_eq(build(nn), build(tnn))


@pytest.mark.parametrize("make", [
    lambda m: m.Conv1d(2, 4, 3, stride=2, padding="same" if False else 1, dilation=2, padding_mode="reflect"),
    lambda m: m.Conv2d(4, 4, (3, 1), padding="same"),
    lambda m: m.ConvTranspose2d(3, 5, 3, stride=2, padding=1, output_padding=1, groups=1, bias=False),
    lambda m: m.ConvTranspose1d(3, 6, 4, stride=3, dilation=2, groups=3),
    lambda m: m.BatchNorm1d(5, momentum=None, affine=False),
    lambda m: m.LayerNorm(6, eps=1e-6, elementwise_affine=False),
    lambda m: m.Embedding(10, 4, max_norm=1.0),
    lambda m: m.MaxPool2d(3, 2, 1, ceil_mode=True),
    lambda m: m.MaxPool1d(2),
    lambda m: m.AvgPool2d(2),
    lambda m: m.AvgPool1d(3, 2, 1),
    lambda m: m.AdaptiveAvgPool1d(4),
    lambda m: m.AdaptiveMaxPool2d((2, 3)),
    lambda m: m.Upsample(scale_factor=2, mode="bilinear"),
    lambda m: m.Upsample(size=(4, 5)),
    lambda m: m.ZeroPad2d((1, 2, 0, 1)),
    lambda m: m.ConstantPad1d(2, 3.5),
    lambda m: m.ReflectionPad2d(1),
    lambda m: m.ReplicationPad1d((1, 2)),
    lambda m: m.Unflatten(1, (2, 5)),
    lambda m: m.LeakyReLU(0.2, inplace=True),
    lambda m: m.ELU(alpha=0.5),
    lambda m: m.CELU(),
    lambda m: m.Softplus(beta=2.0, threshold=10.0),
    lambda m: m.Hardtanh(-2.0, 2.0),
    lambda m: m.ReLU6(),
    lambda m: m.GELU(approximate="tanh"),
    lambda m: m.Threshold(0.1, 20.0),
    lambda m: m.PReLU(3),
    lambda m: m.GLU(),
    lambda m: m.Softmax(dim=-1),
    lambda m: m.LogSoftmax(1),
    lambda m: m.SiLU(),
    lambda m: m.Hardswish(),
    lambda m: m.CrossEntropyLoss(label_smoothing=0.1),
    lambda m: m.BCEWithLogitsLoss(),
    lambda m: m.Bilinear(2, 3, 4),
    lambda m: m.MultiheadAttention(8, 2, kdim=3, vdim=5, add_bias_kv=True),
    lambda m: m.TransformerEncoder(m.TransformerEncoderLayer(8, 2, 16), 2, norm=m.LayerNorm(8), enable_nested_tensor=False),
    lambda m: m.ParameterList([m.Parameter(torch.ones(2, 3) if m is tnn else nee.ones(2, 3))]),
])
def test_repr_layers_match_torch(make):
    _repr_eq(make(nn), make(tnn))


# ================================================================== init
def test_init_functions():
    nee.manual_seed(0)
    w = nee.empty(200, 300)
    nn.init.uniform_(w, -2, 3)
    a = _np(w)
    assert a.min() >= -2 and a.max() < 3 and abs(a.mean() - 0.5) < 0.05
    nn.init.normal_(w, 1.0, 2.0)
    a = _np(w)
    assert abs(a.mean() - 1.0) < 0.05 and abs(a.std() - 2.0) < 0.05
    nn.init.constant_(w, 0.25)
    assert np.all(_np(w) == 0.25)
    nn.init.ones_(w)
    nn.init.zeros_(w)
    assert np.all(_np(w) == 0)
    nn.init.xavier_uniform_(w, gain=2.0)
    bound = 2.0 * math.sqrt(6.0 / 500)
    assert np.abs(_np(w)).max() <= bound and np.abs(_np(w)).max() > 0.9 * bound
    nn.init.xavier_normal_(w)
    assert abs(_np(w).std() - math.sqrt(2.0 / 500)) < 0.005
    nn.init.kaiming_uniform_(w, a=math.sqrt(5))
    assert np.abs(_np(w)).max() <= 1 / math.sqrt(300)
    nn.init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu")
    assert abs(_np(w).std() - math.sqrt(2.0 / 200)) < 0.005
    nn.init.trunc_normal_(w, std=0.5, a=-0.4, b=0.6)
    assert _np(w).min() >= -0.4 and _np(w).max() <= 0.6
    e = nee.empty(3, 4)
    nn.init.eye_(e)
    assert _np(e).tolist() == np.eye(3, 4).tolist()
    d = nee.empty(4, 2, 3, 3)
    nn.init.dirac_(d)
    assert _np(d).sum() == 2 and _np(d)[1, 1, 1, 1] == 1
    o = nee.empty(6, 4)
    nn.init.orthogonal_(o)
    np.testing.assert_allclose(_np(o).T @ _np(o), np.eye(4), atol=1e-5)
    h = nee.empty(5, dtype=nee.float16)
    nn.init.uniform_(h)
    assert h.dtype is nee.float16
    for nl, p in [("linear", None), ("relu", None), ("tanh", None), ("leaky_relu", None), ("leaky_relu", 0.2),
                  ("selu", None), ("sigmoid", None), ("conv2d", None)]:
        assert nn.init.calculate_gain(nl, p) == pytest.approx(tnn.init.calculate_gain(nl, p))
    with pytest.raises(ValueError):
        nn.init.calculate_gain("nope")
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        nn.init.xavier_uniform_(nee.empty(3))
    # seeded: reproducible module initialisation
    nee.manual_seed(123)
    l1 = nn.Linear(5, 4)
    nee.manual_seed(123)
    l2 = nn.Linear(5, 4)
    np.testing.assert_array_equal(_np(l1.weight), _np(l2.weight))
    assert np.abs(_np(l1.weight)).max() <= 1 / math.sqrt(5) and np.abs(_np(l1.bias)).max() <= 1 / math.sqrt(5)


def test_default_init_distributions():
    conv = nn.Conv2d(4, 8, 3)
    assert np.abs(_np(conv.weight)).max() <= 1 / math.sqrt(36)
    assert np.all(_np(nn.LayerNorm(4).weight) == 1) and np.all(_np(nn.LayerNorm(4).bias) == 0)
    bn = nn.BatchNorm2d(3)
    assert _np(bn.running_var).tolist() == [1, 1, 1] and bn.num_batches_tracked.item() == 0
    emb = nn.Embedding(6, 3, padding_idx=-1)
    assert emb.padding_idx == 5 and np.all(_np(emb.weight)[5] == 0) and np.any(_np(emb.weight)[0] != 0)
    mha = nn.MultiheadAttention(6, 2)
    assert np.all(_np(mha.in_proj_bias) == 0) and np.all(_np(mha.out_proj.bias) == 0)
    assert _np(nn.PReLU(2).weight).tolist() == [0.25, 0.25]


# ================================================================== layers vs torch
@pytest.mark.parametrize("shape", [(5, 7), (7,), (2, 3, 7), (0, 7)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear(shape, bias):
    both(tnn.Linear(7, 5, bias=bias), nn.Linear(7, 5, bias=bias), rnd(*shape))


def test_linear_float64_and_noncontiguous_input():
    t, n = tnn.Linear(6, 3).double(), nn.Linear(6, 3).double()
    x = rnd(6, 4, dtype=np.float64).T
    out = both(t, n, x, rtol=1e-10, atol=1e-12)
    assert out.dtype is nee.float64


def test_bilinear():
    both(tnn.Bilinear(3, 4, 5), nn.Bilinear(3, 4, 5), rnd(6, 3), rnd(6, 4))
    both(tnn.Bilinear(3, 4, 2, bias=False), nn.Bilinear(3, 4, 2, bias=False), rnd(2, 6, 3), rnd(2, 6, 4))


@pytest.mark.parametrize("kw", [
    dict(kernel_size=3),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=2, dilation=2, padding=2, bias=False),
    dict(kernel_size=3, groups=2),
    dict(kernel_size=3, padding="same"),
    dict(kernel_size=4, padding="same", dilation=2),
    dict(kernel_size=3, padding=2, padding_mode="reflect"),
    dict(kernel_size=3, padding=1, padding_mode="replicate"),
    dict(kernel_size=3, padding=1, padding_mode="circular"),
])
def test_conv1d(kw):
    both(tnn.Conv1d(4, 6, **kw), nn.Conv1d(4, 6, **kw), rnd(2, 4, 11))
    both(tnn.Conv1d(4, 6, **kw), nn.Conv1d(4, 6, **kw), rnd(4, 9))  # unbatched


@pytest.mark.parametrize("kw", [
    dict(kernel_size=3),
    dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0)),
    dict(kernel_size=3, dilation=2, padding=1, bias=False),
    dict(kernel_size=3, groups=2, stride=2),
    dict(kernel_size=(3, 5), padding="same"),
    dict(kernel_size=3, padding="valid"),
    dict(kernel_size=3, padding=1, padding_mode="reflect"),
    dict(kernel_size=3, padding=(1, 2), padding_mode="replicate"),
    dict(kernel_size=3, padding=1, padding_mode="circular"),
])
def test_conv2d(kw):
    both(tnn.Conv2d(4, 6, **kw), nn.Conv2d(4, 6, **kw), rnd(2, 4, 9, 8))


def test_conv2d_depthwise_unbatched():
    both(tnn.Conv2d(3, 6, 3, groups=3, padding=1), nn.Conv2d(3, 6, 3, groups=3, padding=1), rnd(3, 7, 5))


@pytest.mark.parametrize("kw", [
    dict(kernel_size=3),
    dict(kernel_size=3, stride=2, padding=1, output_padding=1),
    dict(kernel_size=4, stride=3, dilation=2, groups=2, bias=False),
])
def test_conv_transpose(kw):
    both(tnn.ConvTranspose2d(4, 6, **kw), nn.ConvTranspose2d(4, 6, **kw), rnd(2, 4, 5, 6))
    both(tnn.ConvTranspose1d(4, 6, **kw), nn.ConvTranspose1d(4, 6, **kw), rnd(2, 4, 7))


def test_conv_transpose_output_size():
    t, n = tnn.ConvTranspose2d(3, 2, 3, stride=2, padding=1), nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1)
    x = rnd(1, 3, 4, 5)
    out = both(t, n, x, kwargs={"output_size": [8, 10]})
    assert tuple(out.shape) == (1, 2, 8, 10)
    with pytest.raises(ValueError, match="requested an output size"):
        n(nee.tensor(x), output_size=[20, 20])
    t1, n1 = tnn.ConvTranspose1d(3, 2, 3, stride=2), nn.ConvTranspose1d(3, 2, 3, stride=2)
    both(t1, n1, rnd(2, 3, 5), kwargs={"output_size": (12,)})


@pytest.mark.parametrize("args,kw", [((7,), {}), ((7,), dict(eps=1e-3, elementwise_affine=False)),
                                     (([3, 7],), {}), ((7,), dict(bias=False))])
def test_layer_norm(args, kw):
    t, n = tnn.LayerNorm(*args, **kw), nn.LayerNorm(*args, **kw)
    if kw.get("elementwise_affine", True):
        with torch.no_grad():
            t.weight.normal_()
            if t.bias is not None:
                t.bias.normal_()
    both(t, n, rnd(2, 3, 7) * 3 + 1)


def test_group_norm_rms_norm():
    t, n = tnn.GroupNorm(3, 6), nn.GroupNorm(3, 6)
    with torch.no_grad():
        t.weight.normal_()
        t.bias.normal_()
    both(t, n, rnd(2, 6, 5, 3))
    both(tnn.GroupNorm(2, 4, affine=False), nn.GroupNorm(2, 4, affine=False), rnd(3, 4, 7))
    t, n = tnn.RMSNorm(5, eps=1e-6), nn.RMSNorm(5, eps=1e-6)
    with torch.no_grad():
        t.weight.normal_()
    both(t, n, rnd(3, 4, 5))
    both(tnn.RMSNorm([4, 5]), nn.RMSNorm([4, 5]), rnd(3, 4, 5))
    both(tnn.RMSNorm(5, elementwise_affine=False), nn.RMSNorm(5, elementwise_affine=False), rnd(2, 5))


@pytest.mark.parametrize("cls,shape", [("BatchNorm1d", (4, 5)), ("BatchNorm1d", (4, 5, 3)),
                                       ("BatchNorm2d", (2, 5, 3, 4))])
def test_batch_norm_eval_uses_running_stats(cls, shape):
    t, n = getattr(tnn, cls)(5), getattr(nn, cls)(5)
    with torch.no_grad():
        t.weight.normal_()
        t.bias.normal_()
        t.running_mean.normal_()
        t.running_var.uniform_(0.5, 2.0)
    t.eval()
    n.eval()
    both(t, n, rnd(*shape))
    assert n.num_batches_tracked.item() == 0


def test_batch_norm_train_mode_uses_batch_stats():
    t, n = tnn.BatchNorm2d(3), nn.BatchNorm2d(3)
    copy_weights(t, n)
    x = rnd(4, 3, 5, 5) * 2 + 1
    ref = t(torch.from_numpy(x))
    out = n(nee.tensor(x))
    close(out, ref.detach())
    assert n.num_batches_tracked.item() == 1
    t2, n2 = tnn.BatchNorm1d(3, affine=False, track_running_stats=False), \
        nn.BatchNorm1d(3, affine=False, track_running_stats=False)
    assert list(n2.state_dict()) == []
    n2.eval()
    t2.eval()
    both(t2, n2, rnd(6, 3))  # no running stats: batch statistics even in eval


@pytest.mark.parametrize("cls,shape,kw", [("InstanceNorm1d", (2, 3, 7), {}), ("InstanceNorm1d", (3, 7), dict(affine=True)),
                                          ("InstanceNorm2d", (2, 3, 4, 5), dict(affine=True))])
def test_instance_norm(cls, shape, kw):
    t, n = getattr(tnn, cls)(3, **kw), getattr(nn, cls)(3, **kw)
    if kw.get("affine"):
        with torch.no_grad():
            t.weight.normal_()
            t.bias.normal_()
    both(t, n, rnd(*shape) * 2 + 1)


def test_batch_norm_wrong_dims():
    with pytest.raises(ValueError, match="expected 4D input"):
        nn.BatchNorm2d(3)(nee.zeros(2, 3))
    with pytest.raises(ValueError, match="expected 2D or 3D input"):
        nn.BatchNorm1d(3)(nee.zeros(2, 3, 4, 5))


def test_embedding():
    t, n = tnn.Embedding(10, 4, padding_idx=2), nn.Embedding(10, 4, padding_idx=2)
    idx = np.array([[1, 2, 9], [0, 2, 3]], dtype=np.int64)
    both(t, n, idx)
    both(t, n, np.array(4, dtype=np.int64))
    w = rnd(6, 3)
    e = nn.Embedding.from_pretrained(nee.tensor(w))
    assert not e.weight.requires_grad and (e.num_embeddings, e.embedding_dim) == (6, 3)
    close(e(nee.tensor([5, 0])), torch.from_numpy(w[[5, 0]]))
    e2 = nn.Embedding.from_pretrained(w, freeze=False, padding_idx=1)
    assert e2.weight.requires_grad and e2.padding_idx == 1
    with pytest.raises(AssertionError, match="Padding_idx"):
        nn.Embedding(3, 2, padding_idx=3)


def test_dropout():
    x = nee.ones(1000)
    d = nn.Dropout(0.25)
    d.eval()
    assert np.all(_np(d(x)) == 1)
    d.train()
    y = _np(d(x))
    zeros = (y == 0).mean()
    assert 0.15 < zeros < 0.35
    np.testing.assert_allclose(y[y != 0], 1 / 0.75, rtol=1e-6)
    assert np.all(_np(nn.Dropout(0.0)(x)) == 1)
    d2 = nn.Dropout2d(0.5).eval()
    assert np.all(_np(d2(nee.ones(2, 3, 4, 4))) == 1)
    with pytest.raises(ValueError):
        nn.Dropout(1.5)


ACTS = [
    ("ReLU", (), {}), ("ReLU6", (), {}), ("LeakyReLU", (0.2,), {}), ("GELU", (), {}),
    ("GELU", (), dict(approximate="tanh")), ("SiLU", (), {}), ("Mish", (), {}), ("ELU", (), dict(alpha=0.7)),
    ("CELU", (1.3,), {}), ("SELU", (), {}), ("Softplus", (), dict(beta=2.0, threshold=3.0)), ("Softsign", (), {}),
    ("Hardtanh", (-0.5, 1.5), {}), ("Hardsigmoid", (), {}), ("Hardswish", (), {}), ("Sigmoid", (), {}),
    ("Tanh", (), {}), ("LogSigmoid", (), {}), ("Softmax", (), dict(dim=1)), ("Softmax", (), dict(dim=-1)),
    ("LogSoftmax", (), dict(dim=2)), ("Threshold", (0.1, -3.0), {}), ("GLU", (), {}), ("GLU", (1,), {}),
    ("Tanhshrink", (), {}), ("Softmin", (), dict(dim=0)), ("Hardshrink", (0.7,), {}), ("Softshrink", (), {}),
    ("Softmax2d", (), {}),
]


@pytest.mark.parametrize("name,args,kw", ACTS, ids=[f"{a[0]}{i}" for i, a in enumerate(ACTS)])
def test_activation_modules(name, args, kw):
    x = rnd(3, 4, 6) * 3
    both(getattr(tnn, name)(*args, **kw), getattr(nn, name)(*args, **kw), x, rtol=1e-4, atol=1e-5)


def test_prelu():
    t, n = tnn.PReLU(4), nn.PReLU(4)
    with torch.no_grad():
        t.weight.uniform_(-1, 1)
    both(t, n, rnd(2, 4, 3))
    both(tnn.PReLU(), nn.PReLU(), rnd(5, 3))


def test_inplace_activation_modules():
    x = nee.tensor([-1.0, 2.0])
    y = nn.ReLU(inplace=True)(x)
    assert x.tolist() == [0.0, 2.0] and y.tolist() == [0.0, 2.0]


POOLS = [
    ("MaxPool2d", (2,), {}, (2, 3, 7, 6)),
    ("MaxPool2d", (3, 2, 1), dict(ceil_mode=True), (2, 3, 8, 7)),
    ("MaxPool2d", ((2, 3),), dict(dilation=(1, 2)), (1, 2, 9, 9)),
    ("MaxPool1d", (3,), dict(stride=2, padding=1), (2, 3, 10)),
    ("AvgPool2d", (3,), dict(stride=2, padding=1), (2, 3, 7, 8)),
    ("AvgPool2d", (2,), dict(padding=1, count_include_pad=False, ceil_mode=True), (2, 3, 7, 8)),
    ("AvgPool1d", (4,), dict(stride=1), (2, 3, 9)),
    ("AdaptiveAvgPool2d", ((1, 1),), {}, (2, 3, 7, 5)),
    ("AdaptiveAvgPool2d", (3,), {}, (2, 3, 7, 5)),
    ("AdaptiveAvgPool2d", ((None, 2),), {}, (2, 3, 7, 5)),
    ("AdaptiveAvgPool1d", (4,), {}, (2, 3, 10)),
    ("AdaptiveMaxPool2d", ((2, 3),), {}, (2, 3, 7, 5)),
    ("AdaptiveMaxPool2d", (1,), {}, (2, 3, 4, 4)),
]


@pytest.mark.parametrize("name,args,kw,shape", POOLS, ids=[f"{p[0]}{i}" for i, p in enumerate(POOLS)])
def test_pooling_modules(name, args, kw, shape):
    both(getattr(tnn, name)(*args, **kw), getattr(nn, name)(*args, **kw), rnd(*shape))


def test_maxpool_return_indices():
    t, n = tnn.MaxPool2d(2, return_indices=True), nn.MaxPool2d(2, return_indices=True)
    x = rnd(1, 2, 4, 6)
    (ov, oi), (rv, ri) = n(nee.tensor(x)), t(torch.from_numpy(x))
    close(ov, rv)
    np.testing.assert_array_equal(_np(oi), ri.numpy())


SHAPES = [
    ("Flatten", (), {}, (2, 3, 4, 5)),
    ("Flatten", (0, 2), {}, (2, 3, 4, 5)),
    ("Unflatten", (1, (3, 4)), {}, (2, 12, 5)),
    ("Upsample", (), dict(scale_factor=2, mode="nearest"), (1, 2, 3, 4)),
    ("Upsample", (), dict(size=(5, 7), mode="bilinear", align_corners=False), (1, 2, 3, 4)),
    ("Upsample", (), dict(scale_factor=1.5, mode="bilinear", align_corners=True), (1, 2, 4, 4)),
    ("Upsample", (), dict(scale_factor=3, mode="linear"), (2, 3, 4)),
    ("UpsamplingNearest2d", (), dict(scale_factor=2), (1, 1, 2, 3)),
    ("ZeroPad2d", ((1, 2, 0, 3),), {}, (1, 2, 3, 4)),
    ("ZeroPad1d", (2,), {}, (2, 3, 4)),
    ("ConstantPad2d", (1, 2.5), {}, (1, 2, 3, 4)),
    ("ConstantPad1d", ((0, 3), -1.0), {}, (2, 3, 4)),
    ("ReflectionPad2d", ((1, 2, 2, 1),), {}, (1, 2, 4, 5)),
    ("ReflectionPad1d", (2,), {}, (2, 3, 5)),
    ("ReplicationPad2d", (2,), {}, (1, 2, 3, 4)),
    ("ReplicationPad1d", ((3, 1),), {}, (2, 3, 4)),
    ("CircularPad2d", ((1, 2, 2, 1),), {}, (1, 2, 4, 5)),
    ("ChannelShuffle", (2,), {}, (1, 4, 2, 3)),
    ("PixelShuffle", (2,), {}, (1, 8, 3, 2)),
    ("PixelUnshuffle", (2,), {}, (1, 2, 4, 6)),
]


@pytest.mark.parametrize("name,args,kw,shape", SHAPES, ids=[f"{p[0]}{i}" for i, p in enumerate(SHAPES)])
def test_shape_and_padding_modules(name, args, kw, shape):
    both(getattr(tnn, name)(*args, **kw), getattr(nn, name)(*args, **kw), rnd(*shape))


def test_losses():
    logits, target = rnd(5, 4), np.array([0, 3, 1, 1, 2], dtype=np.int64)
    for red in ("mean", "sum", "none"):
        both(tnn.CrossEntropyLoss(reduction=red), nn.CrossEntropyLoss(reduction=red), logits, target)
        both(tnn.NLLLoss(reduction=red), nn.NLLLoss(reduction=red), logits, target)
        both(tnn.MSELoss(reduction=red), nn.MSELoss(reduction=red), rnd(3, 4), rnd(3, 4, seed=1))
        both(tnn.L1Loss(reduction=red), nn.L1Loss(reduction=red), rnd(3, 4), rnd(3, 4, seed=1))
        both(tnn.SmoothL1Loss(reduction=red, beta=0.5), nn.SmoothL1Loss(reduction=red, beta=0.5),
             rnd(3, 4), rnd(3, 4, seed=1))
    both(tnn.HuberLoss(delta=0.3), nn.HuberLoss(delta=0.3), rnd(3, 4), rnd(3, 4, seed=1))
    both(tnn.KLDivLoss(reduction="batchmean"), nn.KLDivLoss(reduction="batchmean"),
         np.log(np.abs(rnd(3, 4)) + 0.1), np.abs(rnd(3, 4, seed=1)) + 0.1)
    w = np.array([1.0, 2.0, 0.5, 1.5], np.float32)
    both(tnn.CrossEntropyLoss(weight=torch.from_numpy(w), ignore_index=1, label_smoothing=0.1),
         nn.CrossEntropyLoss(weight=nee.tensor(w), ignore_index=1, label_smoothing=0.1), logits, target)
    probs = 1 / (1 + np.exp(-rnd(3, 4)))
    tgt = (rnd(3, 4, seed=2) > 0).astype(np.float32)
    both(tnn.BCELoss(), nn.BCELoss(), probs, tgt)
    both(tnn.BCEWithLogitsLoss(), nn.BCEWithLogitsLoss(), rnd(3, 4), tgt)
    pw = np.array([1.0, 2.0, 3.0, 0.5], np.float32)
    both(tnn.BCEWithLogitsLoss(pos_weight=torch.from_numpy(pw)), nn.BCEWithLogitsLoss(pos_weight=nee.tensor(pw)),
         rnd(3, 4), tgt)
    # the weight buffers are persistent like torch's
    assert list(nn.CrossEntropyLoss(weight=nee.tensor(w)).state_dict()) == \
        list(tnn.CrossEntropyLoss(weight=torch.from_numpy(w)).state_dict())


# ================================================================== attention / transformer
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("need_weights,average", [(True, True), (True, False), (False, True)])
def test_multihead_attention_self(batch_first, need_weights, average):
    t = tnn.MultiheadAttention(12, 3, batch_first=batch_first).eval()
    n = nn.MultiheadAttention(12, 3, batch_first=batch_first).eval()
    with torch.no_grad():
        t.in_proj_bias.normal_()
        t.out_proj.bias.normal_()
    copy_weights(t, n)
    x = rnd(2, 5, 12) if batch_first else rnd(5, 2, 12)
    tx = torch.from_numpy(x)
    with torch.no_grad():
        ro, rw = t(tx, tx, tx, need_weights=need_weights, average_attn_weights=average)
    nx = nee.tensor(x)
    o, w = n(nx, nx, nx, need_weights=need_weights, average_attn_weights=average)
    close(o, ro)
    close(w, rw)


@pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask")
@pytest.mark.parametrize("batch_first", [False, True])
def test_multihead_attention_cross_kdim_vdim_masks(batch_first):
    t = tnn.MultiheadAttention(8, 2, kdim=5, vdim=3, batch_first=batch_first).eval()
    n = nn.MultiheadAttention(8, 2, kdim=5, vdim=3, batch_first=batch_first).eval()
    assert [k for k in n.state_dict()] == [k for k in t.state_dict()]
    copy_weights(t, n)
    N, L, S = 3, 4, 6
    q, k, v = (rnd(N, L, 8), rnd(N, S, 5), rnd(N, S, 3)) if batch_first else (rnd(L, N, 8), rnd(S, N, 5), rnd(S, N, 3))
    kpm = np.zeros((N, S), bool)
    kpm[0, -2:] = True
    kpm[2, 0] = True
    am_bool = np.triu(np.ones((L, S), bool), 3)
    am_float = rnd(L, S, seed=5)
    for kw in [dict(key_padding_mask=kpm), dict(attn_mask=am_bool), dict(attn_mask=am_float),
               dict(attn_mask=am_bool, key_padding_mask=kpm), dict(attn_mask=am_float, key_padding_mask=kpm,
                                                                  average_attn_weights=False),
               dict(attn_mask=am_float, need_weights=False)]:
        both(t, n, q, k, v, kwargs=kw, copy=False)


def test_multihead_attention_3d_mask_unbatched_bias_kv_zero_attn():
    t = tnn.MultiheadAttention(8, 2, add_bias_kv=True, add_zero_attn=True, bias=False).eval()
    n = nn.MultiheadAttention(8, 2, add_bias_kv=True, add_zero_attn=True, bias=False).eval()
    assert list(n.state_dict()) == list(t.state_dict())
    copy_weights(t, n)
    x = rnd(4, 2, 8)
    am = rnd(2 * 2, 4, 4, seed=3)
    both(t, n, x, x, x, kwargs=dict(attn_mask=am), copy=False)
    kpm = np.array([[False, False, True, False], [False, False, False, False]])
    both(t, n, x, x, x, kwargs=dict(key_padding_mask=kpm), copy=False)
    t2, n2 = tnn.MultiheadAttention(8, 4).eval(), nn.MultiheadAttention(8, 4).eval()
    copy_weights(t2, n2)
    xu = rnd(5, 8)  # unbatched (L, E)
    out = both(t2, n2, xu, xu, xu, copy=False)
    assert tuple(out[0].shape) == (5, 8) and tuple(out[1].shape) == (5, 5)
    both(t2, n2, xu, xu, xu, kwargs=dict(key_padding_mask=np.array([False] * 4 + [True])), copy=False)
    with pytest.raises(RuntimeError, match="Need attn_mask"):
        n2(nee.tensor(xu), nee.tensor(xu), nee.tensor(xu), is_causal=True)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("batch_first", [False, True])
def test_transformer_encoder_layer(norm_first, activation, batch_first):
    kw = dict(d_model=16, nhead=4, dim_feedforward=24, dropout=0.1, activation=activation, batch_first=batch_first,
              norm_first=norm_first)
    t, n = tnn.TransformerEncoderLayer(**kw).eval(), nn.TransformerEncoderLayer(**kw).eval()
    x = rnd(2, 7, 16) if batch_first else rnd(7, 2, 16)
    both(t, n, x)
    mask = np.asarray(tnn.Transformer.generate_square_subsequent_mask(7))
    np.testing.assert_array_equal(_np(nn.Transformer.generate_square_subsequent_mask(7)), mask)
    both(t, n, x, kwargs=dict(src_mask=mask, is_causal=True), copy=False)
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
        n(nee.tensor(x), is_causal=True)  # like torch: the hint needs the mask


def test_transformer_encoder_stack_with_padding_mask():
    layer_t = tnn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    t = tnn.TransformerEncoder(layer_t, 2, norm=tnn.LayerNorm(16), enable_nested_tensor=False).eval()
    layer_n = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    n = nn.TransformerEncoder(layer_n, 2, norm=nn.LayerNorm(16), enable_nested_tensor=False).eval()
    assert list(n.state_dict()) == list(t.state_dict())
    copy_weights(t, n)
    x = rnd(3, 6, 16)
    kpm = np.zeros((3, 6), bool)
    kpm[1, 4:] = True
    both(t, n, x, kwargs=dict(src_key_padding_mask=kpm), copy=False)
    both(t, n, x, copy=False)


def test_transformer_decoder_and_full_transformer():
    kw = dict(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=2, dim_feedforward=16, dropout=0.0,
              batch_first=True)
    t, n = tnn.Transformer(**kw).eval(), nn.Transformer(**kw).eval()
    assert list(n.state_dict()) == list(t.state_dict())
    src, tgt = rnd(2, 5, 8), rnd(2, 4, 8)
    mask = np.asarray(tnn.Transformer.generate_square_subsequent_mask(4))
    both(t, n, src, tgt, kwargs=dict(tgt_mask=mask))


# ================================================================== end to end
class SmallCNN:
    @staticmethod
    def build(m):
        return m.Sequential(
            m.Conv2d(3, 8, 3, padding=1), m.BatchNorm2d(8), m.ReLU(),
            m.MaxPool2d(2),
            m.Conv2d(8, 12, 3, stride=2, padding=1, groups=4, bias=False), m.GroupNorm(4, 12), m.SiLU(),
            m.ConvTranspose2d(12, 6, 2, stride=2), m.LeakyReLU(0.1),
            m.AdaptiveAvgPool2d((2, 2)), m.Flatten(), m.Dropout(0.5),
            m.Linear(24, 10), m.LogSoftmax(dim=1),
        )


def test_small_cnn_float64_end_to_end():
    t = SmallCNN.build(tnn).double().eval()
    n = SmallCNN.build(nn).double().eval()
    out = both(t, n, rnd(2, 3, 9, 8, dtype=np.float64), rtol=1e-10, atol=1e-12)
    assert out.dtype is nee.float64


def test_small_cnn_end_to_end():
    t = SmallCNN.build(tnn)
    with torch.no_grad():
        t[1].running_mean.normal_()
        t[1].running_var.uniform_(0.5, 1.5)
    t.eval()
    n = SmallCNN.build(nn).eval()
    out = both(t, n, rnd(2, 3, 13, 11))
    assert tuple(out.shape) == (2, 10)


def _tiny_lm(m, mod_base):
    class LM(mod_base):
        def __init__(self):
            super().__init__()
            self.emb = m.Embedding(20, 16, padding_idx=0)
            self.pos = m.Parameter((torch.zeros if m is tnn else nee.zeros)(1, 9, 16))
            self.block = m.TransformerEncoderLayer(16, 4, 32, dropout=0.1, activation="gelu", batch_first=True,
                                                   norm_first=True)
            self.norm = m.LayerNorm(16)
            self.head = m.Linear(16, 20, bias=False)

        def forward(self, idx, mask=None):
            x = self.emb(idx) + self.pos
            x = self.block(x, src_mask=mask)
            return self.head(self.norm(x))
    return LM()


def test_small_transformer_end_to_end():
    t = _tiny_lm(tnn, tnn.Module)
    with torch.no_grad():
        t.pos.normal_()
    t.eval()
    n = _tiny_lm(nn, nn.Module).eval()
    idx = np.random.default_rng(0).integers(0, 20, (2, 9)).astype(np.int64)
    mask = np.asarray(tnn.Transformer.generate_square_subsequent_mask(9))
    both(t, n, idx, kwargs=dict(mask=mask), rtol=1e-4, atol=1e-4)


# ================================================================== weight files
def test_safetensors_round_trip(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    t = TNet()
    path = tmp_path / "model.safetensors"
    st.save_file({k: v.detach().numpy() for k, v in t.state_dict().items()}, str(path))
    sd = serialization.load_safetensors(path)
    assert list(sd) and all(isinstance(v, nee.Tensor) for v in sd.values())
    n = Net()
    assert n.load_state_dict(sd).missing_keys == []
    for k, v in t.state_dict().items():
        np.testing.assert_array_equal(_np(n.state_dict()[k]), v.numpy())
    # neetorch writes, safetensors and neetorch read back
    out = tmp_path / "out.safetensors"
    serialization.save_safetensors(n.state_dict(), out, metadata={"format": "pt"})
    back = st.load_file(str(out))
    assert set(back) == set(t.state_dict())
    np.testing.assert_array_equal(back["bn.num_batches_tracked"], t.state_dict()["bn.num_batches_tracked"].numpy())
    n2 = Net()
    n2.load_state_dict(serialization.load_safetensors(str(out)))
    np.testing.assert_array_equal(_np(n2.blocks[1].weight), t.blocks[1].weight.detach().numpy())
    # tied weights (shared storage) are written as copies
    lin = nn.Linear(2, 2)
    serialization.save_safetensors({"a": lin.weight, "b": lin.weight}, tmp_path / "tied.safetensors")
    assert set(serialization.load_safetensors(tmp_path / "tied.safetensors")) == {"a", "b"}


def test_safetensors_bf16_from_torch(tmp_path):
    pytest.importorskip("safetensors.torch")
    from safetensors.torch import save_file
    w = torch.randn(3, 4)
    save_file({"w": w.to(torch.bfloat16), "i": torch.arange(3)}, str(tmp_path / "bf.safetensors"))
    sd = serialization.load_safetensors(tmp_path / "bf.safetensors")
    assert sd["w"].dtype is nee.bfloat16 and sd["i"].dtype is nee.int64
    np.testing.assert_array_equal(_np(sd["w"].float()), w.to(torch.bfloat16).float().numpy())


def test_nee_save_load(tmp_path):
    n = Net()
    p = tmp_path / "w.npz"
    serialization.save(n.state_dict(), p)
    sd = serialization.load(p)
    assert list(sd) == list(n.state_dict())
    n2 = Net()
    n2.load_state_dict(sd)
    np.testing.assert_array_equal(_np(n2.fc.weight), _np(n.fc.weight))
    serialization.save(nee.arange(5), tmp_path / "t.npz")
    assert serialization.load(tmp_path / "t.npz").tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(TypeError):
        serialization.save([1, 2], tmp_path / "x.npz")
