"""conv_direct's 16-lane "chan" register tiles (session 23): their K loops keep every accumulator in a register.

The (3, 8) tile (24 accumulators + 3 weight vectors + 8 hoisted broadcasts: 35 zmm of 32) spilled to the stack in its
K loop and ran ~2x slower than the other tiles on the convs of 48 (mod 64) output channels it was picked for
(SqueezeNet's 13x13 squeezes, three of Inception v1's convs); (3, 7) replaces it.

* every shipped tile's K loop (relu / residual / depthwise / input prefetch variants), compiled for this host:
  no vector register stored to or loaded from the stack inside the innermost loop that holds the FMAs;
* the rule picks (3, 7) where (3, 8) was picked (48 output channels);
* (3, 7) gives the same bits as (4, 6) (each output summed in the same order whatever the tile) and matches torch,
  one and two threads;
* the 1x1 rule's lane-use bar keeps the small-plane 1x1 that (3, 8) had sent direct on the direct kernel.
"""
import re

import numpy as np
import pytest

from neetorch.devices.cpu import llvm_render as LR
from neetorch.devices.cpu import threads
from neetorch.devices.cpu.kernels import conv_direct as D

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.skipif(not D.available() or D.VEC != 16,
                                reason="conv_direct's 16-lane (AVX-512F) kernels only")

RNG = np.random.default_rng(23)


def _asm(ir: str) -> str:
    """The kernel's assembly as llvm_render compiles it (its pass pipeline) for this host."""
    return LR.assembly(ir)


def _fma_loops(asm: str) -> list:
    """The innermost loops (label .. back-branch to it, no label between) with FMAs: their bodies."""
    bodies = []
    for m in re.finditer(r"\n(\.LBB\d+_\d+):", asm):
        e = re.search(r"\tj\w+\s+" + re.escape(m.group(1)) + r"\n", asm[m.end():])
        if e:
            body = asm[m.end():m.end() + e.end()]
            if "vfmadd" in body and not re.search(r"\n\.LBB\d+_\d+:", body):
                bodies.append(body)
    assert bodies, "no FMA loop found"
    return bodies


def _check_loops(asm: str, fmas: int, what) -> None:
    """The widest FMA loop has ``fmas`` FMAs; no FMA loop stores / reloads a vector register on the stack (a
    general-purpose register reloaded is one scalar load a step: 2x8 with the input prefetch does)."""
    loops = _fma_loops(asm)
    assert max(b.count("vfmadd") for b in loops) == fmas, what
    for b in loops:
        spills = [ln for ln in b.splitlines() if "(%rsp)" in ln and "mm" in ln]
        assert not spills, f"{what}: vector registers spilled in the K loop: {spills}"


@pytest.mark.parametrize("NB,R", list(D._CHAN_SHAPES16))
@pytest.mark.parametrize("relu,dw,res,xpf", [(True, False, False, 0), (False, False, True, 0), (True, True, False, 0),
                                             (True, False, False, D._XPF_FLOATS)])
def test_chan_tile_k_loop_has_no_spills(NB, R, relu, dw, res, xpf):
    _check_loops(_asm(D._render_c(NB, R, relu, dw, res, xpf)), NB * R, (NB, R))


def test_rule_picks_3x7_for_48_channels():
    assert D.plan(48, 13, 13, 13, 256, "chan")[:3] == ("chan", 3, 7)
    assert D.plan(144, 13, 13, 13, 512, "chan")[:3] == ("chan", 3, 7)


@pytest.fixture
def tile(monkeypatch):
    def set_(shapes):
        monkeypatch.setattr(D, "FORCE", ["chan"])
        monkeypatch.setattr(D, "CHAN_SHAPES", shapes)
        D._layouts.clear()
    yield set_
    D._layouts.clear()


@pytest.mark.parametrize("xs,ws,pad", [((1, 256, 13, 13), (48, 256, 1, 1), 0), ((2, 40, 14, 14), (48, 40, 3, 3), 1),
                                       ((1, 16, 13, 13), (48, 16, 5, 5), 2), ((1, 33, 9, 11), (37, 33, 3, 3), 1)])
def test_3x7_same_bits_as_4x6(nthreads, tile, xs, ws, pad):
    x = RNG.standard_normal(xs).astype(np.float32)
    w = (RNG.standard_normal(ws) / np.sqrt(ws[1] * ws[2] * ws[3])).astype(np.float32)
    b = RNG.standard_normal(ws[0]).astype(np.float32)
    e = RNG.standard_normal((xs[0], ws[0], xs[2] + 2 * pad - ws[2] + 1, xs[3] + 2 * pad - ws[3] + 1)
                            ).astype(np.float32)
    outs = {}
    for shapes in (((3, 7),), ((4, 6),)):
        tile(shapes)
        got = np.full(e.shape, np.nan, np.float32)
        assert D.conv2d(x, w, b, got, 1, 1, pad, pad, pad, pad, 1, 1, True, None, e)
        lay = D._layouts[next(reversed(D._layouts))]
        assert (lay.kind, lay.A, lay.B) == ("chan",) + shapes[0]
        outs[shapes[0]] = got
    assert np.array_equal(outs[(3, 7)].view(np.int32), outs[(4, 6)].view(np.int32))
    t = torch.nn.functional.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double(),
                                   torch.from_numpy(b).double(), padding=pad)
    want = torch.relu(t + torch.from_numpy(e).double()).numpy()
    assert np.abs(outs[(3, 7)] - want).max() < 2e-5 * max(1.0, np.abs(want).max())
    assert threads.get_num_threads() == nthreads


@pytest.mark.parametrize("has_e", [False, True])
def test_pk1x1_fused_16_lane_tile_has_no_spills(has_e):
    # conv1x1_packed's fused path on 16 lanes (NEE_CONV_PK1X1_FUSED=1 there): its 12 x 32 tile's K loop not unrolled
    from neetorch.devices.cpu.kernels import conv1x1_packed as PK
    from neetorch.devices.cpu.kernels import linalg
    if linalg.PK_VEC != 16:
        pytest.skip("linalg's packed kernel runs 8 lanes on this host")
    _check_loops(_asm(PK._fused_ir(linalg.PK_NR, linalg.PK_VEC, linalg.PK_MR, True, has_e, True)),
                 2 * linalg.PK_MR, "pk1x1 fused")


def test_lane_use_rule_keeps_small_plane_1x1_direct(nthreads):
    # Inception v1's 832 -> 48 1x1 on 6x6: (3, 7) uses 36 of 42 pixel lanes (0.857; (3, 8) used 0.9): the 1x1 rule's
    # lane-use bar (conv_direct._CHAN_1X1_USE) still sends it to the direct kernel (the GEMM took twice as long)
    x = np.zeros((1, 832, 6, 6), np.float32)
    w = np.zeros((48, 832, 1, 1), np.float32)
    out = np.zeros((1, 48, 6, 6), np.float32)
    attrs = dict(stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1)
    D._pays.clear()
    assert D.route(x, w, out, attrs, True) == "direct"
