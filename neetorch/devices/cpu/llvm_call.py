"""Calling LLVM-compiled kernels from Python with builtin-function overhead.

A ctypes call costs ~1 µs plus ~1 µs per ``ndarray.ctypes.data``: 4-7 µs for a small
elementwise launch, several times the whole launch of a Numba kernel.  Instead, one small
trampoline per argument count, itself compiled with llvmlite, is a CPython builtin
(``METH_VARARGS``): it reads each argument's data pointer straight from the ndarray
struct, releases the GIL, calls the kernel whose address is the builtin's ``self``, takes
the GIL back and returns None.

The trampolines are only used after a self-test in this process confirmed the struct
offsets they assume (CPython tuple items, numpy's ``data`` field) and a real call worked, on
CPython 3.8-3.11 (the trampoline increfs None by hand); otherwise :func:`make` returns the
ctypes caller.  They take numpy arrays only, and
exactly ``nargs`` of them (a wrong count raises SystemError; callers are internal).
"""
from __future__ import annotations

import ctypes
import sys
import threading

import numpy as np

__all__ = ["make"]

_lock = threading.Lock()
_tramps: dict = {}          # nargs -> trampoline address
_defs: dict = {}            # trampoline address -> its PyMethodDef's address (raw memory, never freed)
_ok: list = [None]          # self-test result

_TUPLE_ITEMS = 24           # offsetof(PyTupleObject, ob_item) on 64-bit CPython
_ARRAY_DATA = 16            # offsetof(PyArrayObject_fields, data)


class _PyMethodDef(ctypes.Structure):
    _fields_ = [("ml_name", ctypes.c_void_p), ("ml_meth", ctypes.c_void_p), ("ml_flags", ctypes.c_int),
                ("ml_doc", ctypes.c_void_p)]


_NAME = b"neetorch_llvm_kernel\0"


_new = None


def _ir(nargs: int) -> str:
    p = "i8*"
    # one module per trampoline; its globals (API function addresses, None) are set after loading
    lines = [f"@nee_save_{nargs} = global i8* null", f"@nee_restore_{nargs} = global i8* null",
             f"@nee_aslong_{nargs} = global i8* null", f"@nee_none_{nargs} = global i8* null", "",
             f"define {p} @nee_tramp_{nargs}({p} %self, {p} %args) {{",
             "entry:",
             "  %szp = getelementptr i8, i8* %args, i64 16",
             "  %szq = bitcast i8* %szp to i64*",
             "  %sz = load i64, i64* %szq",
             f"  %okn = icmp eq i64 %sz, {nargs}",
             "  br i1 %okn, label %go, label %bad",
             "bad:",
             f"  ret {p} null",
             "go:",
             f"  %alp = load i8*, i8** @nee_aslong_{nargs}",
             "  %alf = bitcast i8* %alp to i8* (i8*)*",
             "  %fp = call i8* %alf(i8* %self)"]
    for i in range(nargs):
        lines += [f"  %ip{i} = getelementptr i8, i8* %args, i64 {_TUPLE_ITEMS + 8 * i}",
                  f"  %iq{i} = bitcast i8* %ip{i} to i8**",
                  f"  %o{i} = load i8*, i8** %iq{i}",
                  f"  %dp{i} = getelementptr i8, i8* %o{i}, i64 {_ARRAY_DATA}",
                  f"  %dq{i} = bitcast i8* %dp{i} to i8**",
                  f"  %d{i} = load i8*, i8** %dq{i}"]
    sig = ", ".join(["i8*"] * nargs)
    lines += [f"  %svp = load i8*, i8** @nee_save_{nargs}",
              "  %svf = bitcast i8* %svp to i8* ()*",
              "  %ts = call i8* %svf()",
              f"  %kf = bitcast i8* %fp to void ({sig})*",
              f"  call void %kf({', '.join(f'i8* %d{i}' for i in range(nargs))})",
              f"  %rsp = load i8*, i8** @nee_restore_{nargs}",
              "  %rsf = bitcast i8* %rsp to void (i8*)*",
              "  call void %rsf(i8* %ts)",
              f"  %none = load i8*, i8** @nee_none_{nargs}",
              "  %rcp = bitcast i8* %none to i64*",
              "  %rc = load i64, i64* %rcp",
              "  %rc1 = add i64 %rc, 1",
              "  store i64 %rc1, i64* %rcp",
              f"  ret {p} %none",
              "}"]
    return "\n".join(lines) + "\n"


def _addr(fn) -> int:
    return ctypes.cast(fn, ctypes.c_void_p).value


