"""Smoke test of bench/torch_export_vs_ort.py (a LLaMA-style decoder exported from torch, neetorch against
onnxruntime): one tiny model through the legacy exporter, its table printed with a ratio and a small difference."""
import os
import re
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_bench_runs(capsys, monkeypatch):
    monkeypatch.syspath_prepend(os.path.join(ROOT, "bench"))
    import torch_export_vs_ort as B
    old = os.environ.get("NEE_NUM_THREADS")
    try:
        assert B.main(["--seq", "5", "--exporters", "legacy", "--rounds", "1", "--calls", "1", "--vocab", "40",
                       "--d", "32", "--layers", "1", "--threads", str(int(old or 0) or 2)]) == 0
    finally:
        if old is None:
            os.environ.pop("NEE_NUM_THREADS", None)
        else:
            os.environ["NEE_NUM_THREADS"] = old
    out = capsys.readouterr().out
    row = re.search(r"legacy\s+5\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.e+-]+)", out)
    assert row, out
    assert float(row.group(4)) < 1e-4       # the outputs agree
    sys.modules.pop("torch_export_vs_ort", None)
