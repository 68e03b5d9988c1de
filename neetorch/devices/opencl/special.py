"""Non-elementwise OpenCL kernels: reductions, softmax, matmul.

* reductions (sum, mean, prod, amax, amin, any, all, nansum, count_nonzero) over ANY set of dims: the kept
  and the reduced dims are each collapsed to at most 4 (strides as in the
  elementwise kernels); one work-item per output element walks its reduced
  elements.  When there are few outputs and many reduced elements (``x.sum()``),
  a first pass writes per-chunk partials and a second pass combines them.
* softmax / log_softmax over any dim (one work-item per row, float8 loops on contiguous rows; ``safe`` rows of only
  -inf give zeros).
* matmul with broadcast batch dims and any strides (one work-item per output
  element, ``j`` fastest so neighbouring work-items read neighbouring ``b``); float32 / float16 with
  contiguous rows and N % 8 == 0: a work-item per 8 x 8 (M >= 32) or 4 x 8 tile, with vector loads;
  tiles walk row-tiles fastest when b is the larger operand (conv's im2col columns stay in cache).

float16 (``half``, devices with ``cl_khr_fp16``) is storage only, as in the elementwise kernels: every
value is loaded into float (:func:`_ld`), sums accumulate like float32's (double where the device has
it), softmax and matmul compute in float, and each result is rounded once when stored.
"""
from __future__ import annotations

import functools
import hashlib

import numpy as np

from ...tensor import dtypes as _dt
from ..cpu import layout
from .exprs import CTYPE

_NP = {"uchar": np.uint8, "char": np.int8, "short": np.int16, "int": np.int32, "long": np.int64,
       "half": np.float16, "float": np.float32, "double": np.float64}
_MIN = {"uchar": "0", "char": "CHAR_MIN", "short": "SHRT_MIN", "int": "INT_MIN", "long": "LONG_MIN"}
_MAX = {"uchar": "UCHAR_MAX", "char": "CHAR_MAX", "short": "SHRT_MAX", "int": "INT_MAX", "long": "LONG_MAX"}
_FLOATS = ("float", "double")


def _cty(ct):
    """The C type values of storage C type ``ct`` are computed in (``half``: float)."""
    return "float" if ct == "half" else ct


def _ld(ct, e):
    """C text loading ``e`` (storage C type ``ct``) into its compute type."""
    return f"(float)({e})" if ct == "half" else e


def _name(prefix, sig):
    return f"{prefix}_{hashlib.sha1(sig.encode()).hexdigest()[:16]}"


def _store(expr, frm, to, to_bool):
    from .render import _cast
    return _cast(expr, frm, to, to_bool)


# ---------------------------------------------------------------- reductions
_RED_OPS = ("sum", "mean", "prod", "amax", "amin", "any", "all", "nansum", "count_nonzero")


def _acc_type(backend, kind, in_ct):
    in_ct = _cty(in_ct)
    if kind in ("any", "all"):
        return "uchar"
    if kind in ("amax", "amin"):
        return in_ct
    if kind == "count_nonzero":
        return "long"
    if in_ct == "float":
        return "double" if backend.fp64 else "float"
    if in_ct == "double":
        return "double"
    return "long"


def _init_combine(kind, in_ct, acc):
    in_ct = _cty(in_ct)
    fl = in_ct in _FLOATS
    if kind in ("sum", "mean") or (kind == "nansum" and not fl):
        return "0", f"acc += ({acc})v;"
    if kind == "nansum":
        return "0", f"acc += isnan(v) ? ({acc})0 : ({acc})v;"
    if kind == "count_nonzero":
        return "0", "acc += (v != 0);"
    if kind == "prod":
        return "1", f"acc *= ({acc})v;"
    if kind == "any":
        return "0", "acc = acc | (v != 0);"
    if kind == "all":
        return "1", "acc = acc & (v != 0);"
    if kind == "amax":
        if fl:
            return f"-({in_ct})INFINITY", "acc = (v > acc || isnan(v)) ? v : acc;"
        return _MIN[in_ct], "acc = v > acc ? v : acc;"
    if fl:
        return f"({in_ct})INFINITY", "acc = (v < acc || isnan(v)) ? v : acc;"
    return _MAX[in_ct], "acc = v < acc ? v : acc;"


_RMETA = "#ifndef NEE_RMETA\n#define NEE_RMETA\ntypedef struct { long v[26]; } nee_rmeta;\n#endif\n"


