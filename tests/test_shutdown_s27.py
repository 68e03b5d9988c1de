"""Kernel builtins outliving llvm_call's module globals (session 27).

``llvm_call.make`` turns an LLVM kernel into a CPython builtin (``PyCFunction_NewEx`` over a PyMethodDef of a
trampoline).  A builtin reads its PyMethodDef as long as it lives: ``meth_dealloc`` and the collector's
``meth_traverse`` read its flags, ``__name__`` / repr its name.  The PyMethodDefs were ctypes structs, one per
builtin, kept in a list global of llvm_call; at interpreter exit the collector clears module dicts (that list
with them) and the plan caches holding kernel builtins in one pass, in no set order, so builtins were
deallocated after their struct was freed: an ONNX session of an LSTM model (timm sequencer2d_s) at two shape
buckets segfaulted in ``meth_dealloc`` during the exit's collection (the freed struct's memory had gone back
to the system).  The PyMethodDefs are now raw memory that is never freed.

Each case runs in a child under ``PYTHONMALLOC=debug`` (freed memory is filled with 0xDD: a dangling name
pointer faults at once) and must exit cleanly, having read the kernel's name intact.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

_PRELUDE = """
import gc, hashlib, os, sys
import numpy as np
from neetorch.devices.cpu import llvm_call, llvm_render

text = 'define void @"kernel"(i8* %a) {\\n  ret void\\n}\\n'
addr = llvm_render.compile_ir("test_shutdown_s27_" + hashlib.sha1(text.encode()).hexdigest()[:16], lambda: text)
k = llvm_call.make(addr, 1)
if type(k).__name__ != "builtin_function_or_method":
    print("SKIP: no trampolines here (ctypes caller)")
    sys.exit(0)
k(np.zeros(1))
"""

# what module teardown does to llvm_call's globals, done at once: the kernel must not depend on them
_DROP = _PRELUDE + """
for name in [n for n in vars(llvm_call) if not n.startswith("__")]:
    setattr(llvm_call, name, None)
gc.collect()
junk = [bytearray(32) for _ in range(10000)]   # (reuse what was freed)
print("name:", k.__name__, flush=True)
del k
gc.collect()
print("done", flush=True)
"""

# the real exit: the kernel is released last (with sys's dict, after every module's globals), reading its name
_EXIT = _PRELUDE + """
class _Late:
    def __init__(self, k):
        self.k = k

    def __del__(self, _w=os.write):
        _w(1, ("late name: " + self.k.__name__ + "\\n").encode())


sys._nee_test_late = _Late(k)
del k
print("done", flush=True)
"""


def _child(code: str):
    env = dict(os.environ, PYTHONMALLOC="debug", PYTHONFAULTHANDLER="1")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                       timeout=120)
    if "SKIP:" in p.stdout:
        pytest.skip(p.stdout.strip())
    return p


def test_kernel_outlives_llvm_call_globals():
    p = _child(_DROP)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr[-3000:])
    assert "name: neetorch_llvm_kernel" in p.stdout and "done" in p.stdout, p.stdout


def test_kernel_released_last_at_exit():
    p = _child(_EXIT)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr[-3000:])
    assert "done" in p.stdout and "late name: neetorch_llvm_kernel" in p.stdout, (p.stdout, p.stderr[-3000:])


def test_one_method_def_per_trampoline():
    """The PyMethodDefs are per trampoline (argument count), not per kernel: a bounded set."""
    import numpy as np
    from neetorch.devices.cpu import llvm_call, llvm_render
    text = 'define void @"kernel"(i8* %a, i8* %b) {\n  ret void\n}\n'
    import hashlib
    addr = llvm_render.compile_ir("test_shutdown_s27b_" + hashlib.sha1(text.encode()).hexdigest()[:16],
                                  lambda: text)
    ks = [llvm_call.make(addr, 2) for _ in range(5)]
    if type(ks[0]).__name__ != "builtin_function_or_method":
        pytest.skip("no trampolines here (ctypes caller)")
    n = len(llvm_call._defs)
    ks += [llvm_call.make(addr, 2) for _ in range(5)]
    assert len(llvm_call._defs) == n <= len(llvm_call._tramps)
    for f in ks:
        f(np.zeros(1), np.zeros(1))
        assert f.__name__ == "neetorch_llvm_kernel"
