"""Session 20: an OpenCL device whose compiler cannot build programs is left out, and ``nee.devices()`` says why.

PoCL 3.0 (pocl-binary-distribution, LLVM 14) on AMD Zen 5 fails every build with "unknown target CPU 'generic'";
before, the device was listed as available and every op on it raised.  The probe builds a one-line program per
device once per process.  Tested here with stand-in pyopencl objects (runs on every host)."""
import pytest

pytest.importorskip("pyopencl", reason="pyopencl is not installed")

from neetorch.devices import opencl as O  # noqa: E402


class _Dev:
    def __init__(self, name, ok):
        self.name, self.ok = name, ok
        self.version = "OpenCL 3.0 PoCL"

        class P:
            name = "Portable Computing Language"
        self.platform = P()


class _FakeCL:
    built = []

    class Context:
        def __init__(self, devs):
            self.dev = devs[0]

    class Program:
        def __init__(self, ctx, src):
            self.ctx, self.src = ctx, src

        def build(self, *a, **k):
            _FakeCL.built.append(self.ctx.dev.name)
            if not self.ctx.dev.ok:
                raise RuntimeError("clBuildProgram failed: BUILD_PROGRAM_FAILURE\n\nBuild on <dev>:\n\n"
                                   "error: unknown target CPU 'generic'\nDevice failed to build the program")
            return self


@pytest.fixture
def fake(monkeypatch):
    def install(devs):
        _FakeCL.built = []
        monkeypatch.setattr(O, "_cl", lambda: _FakeCL)
        monkeypatch.setattr(O, "_all_devices", lambda: list(devs))
        monkeypatch.setattr(O, "_usable", [None])
    return install


def test_a_device_that_cannot_build_is_unavailable_with_the_compilers_error(fake):
    fake([_Dev("pthread-AMD EPYC", False)])
    n, why = O.OpenCLBackend.probe()
    assert n == 0
    assert "pthread-AMD EPYC" in why and "cannot build OpenCL programs" in why
    assert "error: unknown target CPU 'generic'" in why and "does not know this CPU model" in why
    O.OpenCLBackend.probe()
    assert _FakeCL.built == ["pthread-AMD EPYC"]          # probed once per process


def test_only_devices_that_build_are_counted_and_indexed(fake):
    good = _Dev("good", True)
    fake([_Dev("bad", False), good])
    assert O.OpenCLBackend.probe() == (1, None)
    ok, bad = O._usable_devices()
    assert [d for d, _ in ok] == [good] and len(bad) == 1 and bad[0].startswith("bad ")
