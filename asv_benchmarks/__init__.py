"""asv benchmark suite for neetorch (see asv.conf.json at the repository root).

Every timed benchmark is parametrized by library (neetorch / numpy / torch) so that ratios can be
read from one run; ``bench_ratios`` also tracks those ratios directly.  The workloads themselves live
in ``_workloads`` and are shared with ``bench/compare.py`` and ``tests/test_benchmarks_smoke.py``.

With ``asv run --python=same`` neetorch is not installed into an asv environment: if it cannot be
imported, the repository root (ASV_CONF_DIR, else the parent of this folder) is put on sys.path and
PYTHONPATH (the latter for the fresh-process benchmarks).
"""
import os
import sys

try:
    import neetorch  # noqa: F401
except ImportError:
    _root = os.environ.get("ASV_CONF_DIR") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if os.path.isdir(os.path.join(_root, "neetorch")):
        sys.path.insert(0, _root)
        os.environ["PYTHONPATH"] = os.pathsep.join([_root] + [p for p in [os.environ.get("PYTHONPATH")] if p])
