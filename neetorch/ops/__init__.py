"""The op table: every module in this package defines ops (imported here, in order)."""
import importlib
import pkgutil

from .registry import EXPORTS, OPS, Meta, OpDef, export, register, run  # noqa: F401

for _m in sorted(pkgutil.iter_modules(__path__), key=lambda m: (m.name != "elementwise", m.name)):
    if not _m.name.startswith("_") and _m.name not in ("registry", "shape_rules"):
        importlib.import_module(f"{__name__}.{_m.name}")
