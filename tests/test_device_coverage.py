"""The checked-in device-coverage table (docs/DEVICE_COVERAGE.md) matches what the backends claim.

Regenerate with ``python3 -m neetorch.devices.coverage --write``.  A device column is only
compared when this machine computes it the same way as the checked-in table (same basis:
an instance with the same stored dtypes, or static claims); otherwise that column's check
is skipped with the reason (e.g. the table was generated on a machine with a GPU).
"""
from __future__ import annotations

import difflib
import os

import numpy as np
import pytest

import neetorch as nee
from neetorch.devices import Backend, coverage
from neetorch.ops.registry import OPS

PATH = coverage.default_path()
REGEN = "python3 -m neetorch.devices.coverage --write"


@pytest.fixture(scope="module")
def current():
    return coverage.render(coverage.columns())


@pytest.fixture(scope="module")
def checked_in():
    if not os.path.exists(PATH):
        pytest.fail(f"{PATH} is missing; generate it with: {REGEN}")
    with open(PATH) as f:
        return f.read()


def _diff(a, b):
    return "".join(difflib.unified_diff(a.splitlines(True), b.splitlines(True), "checked in", "regenerated"))


def test_render_is_deterministic(current):
    assert coverage.render(coverage.columns()) == current


def test_whole_file_matches(current, checked_in):
    here, there = coverage.parse_bases(current), coverage.parse_bases(checked_in)
    if here != there:
        pytest.skip(f"device columns computed differently here ({here}) than in the checked-in table ({there}); "
                    f"the per-device checks compare what can be compared")
    assert checked_in == current, f"docs/DEVICE_COVERAGE.md drifted; regenerate it with: {REGEN}\n" \
                                  + _diff(checked_in, current)


def _device_names():
    names = {c.type for c in coverage.columns()}
    if os.path.exists(PATH):
        with open(PATH) as f:
            names |= set(coverage.parse_bases(f.read()))
    return sorted(names)


@pytest.mark.parametrize("dev", _device_names())
def test_device_column_matches(dev, current, checked_in):
    here, there = coverage.parse_bases(current), coverage.parse_bases(checked_in)
    if dev not in there:
        pytest.fail(f"device {dev!r} is registered here but missing from docs/DEVICE_COVERAGE.md; "
                    f"regenerate it with: {REGEN}")
    if dev not in here:
        pytest.skip(f"{dev} is not registered on this machine (checked-in column: {there[dev]})")
    if here[dev] != there[dev]:
        pytest.skip(f"{dev} column is computed from '{here[dev]}' here but from '{there[dev]}' in the checked-in "
                    f"table: not comparable on this machine")
    _, rows_here = coverage.parse_ops(current)
    _, rows_there = coverage.parse_ops(checked_in)
    assert sorted(rows_here) == sorted(rows_there), (
        f"the op table changed (added: {sorted(set(rows_here) - set(rows_there))}, removed: "
        f"{sorted(set(rows_there) - set(rows_here))}); regenerate with: {REGEN}")
    bad = [f"{op}: checked in {rows_there[op].get(dev)!r}, now {rows_here[op][dev]!r}"
           for op in sorted(rows_here) if rows_here[op][dev] != rows_there[op].get(dev)]
    assert not bad, f"{dev} claims drifted; regenerate with: {REGEN}\n" + "\n".join(bad)


def test_every_op_and_registered_device_is_in_the_table(current):
    devs, rows = coverage.parse_ops(current)
    assert sorted(rows) == sorted(OPS)
    assert devs[0] == "cpu" and set(devs) == {d.type for d in nee.devices()}
    assert all(v == "all" for v in (rows[op]["cpu"] for op in OPS)), "the CPU claims every op on every dtype"


# ------------------------------------------------------------------- semantics of a column
class _StaticOnly(Backend):
    """A backend with no device here that knows its claims statically (like CUDA without a GPU)."""
    type = "zzstatic"

    @classmethod
    def probe(cls):
        return 0, "no such hardware in tests"

    @classmethod
    def static_claims(cls):
        return {"add": frozenset({"float32", "float16"}), "sum": frozenset({"float32", "int32", "int64"}),
                "not_an_op": frozenset({"float32"})}


class _Nothing(Backend):
    type = "zznothing"

    @classmethod
    def probe(cls):
        return 0, "absent"


def test_static_and_unavailable_columns(monkeypatch):
    import sys
    D = sys.modules["neetorch.devices"]
    D._discover()
    monkeypatch.setitem(D._backend_classes, "zzstatic", (_StaticOnly, "tests:_StaticOnly", None))
    monkeypatch.setitem(D._backend_classes, "zznothing", (_Nothing, "tests:_Nothing", None))
    cols = {c.type: c for c in coverage.columns()}
    s, n = cols["zzstatic"], cols["zznothing"]
    assert s.basis == "static" and n.basis == "none" and n.reason == "absent"
    assert s.claims["add"] == ("float16", "float32")
    # sum of int32 produces int64: both must be claimed; sum of float32 stays float32
    assert s.claims["sum"] == ("int32", "int64", "float32")
    assert s.claims["matmul"] == ()
    text = coverage.render(list(cols.values()))
    _, rows = coverage.parse_ops(text)
    assert rows["add"]["zzstatic"] == "f16 f32" and rows["matmul"]["zzstatic"] == "falls back"
    assert rows["add"]["zznothing"] == "not available here"
    assert "not_an_op" in text   # a claim for an op the table does not have is reported, not dropped
    assert coverage.parse_bases(text)["zzstatic"] == "static_claims() (no device here)"


def test_check_cli_reports_drift(tmp_path, capsys):
    p = tmp_path / "cov.md"
    assert coverage.main(["--write", "--output", str(p)]) == 0
    assert coverage.main(["--check", "--output", str(p)]) == 0
    p.write_text(p.read_text().replace("| abs | elementwise | all |", "| abs | elementwise | f32 |"))
    assert coverage.main(["--check", "--output", str(p)]) == 1
    out = capsys.readouterr()
    assert "-| abs | elementwise | f32 |" in out.out and REGEN in out.err


# ------------------------------------------------------------------- the table tells what the dispatcher does
def _opencl():
    info = {d.type: d for d in nee.devices()}.get("opencl")
    if info is None or not info.available:
        pytest.skip("no OpenCL device here")
    return "opencl"


@pytest.mark.parametrize("op, dt, fn", [
    ("add", "float32", lambda x: x + x), ("add", "int64", lambda x: x + x),
    ("sum", "int32", lambda x: x.sum(0)), ("mean", "float32", lambda x: x.mean(0)),
    ("cumsum", "float32", lambda x: x.cumsum(0)), ("argmax", "float32", lambda x: x.argmax(0)),
    ("matmul", "int8", lambda x: x @ x),
])
def test_opencl_cells_match_dispatch(op, dt, fn):
    """A dtype the table lists runs without a fallback; an unlisted one shows in the fallback report."""
    dev = _opencl()
    col = {c.type: c for c in coverage.columns()}[dev]
    claimed = dt in col.claims[op]
    x = nee.tensor(np.arange(9).reshape(3, 3) % 4, dtype=getattr(nee, dt)).to(dev)
    nee.reset_fallbacks()
    try:
        fn(x)
        fell = [r for r in nee.fallback_report().records.values() if r.op == op]
    finally:
        nee.reset_fallbacks()
    assert bool(fell) != claimed, (op, dt, claimed, fell)
