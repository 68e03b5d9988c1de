"""Packages that are also functions: ``nee.devices()``, ``nee.jit(fn)``, ``nee.tensor(data)``.

torch-style names put a function where a subpackage of the same name lives; binding the function on the parent
package hides the subpackage from ``import neetorch.jit.passes as p`` (that statement walks the attributes
neetorch -> jit -> passes).  Instead the attribute stays the package, whose module class gets a ``__call__``
running the function (and the function's signature, for ``inspect``/``help``)."""
from __future__ import annotations

import inspect
import sys
import types


def make_callable(package: str, fn) -> types.ModuleType:
    """Make the imported package ``package`` callable as ``fn``; returns the package module."""
    mod = sys.modules[package]

    def __call__(self, *args, **kwargs):
        return fn(*args, **kwargs)

    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        sig = None
    mod.__class__ = type(f"CallablePackage[{package}]", (types.ModuleType,),
                         {"__call__": __call__, "__signature__": sig, "__wrapped__": fn})
    return mod