@functools.cache   # sources are rebuilt per call otherwise (~20 us)
def _reduce_source(backend, kind, in_ct, out_ct, out_bool, final):
    """Kernel: ``final`` writes ``out[po]`` (mean divided by m.v[25]); else partials at ``out[g]``."""
    acc = _acc_type(backend, kind, in_ct)
    init, comb = _init_combine(kind, in_ct, acc)
    name = _name("red_" + kind, f"{in_ct}|{out_ct}|{out_bool}|{final}|{acc}")
    res = "acc" if kind != "mean" or not final else f"(acc / ({acc})m.v[25])"
    store = _store(res, acc, out_ct, out_bool) if final else res
    dst = "o[po]" if final else "o[g]"
    src = _RMETA + f"""
__kernel void {name}(__global {out_ct}* o, __global const {in_ct}* x, const nee_rmeta m) {{
  const long g = get_global_id(0);
  const long no0 = m.v[0], no1 = m.v[1], no2 = m.v[2], no3 = m.v[3];
  const long nch = m.v[24];
  if (g >= no0 * no1 * no2 * no3 * nch) return;
  const long oi = g / nch, c = g % nch;
  const long i3 = oi % no3; long t = oi / no3; const long i2 = t % no2; t /= no2;
  const long i1 = t % no1; const long i0 = t / no1;
  const long po = m.v[8] + i0 * m.v[4] + i1 * m.v[5] + i2 * m.v[6] + i3 * m.v[7];
  const long px = m.v[13] + i0 * m.v[9] + i1 * m.v[10] + i2 * m.v[11] + i3 * m.v[12];
  const long nr0 = m.v[14], nr1 = m.v[15], nr2 = m.v[16], nr3 = m.v[17];
  const long sr0 = m.v[18], sr1 = m.v[19], sr2 = m.v[20], sr3 = m.v[21];
  const long R = m.v[22], chunk = m.v[23];
  const long j0 = c * chunk; const long j1 = min(R, j0 + chunk);
  {acc} acc = {init};
  if (j0 < j1) {{
    long r3 = j0 % nr3; long u = j0 / nr3; long r2 = u % nr2; u /= nr2; long r1 = u % nr1; long r0 = u / nr1;
    for (long j = j0; j < j1; j++) {{
      const {_cty(in_ct)} v = {_ld(in_ct, "x[px + r0 * sr0 + r1 * sr1 + r2 * sr2 + r3 * sr3]")};
      {comb}
      if (++r3 == nr3) {{ r3 = 0; if (++r2 == nr2) {{ r2 = 0; if (++r1 == nr1) {{ r1 = 0; ++r0; }} }} }}
    }}
  }}
  {dst} = {store};
}}
"""
    return name, src, acc


