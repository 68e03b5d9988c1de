"""Smoke run of asv_benchmarks/bench_opencl.py at tiny sizes: every benchmark runs once, results are
checked against the CPU device.  Measures nothing; skipped without an OpenCL device."""
from __future__ import annotations

import math
import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from asv_benchmarks import _workloads as W
from asv_benchmarks import bench_opencl as B


@pytest.fixture(autouse=True)
def _tiny(monkeypatch):
    monkeypatch.setattr(W, "TINY", True)
    monkeypatch.setenv("NEE_BENCH_TINY", "1")
    try:
        B._require("opencl")
    except NotImplementedError as e:
        pytest.skip(str(e))


@pytest.mark.parametrize("workload", B.WORKLOADS)
def test_workload_same_result_on_both_devices(workload):
    outs = {d: B._host(B.build(workload, d)()) for d in B.DEVICES}
    assert outs["cpu"].size > 0
    np.testing.assert_allclose(outs["opencl"], outs["cpu"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("workload", B.WORKLOADS)
def test_ratio_and_time(workload):
    r = B.DeviceRatio()
    r.setup(workload)
    try:
        v = r.track_speed_ratio(workload)
    finally:
        r.teardown(workload)
    assert math.isfinite(v) and v > 0
    t = B.DeviceWorkload()
    t.setup(workload, "opencl")
    t.time_run(workload, "opencl")
    t.teardown(workload, "opencl")


@pytest.mark.parametrize("mode", ["queued", "synced"])
@pytest.mark.parametrize("device", B.DEVICES)
def test_launch_overhead(mode, device):
    b = B.LaunchOverhead()
    b.setup("add", mode, device)
    us = b.track_us_per_op("add", mode, device)
    assert math.isfinite(us) and 0 < us < 1e6


def test_wrong_opencl_result_is_caught(monkeypatch):
    real = B.build

    def broken(workload, dev):
        fn = real(workload, dev)
        return (lambda: fn() * 2.0) if dev == "opencl" else fn
    monkeypatch.setattr(B, "build", broken)
    with pytest.raises(AssertionError, match="differs from the CPU"):
        B.DeviceRatio().setup("softmax")


def test_skips_without_opencl(monkeypatch):
    import neetorch as nee
    info = [d for d in nee.devices() if d.type != "opencl"]
    monkeypatch.setattr(nee, "devices", lambda: info)
    with pytest.raises(NotImplementedError, match="no opencl backend"):
        B.DeviceWorkload().setup("matmul", "cpu")
