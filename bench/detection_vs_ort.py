#!/usr/bin/env python3
"""torchvision's detection models exported to ONNX: neetorch vs onnxruntime, outputs and latency.

    python3 bench/detection_vs_ort.py --export-python /tmp/detvenv/bin/python
    python3 bench/detection_vs_ort.py --models fcos_resnet50_fpn,ssdlite320_mobilenet_v3_large --rounds 5

Detectors are where graph breaks matter: NonZero, TopK on computed counts and NonMaxSuppression (inside If
subgraphs) make their output sizes depend on values, so those nodes run eagerly between compiled segments
(``InferenceSession.info["breaks"]``).  Export needs a torchvision whose compiled ops match its torch (nms,
roi_align): ``--export-python`` names an interpreter that has them (e.g. a venv with ``pip install torch==2.14.1
torchvision==0.29.1``); the exports (random weights, score thresholds 0 so every model returns its maximum number
of detections, the MobileNetV3 models' batch-norm statistics re-estimated on random images so their scores are not
all equal; a 3x320x320 image) are cached in ``--dir``.  Measuring runs in this interpreter (neetorch and
onnxruntime), each model in its own process: session construction + first run, the largest error against
onnxruntime relative to each output's largest magnitude (detections in a canonical order first, sorted by box,
score and label: near-equal scores may be ordered differently), and steady-state latency with the same thread count (min over ``--rounds`` alternated
rounds of ``--reps`` runs each; ratio = neetorch / onnxruntime).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

MODELS = ("fasterrcnn_mobilenet_v3_large_320_fpn ssdlite320_mobilenet_v3_large retinanet_resnet50_fpn "
          "fcos_resnet50_fpn ssd300_vgg16 maskrcnn_resnet50_fpn keypointrcnn_resnet50_fpn").split()

_EXPORT = r'''
import sys, numpy as np, torch
from torchvision.models import detection as D
name, path = sys.argv[1], sys.argv[2]
small = {} if name.startswith(("ssd", "fasterrcnn_mobilenet")) else dict(min_size=320, max_size=320)
torch.manual_seed(0)
model = getattr(D, name)(weights=None, weights_backbone=None, **small).eval()
for obj in (model, getattr(model, "roi_heads", None)):
    if obj is not None and hasattr(obj, "score_thresh"):
        obj.score_thresh = 0.0
if "mobilenet" in name:   # random BN statistics make MobileNetV3's features vanish: every score equal
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for b in bns:
        b.reset_running_stats(); b.momentum = None; b.train()
    g = torch.Generator().manual_seed(123)
    with torch.no_grad():
        model([torch.rand(3, 320, 320, generator=g) for _ in range(4)])
    for b in bns:
        b.eval()
torch.manual_seed(0)
img = torch.rand(3, 320, 320)
torch.onnx.export(model, ([img],), path, opset_version=17, input_names=["image"], dynamo=False)
np.save(path[:-5] + "_image.npy", img.numpy())
'''

_MEASURE = r'''
import json, os, sys, time
os.environ["NEE_NUM_THREADS"] = "{nt}"
import numpy as np, onnxruntime as ort
path, rounds, reps = {path!r}, {rounds}, {reps}
x = np.load(path[:-5] + "_image.npy")
so = ort.SessionOptions(); so.intra_op_num_threads = {nt}; so.log_severity_level = 3
r = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
name = r.get_inputs()[0].name
want = r.run(None, {{name: x}})
import neetorch as nee
t0 = time.perf_counter()
s = nee.onnx.InferenceSession(path)
got = s.run(None, {{name: x}})
first = time.perf_counter() - t0
# detections in a canonical order: rows sorted by (box, score, label) rounded to 1e-3, each engine's own order
K = want[0].shape[0] if want and want[0].ndim else 0
def order(outs):
    cols = [np.round(o.reshape(K, -1).astype(np.float64), 3) for o in outs
            if o.ndim and o.shape[0] == K and o[:1].size <= 8]
    return np.lexsort(np.concatenate(cols, 1).T[::-1]) if cols and K else None
pg, pw = order(got), order(want)
err = 0.0
for g, w in zip(got, want):
    if g.shape != w.shape:
        err = float("inf"); break
    if pg is not None and w.ndim and w.shape[0] == K:
        g, w = g[pg], w[pw]
    if w.size:
        err = max(err, float(np.abs(g.astype(np.float64) - w).max() / (np.abs(w).max() or 1.0)))
best = {{"nee": 1e9, "ort": 1e9}}
for _ in range(rounds):
    for eng, f in (("nee", lambda: s.run(None, {{name: x}})), ("ort", lambda: r.run(None, {{name: x}}))):
        f()
        for _ in range(reps):
            t = time.perf_counter(); f(); best[eng] = min(best[eng], time.perf_counter() - t)
print(json.dumps({{"first_s": first, "err": err, "nee_ms": best["nee"] * 1e3, "ort_ms": best["ort"] * 1e3,
                  "mode": s.info["mode"], "breaks": len(s.info.get("break_reasons", {{}})),
                  "segments": s.info.get("breaks", "").rsplit("segments: ", 1)[-1].count("nee(")}}))
'''


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "nee_detection"))
    ap.add_argument("--export-python", default=sys.executable,
                    help="interpreter with torch + a matching torchvision (exports missing from --dir)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=1800)
    a = ap.parse_args(argv)
    os.makedirs(a.dir, exist_ok=True)
    print(f"{'model':40s} {'first run':>10s} {'nee ms':>9s} {'ORT ms':>9s} {'ratio':>6s} {'max err':>8s}  mode")
    ratios = []
    for m in a.models.split(","):
        path = os.path.join(a.dir, m + ".onnx")
        if not os.path.exists(path):
            p = subprocess.run([a.export_python, "-c", _EXPORT, m, path], capture_output=True, text=True,
                               timeout=a.timeout)
            if p.returncode:
                print(f"{m:40s} export failed: {(p.stderr.strip().splitlines() or ['?'])[-1][:100]}")
                continue
        code = _MEASURE.format(nt=a.threads, path=path, rounds=a.rounds, reps=a.reps)
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=a.timeout)
        if p.returncode:
            print(f"{m:40s} failed: {(p.stderr.strip().splitlines() or ['?'])[-1][:100]}")
            continue
        r = json.loads(p.stdout.strip().splitlines()[-1])
        ratio = r["nee_ms"] / r["ort_ms"]
        ratios.append(ratio)
        print(f"{m:40s} {r['first_s']:9.1f}s {r['nee_ms']:9.1f} {r['ort_ms']:9.1f} {ratio:5.2f}x {r['err']:8.1e}  "
              f"{r['mode']}, {r['breaks']} break node(s), {r['segments']} compiled segment(s)", flush=True)
    if ratios:
        import math
        print(f"geometric mean ratio {math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}x over {len(ratios)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
