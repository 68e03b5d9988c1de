"""ONNX conformance: ONNX's own node test cases and the model tests under onnx/backend/test/data
({simple, pytorch-converted, pytorch-operator, light}) run through ``neetorch.onnx.backend`` with
ONNX's comparison rule (same shapes and dtypes, ``assert_allclose`` with the case's rtol/atol,
default 1e-3 / 1e-7), node cases eagerly (no jit: one trace would cost more than the case),
model tests through ``nee.jit``.  Every case not listed in ``tests/onnx_expected_failures.py``
(each entry has a reason) must pass.

By default (CI time budget: every distinct kernel costs ~0.5 s of Numba compile on a cold
cache) a fixed, representative subset runs: one node case per op type (the first, by name, not
expected to fail) and a handful of model tests.  ``NEE_ONNX_FULL=1`` runs every case, measures
onnxruntime with the same harness, and prints pass counts per category and per op type for both
(``pytest -s tests/test_onnx_conformance.py``).
"""
from __future__ import annotations

import os
import sys
import time

import pytest

pytest.importorskip("onnx")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import onnx_conformance_harness as H  # noqa: E402
from onnx_expected_failures import EXPECTED_FAILURES  # noqa: E402

FULL = os.environ.get("NEE_ONNX_FULL", "") not in ("", "0")

# model tests run by default: small, and together they cover conv/pool/norm/gemm/sequence paths
DEFAULT_MODELS = ("test_AvgPool2D", "test_BatchNorm2d_eval", "test_Conv2d_groups", "test_ConvTranspose2d",
                  "test_Embedding", "test_PReLU_2d_multiparam", "test_MaxPool3d", "test_Conv3d",
                  "test_operator_maxpool", "test_operator_pad", "test_operator_reduced_mean_keepdim",
                  "test_operator_symbolic_override_nested", "test_sequence_model1", "test_expand_shape_model1",
                  "test_shrink", "light_squeezenet")


def _select(cases):
    if FULL:
        return cases
    out, seen = [], set()
    for c in sorted(cases, key=lambda c: c.name):
        if c.category == "node":
            if c.op_type in seen or c.name in EXPECTED_FAILURES:
                continue
            seen.add(c.op_type)
            out.append(c)
        elif c.name in DEFAULT_MODELS:
            out.append(c)
    return out


def _check(cases, res, label):
    regressed = {c.name: res[c.name] for c in cases if res[c.name] is not None and c.name not in EXPECTED_FAILURES}
    assert not regressed, f"{label}: {len(regressed)} case(s) not on the expected-failure list fail:\n" + \
        "\n".join(f"  {k}: {v}" for k, v in sorted(regressed.items()))


def test_node_cases():
    cases = _select(H.node_cases())
    t0 = time.time()
    res = H.evaluate(cases, H.run_nee, jit=False)
    dt = time.time() - t0
    ort = H.evaluate(cases, H.run_ort) if FULL else None
    print(f"\nONNX node cases ({'full' if FULL else 'subset: one per op type'}, {dt:.1f}s):")
    print(H.summarize(cases, res, ort))
    if FULL:
        fixed = sorted(c.name for c in cases if c.name in EXPECTED_FAILURES and res[c.name] is None)
        if fixed:
            print(f"expected failures that now pass ({len(fixed)}): {', '.join(fixed)}")
    _check(cases, res, "node cases")


@pytest.mark.parametrize("category", H.CATEGORIES)
def test_model_cases(category):
    cases = _select(H.model_cases(category))
    if not cases:
        pytest.skip(f"no {category} model tests selected")
    missing = [c.name for c in cases if c.model is None or c.data_sets is None]
    cases = [c for c in cases if c.name not in missing]
    t0 = time.time()
    res = H.evaluate(cases, H.run_nee, jit=True)
    dt = time.time() - t0
    ort = H.evaluate(cases, H.run_ort) if FULL else None
    print(f"\nONNX {category} model tests ({dt:.1f}s):")
    print(H.summarize(cases, res, ort, by_op=False))
    if missing:
        print(f"skipped (model or data not available locally: downloads are not attempted): {', '.join(missing)}")
    _check(cases, res, f"{category} models")
