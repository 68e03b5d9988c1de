"""Lazy modules (LazyLinear, LazyConv*, LazyConvTranspose*, LazyBatchNorm*, LazyInstanceNorm*) against PyTorch."""
import numpy as np
import pytest

import neetorch as nee
from neetorch import nn

torch = pytest.importorskip("torch")

CASES = [
    ("LazyLinear", (3,), {}, (2, 4, 5)),
    ("LazyLinear", (3,), {"bias": False}, (5,)),
    ("LazyConv1d", (4, 3), {"padding": 1}, (2, 6, 7)),
    ("LazyConv1d", (4, 3), {}, (6, 7)),  # unbatched: channels are dim 0
    ("LazyConv2d", (4, 3), {"groups": 2, "stride": 2}, (2, 6, 7, 6)),
    ("LazyConv3d", (2, 2), {"bias": False}, (1, 3, 4, 4, 3)),
    ("LazyConvTranspose1d", (3, 2), {"stride": 2}, (2, 4, 5)),
    ("LazyConvTranspose2d", (4, 3), {"groups": 2, "output_padding": 1, "stride": 2}, (2, 6, 4, 5)),
    ("LazyConvTranspose3d", (2, 2), {}, (1, 3, 3, 3, 2)),
    ("LazyBatchNorm1d", (), {}, (4, 3)),
    ("LazyBatchNorm1d", (), {"affine": False}, (4, 3, 5)),
    ("LazyBatchNorm2d", (), {"momentum": None}, (2, 3, 4, 4)),
    ("LazyBatchNorm3d", (), {"track_running_stats": False}, (2, 3, 2, 2, 2)),
    ("LazyInstanceNorm1d", (), {}, (2, 3, 5)),
    ("LazyInstanceNorm2d", (), {"affine": False, "track_running_stats": False}, (2, 3, 4, 4)),
    ("LazyInstanceNorm3d", (), {}, (2, 3, 2, 3, 2)),
]


def _sd_repr(sd):
    return {k: (repr(v) if type(v).__name__.startswith("Uninitialized") else tuple(v.shape)) for k, v in sd.items()}


@pytest.mark.parametrize("name,args,kw,shape", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_lazy_module_materializes_like_torch(name, args, kw, shape):
    tm = getattr(torch.nn, name)(*args, **kw)
    nm = getattr(nn, name)(*args, **kw)
    assert repr(nm) == repr(tm)
    assert nm.has_uninitialized_params() == tm.has_uninitialized_params() == bool(list(tm.state_dict()))
    assert _sd_repr(nm.state_dict()) == _sd_repr(tm.state_dict())
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    tm(torch.tensor(x))
    # same kind of parameters as torch, then the same computation with torch's values
    nm2 = getattr(nn, name)(*args, **kw)
    y = nm2(nee.tensor(x))
    assert type(nm2).__name__ == type(tm).__name__ == name[4:]
    assert repr(nm2) == repr(tm)
    assert not hasattr(nm2, "has_uninitialized_params") and not hasattr(tm, "has_uninitialized_params")
    assert _sd_repr(nm2.state_dict()) == _sd_repr(tm.state_dict())
    for (k, p), (_, tp) in zip(nm2.named_parameters(), tm.named_parameters()):
        assert type(p) is nn.Parameter and tuple(p.shape) == tuple(tp.shape), k
    # a fresh lazy module loads torch's initialized state dict, then computes what torch computes
    nm3 = getattr(nn, name)(*args, **kw)
    nm3.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    assert not nm3.has_uninitialized_params()
    tm.eval()
    nm3.eval()
    want = tm(torch.tensor(x)).detach().numpy()
    np.testing.assert_allclose(nm3(nee.tensor(x)).numpy(), want, rtol=1e-4, atol=1e-5)
    assert type(nm3).__name__ == name[4:] and repr(nm3) == repr(tm)
    assert tuple(y.shape) == want.shape


def test_lazy_placeholders_follow_module_to_and_are_the_same_objects():
    m = nn.LazyLinear(4).double()
    w = m.weight
    assert repr(w) == "<UninitializedParameter>" and w.dtype == nee.float64
    with pytest.raises(RuntimeError, match="Can't access the shape of an uninitialized parameter"):
        _ = w.shape
    out = m(nee.ones(2, 3, dtype=nee.float64))
    assert out.dtype == nee.float64 and m.weight is w and type(w) is nn.Parameter and tuple(w.shape) == (4, 3)
    bn = nn.LazyBatchNorm1d(dtype=nee.float64)
    bn(nee.randn(4, 2, dtype=nee.float64))
    assert bn.running_mean.dtype == nee.float64 and type(bn.running_mean) is nee.Tensor
    assert bn.num_batches_tracked.item() == 1


def test_lazy_in_a_sequential_under_jit_first_call_materializes():
    net = nn.Sequential(nn.LazyConv2d(4, 3), nn.LazyBatchNorm2d(), nn.ReLU(), nn.Flatten(), nn.LazyLinear(5)).eval()
    f = nee.jit(net)
    x = nee.randn(2, 3, 6, 6)
    y = f(x)  # traced: the lazy hooks initialize eagerly, outside the graph
    assert [type(m).__name__ for m in net] == ["Conv2d", "BatchNorm2d", "ReLU", "Flatten", "Linear"]
    assert tuple(net[4].weight.shape) == (5, 64)
    np.testing.assert_allclose(y.numpy(), net(x).numpy(), rtol=1e-5, atol=1e-6)
    x2 = nee.randn(2, 3, 6, 6)
    np.testing.assert_allclose(f(x2).numpy(), net(x2).numpy(), rtol=1e-5, atol=1e-6)
    assert f.stats["traces"] == 1


def test_lazy_bad_input():
    with pytest.raises(ValueError, match="in_channels must be divisible by groups"):
        nn.LazyConv2d(4, 3, groups=2)(nee.randn(1, 3, 5, 5))
    with pytest.raises(RuntimeError, match=r"Expected 3D \(unbatched\) or 4D \(batched\) input to LazyConv2d"):
        nn.LazyConv2d(4, 3)(nee.randn(5, 5))
    m = nn.LazyLinear(2)
    with pytest.raises(RuntimeError, match="shape of an uninitialized parameter"):
        nn.Linear(3, 2).load_state_dict(m.state_dict())


def test_lazy_module_deepcopies_and_pickles_before_initialization():
    import copy
    import pickle
    m = nn.LazyConv2d(2, 3)
    for clone in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        assert clone.has_uninitialized_params()
        assert tuple(clone(nee.randn(1, 3, 5, 5)).shape) == (1, 2, 3, 3)
        assert type(clone) is nn.Conv2d and not clone._forward_pre_hooks
    assert type(m) is nn.LazyConv2d and m.has_uninitialized_params()
