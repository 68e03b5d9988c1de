"""Numba kernels for the ONNX ops whose output size depends on values, run on values read back to the host
(the op is a graph break: the session runs it eagerly between compiled segments).

NonMaxSuppression's greedy selection: per (batch, class), candidates in descending score order (equal scores by
index), each kept unless its IoU with a box already kept exceeds the threshold.  IoUs are computed on the fly
against the kept boxes only (at most ``max_output_boxes_per_class`` of them), as onnxruntime does, instead of the
n x n IoU matrix: a detector's 5,000 candidates were 1.4 s of Python loops over a 25 M-entry matrix.
"""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _nms_greedy(x1, y1, x2, y2, area, scores, order, max_out, iou_thr, score_thr, has_score_thr, out):
    """Selected (batch, class, box) triples into ``out`` (rows), their count returned.  ``x1..area``: (B, n)
    box corners (x1 <= x2, y1 <= y2) and areas; ``scores`` / ``order``: (B, C, n), order = indices by descending
    score.  Arithmetic in the boxes' dtype, in the order of ONNX's reference: intersection = max(min(x2) -
    max(x1), 0) * max(min(y2) - max(y1), 0); union = (area_a + area_b) - intersection; IoU = intersection / union,
    0 unless the intersection, both areas and the union are positive; a box is suppressed when IoU > threshold
    (strictly), skipped when its score is not > score_thr.  The kept boxes' corners are copied side by side
    (a scan over them reads memory in order), and a pair whose width or height overlap is not positive (most
    pairs: torchvision's batched NMS offsets each class's boxes apart) stops at that test: its intersection is
    0, so it cannot suppress."""
    B, C, n = scores.shape
    m = max(min(max_out, n), 1)
    kx1 = np.empty(m, x1.dtype)
    ky1 = np.empty(m, x1.dtype)
    kx2 = np.empty(m, x1.dtype)
    ky2 = np.empty(m, x1.dtype)
    ka = np.empty(m, x1.dtype)
    zero = x1.dtype.type(0)
    cnt = 0
    for b in range(B):
        for c in range(C):
            nk = 0
            for r in range(n):
                if nk >= max_out:
                    break
                j = order[b, c, r]
                if has_score_thr and not scores[b, c, j] > score_thr:
                    continue
                jx1, jy1, jx2, jy2, aj = x1[b, j], y1[b, j], x2[b, j], y2[b, j], area[b, j]
                ok = True
                for q in range(nk):
                    iw = min(jx2, kx2[q]) - max(jx1, kx1[q])
                    if not iw > zero:
                        continue
                    ih = min(jy2, ky2[q]) - max(jy1, ky1[q])
                    if not ih > zero:
                        continue
                    inter = iw * ih
                    ak = ka[q]
                    union = (aj + ak) - inter
                    if inter > zero and aj > zero and ak > zero and union > zero and inter / union > iou_thr:
                        ok = False
                        break
                if ok:
                    kx1[nk], ky1[nk], kx2[nk], ky2[nk], ka[nk] = jx1, jy1, jx2, jy2, aj
                    nk += 1
                    out[cnt, 0] = b
                    out[cnt, 1] = c
                    out[cnt, 2] = j
                    cnt += 1
    return cnt


def nms_greedy(x1, y1, x2, y2, area, scores, order, max_out: int, iou_thr: float, score_thr) -> np.ndarray:
    """(K, 3) int64 selected indices (batch, class, box), ONNX NonMaxSuppression's output; numpy arrays in
    (:func:`_nms_greedy`), ``score_thr`` None for none.  Thresholds compare in the boxes' / scores' dtype
    (onnxruntime's float comparison)."""
    B, C, n = scores.shape
    max_out = max(int(max_out), 0)
    out = np.empty((B * C * min(max_out, n), 3), np.int64)
    if out.shape[0] == 0:
        return out
    dt = x1.dtype.type
    has = score_thr is not None
    cnt = _nms_greedy(x1, y1, x2, y2, area, scores, order.astype(np.int64, copy=False), max_out,
                      dt(iou_thr), scores.dtype.type(score_thr if has else 0), has, out)
    return out[:cnt]
