"""OpenCL drivers installed as Python packages, made visible to the ICD loader.

pyopencl's wheel bundles an ICD loader (ocl-icd) and PoCL.  PoCL 3.0 (LLVM 14) cannot compile for CPUs
newer than its LLVM (AMD Zen 5: "unknown target CPU 'generic'"), so on those hosts pyopencl alone gives
no usable device.  Intel's CPU OpenCL runtime (``intel-opencl-rt`` on PyPI, x86-64 Linux; it runs on AMD
CPUs too) does, but its wheel is laid out for conda: its ``etc/OpenCL/vendors/intel-cpu.icd`` names
``/opt/anaconda1anaconda2anaconda3/lib/libintelocl.so``, a placeholder conda's post-link script rewrites
and pip does not.  So the loader never finds it.

:func:`register` (called once, before pyopencl is first imported) finds such drivers through their
package records and, unless the user chose the loader's vendor directory (``OCL_ICD_VENDORS`` or
``OPENCL_VENDOR_PATH`` set), points ``OCL_ICD_VENDORS`` at a directory under the neetorch cache holding
the system's ``/etc/OpenCL/vendors/*.icd`` (so GPU drivers stay visible) plus one ``.icd`` per driver
found.  PoCL stays visible: pyopencl's loader adds its bundled PoCL whatever the vendor directory.
``NEE_OPENCL_PIP_DRIVERS=0`` turns this off.
"""
from __future__ import annotations

import glob
import hashlib
import os

from ... import _env

__all__ = ["register", "registered"]

# (distribution, the driver library's file name in it)
PIP_DRIVERS = (("intel-opencl-rt", "libintelocl.so"),)
SYSTEM_VENDORS = "/etc/OpenCL/vendors"

_done: list = []        # [the vendor directory set, or None] once register() has run


def _installed_drivers() -> list[str]:
    """Absolute paths of the driver libraries that pip installed."""
    from importlib import metadata
    out = []
    for dist, lib in PIP_DRIVERS:
        try:
            files = metadata.distribution(dist).files or ()
        except metadata.PackageNotFoundError:
            continue
        for f in files:
            if f.name == lib:
                p = os.path.realpath(f.locate())
                if os.path.isfile(p):
                    out.append(p)
                break
    return out


def _write_vendor_dir(libs: list[str]) -> str | None:
    """A directory of ``.icd`` files: the system's, then one per library in ``libs``; None if it
    cannot be written.  Named by its contents, written atomically (parallel processes race here)."""
    entries = []
    for icd in sorted(glob.glob(os.path.join(SYSTEM_VENDORS, "*.icd"))):
        try:
            with open(icd, encoding="utf-8", errors="replace") as f:
                entries.append((os.path.basename(icd), f.read().strip()))
        except OSError:
            continue
    entries += [(f"nee-pip-{os.path.basename(lib)}.icd", lib) for lib in libs]
    key = hashlib.sha256(repr(entries).encode()).hexdigest()[:16]
    d = os.path.join(_env.CACHE_DIR, "opencl-vendors", key)
    try:
        os.makedirs(d, exist_ok=True)
        for name, text in entries:
            p = os.path.join(d, name)
            try:
                with open(p, encoding="utf-8") as f:
                    if f.read() == text + "\n":
                        continue
            except OSError:
                pass
            tmp = f"{p}.{os.getpid()}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text + "\n")
            os.replace(tmp, p)
    except OSError:
        return None
    return d


def register() -> str | None:
    """Make pip-installed OpenCL drivers visible to the ICD loader (see the module's doc); the vendor
    directory set, or None when nothing was changed.  Once per process; takes effect only if called
    before the loader first lists platforms."""
    if _done:
        return _done[0]
    d = None
    if (os.environ.get("NEE_OPENCL_PIP_DRIVERS", "1") not in ("0", "false", "False")
            and not os.environ.get("OCL_ICD_VENDORS") and not os.environ.get("OPENCL_VENDOR_PATH")):
        libs = _installed_drivers()
        if libs:
            d = _write_vendor_dir(libs)
            if d is not None:
                os.environ["OCL_ICD_VENDORS"] = d
    _done.append(d)
    return d


def registered() -> str | None:
    """The vendor directory :func:`register` set (None: none, or not run yet)."""
    return _done[0] if _done else None
