"""Smoke test of the benchmark suite: every asv benchmark (and bench/compare.py) runs once on tiny sizes.

Catches broken benchmarks in seconds; it measures nothing.  A benchmark whose setup raises
NotImplementedError (torch absent, neetorch op not implemented yet) is skipped, as asv would.
"""
from __future__ import annotations

import importlib
import inspect
import itertools
import math
import os
import pkgutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import asv_benchmarks  # noqa: E402
from asv_benchmarks import _workloads as W  # noqa: E402

PREFIXES = ("time_", "timeraw_", "track_", "mem_", "peakmem_")

# Benchmarks too slow for a seconds-long smoke run (fresh-process compiles, torch.compile, the demo):
# skipped unless NEE_BENCH_SMOKE_SLOW=1.  A benchmark class or function opts in with ``slow = True``.
SLOW_NAMES = {"JitCompileTime", "Demo"}
SLOW_PARAMS = {"torch.compile", "torch.compile-freeze"}
RUN_SLOW = os.environ.get("NEE_BENCH_SMOKE_SLOW", "0") not in ("", "0")


def _is_slow(obj, name, params) -> bool:
    return bool(getattr(obj, "slow", False)) or name in SLOW_NAMES or any(str(p) in SLOW_PARAMS for p in params)


def _modules():
    mods = []
    for info in pkgutil.iter_modules(asv_benchmarks.__path__, "asv_benchmarks."):
        mods.append(importlib.import_module(info.name))
    return mods


def _param_combos(params):
    if not params:
        return [()]
    if not isinstance(params[0], (list, tuple)):
        params = [params]
    return list(itertools.product(*params))


_SLOW = [pytest.mark.slow,
         pytest.mark.skipif(not RUN_SLOW, reason="slow benchmark: set NEE_BENCH_SMOKE_SLOW=1 to run it")]


def _cases():
    cases = []
    for mod in _modules():
        for name, obj in vars(mod).items():
            if name.startswith("_"):
                continue
            if inspect.isfunction(obj) and name.startswith(PREFIXES) and obj.__module__ == mod.__name__:
                marks = _SLOW if _is_slow(obj, name, ()) else []
                cases.append(pytest.param(mod.__name__, None, name, (), id=f"{mod.__name__[15:]}.{name}",
                                          marks=marks))
            elif inspect.isclass(obj) and obj.__module__ == mod.__name__:
                methods = [m for m in dir(obj) if m.startswith(PREFIXES)]
                for m in methods:
                    for p in _param_combos(getattr(obj, "params", [])):
                        pid = "-".join(str(x) for x in p)
                        marks = _SLOW if _is_slow(obj, name, p) else []
                        cases.append(pytest.param(mod.__name__, name, m, p, marks=marks,
                                                  id=f"{mod.__name__[15:]}.{name}.{m}[{pid}]"))
    return cases


CASES = _cases()


@pytest.fixture(autouse=True)
def _tiny(monkeypatch):
    monkeypatch.setattr(W, "TINY", True)
    monkeypatch.setenv("NEE_BENCH_TINY", "1")


def _check_result(method: str, r):
    if method.startswith("track_"):
        assert isinstance(r, (int, float)) and math.isfinite(r), f"{method} returned {r!r}"
    elif method.startswith("timeraw_"):
        code = r if isinstance(r, str) else r[0]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr


def test_suite_has_benchmarks():
    assert len(CASES) > 50
    names = {c.values[2] for c in CASES}
    assert {"time_op", "track_gbps", "track_speed_ratio", "timeraw_import_neetorch"} <= names


@pytest.mark.parametrize("modname, clsname, method, params", CASES)
def test_benchmark_runs_once(modname, clsname, method, params):
    mod = importlib.import_module(modname)
    if clsname is None:
        fn = getattr(mod, method)
        try:
            r = fn()
        except NotImplementedError as e:
            pytest.skip(str(e))
        _check_result(method, r)
        return
    inst = getattr(mod, clsname)()
    if hasattr(inst, "setup"):
        try:
            inst.setup(*params)
        except NotImplementedError as e:
            pytest.skip(str(e))
    try:
        r = getattr(inst, method)(*params)
        _check_result(method, r)
    finally:
        if hasattr(inst, "teardown"):
            inst.teardown(*params)


@pytest.mark.parametrize("name", list(W.WORKLOADS))
def test_neetorch_result_matches_reference(name):
    """Tiny sizes: neetorch's answer agrees with numpy's (or torch's) for every workload it can run."""
    w = W.WORKLOADS[name]
    try:
        got = W.build(name, "neetorch", warmup=False)()
    except NotImplementedError as e:
        pytest.skip(str(e))
    for ref_lib in ("numpy", "torch"):
        try:
            ref = W.build(name, ref_lib, warmup=False)()
        except NotImplementedError:
            continue
        assert W.results_match(got, ref), f"{name}: neetorch differs from {ref_lib}"
        return
    assert w is not None


def test_asv_conf_is_valid():
    asv_util = pytest.importorskip("asv.util")
    conf = asv_util.load_json(os.path.join(ROOT, "asv.conf.json"), js_comments=True)
    assert conf["benchmark_dir"] == "asv_benchmarks"
    assert conf["repo"] == "." and conf["branches"] == ["main"]
    assert conf["environment_type"] == "virtualenv"
    assert any("[bench]" in c for c in conf["install_command"])


def test_compare_script_runs_tiny(capsys):
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        compare = importlib.import_module("compare")
    finally:
        sys.path.remove(os.path.join(ROOT, "bench"))
    assert compare.main(["--tiny", "--no-coldstart"]) == 0
    out = capsys.readouterr().out
    assert "copy bandwidth" in out and "workload" in out
    for w in W.WORKLOADS.values():
        assert w.label in out
