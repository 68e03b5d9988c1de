"""The compiled graph's fast path for a decoder step: views of arena buffers made once when the fast path is
built (executable._frozen_view), multi-output arena steps, and the KV cache's append bound to its native copy
plan (kernels/shape.py bind_cat) — each checked against eager / numpy / onnxruntime over several calls."""
import numpy as np
import pytest

import neetorch as nee
from neetorch.devices.cpu import threads
from neetorch.devices.cpu.kernels import shape as S
from neetorch.jit import executable as E

F = nee.nn.functional


def _t(rng, *s):
    return rng.standard_normal(s).astype(np.float32)


def _exe(jf):
    """The (only) executable of a jitted function and its fast path's runners."""
    (exe, _), = {id(e[0]): e for e in jf._fast.values()}.values()
    return exe, exe._local.fast[2]


def _attention_block(W, Wo, heads):
    def fn(x, past):
        # x (1, 1, d), past (1, heads, P, dh): projection, split into heads (views of an intermediate),
        # cache append, scores, context merged back (a reshape of a transposed intermediate: it copies)
        d = x.shape[-1]
        qkv = x @ W
        q, k = qkv.narrow(-1, 0, d), qkv.narrow(-1, d, d)
        q = q.unflatten(-1, (heads, d // heads)).permute(0, 2, 1, 3)
        k = k.unflatten(-1, (heads, d // heads)).permute(0, 2, 1, 3)
        present = nee.cat([past, k], 2)
        p = F.softmax(q @ present.transpose(2, 3) * 0.5, -1)
        ctx = (p @ present).permute(0, 2, 1, 3).reshape(1, 1, d)
        return ctx @ Wo + x, present
    return fn


@pytest.mark.parametrize("d,heads,P", [(24, 3, 7), (40, 5, 33)])
def test_frozen_views_follow_new_values_every_call(nthreads, d, heads, P):
    """The views of the projection's arena buffer are made once; every call's values must come through them
    (a frozen view over the wrong buffer, or a frozen copy, would return a stale or wrong result)."""
    rng = np.random.default_rng(d)
    W, Wo = nee.from_numpy(_t(rng, d, 2 * d)), nee.from_numpy(_t(rng, d, d))
    fn = _attention_block(W, Wo, heads)
    f = nee.jit(fn)
    past = _t(rng, 1, heads, P, d // heads)
    for step in range(4):          # present fed back as past: a new shape each step (a new specialization)
        x = nee.from_numpy(_t(rng, 1, 1, d))
        for _ in range(2):         # the fast path's second call at this shape, other values
            got, ref = f(x, nee.from_numpy(past)), fn(x, nee.from_numpy(past))
            for g, r in zip(got, ref):
                np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-5, atol=1e-5)
            x = nee.from_numpy(_t(rng, 1, 1, d))
        past = got[1].numpy()
        assert past.shape == (1, heads, P + step + 1, d // heads)


def test_views_of_arena_buffers_are_frozen_and_copies_are_not(monkeypatch):
    rng = np.random.default_rng(1)
    W, Wo = nee.from_numpy(_t(rng, 24, 48)), nee.from_numpy(_t(rng, 24, 24))
    fn = _attention_block(W, Wo, 3)
    x, past = nee.from_numpy(_t(rng, 1, 1, 24)), nee.from_numpy(_t(rng, 1, 3, 5, 8))
    on = nee.jit(fn)
    on(x, past)
    exe, runners = _exe(on)
    steps = [r.step for r in runners]
    views = [s for s in exe.steps if s[0] == "view"]
    run_views = [s for s in steps if s[0] == "view"]
    # narrow / unflatten / permute of the projection's output: made once; the transpose of `present` (a
    # returned value, new every call): run every call
    assert len(run_views) < len(views)
    names = {s[1].name for s in run_views}
    assert "narrow" not in names and "unflatten" not in names and "transpose" in names
    monkeypatch.setattr(E, "_FREEZE_VIEWS", [False])
    off = nee.jit(fn)
    off(x, past)
    assert len([r for r in _exe(off)[1] if r.step[0] == "view"]) == len(views)
    for _ in range(3):
        x = nee.from_numpy(_t(rng, 1, 1, 24))
        for g, r, e in zip(on(x, past), off(x, past), fn(x, past)):
            np.testing.assert_array_equal(g.numpy(), r.numpy())
            np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("copy_kernel", [True, False])
def test_a_reshape_that_copies_is_not_frozen(copy_kernel, monkeypatch):
    from neetorch.jit import passes
    monkeypatch.setattr(passes, "_COPY_RESHAPES", [copy_kernel])
    rng = np.random.default_rng(8)
    W = nee.from_numpy(_t(rng, 5, 6))

    def fn(x):
        return (x @ W).transpose(0, 1).reshape(-1) * 3     # a copy of the arena buffer's elements
    f = nee.jit(fn)
    for _ in range(3):
        x = nee.from_numpy(_t(rng, 4, 5))
        np.testing.assert_allclose(f(x).numpy(), fn(x).numpy(), rtol=1e-5, atol=1e-5)
    _, runners = _exe(f)
    if copy_kernel:   # (session 17: the copy is a kernel, the reshape of its buffer a view no step replays)
        assert "cast" in {r.step[1].name for r in runners if r.step[0] == "kernel"}
    else:
        assert "reshape" in {r.step[1].name for r in runners if r.step[0] == "view"}


def test_frozen_view_of_a_constant_and_a_strided_slice():
    rng = np.random.default_rng(2)
    C = nee.from_numpy(_t(rng, 6, 10))

    def fn(x):
        h = x @ C                              # (3, 10) arena buffer
        a = h[:, 1::3]                         # strided view of it
        b = C.narrow(1, 2, 5).transpose(0, 1)  # view of a constant
        return (a * 2).sum(1, keepdim=True) + (h[:, :5] @ b @ C)[:, :1]
    f = nee.jit(fn)
    for _ in range(3):
        x = nee.from_numpy(_t(rng, 3, 6))
        np.testing.assert_allclose(f(x).numpy(), fn(x).numpy(), rtol=1e-5, atol=1e-5)


def test_multi_output_arena_steps_and_several_calls(nthreads):
    """A matmul epilogue with two outputs in the arena (residual + layer_norm) feeding later steps."""
    rng = np.random.default_rng(3)
    W1, W2 = nee.from_numpy(_t(rng, 32, 48)), nee.from_numpy(_t(rng, 48, 32))

    def fn(x):
        h = F.gelu(x @ W1)
        y = h @ W2 + x
        n = F.layer_norm(y, (32,))
        return (n @ W1).sum(-1) + y.sum(-1)
    f = nee.jit(fn)
    for _ in range(4):
        x = nee.from_numpy(_t(rng, 1, 32))
        np.testing.assert_allclose(f(x).numpy(), fn(x).numpy(), rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- the bound KV-cache append
@pytest.mark.parametrize("shape,new", [((1, 12, 512, 32), 1), ((1, 7, 301, 24), 1), ((2, 5, 129, 40), 3)])
def test_bound_cat_matches_numpy(shape, new):
    rng = np.random.default_rng(4)
    past = _t(rng, *shape)
    k = _t(rng, *shape[:2], new, shape[3])
    out = np.full(shape[:2] + (shape[2] + new, shape[3]), np.nan, np.float32)
    old = threads.get_num_threads()
    nee.set_num_threads(2)
    try:
        f = S.bind_cat(out, [past, k], 2)
        if out.nbytes < S.CAT_PAR_BYTES:
            assert f is None
            return
        assert f is not None
        for _ in range(3):
            past, k = past + 1, k - 1
            out[...] = np.nan
            assert f([out], [past, k])
            np.testing.assert_array_equal(out, np.concatenate([past, k], 2))
        nee.set_num_threads(1)
        assert f([out], [past, k]) is False            # the thread count changed: the caller's path runs
    finally:
        nee.set_num_threads(old)


def test_bound_cat_declines_what_cat_kernel_does_not_take_natively():
    rng = np.random.default_rng(5)
    past = _t(rng, 1, 12, 64, 512)
    old = threads.get_num_threads()
    nee.set_num_threads(2)
    try:
        strided = np.ascontiguousarray(past.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)
        k = _t(rng, 1, 12, 1, 512)
        out = np.empty((1, 12, 65, 512), np.float32)
        assert S.bind_cat(out, [strided, k], 2) is None            # rows not contiguous
        assert S.bind_cat(out, [out[:, :, :64], k], 2) is None     # a piece over the output
        assert S.bind_cat(out[:, :, :1], [k[:, :, :0], k], 2) is None   # too small to split
        nee.set_num_threads(1)
        assert S.bind_cat(out, [past, k], 2) is None               # one thread: numpy's copies
    finally:
        nee.set_num_threads(old)


@pytest.mark.parametrize("strided", [False, True])
def test_jit_kv_append_over_steps(nthreads, strided):
    """A compiled cache append (bound on 2 threads) over steps: the caller's past changes object, layout
    (strided) and values between calls; present is fed back as the next step's past."""
    rng = np.random.default_rng(6)

    def fn(past, k):
        present = nee.cat([past, k * 2], 2)
        return present, present.sum(-1)
    f = nee.jit(fn)
    past = _t(rng, 1, 6, 400, 40)                 # 384 KB: the native split from 256 KiB
    for step in range(3):
        k = _t(rng, 1, 6, 1, 40)
        for variant in range(3):
            p = past
            if strided and variant == 1:
                p = np.ascontiguousarray(past.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)
            elif variant == 2:
                p = past.copy()
            got = f(nee.from_numpy(p), nee.from_numpy(k))
            ref = np.concatenate([past, k * 2], 2)
            np.testing.assert_array_equal(got[0].numpy(), ref)
            np.testing.assert_allclose(got[1].numpy(), ref.sum(-1), rtol=1e-5, atol=1e-4)
        past = got[0].numpy()


def test_onnx_decoder_steps_match_onnxruntime(nthreads):
    """The ONNX GPT-style step (fused QKV + Split, Concat of past and new, pre-norm, GELU MLP) over several
    steps with each step's present fed back as past, against onnxruntime; the same at a fixed past (the
    fast path's second and later calls)."""
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from asv_benchmarks import _onnx_models as M
    sp = M.gpt_step(past=64, d=48, heads=3, layers=2, ffn=3)   # a bucket's top size: the fast path
    s = nee.onnx.InferenceSession(sp.model)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    r = ort.InferenceSession(sp.model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    onames = [o.name for o in r.get_outputs()]
    rng = np.random.default_rng(7)
    for fixed in (True, False):
        feed = dict(sp.feed)
        for _ in range(4):
            feed["x"] = rng.standard_normal(feed["x"].shape).astype(np.float32)
            got, ref = s.run(None, feed), r.run(None, feed)
            for name, g, e in zip(onames, got, ref):
                np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5, err_msg=name)
            if fixed:
                exe = next(iter(s._jit._fast.values()))[0]
                assert exe._local.fast is not None            # (the fast path ran)
            else:
                for name, a in zip(onames, got):
                    if name.startswith("present_"):
                        feed["past_" + name[len("present_"):]] = a


# ---------------------------------------------------------------- non-temporal copies of large cats
@pytest.mark.skipif(not S._X86, reason="non-temporal cat copies: x86-64 only (NEE_CAT_NT)")
def test_non_temporal_copy_every_alignment_and_length():
    import ctypes
    f = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(S._nt_copy())
    rng = np.random.default_rng(9)
    src = rng.integers(0, 256, 5000, dtype=np.uint8)
    for n in (0, 1, 63, 64, 255, 256, 319, 320, 321, 1000, 4096, 4097):
        for doff in (0, 1, 17, 63):
            for soff in (0, 5):
                dst = np.zeros(5200, np.uint8)
                base = (-dst.ctypes.data) % 64          # dst + base is 64-byte aligned
                d0 = base + doff
                r = f(dst.ctypes.data + d0, src.ctypes.data + soff, n)
                assert r == dst.ctypes.data + d0
                np.testing.assert_array_equal(dst[d0:d0 + n], src[soff:soff + n], err_msg=f"n={n} doff={doff}")
                assert not dst[:d0].any() and not dst[d0 + n:].any(), (n, doff, soff)   # nothing outside


@pytest.mark.skipif(not S._X86, reason="non-temporal cat copies: x86-64 only (NEE_CAT_NT)")
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8])
def test_large_cat_with_non_temporal_copies(dtype, monkeypatch):
    monkeypatch.setattr(S, "_cat_plans", {})
    monkeypatch.setattr(S, "CAT_NT", [True])
    rng = np.random.default_rng(10)
    old = threads.get_num_threads()
    nee.set_num_threads(2)
    try:
        wide = 8 // np.dtype(dtype).itemsize    # every dtype past CAT_NT_BYTES
        for shape in ((1, 12, 512, 32 * wide), (1, 5, 701, 77 * wide)):
            past = (rng.standard_normal(shape) * 50).astype(dtype)
            new = (rng.standard_normal(shape[:2] + (1, shape[3])) * 50).astype(dtype)
            out_bytes = past.nbytes + new.nbytes
            assert out_bytes >= S.CAT_NT_BYTES
            ref = np.concatenate([past, new], 2)
            np.testing.assert_array_equal(nee.cat([nee.tensor(past), nee.tensor(new)], 2).numpy(), ref)
            flat = np.empty(ref.size + 3, dtype)[1:1 + ref.size].reshape(ref.shape)   # misaligned output
            flat[...] = 0
            S.cat_kernel(None, [flat], [past, new], {"dim": 2})
            np.testing.assert_array_equal(flat, ref)
        assert S._cat_plans and all(p is not False for p in S._cat_plans.values())
    finally:
        nee.set_num_threads(old)


@pytest.mark.parametrize("dims", [(1, 0, 2), (2, 0, 1), (-1, -3, -2)])
def test_permute_of_a_returned_value_made_each_call(dims):
    """The permute of a value returned to the caller (new every call) feeding a product: the fast path
    transposes the new array directly (executable._plain_permute); every call must see its own values."""
    rng = np.random.default_rng(11)
    W, W2 = nee.from_numpy(_t(rng, 6, 20)), nee.from_numpy(_t(rng, 5, 7))

    def fn(x):
        z = (x @ W).reshape(3, 4, 5) + 1.0          # a kernel's output, returned: a new buffer every call
        return z, z.permute(*dims).reshape(-1, 5) @ W2
    f = nee.jit(fn)
    outs = []
    for _ in range(3):
        x = nee.from_numpy(_t(rng, 3, 6))
        got, ref = f(x), fn(x)
        for g, r in zip(got, ref):
            np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-5, atol=1e-5)
        outs.append(got)
    assert not np.allclose(outs[0][1].numpy(), outs[1][1].numpy())    # (the calls' values differ)


# ---------------------------------------------------------------- the generic loop's bound pattern steps
def test_generic_loop_binds_per_layout_and_follows_sizes_and_threads(monkeypatch):
    """A shape-polymorphic function called at sizes other than traced (the generic loop): its matmul +
    epilogue steps are bound per array layout (executable._generic_bound); sizes that come back reuse the
    binding, new ones bind anew, a thread-count change re-binds; every result equals eager's."""
    rng = np.random.default_rng(12)
    W, b = nee.from_numpy(_t(rng, 24, 40)), nee.from_numpy(_t(rng, 40))

    def fn(x, kv):
        h = F.gelu(x @ W + b)                        # (1, 40): the same shapes at every size
        s = F.softmax((h[:, :8] @ kv.transpose(0, 1)) * 0.3, -1)   # (1, n): changes with kv's rows
        return s @ kv, h
    f = nee.jit(fn, dynamic={1: 0})
    old = threads.get_num_threads()
    try:
        for nt in (1, 2, 1):
            nee.set_num_threads(nt)
            for n in (64, 37, 50, 37, 64, 9, 50):
                x, kv = nee.from_numpy(_t(rng, 1, 24)), nee.from_numpy(_t(rng, n, 8))
                for g, r in zip(f(x, kv), fn(x, kv)):
                    np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-5, atol=1e-5)
    finally:
        nee.set_num_threads(old)
    tables = [t for e, _ in f._fast.values() for t in getattr(e._local, "gen", {}).values()]
    assert any(t[1] for t in tables)                         # bound calls were kept
    assert any(len(t[0]) >= 2 for t in tables)               # output metas per input shapes
