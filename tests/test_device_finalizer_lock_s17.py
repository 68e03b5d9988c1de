"""A device storage's finalizer (it returns the buffer to the backend's pool under the backend's lock) can run from a
garbage collection triggered inside a section that holds that lock (OpenCL's kernel launch builds its argument
list under it): the lock is re-entrant, so this does not deadlock (a full-suite run hung in
test_opencl_nn.py::test_unique_matches_cpu on it, session 17)."""
import gc
import threading

import pytest

import neetorch as nee
from neetorch.devices import get_backend


@pytest.mark.parametrize("dev", ["opencl", "simnpu"])
def test_release_from_a_gc_inside_the_backends_lock(dev):
    if not any(d.type == dev and d.available for d in nee.devices()):
        pytest.skip(f"no {dev} device")
    b = get_backend(nee.device(dev))
    done = []

    def body():
        t = nee.ones(1000, device=dev)
        cyc = [t]
        cyc.append(cyc)          # only the collector frees it
        del t, cyc
        with b._lock:            # a finalizer that takes the lock again in this thread
            gc.collect()
        done.append(True)
    th = threading.Thread(target=body, daemon=True)
    th.start()
    th.join(30)
    assert done == [True], f"{dev}: releasing a storage from a GC inside the backend's lock deadlocked"