def _trampoline(nargs: int) -> int:
    t = _tramps.get(nargs)
    if t is not None:
        return t
    from . import llvm_render
    _, llvm = llvm_render._init()
    tm = llvm_render._machine()
    mod = llvm.parse_assembly(_ir(nargs))
    mod.verify()
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    eng = llvm_render._state["engine"]
    eng.add_object_file(llvm.ObjectFileRef.from_data(bytes(tm.emit_object(mod))))
    eng.finalize_object()
    api = ctypes.pythonapi
    for name, value in (("save", _addr(api.PyEval_SaveThread)), ("restore", _addr(api.PyEval_RestoreThread)),
                        ("aslong", _addr(api.PyLong_AsVoidPtr)), ("none", id(None))):
        g = eng.get_global_value_address(f"nee_{name}_{nargs}")
        if not g:
            raise RuntimeError("trampoline global not found")
        ctypes.c_void_p.from_address(g).value = value
    t = eng.get_function_address(f"nee_tramp_{nargs}")
    if not t:
        raise RuntimeError("trampoline not found")
    _tramps[nargs] = t
    return t


def _builtin(tramp: int, kernel_addr: int):
    global _new
    if _new is None:
        f = ctypes.pythonapi.PyCFunction_NewEx
        f.restype = ctypes.py_object
        f.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.py_object]
        _new = f
    return _new(_method_def(tramp), int(kernel_addr), None)


def _method_def(tramp: int) -> int:
    """Address of the PyMethodDef of trampoline ``tramp`` (``METH_VARARGS``; the kernel's address is each
    builtin's ``self``), one per trampoline, in raw memory that is never freed.  A builtin reads its
    PyMethodDef until it is deallocated (the flags in ``meth_dealloc`` and the collector's ``meth_traverse``,
    the name in its repr), and kernel builtins live in caches that can outlive this module's globals: at
    interpreter exit the collector clears module dicts and the caches holding kernels in one pass, in no set
    order.  (A ctypes struct per builtin kept in a module-level list was freed with the list, before builtins
    still held elsewhere: their deallocation read the freed struct, a segfault when its memory had gone back
    to the system; tests/test_shutdown_s27.py.)  Called under ``_lock``."""
    a = _defs.get(tramp)
    if a is None:
        raw = ctypes.pythonapi.PyMem_RawMalloc
        raw.restype = ctypes.c_void_p
        raw.argtypes = [ctypes.c_size_t]
        size = ctypes.sizeof(_PyMethodDef)
        a = raw(size + len(_NAME))
        if not a:
            raise MemoryError("llvm_call: PyMethodDef")
        ctypes.memmove(a + size, _NAME, len(_NAME))
        d = _PyMethodDef.from_address(a)     # (a view of the raw memory: dropping it frees nothing)
        d.ml_name, d.ml_meth, d.ml_flags, d.ml_doc = a + size, tramp, 1, None   # METH_VARARGS
        _defs[tramp] = a
    return a


def _ctypes_caller(addr: int, nargs: int):
    f = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * nargs))(addr)

    def call(*arrays):
        f(*[a.ctypes.data for a in arrays])
    call._cfunc = f
    return call


def _self_test() -> bool:
    """Check the struct offsets on this interpreter / numpy and one real call."""
    if sys.implementation.name != "cpython" or ctypes.sizeof(ctypes.c_void_p) != 8 or \
            not (3, 8) <= sys.version_info[:2] < (3, 12):
        return False   # 3.12+: immortal None (a raw incref would break it), free-threaded layouts
    try:
        a = np.arange(3, dtype=np.float64)
        if ctypes.c_void_p.from_address(id(a) + _ARRAY_DATA).value != a.ctypes.data:
            return False
        tup = (a, None)
        if ctypes.c_void_p.from_address(id(tup) + _TUPLE_ITEMS).value != id(a) or \
                ctypes.c_ssize_t.from_address(id(tup) + 16).value != 2:
            return False
        from . import llvm_render
        _, llvm = llvm_render._init()
        tm = llvm_render._machine()
        ir_text = ("define void @nee_selftest(double* %o, double* %x) {\n"
                   "  %v = load double, double* %x\n  %w = fadd double %v, 1.5\n"
                   "  store double %w, double* %o\n  ret void\n}\n")
        mod = llvm.parse_assembly(ir_text)
        mod.triple = tm.triple
        eng = llvm_render._state["engine"]
        eng.add_object_file(llvm.ObjectFileRef.from_data(bytes(tm.emit_object(mod))))
        eng.finalize_object()
        f = _builtin(_trampoline(2), eng.get_function_address("nee_selftest"))
        o, x = np.zeros(1), np.array([2.0])
        r = f(o, x)
        return r is None and o[0] == 3.5
    except Exception:   # noqa: BLE001 - any surprise: the ctypes path is always correct
        return False


def make(addr: int, nargs: int):
    """A Python callable ``f(*arrays)`` running the kernel at ``addr`` on the arrays' data."""
    from . import llvm_render
    # (llvm_render's lock: the trampolines are loaded into its engine, which kernels compiled in other threads
    # are loaded into too)
    with llvm_render._lock, _lock:
        if _ok[0] is None:
            _ok[0] = _self_test()
        if _ok[0]:
            return _builtin(_trampoline(nargs), addr)
    return _ctypes_caller(addr, nargs)
