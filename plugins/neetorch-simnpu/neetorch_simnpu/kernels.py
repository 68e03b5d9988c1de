"""simnpu kernels: ``fn(backend, outs, ins, attrs)`` writing into ``outs`` (NPUArrays).

The matrix engine (matmul, conv2d) pads operands to whole tiles, multiplies one K tile
at a time and accumulates in the accumulator dtype (int32 for int8, float32 for
float16); the result is converted to the output dtype once (float16: one rounding;
int8: wraps, PyTorch's int8 matmul semantics).  The vector unit (add, sub, mul, relu)
computes elementwise with numpy's same-dtype semantics (float16 rounded once per op,
int8 wrapping).  ``backend.host_view`` is the simulator's window onto device memory.
"""
from __future__ import annotations

import numpy as np

_ACC = {np.dtype(np.int8): np.dtype(np.int32), np.dtype(np.float16): np.dtype(np.float32)}


def _count(backend, name: str) -> None:
    backend.launches[name] = backend.launches.get(name, 0) + 1


def _store(backend, out, result: np.ndarray) -> None:
    with np.errstate(over="ignore", invalid="ignore"):
        np.copyto(backend.host_view(out), result, casting="unsafe")


def _padded(a: np.ndarray, rows: int, cols: int, acc: np.dtype) -> np.ndarray:
    """``a[..., r, c]`` in accumulator dtype, zero-padded to (rows, cols) (a tile load)."""
    p = np.zeros(a.shape[:-2] + (rows, cols), acc)
    p[..., :a.shape[-2], :a.shape[-1]] = a
    return p


def tiled_matmul(backend, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a[..., M, K] @ b[..., K, N]`` the way the matrix engine does it, in the accumulator dtype."""
    acc = _ACC[a.dtype]
    t = backend.tile
    M, K = a.shape[-2:]
    N = b.shape[-1]
    Mp, Kp, Np = (-(-M // t) * t, -(-K // t) * t, -(-N // t) * t)
    ap = _padded(a, Mp, Kp, acc)
    bp = _padded(b, Kp, Np, acc)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    r = np.zeros(batch + (Mp, Np), acc)
    with np.errstate(over="ignore"):
        for k0 in range(0, Kp, t):   # K tiles in order: the accumulation order is part of the result
            r += np.matmul(ap[..., k0:k0 + t], bp[..., k0:k0 + t, :])
    backend.macs += int(np.prod(batch, dtype=np.int64)) * Mp * Np * Kp
    return r[..., :M, :N]


def matmul(backend, outs, ins, attrs):
    _count(backend, "matmul")
    a, b = backend.host_view(ins[0]), backend.host_view(ins[1])
    _store(backend, outs[0], tiled_matmul(backend, a, b))


def conv2d(backend, outs, ins, attrs):
    """Cross-correlation lowered to one matrix product per image (im2col in the DMA engine)."""
    _count(backend, "conv2d")
    x = backend.host_view(ins[0])
    w = backend.host_view(ins[1])
    N, C, H, W = x.shape
    O, _, KH, KW = w.shape
    sh, sw = attrs["stride"]
    pt, pb, pl, pr = attrs["padding"]
    OH, OW = outs[0].shape[2:]
    xp = np.zeros((N, C, H + pt + pb, W + pl + pr), x.dtype)
    xp[:, :, pt:pt + H, pl:pl + W] = x
    win = np.lib.stride_tricks.sliding_window_view(xp, (KH, KW), axis=(2, 3))[:, :, ::sh, ::sw][:, :, :OH, :OW]
    cols = win.transpose(0, 1, 4, 5, 2, 3).reshape(N, C * KH * KW, OH * OW)     # (N, K, L)
    r = tiled_matmul(backend, w.reshape(O, C * KH * KW), cols)                    # (N, O, L), accumulator
    if len(ins) > 2:
        r = r + backend.host_view(ins[2]).astype(r.dtype).reshape(1, O, 1)        # bias before the one rounding
    _store(backend, outs[0], r.reshape(N, O, OH, OW))


def _vector(name, fn):
    def kernel(backend, outs, ins, attrs):
        _count(backend, name)
        with np.errstate(over="ignore", invalid="ignore"):
            r = fn(*[backend.host_view(a) for a in ins])
        _store(backend, outs[0], r)
    kernel.__name__ = name
    return kernel


KERNELS = {
    "matmul": matmul,
    "conv2d": conv2d,
    "add": _vector("add", np.add),
    "sub": _vector("sub", np.subtract),
    "mul": _vector("mul", np.multiply),
    "relu": _vector("relu", lambda x: np.maximum(x, np.zeros((), x.dtype))),
}
