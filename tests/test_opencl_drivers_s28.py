"""Session 28: OpenCL drivers installed by pip (Intel's CPU runtime) are made visible to pyopencl's ICD loader.

PoCL 3.0 (LLVM 14, bundled by pyopencl) builds no program on AMD Zen 5, so the OpenCL backend had no device
on such hosts and every OpenCL test skipped.  ``intel-opencl-rt`` (in the ``opencl`` extra) runs there, but its
wheel's ``.icd`` names a conda placeholder path the loader cannot open.  ``devices/opencl/drivers.register``
writes a vendor directory (the system's ``.icd`` files plus one per pip driver) and points ``OCL_ICD_VENDORS``
at it, unless the user set the loader's directory.  Unit tests use a stand-in driver list and system
directory; the last test checks the real thing in a fresh process where the runtime is installed."""
import json
import os
import subprocess
import sys

import pytest

from neetorch.devices.opencl import drivers as D


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """register() as in a new process, with the cache and the system vendor dir under tmp_path."""
    monkeypatch.setattr(D, "_done", [])
    monkeypatch.setattr(D._env, "CACHE_DIR", str(tmp_path / "cache"))
    sysdir = tmp_path / "etc-vendors"
    sysdir.mkdir()
    monkeypatch.setattr(D, "SYSTEM_VENDORS", str(sysdir))
    for k in ("OCL_ICD_VENDORS", "OPENCL_VENDOR_PATH", "NEE_OPENCL_PIP_DRIVERS"):
        monkeypatch.delenv(k, raising=False)
    return sysdir


def _icds(d):
    return {n: open(os.path.join(d, n)).read() for n in sorted(os.listdir(d))}


def test_the_vendor_dir_keeps_the_systems_drivers_and_adds_the_pip_ones(fresh, monkeypatch):
    (fresh / "nvidia.icd").write_text("libnvidia-opencl.so.1\n")
    (fresh / "README").write_text("not an icd")
    monkeypatch.setattr(D, "_installed_drivers", lambda: ["/x/lib/libintelocl.so"])
    d = D.register()
    assert d is not None and os.environ["OCL_ICD_VENDORS"] == d and D.registered() == d
    assert d.startswith(str(D._env.CACHE_DIR))
    assert _icds(d) == {"nvidia.icd": "libnvidia-opencl.so.1\n",
                        "nee-pip-libintelocl.so.icd": "/x/lib/libintelocl.so\n"}
    monkeypatch.setattr(D, "_installed_drivers", lambda: pytest.fail("register() ran twice"))
    assert D.register() == d                                   # once per process


def test_the_directory_is_named_by_its_contents(fresh, monkeypatch):
    monkeypatch.setattr(D, "_installed_drivers", lambda: ["/a/libintelocl.so"])
    d1 = D._write_vendor_dir(["/a/libintelocl.so"])
    assert D._write_vendor_dir(["/a/libintelocl.so"]) == d1     # same contents: same dir, rewritten in place
    d2 = D._write_vendor_dir(["/b/libintelocl.so"])
    assert d2 != d1 and _icds(d1)["nee-pip-libintelocl.so.icd"] == "/a/libintelocl.so\n"
    assert not [n for n in os.listdir(d1) if n.endswith(".tmp")]


@pytest.mark.parametrize("var", ["OCL_ICD_VENDORS", "OPENCL_VENDOR_PATH"])
def test_a_vendor_dir_the_user_chose_is_left_alone(fresh, monkeypatch, var):
    monkeypatch.setenv(var, "/mine")
    monkeypatch.setattr(D, "_installed_drivers", lambda: ["/x/libintelocl.so"])
    assert D.register() is None
    assert os.environ.get("OCL_ICD_VENDORS") == ("/mine" if var == "OCL_ICD_VENDORS" else None)
    assert not os.path.exists(D._env.CACHE_DIR)


def test_off_switch_and_no_drivers_change_nothing(fresh, monkeypatch):
    monkeypatch.setattr(D, "_installed_drivers", lambda: ["/x/libintelocl.so"])
    monkeypatch.setenv("NEE_OPENCL_PIP_DRIVERS", "0")
    assert D.register() is None and "OCL_ICD_VENDORS" not in os.environ
    monkeypatch.setattr(D, "_done", [])
    monkeypatch.delenv("NEE_OPENCL_PIP_DRIVERS")
    monkeypatch.setattr(D, "_installed_drivers", lambda: [])
    assert D.register() is None and "OCL_ICD_VENDORS" not in os.environ


def test_an_unwritable_cache_leaves_the_loader_as_it_was(fresh, monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setattr(D._env, "CACHE_DIR", str(blocker / "cache"))       # under a file: makedirs fails
    monkeypatch.setattr(D, "_installed_drivers", lambda: ["/x/libintelocl.so"])
    assert D.register() is None and "OCL_ICD_VENDORS" not in os.environ


def test_installed_drivers_are_found_through_the_package_record():
    from importlib import metadata
    try:
        metadata.distribution("intel-opencl-rt")
    except metadata.PackageNotFoundError:
        pytest.skip("intel-opencl-rt is not installed (pip install 'neetorch[opencl]' on x86-64 Linux)")
    libs = D._installed_drivers()
    assert len(libs) == 1 and os.path.basename(libs[0]).startswith("libintelocl.so") and os.path.isfile(libs[0])


_PROBE = r"""
import json, os, numpy as np, neetorch as nee
import pyopencl as cl
info = [d for d in nee.devices() if d.type == "opencl"][0]
out = {"vendors": os.environ.get("OCL_ICD_VENDORS"), "count": info.count, "reason": info.reason,
       "platforms": [p.name for p in cl.get_platforms()]}
if info.count:
    x = np.linspace(-3, 3, 37, dtype=np.float32).reshape(37, 1) * np.ones((1, 5), np.float32)
    t = nee.tensor(x).to("opencl")
    out["device"] = str(t.device)
    out["ok"] = bool(np.allclose((t.exp() * 2 + 1).sum(1).cpu().numpy(), (np.exp(x) * 2 + 1).sum(1), rtol=1e-6))
print(json.dumps(out))
"""


def test_a_fresh_process_gets_an_opencl_device_from_the_pip_runtime(tmp_path):
    pytest.importorskip("pyopencl")
    from importlib import metadata
    try:
        metadata.distribution("intel-opencl-rt")
    except metadata.PackageNotFoundError:
        pytest.skip("intel-opencl-rt is not installed (pip install 'neetorch[opencl]' on x86-64 Linux)")
    env = {k: v for k, v in os.environ.items() if k not in ("OCL_ICD_VENDORS", "OPENCL_VENDOR_PATH")}
    env["NEE_CACHE_DIR"] = str(tmp_path / "cache")
    p = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["vendors"] and out["vendors"].startswith(str(tmp_path / "cache"))
    assert any("Intel" in n for n in out["platforms"]), out
    assert out["count"] >= 1, out["reason"]
    assert out["device"] == "opencl:0" and out["ok"] is True