def _reduce(kind):
    def run(backend, outs, ins, attrs):
        x, out = ins[0], outs[0]
        if out.size == 0:
            return
        dims = tuple(sorted(attrs["dims"]))
        nd = x.ndim
        kept = [d for d in range(nd) if d not in dims]
        ost = [out.estrides[d] for d in kept] if (attrs.get("keepdim") and out.ndim == nd) else list(out.estrides)
        kshape = [x.shape[d] for d in kept]
        rshape = [x.shape[d] for d in dims]
        xs_k = [x.estrides[d] for d in kept]
        xs_r = [x.estrides[d] for d in dims]
        cks, (cso, csx) = layout.collapse(kshape, [ost, xs_k])
        crs, (csr,) = layout.collapse(rshape, [xs_r])
        xoff = x.offset
        if len(cks) > 4 or len(crs) > 4:
            # rare: more than 4 non-mergeable dims; read from a copy with kept dims first, reduced last
            perm = kept + list(dims)
            xv = backend.as_strided(x, [x.shape[d] for d in perm], [x.estrides[d] for d in perm], 0)
            xc = backend.empty(xv.shape, _dt.from_numpy_dtype(x.dtype))
            backend.copy_(xc, xv)
            x, xoff = xc, 0
            nk = len(kept)
            cks, (cso, csx) = layout.collapse(kshape, [ost, list(xc.estrides[:nk])])
            crs, (csr,) = layout.collapse(rshape, [list(xc.estrides[nk:])])
            if len(cks) > 4:
                raise NotImplementedError("opencl reduction: output layout with more than 4 non-mergeable dims")
        no, (so, sx) = layout.pad4(cks, [cso, csx])
        nr, (sr,) = layout.pad4(crs, [csr])
        nout = no[0] * no[1] * no[2] * no[3]
        R = nr[0] * nr[1] * nr[2] * nr[3]
        in_ct, out_ct = CTYPE[_dt.from_numpy_dtype(x.dtype).name], CTYPE[_dt.from_numpy_dtype(out.dtype).name]
        out_bool = out.dtype == np.bool_
        nch = 1
        if nout < 256 and R > 4096:
            nch = min(-(-R // 2048), max(1, 16384 // nout))
        chunk = -(-R // nch) if R else 1
        if R:
            nch = -(-R // chunk)
        if nch == 1:
            name, src, _ = _reduce_source(backend, kind, in_ct, out_ct, out_bool, True)
            k = backend.programs.kernel(name, src)
            meta = no + so + [out.offset] + sx + [xoff] + nr + sr + [R, chunk, 1, R]
            backend.enqueue(k, nout, [out.storage.buffer, x.storage.buffer], np.array(meta, np.int64))
            return
        # two passes: partials [nout, nch] in the accumulator type, then combine
        acc_ct = _acc_type(backend, kind, in_ct)
        name, src, _ = _reduce_source(backend, kind, in_ct, acc_ct, False, False)
        k1 = backend.programs.kernel(name, src)
        part = backend.empty((nout * nch,), _dt.from_numpy_dtype(np.dtype(_NP[acc_ct])))
        meta = no + so + [out.offset] + sx + [xoff] + nr + sr + [R, chunk, nch, R]
        backend.enqueue(k1, nout * nch, [part.storage.buffer, x.storage.buffer], np.array(meta, np.int64))
        k2kind = {"nansum": "sum", "count_nonzero": "sum"}.get(kind, kind)
        name2, src2, _ = _reduce_source(backend, k2kind, acc_ct, out_ct, out_bool, True)
        k2 = backend.programs.kernel(name2, src2)
        # partial of output (i0..i3) sits at ((i0*no1 + i1)*no2 + i2)*no3 + i3) * nch
        cs = [no[1] * no[2] * no[3] * nch, no[2] * no[3] * nch, no[3] * nch, nch]
        meta2 = no + so + [out.offset] + cs + [0] + [1, 1, 1, nch] + [0, 0, 0, 1] + [nch, nch, 1, R]
        backend.enqueue(k2, nout, [out.storage.buffer, part.storage.buffer], np.array(meta2, np.int64))

    def claims(backend, dtypes):
        if kind == "mean" and dtypes[0].category != 2:
            return "mean needs a floating input"
        return None
    run.__name__ = f"cl_{kind}"
    run.claims = claims
    return run


# ---------------------------------------------------------------- softmax
_SMETA = "#ifndef NEE_SMETA\n#define NEE_SMETA\ntypedef struct { long v[17]; } nee_smeta;\n#endif\n"


@functools.cache
def _softmax_source(ct, log, safe, low_last=False):
    """One work-item per row (rows spread over the cores).  float rows that are contiguous in x and out
    take float8 vector loops (PoCL does not vectorize across work-items here: each walks its own row),
    exp by ``nee_exp32x8``; the sums run in 8 lanes (then added), so they round a little differently
    from a sequential sum."""
    name = _name("softmax_v", f"{ct}|{log}|{safe}" + ("|low_last" if low_last else ""))
    cc = _cty(ct)                          # half rows: computed in float, each output rounded once
    xk = _ld(ct, "x[px + k * xsn]")
    ex = "nee_exp32" if cc == "float" else "exp"
    write = f"{xk} - mx - log(s)" if log else f"{ex}({xk} - mx) / s"
    if low_last:
        # float16 log_softmax over the last dim as torch's CPU kernel (and the CPU backend) computes it: the
        # row's sum of exponentials and its log rounded to half before the subtraction
        write = f"{xk} - mx - (float)(half)log((float)(half)s)"
    if ct == "half":
        write = _store(write, "float", "half", False)
    safe_c = f"if (mx == -({cc})INFINITY) {{ for (long k = 0; k < n; k++) o[po + k * osn] = 0; return; }}" \
        if safe else ""
    vec = ""
    if ct == "float":
        # softmax keeps exp(x - max) in the output row (vector part) and divides it in place: one exp per element
        vwrite = "v - mx - log(s)" if log else "v / s"
        vkeep = "" if log else " vstore8(e, 0, orow + k);"
        vsrc = "xr" if log else "orow"
        swrite = "xr[k] - mx - log(s)" if log else "nee_exp32(xr[k] - mx) / s"
        vec = f"""
  if (xsn == 1 && osn == 1) {{
    __global const float* xr = x + px;
    __global float* orow = o + po;
    const long nv = n & ~7L;
    float8 m8 = (float8)(-INFINITY);
    for (long k = 0; k < nv; k += 8) {{ const float8 v = vload8(0, xr + k); m8 = select(m8, v, (v > m8) | isnan(v)); }}
    float mx = -INFINITY;
    for (int l = 0; l < 8; l++) {{ const float v = m8[l]; mx = (v > mx || isnan(v)) ? v : mx; }}
    for (long k = nv; k < n; k++) {{ const float v = xr[k]; mx = (v > mx || isnan(v)) ? v : mx; }}
    {safe_c.replace("o[po + k * osn]", "orow[k]")}
    float8 s8 = (float8)0;
    for (long k = 0; k < nv; k += 8) {{
      const float8 e = nee_exp32x8(vload8(0, xr + k) - mx); s8 += e;{vkeep}
    }}
    float s = ((s8.s0 + s8.s1) + (s8.s2 + s8.s3)) + ((s8.s4 + s8.s5) + (s8.s6 + s8.s7));
    for (long k = nv; k < n; k++) s += nee_exp32(xr[k] - mx);
    for (long k = 0; k < nv; k += 8) {{ const float8 v = vload8(0, {vsrc} + k); vstore8({vwrite}, 0, orow + k); }}
    for (long k = nv; k < n; k++) orow[k] = {swrite};
    return;
  }}"""
    src = _SMETA + f"""
__kernel void {name}(__global {ct}* o, __global const {ct}* x, const nee_smeta m) {{
  const long g = get_global_id(0);
  const long no0 = m.v[0], no1 = m.v[1], no2 = m.v[2], no3 = m.v[3];
  if (g >= no0 * no1 * no2 * no3) return;
  const long i3 = g % no3; long t = g / no3; const long i2 = t % no2; t /= no2;
  const long i1 = t % no1; const long i0 = t / no1;
  const long po = m.v[8] + i0 * m.v[4] + i1 * m.v[5] + i2 * m.v[6] + i3 * m.v[7];
  const long px = m.v[13] + i0 * m.v[9] + i1 * m.v[10] + i2 * m.v[11] + i3 * m.v[12];
  const long n = m.v[14], osn = m.v[15], xsn = m.v[16];{vec}
  {cc} mx = -({cc})INFINITY;
  for (long k = 0; k < n; k++) {{ const {cc} v = {xk}; mx = (v > mx || isnan(v)) ? v : mx; }}
  {safe_c}
  {cc} s = 0;
  for (long k = 0; k < n; k++) s += {ex}({xk} - mx);
  for (long k = 0; k < n; k++) o[po + k * osn] = {write};
}}
"""
    return name, src


def _softmax(log):
    def run(backend, outs, ins, attrs):
        x, out = ins[0], outs[0]
        if out.size == 0:
            return
        if x.ndim == 0:
            x = backend.as_strided(x, (1,), (0,), 0)
            out = backend.as_strided(out, (1,), (0,), 0)
            d = 0
        else:
            d = attrs["dim"]
        if x.storage is out.storage:
            c = backend.empty(x.shape, _dt.from_numpy_dtype(x.dtype))
            backend.copy_(c, x)
            x = c
        other = [i for i in range(x.ndim) if i != d]
        cks, (cso, csx) = layout.collapse([x.shape[i] for i in other],
                                          [[out.estrides[i] for i in other], [x.estrides[i] for i in other]])
        if len(cks) > 4:
            raise NotImplementedError("opencl softmax: more than 4 non-mergeable dims")
        no, (so, sx) = layout.pad4(cks, [cso, csx])
        ct = CTYPE[_dt.from_numpy_dtype(x.dtype).name]
        low_last = log and ct == "half" and d % x.ndim == x.ndim - 1
        name, src = _softmax_source(ct, log, bool(attrs.get("safe", False)), bool(low_last))
        k = backend.programs.kernel(name, src)
        meta = no + so + [out.offset] + sx + [x.offset] + [x.shape[d], out.estrides[d], x.estrides[d]]
        backend.enqueue(k, no[0] * no[1] * no[2] * no[3], [out.storage.buffer, x.storage.buffer],
                        np.array(meta, np.int64), local=8)

    def claims(backend, dtypes):
        return None if dtypes[0].category == 2 else "softmax needs a floating input"
    run.claims = claims
    run.__name__ = "cl_log_softmax" if log else "cl_softmax"
    return run


# ---------------------------------------------------------------- matmul
_MMETA = "#ifndef NEE_MMETA\n#define NEE_MMETA\ntypedef struct { long v[28]; } nee_mmeta;\n#endif\n"


@functools.cache
def _matmul_source(ct):
    name = _name("matmul", ct)
    src = _MMETA + f"""
__kernel void {name}(__global {ct}* o, __global const {ct}* a, __global const {ct}* b, const nee_mmeta m) {{
  const long g = get_global_id(0);
  const long nb0 = m.v[0], nb1 = m.v[1], nb2 = m.v[2], nb3 = m.v[3];
  const long M = m.v[19], N = m.v[20], K = m.v[21];
  if (g >= nb0 * nb1 * nb2 * nb3 * M * N) return;
  const long j = g % N; long t = g / N; const long i = t % M; t /= M;
  const long i3 = t % nb3; t /= nb3; const long i2 = t % nb2; t /= nb2; const long i1 = t % nb1; const long i0 = t / nb1;
  const long po = m.v[8] + i0 * m.v[4] + i1 * m.v[5] + i2 * m.v[6] + i3 * m.v[7] + i * m.v[22] + j * m.v[23];
  const long pa = m.v[13] + i0 * m.v[9] + i1 * m.v[10] + i2 * m.v[11] + i3 * m.v[12] + i * m.v[24];
  const long pb = m.v[18] + i0 * m.v[14] + i1 * m.v[15] + i2 * m.v[16] + i3 * m.v[17] + j * m.v[27];
  const long sak = m.v[25], sbk = m.v[26];
  {_cty(ct)} acc = 0;
  for (long k = 0; k < K; k++) acc += {_ld(ct, "a[pa + k * sak]")} * {_ld(ct, "b[pb + k * sbk]")};
  o[po] = {_store("acc", _cty(ct), ct, False) if ct == "half" else "acc"};
}}
"""
    return name, src


@functools.cache
def _matmul_v8_source(ct, R=4):
    """float matmul with out and b contiguous along j and N % 8 == 0: a work-item computes an R x 8
    tile (R = 8 for M >= 32: half the loads of b per multiply-add, 2x on PoCL; else 4) with vector loads of b (PoCL does not vectorize the scalar kernel: its k loop is inside the
    work-item).  Sums run over k in order, like the scalar kernel."""
    name = _name("matmul_v8", ct if R == 4 else f"{ct}|r{R}")
    v = f"{_cty(ct)}8"
    rows = range(R)
    # half: vload_half8 / vstore_half8 convert 8 values to float8 and back (rounding to nearest even)
    vld, vst = ("vload_half8", "vstore_half8") if ct == "half" else ("vload8", "vstore8")
    la = functools.partial(_ld, ct)
    src = _MMETA + f"""
__kernel void {name}(__global {ct}* o, __global const {ct}* a, __global const {ct}* b, const nee_mmeta m) {{
  const long g = get_global_id(0);
  const long nb0 = m.v[0], nb1 = m.v[1], nb2 = m.v[2], nb3 = m.v[3];
  const int itf = m.v[19] < 0;
  const long M = itf ? -m.v[19] : m.v[19], N = m.v[20], K = m.v[21];
  const long NT = N >> 3, MT = (M + {R - 1}) / {R};
  if (g >= nb0 * nb1 * nb2 * nb3 * MT * NT) return;
  /* it_fast (m.v[19] < 0 marks it: M = -m.v[19]): neighbouring work-items take neighbouring row tiles, so a
     work-group reuses one 8-column strip of b from cache (b larger than a, e.g. im2col columns) */
  long jt, it, t;
  if (itf) {{ it = g % MT; t = g / MT; jt = t % NT; t /= NT; }} else {{ jt = g % NT; t = g / NT; it = t % MT; t /= MT; }}
  const long i3 = t % nb3; t /= nb3; const long i2 = t % nb2; t /= nb2; const long i1 = t % nb1; const long i0 = t / nb1;
  const long i = it * {R}, j = jt * 8;
  const long soi = m.v[22], sai = m.v[24], sak = m.v[25], sbk = m.v[26];
  const long po = m.v[8] + i0 * m.v[4] + i1 * m.v[5] + i2 * m.v[6] + i3 * m.v[7] + i * soi + j;
  const long pa = m.v[13] + i0 * m.v[9] + i1 * m.v[10] + i2 * m.v[11] + i3 * m.v[12] + i * sai;
  const long pb = m.v[18] + i0 * m.v[14] + i1 * m.v[15] + i2 * m.v[16] + i3 * m.v[17] + j;
  /* rows past M read row M-1 (valid memory) and are not stored */
{"".join(f"  const long pa{r} = pa + min({r}L, M - 1 - i) * sai; {v} c{r} = ({v})0;{chr(10)}" for r in rows)}  for (long k = 0; k < K; k++) {{
    const {v} bv = {vld}(0, b + pb + k * sbk);
{"".join(f"    c{r} += {la(f'a[pa{r} + k * sak]')} * bv;{chr(10)}" for r in rows)}  }}
  {vst}(c0, 0, o + po);
{"".join(f"  if (i + {r} < M) {vst}(c{r}, 0, o + po + {r} * soi);{chr(10)}" for r in rows[1:])}}}
"""
    return name, src


def _matmul(backend, outs, ins, attrs):
    a, b = ins
    out = outs[0]
    if out.size == 0:
        return
    if a.storage is out.storage or b.storage is out.storage:
        raise NotImplementedError("opencl matmul: output aliases an input")
    M, K = a.shape[-2], a.shape[-1]
    N = b.shape[-1]
    bshape = out.shape[:-2]
    nb = len(bshape)

    def bst(t):
        off = nb - (t.ndim - 2)
        st = [0] * nb
        for i in range(t.ndim - 2):
            if t.shape[i] != 1:
                st[off + i] = t.estrides[i]
        return st
    so, sa, sb = list(out.estrides[:-2]), bst(a), bst(b)
    cbs, (cso, csa, csb) = layout.collapse(list(bshape), [so, sa, sb])
    if len(cbs) > 4:
        raise NotImplementedError("opencl matmul: more than 4 non-mergeable batch dims")
    nbs, (so4, sa4, sb4) = layout.pad4(cbs, [cso, csa, csb])
    ct = CTYPE[_dt.from_numpy_dtype(out.dtype).name]
    # float only: double8 breaks PoCL builds for AVX2 targets (no kernel in the program, then a crash).  Columns
    # past the last multiple of 8 go to the scalar kernel in a second launch (one work-item per output, strided
    # loads: ~2 GF/s, so a whole product of N = 3025 on it ran at 1.6 GF/s, the tile kernel's 30 with N = 50176)
    N8 = N // 8 * 8 if ct in ("float", "half") and out.estrides[-1] == 1 and b.estrides[-1] == 1 else 0
    R = 8 if M >= 32 else 4                 # 8 x 8 tiles: half the loads of b per multiply-add
    sak = a.estrides[-1] if K > 1 else 0
    sbk = b.estrides[-2] if K > 1 else 0
    nbt = nbs[0] * nbs[1] * nbs[2] * nbs[3]
    bufs = [out.storage.buffer, a.storage.buffer, b.storage.buffer]
    for vec, n0, n in ((True, 0, N8), (False, N8, N - N8)):
        if n == 0:
            continue
        name, src = _matmul_v8_source(ct, R) if vec else _matmul_source(ct)
        k = backend.programs.kernel(name, src)
        # the tile kernel walks row tiles fastest when b is the larger operand (its strips then stay in cache)
        mm = -M if (vec and K * n > M * K and M > R) else M
        meta = (nbs + so4 + [out.offset + n0 * out.estrides[-1]] + sa4 + [a.offset] + sb4
                + [b.offset + n0 * b.estrides[-1]] + [mm, n, K]
                + [out.estrides[-2], out.estrides[-1], a.estrides[-2], sak, sbk, b.estrides[-1]])
        total = nbt * (-(-M // R) * (n // 8) if vec else M * n)
        backend.enqueue(k, total, bufs, np.array(meta, np.int64))


def _matmul_claims(backend, dtypes):
    a, b = dtypes[0], dtypes[1]
    if a is not b:
        return f"matmul on {a.name} x {b.name}"
    if a.name not in ("float16", "float32", "float64", "int32", "int64"):
        return f"no opencl matmul for {a.name}"
    return None


_matmul.claims = _matmul_claims


def table() -> dict:
    t = {k: _reduce(k) for k in _RED_OPS}
    t["softmax"] = _softmax(False)
    t["log_softmax"] = _softmax(True)
    t["matmul"] = _matmul
    return t
