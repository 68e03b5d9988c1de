#!/usr/bin/env python3
"""torchvision's architectures exported to ONNX: neetorch vs onnxruntime, outputs and latency.

    python3 bench/torchvision_vs_ort.py                       # the default list, TorchScript exporter
    python3 bench/torchvision_vs_ort.py --exporter dynamo --models resnet18,swin_t
    python3 bench/torchvision_vs_ort.py --torchvision /tmp/tv  # a torchvision installed with --target there

Needs torch, torchvision and onnxruntime (none of them a dependency of neetorch).  Random weights (no download),
batch-norm statistics perturbed so no BN is an identity; each model runs in its own process (an exporter's crash
or memory blow-up stays there, ``--timeout`` per model).  Per model: the export time, neetorch's session
construction and first run (cold kernel caches compile here), the largest error against onnxruntime relative to
the output's largest magnitude, and steady-state latency of both engines with the same thread count (min over 5
batches of >= 0.3 s each, the engines alternated; ratio = neetorch / onnxruntime).

A torchvision wheel whose compiled ops do not match the installed torch (``operator torchvision::nms does not
exist`` on import) still gives the models: its meta registrations are skipped (``_import_torchvision``); the
detection models, which need those ops, are not in the default list.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

DEFAULT = ("alexnet squeezenet1_1 vgg11 resnet18 resnet50 resnext50_32x4d densenet121 googlenet inception_v3 "
           "mobilenet_v2 mobilenet_v3_large mobilenet_v3_small mnasnet0_5 shufflenet_v2_x1_0 efficientnet_b0 "
           "efficientnet_v2_s regnet_x_400mf regnet_y_400mf convnext_tiny vit_b_32 swin_t swin_v2_t maxvit_t "
           "lraspp_mobilenet_v3_large deeplabv3_mobilenet_v3_large fcn_resnet50 r3d_18 r2plus1d_18 s3d "
           "raft_small").split()
VIDEO = ("r3d_18", "mc3_18", "r2plus1d_18", "s3d", "mvit_v2_s", "swin3d_t")

_ONE = r'''
import io, json, os, sys, time
os.environ["NEE_NUM_THREADS"] = "{nt}"
sys.path[:0] = {paths!r}


def _import_torchvision():
    import torch, torch.library as L
    try:
        import torchvision
        return torchvision
    except RuntimeError:
        for k in [k for k in sys.modules if k.startswith("torchvision")]:
            del sys.modules[k]
    orig = L.register_fake

    def rf(*a, **k):
        def deco(f):
            try:
                return orig(*a, **k)(f)
            except Exception:       # (an op of the wheel's library that this torch did not load)
                return f
        return deco
    L.register_fake = rf
    try:
        import torchvision
    finally:
        L.register_fake = orig
    return torchvision


tv = _import_torchvision()
import numpy as np, torch
import torchvision.models as tm
name, exporter, nt = {name!r}, {exporter!r}, {nt}
torch.manual_seed(0)
res = {{"model": name}}
try:
    if name.startswith(("deeplab", "fcn", "lraspp")):
        import torchvision.models.segmentation as seg
        m = getattr(seg, name)(weights=None, weights_backbone=None, num_classes=21, aux_loss=False)
    elif name in {video!r}:
        import torchvision.models.video as vid
        m = getattr(vid, name)(weights=None)
    elif name.startswith("raft"):
        import torchvision.models.optical_flow as of
        m = getattr(of, name)(weights=None)
    else:
        m = tm.get_model(name, weights=None, **({{"aux_logits": False, "init_weights": True}}
                                                if name in ("googlenet", "inception_v3") else {{}}))
    m.eval()
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, (torch.nn.BatchNorm2d, torch.nn.BatchNorm3d)):
                mod.running_mean.uniform_(-0.1, 0.1)
                mod.running_var.uniform_(0.5, 1.5)
            elif isinstance(mod, torch.nn.Linear) and not mod.weight.any():
                torch.nn.init.normal_(mod.weight, std=0.02)     # (zero-initialized heads: ViT's)
    if name in {video!r}:
        side = 224 if name in ("s3d", "mvit_v2_s") else 112
        args = (torch.randn(1, 3, 16, side, side),)
    elif name.startswith("raft"):
        args = (torch.randn(1, 3, 128, 128), torch.randn(1, 3, 128, 128))
    else:
        args = (torch.randn(1, 3, 224, 224),)
    names = [f"in{{i}}" for i in range(len(args))]
    t = time.time()
    if exporter == "dynamo":
        buf = torch.onnx.export(m, args, input_names=names, dynamo=True, verbose=False).model_proto.SerializeToString()
    else:
        f = io.BytesIO()
        torch.onnx.export(m, args, f, input_names=names, opset_version=17, dynamo=False)
        buf = f.getvalue()
    res["export_s"] = round(time.time() - t, 1)
    import onnxruntime as ort
    import neetorch as nee
    feed = {{n: a.numpy() for n, a in zip(names, args)}}
    so = ort.SessionOptions()
    so.intra_op_num_threads = nt
    o = ort.InferenceSession(buf, so, providers=["CPUExecutionProvider"])
    ro = o.run(None, feed)
    t = time.time()
    s = nee.onnx.InferenceSession(buf)
    rn = s.run(None, feed)
    res["first_s"] = round(time.time() - t, 2)
    res["mode"] = s.info.get("mode")
    err = 0.0
    for a, b in zip(rn, ro):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        if a.shape != b.shape:
            err = float("inf")
            break
        if a.size:
            err = max(err, float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-6)))
    res["err"] = err

    def lat(fn):
        fn()
        best = 1e9
        for _ in range(5):
            n, t = 0, time.perf_counter()
            while time.perf_counter() - t < 0.3:
                fn()
                n += 1
            best = min(best, (time.perf_counter() - t) / n)
        return best
    tn, to = [], []
    for _ in range(2):
        tn.append(lat(lambda: s.run(None, feed)))
        to.append(lat(lambda: o.run(None, feed)))
    res["nee_ms"], res["ort_ms"] = min(tn) * 1e3, min(to) * 1e3
except Exception as e:  # noqa: BLE001 - reported in the table
    res["error"] = (type(e).__name__ + ": " + str(e))[:300]
print("RESULT " + json.dumps(res))
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(DEFAULT))
    ap.add_argument("--exporter", choices=("legacy", "dynamo"), default="legacy")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("NEE_NUM_THREADS", "2")))
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--torchvision", default="", help="a folder to import torchvision from (pip install --target)")
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = [p for p in (a.torchvision, root) if p]
    print(f"torchvision models, {a.exporter} exporter, {a.threads} threads: neetorch / onnxruntime")
    print(f"{'model':32s} {'export':>7s} {'nee first':>10s} {'nee ms':>9s} {'ORT ms':>9s} {'ratio':>6s} {'max err':>8s}")
    ratios = []
    for name in a.models.split(","):
        code = _ONE.format(nt=a.threads, paths=paths, name=name, exporter=a.exporter, video=VIDEO)
        try:
            p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=a.timeout)
            line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
            r = json.loads(line[-1][7:]) if line else {"error": f"exit {p.returncode}: {p.stderr.strip()[-200:]}"}
        except subprocess.TimeoutExpired:
            r = {"error": f"timed out after {a.timeout} s"}
        if "error" in r:
            print(f"{name:32s} FAILED: {r['error']}")
            continue
        ratio = r["nee_ms"] / r["ort_ms"]
        ratios.append(ratio)
        print(f"{name:32s} {r['export_s']:6.1f}s {r['first_s']:9.2f}s {r['nee_ms']:9.2f} {r['ort_ms']:9.2f} "
              f"{ratio:5.2f}x {r['err']:8.1e}", flush=True)
    if ratios:
        import math
        g = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        print(f"geometric mean ratio {g:.2f}x over {len(ratios)} models; within 1.0x: "
              f"{sum(x <= 1.0 for x in ratios)}, within 1.5x: {sum(x <= 1.5 for x in ratios)}")


if __name__ == "__main__":
    main()
