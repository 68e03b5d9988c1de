"""Device registry: nee.devices(), nee.device parsing, fallback accounting and strict mode."""
import importlib
import pickle

import numpy as np
import pytest

import neetorch as nee
D = importlib.import_module("neetorch.devices")  # the package (nee.devices; nee.devices() lists the backends)
from neetorch.devices.cpu import CPUBackend


def test_devices_lists_cpu():
    infos = nee.devices()
    cpu = [d for d in infos if d.type == "cpu"]
    assert cpu and cpu[0].available and cpu[0].count >= 1 and cpu[0].reason is None
    assert infos[0].type == "cpu"
    assert "cpu" in str(cpu[0])


def test_device_parsing_and_equality():
    d = nee.device("cpu")
    assert d.type == "cpu" and d.index == 0
    assert d == nee.device("cpu:0") == nee.device("cpu", 0) == "cpu"
    assert nee.device(d) is d
    assert str(d) == "cpu" and repr(d) == "device(type='cpu')"
    c = nee.device("cuda:1")
    assert c.type == "cuda" and c.index == 1 and str(c) == "cuda:1"
    assert repr(c) == "device(type='cuda', index=1)"
    assert nee.device("cuda", 1) == c and c != d and hash(c) == hash(nee.device("cuda:1"))
    assert nee.device("opencl:0") != nee.device("opencl:1")
    with pytest.raises(ValueError):
        nee.device("cuda:x")
    with pytest.raises(ValueError):
        nee.device("cuda:0", 1)
    with pytest.raises(AttributeError):
        d.type = "x"
    assert {nee.device("cpu"), nee.device("cpu:0")} == {d}


def test_tensor_device_attributes():
    t = nee.zeros(2)
    assert t.device == nee.device("cpu") and t.is_cpu and not t.is_cuda
    assert nee.zeros(2, device="cpu").device == "cpu"
    assert nee.tensor([1.0], device=nee.device("cpu")).device.type == "cpu"
    with pytest.raises(RuntimeError, match="unknown device type"):
        nee.zeros(2, device="nosuchdev")


class _FakeBackend(CPUBackend):
    """A device whose storage is numpy (like the CPU) but that claims only a few ops."""
    type = "fakedev"
    claims = ("add",)

    def __init__(self, index=0):
        super().__init__(index)
        self.kernels = {k: v for k, v in self.kernels.items() if k in self.claims}

    def supports(self, op, dtypes):
        return None if op in self.kernels else f"no fakedev kernel for {op}"


@pytest.fixture
def fakedev():
    D.register_backend(_FakeBackend)
    nee.reset_fallbacks()
    strict = nee.is_strict()
    nee.set_strict(False)
    yield nee.device("fakedev")
    nee.set_strict(strict)
    nee.reset_fallbacks()
    with D._lock:
        D._backend_classes.pop("fakedev", None)
        for k in [k for k in D._instances if k[0] == "fakedev"]:
            del D._instances[k]


def test_fake_backend_listed_and_transfers(fakedev):
    assert any(i.type == "fakedev" and i.available for i in nee.devices())
    x = nee.tensor([1.0, 2.0]).to(fakedev)
    assert x.device == fakedev and x.device.type == "fakedev"
    assert "device='fakedev:0'" in repr(x)
    back = x.to("cpu")
    assert back.device == "cpu" and back.tolist() == [1.0, 2.0]
    y = nee.zeros(3, device=fakedev)
    assert y.device == fakedev


def test_claimed_op_runs_without_fallback(fakedev):
    x = nee.tensor([1.0, 2.0]).to(fakedev)
    r = x + x
    assert r.device == fakedev and r.cpu().tolist() == [2.0, 4.0]
    assert len(nee.fallback_report()) == 0


def test_unclaimed_op_falls_back_visibly(fakedev):
    x = nee.tensor([1.0, 2.0]).to(fakedev)
    for _ in range(3):  # repeated calls keep falling back (no cached plan skips the accounting)
        r = x * 3
        assert r.device == fakedev and r.cpu().tolist() == [3.0, 6.0]
    e = nee.exp(x)
    assert e.device == fakedev
    np.testing.assert_allclose(e.cpu().numpy(), np.exp([1.0, 2.0]), rtol=1e-6)
    rep = nee.fallback_report()
    assert len(rep) == 4
    recs = {r.op: r for r in rep.records.values()}
    assert recs["mul"].count == 3 and recs["mul"].device == "fakedev:0"
    assert recs["exp"].count == 1 and recs["mul"].bytes_moved > 0
    assert "float32" in recs["mul"].dtypes
    s = str(rep)
    assert "mul" in s and "exp" in s and "fakedev" in s
    nee.reset_fallbacks()
    assert len(nee.fallback_report()) == 0 and str(nee.fallback_report()) == "no fallbacks"


def test_strict_mode_raises(fakedev):
    x = nee.tensor([1.0, 2.0]).to(fakedev)
    nee.set_strict(True)
    assert nee.is_strict()
    with pytest.raises(nee.FallbackError, match="mul"):
        x * 3
    with pytest.raises(RuntimeError):  # FallbackError is a RuntimeError
        nee.exp(x)
    r = x + x  # claimed: fine in strict mode
    assert r.cpu().tolist() == [2.0, 4.0]
    nee.set_strict(False)
    assert (x * 3).cpu().tolist() == [3.0, 6.0]


def test_inplace_and_out_fallback(fakedev):
    x = nee.tensor([1.0, 2.0]).to(fakedev)
    x.mul_(2)
    assert x.device == fakedev and x.cpu().tolist() == [2.0, 4.0]
    out = nee.empty(2, device=fakedev)
    nee.mul(x, x, out=out)
    assert out.cpu().tolist() == [4.0, 16.0]
    assert nee.fallback_report().records


def test_mixed_devices_error(fakedev):
    x = nee.tensor([1.0, 2.0]).to(fakedev)
    with pytest.raises(RuntimeError, match="same device"):
        x + nee.tensor([1.0, 2.0])


def test_broken_plugin_is_reported():
    class Broken(CPUBackend):
        type = "brokendev"

        @classmethod
        def probe(cls):
            return 0, "no brokendev hardware here"

    D.register_backend(Broken)
    try:
        info = [i for i in nee.devices() if i.type == "brokendev"][0]
        assert not info.available and info.reason == "no brokendev hardware here"
        with pytest.raises(RuntimeError, match="unavailable"):
            nee.zeros(1, device="brokendev")
    finally:
        with D._lock:
            D._backend_classes.pop("brokendev", None)


def test_num_threads_roundtrip():
    n = nee.get_num_threads()
    nee.set_num_threads(1)
    try:
        assert nee.get_num_threads() == 1
        x = nee.arange(200_000.0)
        assert (x + 1).numpy()[-1] == 200_000.0
    finally:
        nee.set_num_threads(n)


def test_device_pickles():
    d = nee.device("cpu")
    assert pickle.loads(pickle.dumps(d)) == d


def test_default_device_scope_is_per_thread():
    import threading
    from neetorch.tensor.creation import default_device_scope
    seen = {}
    inside, done = threading.Event(), threading.Event()

    def other():
        inside.wait(10)
        seen["other"] = nee.get_default_device()
        done.set()

    t = threading.Thread(target=other)
    t.start()
    with default_device_scope("opencl:0") as d:
        assert nee.get_default_device() == d == nee.device("opencl", 0)
        inside.set()
        done.wait(10)
    t.join()
    assert seen["other"] == nee.device("cpu")
    assert nee.get_default_device() == nee.device("cpu")
