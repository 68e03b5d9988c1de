"""OpenCL C expressions for the elementwise op table: the shared C table
(``devices/cexpr.py``, also used by the CUDA renderer) in the OpenCL dialect.

``EXPR`` is the shared table itself (one dict: deleting an entry un-claims the op on
every C-family device); ``CTYPE`` maps dtype names to OpenCL C types; ``preamble``
gives the helper functions every program starts with.
"""
from __future__ import annotations

from ..cexpr import EXPR, OPENCL, UNARY_FLOAT, _by_cat, _fl  # noqa: F401  (re-exported)

CTYPE = OPENCL.ctype
UTYPE = OPENCL.utype
BITS = OPENCL.bits
INT_CTYPES = OPENCL.int_ctypes


def preamble(fp64: bool, fp16: bool = False) -> str:
    """The helper functions every generated program starts with (``fp16``: with the cl_khr_fp16 pragma)."""
    return OPENCL.preamble(fp64, fp16)
