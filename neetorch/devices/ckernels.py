"""Dialect-neutral C kernel sources shared by the CUDA and the OpenCL backends.

Each ``*_source(D, ...)`` function returns ``(kernel name, source)`` in the C dialect ``D``
(:data:`CUDA` or :data:`OPENCL`): the SAME kernel logic, printed as CUDA C (compiled by
NVRTC through CuPy, by nvcc in the tests, by g++ in the CUDA emulation) or as OpenCL C
(compiled by pyopencl).  What differs between the dialects is small and lives in
:class:`KDialect`:

* the kernel signature (:meth:`KDialect.sig`): ``extern "C" __global__ void f(const T* __restrict__ x, ...)``
  vs ``__kernel void f(__global const T* restrict x, ...)``; scalar parameters are the same;
* ``G``: the address-space qualifier of pointers into device memory (``""`` / ``"__global "``);
* the grid-stride loop over work items (:meth:`KDialect.grid`): ``blockIdx.x * blockDim.x +
  threadIdx.x`` / ``get_global_id(0)``, stepping by the whole grid;
* block / work-group primitives for the one-block-per-row kernels: ``shared`` (``__shared__`` /
  ``__local``), ``sync``, ``tid``, ``bid``, ``nblocks``, ``bdim``, and the block sum
  (:meth:`KDialect.bsum`: warp shuffles + 32 slots in CUDA, a local-memory tree over
  ``slots`` = 256 entries in OpenCL, whose work-groups are at most 256 wide);
* types: ``llong`` / ``ullong`` (CUDA's typedefs, added to OpenCL C by :attr:`KDialect.prelude`),
  the C type of each dtype (``schar`` / ``char``), float16 storage and its conversions, both from the
  elementwise dialect (``devices/cexpr.py``): CUDA ``nhalf`` bits converted by ``nee_h2f`` / ``nee_f2h``,
  OpenCL ``half`` (``cl_khr_fp16``) converted by casts; either way computed in float, rounded once per store.

No atomics anywhere: scatter is a gather per output element (deterministic), serial sums run in
index order on one thread where the CPU kernel's float64 sums must be matched bit for bit.  Index
kernels never read out of bounds: an out-of-range index writes 0 and raises a flag the host may read.
Kernels: convolution (im2col, depthwise, col2im), pools (max, avg, adaptive), bilinear, arg
reductions, group/layer/rms norms and batch-norm moments (a block per row), scans (cumsum/cumprod,
cummax/cummin), sort, median, scatter, searchsorted, gathers (take3), tri, stream compaction
(nonzero, masked_select/scatter, unique), index_put, nll-loss terms, embedding renorm.  The CUDA
backend launches most of them (``cuda/nn.py``, ``cuda/rows.py``; its ``all_sources`` lists them all
for the nvcc and g++-emulation tests), the OpenCL backend all of them (``opencl/nn.py``).
Nothing here imports CuPy or pyopencl.
"""
from __future__ import annotations

from .cexpr import CUDA as _CUDA_C
from .cexpr import OPENCL as _OPENCL_C

__all__ = ["BITS", "CUDA", "IDX", "OPENCL", "KDialect"]

BITS = {1: "uchar", 2: "ushort", 4: "uint", 8: "ullong"}
IDX = {"int32": "int", "int64": "llong"}
FLOATS = ("float16", "float32", "float64")
_ACC = {"float16": "float", "float32": "float", "float64": "double"}

CUDA_BLOCK_HELPERS = r"""
#ifndef NEE_ROW_HELPERS
#define NEE_ROW_HELPERS
template <typename A> static __device__ __forceinline__ A nee_wsum(A v) {
  for (int o = blockDim.x >= 32 ? 16 : 0; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <typename A> static __device__ __forceinline__ A nee_wmax(A v) {
  for (int o = blockDim.x >= 32 ? 16 : 0; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
/* every thread of the block gets the sum (max) of v over the block; sh: 32 slots of shared memory */
template <typename A> static __device__ __forceinline__ A nee_bsum(A v, A* sh) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = nee_wsum(v);
  __syncthreads();                       /* sh may still be read by the previous reduction */
  if (lane == 0) sh[w] = v;
  __syncthreads();
  if (w == 0) {
    v = lane < nw ? sh[lane] : (A)0;
    v = nee_wsum(v);
    if (lane == 0) sh[0] = v;
  }
  __syncthreads();
  return sh[0];
}
template <typename A> static __device__ __forceinline__ A nee_bmax(A v, A* sh) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = nee_wmax(v);
  __syncthreads();
  if (lane == 0) sh[w] = v;
  __syncthreads();
  if (w == 0) {
    v = lane < nw ? sh[lane] : (A)(-INFINITY);
    v = nee_wmax(v);
    if (lane == 0) sh[0] = v;
  }
  __syncthreads();
  return sh[0];
}
#endif
"""

# OpenCL C has no templates: one block sum per accumulator type; a tree over one local slot per
# work-item (work-groups are a power of two, at most 256 wide).
_CL_BSUM = r"""
inline $A nee_bsum_$A($A v, __local $A* sh) {
  const int t = (int)get_local_id(0), n = (int)get_local_size(0);
  barrier(CLK_LOCAL_MEM_FENCE);          /* sh may still be read by the previous reduction */
  sh[t] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int h = n >> 1; h > 0; h >>= 1) {
    if (t < h) sh[t] += sh[t + h];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  return sh[0];
}
"""
_CL_PRELUDE = ("#ifndef NEE_CK_OPENCL\n#define NEE_CK_OPENCL\ntypedef long llong;\ntypedef ulong ullong;\n"
               "#endif\n")
CL_BLOCK_HELPERS = ("#ifndef NEE_ROW_HELPERS\n#define NEE_ROW_HELPERS\n" + _CL_BSUM.replace("$A", "double")
                    + "#endif\n")


class KDialect:
    """How one C dialect spells the parts of a kernel that differ (see the module docstring)."""

    def __init__(self, name, cexpr, kernel, G, restrict, grid_id, grid_step, shared, sync, tid, bid, nblocks,
                 bdim, inline, slots, prelude, block_helpers):
        self.name = name
        self.cexpr = cexpr              # the elementwise renderers' dialect (devices/cexpr.py): C types
        self.kernel = kernel
        self.G = G
        self.restrict = restrict
        self.grid_id = grid_id
        self.grid_step = grid_step
        self.shared = shared
        self.sync = sync
        self.tid = tid
        self.bid = bid
        self.nblocks = nblocks
        self.bdim = bdim
        self.inline = inline
        self.slots = slots
        self.prelude = prelude
        self.block_helpers = block_helpers

    def __repr__(self):
        return f"KDialect({self.name})"

    def sig(self, name: str, *params: str) -> str:
        """``<kernel> name(params) {`` with each pointer parameter ``"const T* x"`` qualified
        (restrict; ``__global`` in OpenCL); scalar parameters unchanged."""
        ps = []
        for p in params:
            if "*" in p:
                typ, nm = p.rsplit(" ", 1)
                ps.append(f"{self.G}{typ} {self.restrict} {nm}")
            else:
                ps.append(p)
        return f"{self.prelude}{self.kernel} {name}({', '.join(ps)}) {{\n"

    def grid(self, g: str = "g", total: str = "total") -> str:
        """The grid-stride loop header over ``[0, total)`` (the body follows, closed by ``  }``)."""
        return (f"  const llong nee_step = {self.grid_step};\n"
                f"  for (llong {g} = {self.grid_id}; {g} < {total}; {g} += nee_step) {{\n")

    def bsum(self, A: str) -> str:
        return "nee_bsum" if self.name == "cuda" else f"nee_bsum_{A}"

    def ctype(self, dn: str) -> str:
        return self.cexpr.ctype[dn] if dn != "int64" else "llong"

    def io(self, dn: str):
        """(storage C type, compare/accumulate C type, load, store) for dtype ``dn``."""
        if dn == "float16":
            c = self.cexpr
            return c.ctype["float16"], "float", c.half_load.format, c.half_store.format
        ct = self.ctype(dn)
        return ct, ct, (lambda e: e), (lambda e: f"({ct})({e})")


CUDA = KDialect(
    "cuda", _CUDA_C, kernel='extern "C" __global__ void', G="", restrict="__restrict__",
    grid_id="(llong)blockIdx.x * blockDim.x + threadIdx.x", grid_step="(llong)gridDim.x * blockDim.x",
    shared="__shared__", sync="__syncthreads()", tid="threadIdx.x", bid="blockIdx.x", nblocks="gridDim.x",
    bdim="blockDim.x", inline="static __device__ __forceinline__", slots=32, prelude="",
    block_helpers=CUDA_BLOCK_HELPERS)

OPENCL = KDialect(
    "opencl", _OPENCL_C, kernel="__kernel void", G="__global ", restrict="restrict",
    grid_id="(llong)get_global_id(0)", grid_step="(llong)get_global_size(0)",
    shared="__local", sync="barrier(CLK_LOCAL_MEM_FENCE)", tid="(int)get_local_id(0)", bid="(llong)get_group_id(0)",
    nblocks="(llong)get_num_groups(0)", bdim="(int)get_local_size(0)", inline="inline", slots=256,
    prelude=_CL_PRELUDE, block_helpers=CL_BLOCK_HELPERS)


def _nm(D, base):
    return base if D.name == "cuda" else base.replace("nee_", "neecl_", 1)


# ---------------------------------------------------------------- convolution

# The convolution / pooling kernels below give each thread a RUN of up to ``RW`` outputs along the
# output row (``NR = ceil(OW / RW)`` runs per row; ``total`` = rows * NR): the index arithmetic (64-bit
# divisions) is paid once per run.  GPUs launch them with RW = 1 (one thread per output, as before);
# the OpenCL backend on CPU devices (PoCL) with RW = OW (a thread per row).
def im2col_source(D, isz: int):
    U = BITS[isz]
    name = _nm(D, f"nee_im2col_{U}")
    return name, (
        D.sig(name, f"const {U}* x", f"{U}* col", "const llong total", "const llong H", "const llong W",
              "const int KH", "const int KW", "const int sh", "const int sw", "const int pt", "const int pl",
              "const int dh", "const int dw", "const llong OH", "const llong OW", "const llong RW",
              "const llong NR") + D.grid() +
        "    const llong run = g % NR; const llong row = g / NR;   /* row: ((t * KH + kh) * KW + kw) * OH + oh */\n"
        "    const llong oh = row % OH; llong t = row / OH;\n"
        "    const int kw = (int)(t % KW); t /= KW; const int kh = (int)(t % KH); t /= KH;   /* t: n * C + c */\n"
        "    const llong ih = oh * sh - pt + (llong)kh * dh;\n"
        "    const llong ow0 = run * RW, ow1 = ow0 + RW < OW ? ow0 + RW : OW;\n"
        f"    {D.G}{U}* cr = col + row * OW;\n"
        "    if (ih < 0 || ih >= H) {\n"
        f"      for (llong ow = ow0; ow < ow1; ow++) cr[ow] = ({U})0;\n"
        "      continue;\n"
        "    }\n"
        f"    {D.G}const {U}* xr = x + (t * H + ih) * W;\n"
        "    for (llong ow = ow0; ow < ow1; ow++) {\n"
        "      const llong iw = ow * sw - pl + (llong)kw * dw;\n"
        f"      cr[ow] = (iw >= 0 && iw < W) ? xr[iw] : ({U})0;\n"
        "    }\n"
        "  }\n}\n")


def depthwise_source(D, dn: str):
    """Convolution with one input channel per group (depthwise, any channel multiplier ``Og``): runs of
    outputs along a row, taps in (kh, kw) order, float16/32 accumulated in float, float64 in double."""
    T, A, ld, st = D.io(dn)
    A = _ACC[dn]
    G = D.G
    name = _nm(D, f"nee_depthwise_{dn}")
    return name, (
        D.sig(name, f"const {T}* x", f"const {T}* w", f"const {T}* bias", f"{T}* y", "const llong total",
              "const llong C", "const llong O", "const llong H", "const llong W", "const int KH", "const int KW",
              "const int sh", "const int sw", "const int pt", "const int pl", "const int dh", "const int dw",
              "const llong OH", "const llong OW", "const int has_bias", "const llong RW", "const llong NR")
        + D.grid() +
        "    const llong run = g % NR; const llong row = g / NR;   /* row: (n * O + o) * OH + oh */\n"
        "    const llong oh = row % OH; const llong t = row / OH;\n"
        "    const llong o = t % O, n = t / O, c = o / (O / C);\n"
        f"    {G}const {T}* xp = x + (n * C + c) * H * W;\n"
        f"    {G}const {T}* wp = w + o * KH * KW;\n"
        f"    const {A} b0 = has_bias ? ({A}){ld('bias[o]')} : ({A})0;\n"
        "    const llong ow0 = run * RW, ow1 = ow0 + RW < OW ? ow0 + RW : OW;\n"
        "    for (llong ow = ow0; ow < ow1; ow++) {\n"
        f"      {A} acc = b0;\n"
        "      for (int kh = 0; kh < KH; kh++) {\n"
        "        const llong ih = oh * sh - pt + (llong)kh * dh;\n"
        "        if (ih < 0 || ih >= H) continue;\n"
        "        for (int kw = 0; kw < KW; kw++) {\n"
        "          const llong iw = ow * sw - pl + (llong)kw * dw;\n"
        "          if (iw < 0 || iw >= W) continue;\n"
        f"          acc += ({A}){ld('xp[ih * W + iw]')} * ({A}){ld('wp[kh * KW + kw]')};\n"
        "        }\n"
        "      }\n"
        f"      y[row * OW + ow] = {st('acc')};\n"
        "    }\n"
        "  }\n}\n")


def col2im_source(D, dn: str):
    """out[p, oh, ow] (+ bias[p % Cout]) = sum of the column entries col[p, kh, kw, ih, iw] with
    ih * sh - ph + kh * dh == oh (same for w): the transposed convolution's scatter, as a gather."""
    T, A, ld, st = D.io(dn)
    if dn == "float32":
        A = "double"            # the CPU kernel adds float32 columns in BLAS/numpy order: keep the sum tight
    name = _nm(D, f"nee_col2im_{dn}")
    return name, (
        D.sig(name, f"const {T}* col", f"const {T}* bias", f"{T}* y", "const llong total", "const llong H",
              "const llong W", "const int KH", "const int KW", "const int sh", "const int sw", "const int ph",
              "const int pw", "const int dh", "const int dw", "const llong OH", "const llong OW",
              "const llong Cout", "const int has_bias") + D.grid() +
        "    const llong ow = g % OW; llong t = g / OW; const llong oh = t % OH; const llong p = t / OH;\n"
        f"    {A} acc = 0;\n"
        f"    {D.G}const {T}* cp = col + p * (llong)KH * KW * H * W;\n"
        "    for (int kh = 0; kh < KH; kh++) {\n"
        "      const llong a = oh + ph - (llong)kh * dh;\n"
        "      if (a < 0 || a % sh) continue;\n"
        "      const llong ih = a / sh;\n"
        "      if (ih >= H) continue;\n"
        "      for (int kw = 0; kw < KW; kw++) {\n"
        "        const llong b = ow + pw - (llong)kw * dw;\n"
        "        if (b < 0 || b % sw) continue;\n"
        "        const llong iw = b / sw;\n"
        "        if (iw >= W) continue;\n"
        f"        acc += ({A}){ld('cp[(((llong)kh * KW + kw) * H + ih) * W + iw]')};\n"
        "      }\n"
        "    }\n"
        f"    if (has_bias) acc += ({A}){ld('bias[p % Cout]')};\n"
        f"    y[g] = {st('acc')};\n"
        "  }\n}\n")


# ---------------------------------------------------------------- pooling
def maxpool_source(D, dn: str):
    T, A, ld, st = D.io(dn)
    name = _nm(D, f"nee_maxpool_{dn}")
    return name, (
        D.sig(name, f"const {T}* x", f"{T}* y", "llong* idx", "const llong total", "const llong H",
              "const llong W", "const llong OH", "const llong OW", "const int KH", "const int KW", "const int sh",
              "const int sw", "const int ph", "const int pw", "const int dh", "const int dw",
              "const int has_idx", "const llong RW", "const llong NR") + D.grid() +
        "    const llong run = g % NR; const llong row = g / NR;   /* row: p * OH + oh */\n"
        "    const llong oh = row % OH; const llong p = row / OH;\n"
        "    const llong hs = oh * sh - ph;\n"
        f"    {D.G}const {T}* xp = x + p * H * W;\n"
        "    const llong ow0 = run * RW, ow1 = ow0 + RW < OW ? ow0 + RW : OW;\n"
        "    for (llong ow = ow0; ow < ow1; ow++) {\n"
        "      const llong ws = ow * sw - pw;\n"
        f"      {A} best = 0; llong bi = -1;\n"
        "      for (int ki = 0; ki < KH; ki++) {\n"
        "        const llong ih = hs + (llong)ki * dh;\n"
        "        if (ih < 0 || ih >= H) continue;\n"
        "        for (int kj = 0; kj < KW; kj++) {\n"
        "          const llong iw = ws + (llong)kj * dw;\n"
        "          if (iw < 0 || iw >= W) continue;\n"
        f"          const {A} v = {ld('xp[ih * W + iw]')};\n"
        "          if (bi < 0 || v > best || v != v) { best = v; bi = ih * W + iw; }   /* torch: NaN takes over */\n"
        "        }\n"
        "      }\n"
        f"      y[row * OW + ow] = {st('best')};\n"
        "      if (has_idx) idx[row * OW + ow] = bi;\n"
        "    }\n"
        "  }\n}\n")


def avgpool_source(D, dn: str):
    T, A, ld, st = D.io(dn)
    A = _ACC[dn]
    name = _nm(D, f"nee_avgpool_{dn}")
    return name, (
        D.sig(name, f"const {T}* x", f"{T}* y", "const llong total", "const llong H", "const llong W",
              "const llong OH", "const llong OW", "const int KH", "const int KW", "const int sh", "const int sw",
              "const int ph", "const int pw", "const int cip", "const llong divisor", "const llong RW",
              "const llong NR") + D.grid() +
        "    const llong run = g % NR; const llong row = g / NR;   /* row: p * OH + oh */\n"
        "    const llong oh = row % OH; const llong p = row / OH;\n"
        "    const llong hs = oh * sh - ph;\n"
        "    const llong he = hs + KH < H + ph ? hs + KH : H + ph;\n"
        "    const llong h0 = hs > 0 ? hs : 0, h1 = he < H ? he : H;\n"
        f"    {D.G}const {T}* xp = x + p * H * W;\n"
        "    const llong ow0 = run * RW, ow1 = ow0 + RW < OW ? ow0 + RW : OW;\n"
        "    for (llong ow = ow0; ow < ow1; ow++) {\n"
        "      const llong ws = ow * sw - pw;\n"
        "      const llong we = ws + KW < W + pw ? ws + KW : W + pw;\n"
        "      const llong w0 = ws > 0 ? ws : 0, w1 = we < W ? we : W;\n"
        f"      {A} acc = 0;\n"
        "      for (llong ih = h0; ih < h1; ih++)\n"
        f"        for (llong iw = w0; iw < w1; iw++) acc += {ld('xp[ih * W + iw]')};\n"
        "      const llong d = divisor ? divisor : (cip ? (he - hs) * (we - ws) : (h1 - h0) * (w1 - w0));\n"
        f"      y[row * OW + ow] = {st('(double)acc / (double)d')};\n"
        "    }\n"
        "  }\n}\n")


def adaptive_source(D, dn: str, is_max: bool):
    """Adaptive pooling: output (oh, ow) covers rows [oh*H/OH, ceil((oh+1)*H/OH)) (same for columns);
    max: the CPU's rule (first element, then v > best or NaN; plane index), avg: the sum over count."""
    T, A, ld, st = D.io(dn)
    if not is_max:
        A = _ACC[dn]
    name = _nm(D, f"nee_adaptive_{'max' if is_max else 'avg'}_{dn}")
    L = [D.sig(name, f"const {T}* x", f"{T}* y", "llong* idx", "const llong total", "const llong H",
               "const llong W", "const llong OH", "const llong OW", "const int has_idx") + D.grid() +
         "    const llong ow = g % OW; const llong t = g / OW; const llong oh = t % OH; const llong p = t / OH;\n"
         "    const llong h0 = oh * H / OH, h1 = ((oh + 1) * H + OH - 1) / OH;\n"
         "    const llong w0 = ow * W / OW, w1 = ((ow + 1) * W + OW - 1) / OW;\n"
         f"    {D.G}const {T}* xp = x + p * H * W;\n"]
    if is_max:
        L += [f"    {A} best = 0; llong bi = -1;\n",
              "    for (llong ih = h0; ih < h1; ih++)\n",
              "      for (llong iw = w0; iw < w1; iw++) {\n",
              f"        const {A} v = {ld('xp[ih * W + iw]')};\n",
              "        if (bi < 0 || v > best || v != v) { best = v; bi = ih * W + iw; }\n",
              "      }\n",
              f"    y[g] = {st('best')};\n",
              "    if (has_idx) idx[g] = bi;\n"]
    else:
        L += [f"    {A} acc = 0;\n",
              "    for (llong ih = h0; ih < h1; ih++)\n",
              f"      for (llong iw = w0; iw < w1; iw++) acc += {ld('xp[ih * W + iw]')};\n",
              f"    y[g] = {st('(double)acc / (double)((h1 - h0) * (w1 - w0))')};\n"]
    return name, "".join(L) + "  }\n}\n"


# ---------------------------------------------------------------- arg reductions
def argred_source(D, dn: str, kind: str, rows: bool):
    """argmax / argmin (and max/min with indices) over the middle dim of contiguous x (O, n, I): the
    CPU's rule (first occurrence; the first NaN wins), as an order-aware comparison of (value, index)
    pairs, so that a block's tree combine picks exactly what a serial scan picks.  ``rows``: one block
    per row (I == 1, long rows; any power-of-two block, 1 in the emulation), else one thread per output."""
    T, A, ld, st = D.io(dn)
    cmp = ">" if kind == "argmax" else "<"
    name = _nm(D, f"nee_{kind}_{'rows' if rows else 'cols'}_{dn}")
    better = (f"{D.inline} bool nee_{kind}_better_{dn}({A} v, llong j, {A} b, llong bj) {{\n"
              "  if (bj < 0) return j >= 0;\n"
              "  if (j < 0) return false;\n"
              "  const bool vn = v != v, bn = b != b;\n"
              "  if (vn || bn) return vn && (!bn || j < bj);   /* the first NaN wins */\n"
              f"  return v {cmp} b || (v == b && j < bj);      /* ties: the first occurrence */\n"
              "}\n")
    guard = f"NEE_{kind.upper()}_BETTER_{dn.upper()}"
    head = f"#ifndef {guard}\n#define {guard}\n{better}#endif\n"
    sig = D.sig(name, f"const {T}* x", f"{T}* vals", "llong* idx", "const llong O", "const llong n",
                "const llong I", "const int has_vals")
    if not rows:
        body = ("  const llong total = O * I;\n" + D.grid() +
                "    const llong o = g / I, i = g % I;\n"
                f"    {D.G}const {T}* xr = x + o * n * I + i;\n"
                f"    {A} b = 0; llong bj = -1;\n"
                "    for (llong j = 0; j < n; j++) {\n"
                f"      const {A} v = {ld('xr[j * I]')};\n"
                f"      if (nee_{kind}_better_{dn}(v, j, b, bj)) {{ b = v; bj = j; }}\n"
                "    }\n"
                f"    if (has_vals) vals[g] = {st('b')};\n"
                "    idx[g] = bj;\n"
                "  }\n}\n")
    else:
        S = D.shared
        body = (f"  {S} {A} sv[1024]; {S} llong sj[1024];\n"
                f"  const int t = {D.tid};\n"
                f"  for (llong r = {D.bid}; r < O; r += {D.nblocks}) {{\n"
                f"    {D.G}const {T}* xr = x + r * n;\n"
                f"    {A} b = 0; llong bj = -1;\n"
                f"    for (llong j = t; j < n; j += {D.bdim}) {{\n"
                f"      const {A} v = {ld('xr[j]')};\n"
                f"      if (nee_{kind}_better_{dn}(v, j, b, bj)) {{ b = v; bj = j; }}\n"
                "    }\n"
                "    sv[t] = b; sj[t] = bj;\n"
                f"    {D.sync};\n"
                f"    for (int h = {D.bdim} >> 1; h > 0; h >>= 1) {{\n"
                f"      if (t < h && nee_{kind}_better_{dn}(sv[t + h], sj[t + h], sv[t], sj[t])) "
                "{ sv[t] = sv[t + h]; sj[t] = sj[t + h]; }\n"
                f"      {D.sync};\n"
                "    }\n"
                "    if (t == 0) {\n"
                f"      if (has_vals) vals[r] = {st('sv[0]')};\n"
                "      idx[r] = sj[0];\n"
                "    }\n"
                f"    {D.sync};\n"
                "  }\n}\n")
    return name, D.prelude + head + sig + body


# ---------------------------------------------------------------- resampling
def bilinear_source(D, dn: str):
    """Bilinear resampling with the CPU kernel's per-row / per-column source indices and weights
    (``ii``: h0[OH] h1[OH] w0[OW] w1[OW]; ``ll``: lh0 lh1 lw0 lw1 in the compute type), PyTorch's
    arithmetic: blend along W, then ``t0 * lh0 + t1 * lh1``."""
    T, A, ld, st = D.io(dn)
    A = _ACC[dn]
    G = D.G
    name = _nm(D, f"nee_bilinear_{dn}")
    return name, (
        D.sig(name, f"const {T}* x", f"{T}* y", "const llong* ii", f"const {A}* ll", "const llong total",
              "const llong H", "const llong W", "const llong OH", "const llong OW") + D.grid() +
        "    const llong ow = g % OW; const llong t = g / OW; const llong oh = t % OH; const llong p = t / OH;\n"
        f"    {G}const {T}* ra = x + p * H * W + ii[oh] * W;\n"
        f"    {G}const {T}* rb = x + p * H * W + ii[OH + oh] * W;\n"
        "    const llong c0 = ii[2 * OH + ow], c1 = ii[2 * OH + OW + ow];\n"
        f"    const {A} a0 = ll[oh], a1 = ll[OH + oh], b0 = ll[2 * OH + ow], b1 = ll[2 * OH + OW + ow];\n"
        f"    const {A} t0 = ({A}){ld('ra[c0]')} * b0 + ({A}){ld('ra[c1]')} * b1;\n"
        f"    const {A} t1 = ({A}){ld('rb[c0]')} * b0 + ({A}){ld('rb[c1]')} * b1;\n"
        f"    y[g] = {st('t0 * a0 + t1 * a1')};\n"
        "  }\n}\n")


# ---------------------------------------------------------------- normalizations (a block per row)
def group_norm_source(D, dn: str):
    """group_norm: one block per (image, group) row of ``Cg * HW`` contiguous elements (the block
    reduction), float64 moments like the CPU kernel, then its per-channel affine
    ``x * sc + sh`` with ``sc = rstd * w[c]``, ``sh = b[c] - mean * rstd * w[c]`` (float16/32 in float)."""
    T, A, ld, st = D.io(dn)
    A = _ACC[dn]
    bs = D.bsum("double")
    name = _nm(D, f"nee_group_norm_{dn}")
    xa = f"({A}){ld('xr[i]')}"
    return name, D.prelude + D.block_helpers + (
        D.sig(name, f"const {T}* x", f"const {T}* w", f"const {T}* b", f"{T}* y", "const llong rows",
              "const llong G", "const llong Cg", "const llong HW", "const double eps", "const int has_w",
              "const int has_b") +
        f"  {D.shared} double sh[{D.slots}];\n"
        "  const llong n = Cg * HW;\n"
        f"  for (llong r = {D.bid}; r < rows; r += {D.nblocks}) {{\n"
        f"    {D.G}const {T}* xr = x + r * n; {D.G}{T}* yr = y + r * n;\n"
        "    double s = 0;\n"
        f"    for (llong i = {D.tid}; i < n; i += {D.bdim}) s += (double){ld('xr[i]')};\n"
        f"    const double mean = {bs}(s, sh) / (double)n;\n"
        "    double q = 0;\n"
        f"    for (llong i = {D.tid}; i < n; i += {D.bdim}) {{ const double d = (double){ld('xr[i]')} - mean; "
        "q += d * d; }\n"
        f"    const double rstd = 1.0 / sqrt({bs}(q, sh) / (double)n + eps);\n"
        "    const llong c0 = (r % G) * Cg;\n"
        f"    for (llong i = {D.tid}; i < n; i += {D.bdim}) {{\n"
        "      const llong c = c0 + i / HW;\n"
        f"      const double sc = rstd * (has_w ? (double){ld('w[c]')} : 1.0);\n"
        f"      const {A} a = ({A})sc, bb = ({A})((has_b ? (double){ld('b[c]')} : 0.0) - mean * sc);\n"
        f"      yr[i] = {st(xa + ' * a + bb')};\n"
        "    }\n"
        "  }\n}\n")


def norm_rows_source(D, op: str, dn: str, name: str):
    """layer_norm / rms_norm over contiguous rows of ``n``: one block per row, float64 statistics
    like the CPU kernel; ``(const T* x, const T* w, const T* b, T* y, llong rows, llong n, double eps,
    int has_w, int has_b)`` (``w`` / ``b`` contiguous, length ``n``; ignored when absent)."""
    T, _A, ld0, st = D.io(dn)
    ld = (lambda e: f"({_ACC[dn]})({ld0(e)})") if dn == "float16" else (lambda e: f"({_ACC[dn]})({e})")
    bs = D.bsum("double")
    rms = op == "rms_norm"
    L = [D.sig(name, f"const {T}* x", f"const {T}* w", f"const {T}* b", f"{T}* y", "const llong rows",
               "const llong n", "const double eps", "const int has_w", "const int has_b").rstrip("\n"),
         f"  {D.shared} double sh[{D.slots}];",
         f"  for (llong r = {D.bid}; r < rows; r += {D.nblocks}) {{",
         f"    {D.G}const {T}* xr = x + r * n; {D.G}{T}* yr = y + r * n;",
         "    double mean = 0;"]
    if not rms:
        L += ["    double s = 0;",
              f"    for (llong i = {D.tid}; i < n; i += {D.bdim}) s += (double){ld('xr[i]')};",
              f"    mean = {bs}(s, sh) / (double)n;"]
    L += ["    double q = 0;",
          (f"    for (llong i = {D.tid}; i < n; i += {D.bdim}) {{ const double d = (double){ld('xr[i]')}"
           " - mean; q += d * d; }"),
          f"    const double rstd = 1.0 / sqrt({bs}(q, sh) / (double)n + eps);",
          f"    for (llong i = {D.tid}; i < n; i += {D.bdim}) {{",
          f"      double v = ((double){ld('xr[i]')} - mean) * rstd;",
          f"      if (has_w) v *= (double){ld('w[i]')};",
          f"      if (has_b) v += (double){ld('b[i]')};",
          f"      yr[i] = {st('v')};",
          "    }",
          "  }",
          "}"]
    return "\n".join(L) + "\n"


# ---------------------------------------------------------------- scans
def scan_source(D, dn: str, odn: str, kind: str):
    """cumsum / cumprod along the middle dim of contiguous x (O, n, I) into contiguous y (same shape):
    one thread per (o, i) column, a serial scan accumulating like the CPU kernel (float64 when the input
    or the output is floating, else int64), each prefix cast into the output dtype."""
    T, _, ld, _ = D.io(dn)
    To, _, _, sto = D.io(odn)
    fl = dn in FLOATS or odn in FLOATS
    A = "double" if fl else "llong"
    op = "+" if kind == "cumsum" else "*"
    init = "0" if kind == "cumsum" else "1"
    store = (lambda e: f"(uchar)(({e}) != 0)") if odn == "bool" else sto
    name = _nm(D, f"nee_{kind}_{dn}_{odn}")
    return name, (
        D.sig(name, f"const {T}* x", f"{To}* y", "const llong O", "const llong n", "const llong I") +
        "  const llong total = O * I;\n" + D.grid() +
        "    const llong o = g / I, i = g % I;\n"
        f"    {A} acc = {init};\n"
        "    for (llong j = 0; j < n; j++) {\n"
        "      const llong q = (o * n + j) * I + i;\n"
        f"      acc = acc {op} ({A}){ld('x[q]')};\n"
        f"      y[q] = {store('acc')};\n"
        "    }\n"
        "  }\n}\n")


# ---------------------------------------------------------------- indexing
SCATTER_KINDS = {None: 0, "sum": 1, "prod": 2, "amax": 3, "amin": 4, "mean": 5}


def scatter_source(D, dn: str, idn: str):
    """scatter / scatter_reduce as a GATHER: each element (o, t, i) of the output region (O, n, I)
    scans the index column idx[o, :, i] (O, k, I) for entries equal to t and folds their src values
    in index order, so duplicates resolve exactly like the CPU's serial loop (the last write wins;
    float16 sums and products accumulate in float and round once, like torch's CPU kernels; amax/amin
    propagate NaN; mean sums in float64 / int64 then divides, flooring for integers).  No atomics:
    deterministic, O(k) per output element.  ``kind``: 0 assign, 1 sum, 2 prod, 3 amax, 4 amin, 5 mean."""
    T, A, ld, st = D.io(dn)
    I = IDX[idn]
    isf = dn in FLOATS
    R = "double" if isf else "llong"                    # mean accumulator
    if not isf:
        A = "llong"                                     # integers / bool: int64, cast at the end
    store = (lambda e: f"(uchar)(({e}) != 0)") if dn == "bool" else st
    name = _nm(D, f"nee_scatter_{dn}_{I}")
    return name, (
        D.sig(name, f"{T}* y", f"const {I}* idx", f"const {T}* src", "const llong total", "const llong n",
              "const llong k", "const llong I", "const int kind", "const int include_self") + D.grid() +
        "    const llong i = g % I; const llong t = (g / I) % n; const llong o = g / (n * I);\n"
        f"    const {A} self = ({A}){ld('y[g]')};\n"
        f"    {A} acc = self; {R} sum = include_self ? ({R})self : ({R})0; llong cnt = include_self ? 1 : 0;\n"
        "    bool hit = false;\n"
        "    if (!include_self) acc = kind == 2 ? 1 : 0;\n"
        "    for (llong j = 0; j < k; j++) {\n"
        "      const llong q = (o * k + j) * I + i;\n"
        "      if ((llong)idx[q] != t) continue;\n"
        f"      const {A} v = ({A}){ld('src[q]')};\n"
        "      if (kind == 0) acc = v;\n"
        "      else if (kind == 1) acc = acc + v;\n"
        "      else if (kind == 2) acc = acc * v;\n"
        "      else if (kind == 3 || kind == 4) {\n"
        "        if (!hit && !include_self) acc = v;\n"
        "        else if (acc != acc || v != v) acc = acc != acc ? acc : v;   /* NaN propagates */\n"
        "        else if (kind == 3 ? v > acc : v < acc) acc = v;\n"
        "      } else { sum += (" + R + ")v; cnt++; }\n"
        "      hit = true;\n"
        "    }\n"
        "    if (!hit) continue;                     /* untouched: the input's value stays */\n"
        "    if (kind == 5) {\n"
        + ("      y[g] = " + store(f"sum / ({R})cnt") + ";\n" if isf else
           "      llong qd = sum / cnt;\n"
           "      if ((sum % cnt != 0) && ((sum < 0) != (cnt < 0))) qd--;   /* floor division */\n"
           "      y[g] = " + store("qd") + ";\n") +
        "    } else {\n"
        f"      y[g] = {store('acc')};\n"
        "    }\n"
        "  }\n}\n")


def searchsorted_source(D, dn: str, odn: str):
    """Binary search per value in its row of the sorted sequence (one row for a 1-D sequence):
    PyTorch's steps (right while ``!(e >= x)``, ``!(e > x)`` for ``right``): numpy's answers on a sorted
    sequence, torch's path-dependent ones where the sequence holds NaNs (the CPU kernel does the same)."""
    T, A, ld, _ = D.io(dn)
    O = IDX[odn]
    name = _nm(D, f"nee_searchsorted_{dn}_{O}")
    return name, (
        D.sig(name, f"const {T}* seq", f"const {T}* v", f"{O}* y", "const llong total", "const llong n",
              "const llong m", "const int rows", "const int right") + D.grid() +
        f"    {D.G}const {T}* s = seq + (rows ? (g / m) * n : 0);\n"
        f"    const {A} x = {ld('v[g]')};\n"
        "    llong lo = 0, hi = n;\n"
        "    while (lo < hi) {\n"
        "      const llong mid = lo + (hi - lo) / 2;\n"
        f"      const {A} e = {ld('s[mid]')};\n"
        "      const bool go = right ? !(e > x) : !(e >= x);\n"
        "      if (go) lo = mid + 1; else hi = mid;\n"
        "    }\n"
        f"    y[g] = ({O})lo;\n"
        "  }\n}\n")


def take_source(D, isz: int, idn: str):
    """y[o, j, i] = x[o, idx[..], i] over x (outer, n, inner) and y (outer, k, inner), both contiguous;
    idx is per output element (gather: (outer, k, inner)) or per j (index_select / embedding)."""
    U, I = BITS[isz], IDX[idn]
    name = _nm(D, f"nee_take3_{U}_{I}")
    return name, (
        D.sig(name, f"const {U}* x", f"const {I}* idx", f"{U}* y", "int* err", "const llong total",
              "const llong n", "const llong k", "const llong inner", "const int per_elem", "const int wrap")
        + D.grid() +
        "    const llong i = g % inner; const llong t = g / inner; const llong j = t % k; const llong o = t / k;\n"
        "    llong v = (llong)idx[per_elem ? g : j];\n"
        "    if (wrap && v < 0) v += n;   /* take: negative indices count from the end */\n"
        f"    if (v < 0 || v >= n) {{ err[0] = 1; y[g] = ({U})0; continue; }}   /* never read out of bounds */\n"
        "    y[g] = x[(o * n + v) * inner + i];\n"
        "  }\n}\n")


def tri_source(D, isz: int):
    U = BITS[isz]
    name = _nm(D, f"nee_tri_{U}")
    return name, (
        D.sig(name, f"const {U}* x", f"{U}* y", "const llong total", "const llong R", "const llong C",
              "const llong diag", "const int lower") + D.grid() +
        "    const llong c = g % C; const llong r = (g / C) % R;\n"
        "    const bool keep = lower ? (c - r <= diag) : (c - r >= diag);\n"
        f"    y[g] = keep ? x[g] : ({U})0;\n"
        "  }\n}\n")


def scanarg_source(D, dn: str, kind: str):
    """cummax / cummin along the middle dim of contiguous x (O, n, I): values and int64 indices, the
    CPU kernel's rule (``v >= a`` for cummax, ``v <= a`` for cummin: ties move the index to the latest;
    a NaN takes over and stays, each later NaN moving the index)."""
    T, A, ld, st = D.io(dn)
    isf = dn in FLOATS
    cmp = ">=" if kind == "cummax" else "<="
    if isf:
        init = "-INFINITY" if kind == "cummax" else "INFINITY"
        cond = f"v {cmp} a || v != v"
    else:
        lim = {"bool": ("0", "1"), "uint8": ("0", "255"), "int8": ("-128", "127"), "int16": ("-32768", "32767"),
               "int32": ("(-2147483647 - 1)", "2147483647"),
               "int64": ("(-9223372036854775807LL - 1)", "9223372036854775807LL")}[dn]
        init = lim[0] if kind == "cummax" else lim[1]
        cond = f"v {cmp} a"
    name = _nm(D, f"nee_{kind}_{dn}")
    return name, (
        D.sig(name, f"const {T}* x", f"{T}* y", "llong* yi", "const llong O", "const llong n", "const llong I") +
        "  const llong total = O * I;\n" + D.grid() +
        "    const llong o = g / I, i = g % I;\n"
        f"    {A} a = ({A}){init}; llong ai = 0;\n"
        "    for (llong j = 0; j < n; j++) {\n"
        "      const llong q = (o * n + j) * I + i;\n"
        f"      const {A} v = {ld('x[q]')};\n"
        f"      if ({cond}) {{ a = v; ai = j; }}\n"
        f"      y[q] = {st('a')}; yi[q] = ai;\n"
        "    }\n"
        "  }\n}\n")


def sort_source(D, dn: str):
    """A stable sort of each (o, i) column of contiguous x (O, n, I) along n: one thread per column, a
    bottom-up merge sort of int64 positions ping-ponging between ``idx`` and ``tmp`` (both (O, n, I)),
    then the values gathered into ``vals``.  The CPU's order: ascending with NaN last, descending
    (``desc``) with NaN first; ties (and NaNs) keep their original order either way."""
    T, A, ld, _st = D.io(dn)
    G = D.G
    isf = dn in FLOATS
    nan_a = "(a != a)" if isf else "0"
    nan_b = "(b != b)" if isf else "0"
    name = _nm(D, f"nee_sort_{dn}")
    return name, (
        D.sig(name, f"const {T}* x", f"{T}* vals", "llong* idx", "llong* tmp", "const llong O", "const llong n",
              "const llong I", "const int desc") +
        "  const llong total = O * I;\n" + D.grid() +
        "    const llong o = g / I, i = g % I;\n"
        f"    {G}const {T}* xr = x + o * n * I + i;\n"
        f"    {G}llong* src = idx + o * n * I + i; {G}llong* dst = tmp + o * n * I + i;\n"
        "    for (llong j = 0; j < n; j++) src[j * I] = j;\n"
        "    for (llong w = 1; w < n; w *= 2) {\n"
        "      for (llong lo = 0; lo < n; lo += 2 * w) {\n"
        "        const llong mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;\n"
        "        llong p = lo, q = mid, k = lo;\n"
        "        while (p < mid && q < hi) {\n"
        f"          const {A} a = {ld('xr[src[q * I] * I]')}, b = {ld('xr[src[p * I] * I]')};\n"
        f"          const int an = {nan_a}, bn = {nan_b};\n"
        "          /* right (a) strictly before left (b)?  else the left one goes first: stable */\n"
        "          const int before = desc ? ((an && !bn) || (!an && !bn && a > b)) : ((!an && bn) || (!an && !bn && a < b));\n"
        "          if (before) { dst[k * I] = src[q * I]; q++; } else { dst[k * I] = src[p * I]; p++; }\n"
        "          k++;\n"
        "        }\n"
        "        while (p < mid) { dst[k * I] = src[p * I]; p++; k++; }\n"
        "        while (q < hi) { dst[k * I] = src[q * I]; q++; k++; }\n"
        "      }\n"
        f"      {G}llong* s = src; src = dst; dst = s;\n"
        "    }\n"
        f"    {G}llong* out = idx + o * n * I + i;\n"
        "    for (llong j = 0; j < n; j++) {\n"
        "      const llong v = src[j * I];\n"
        "      out[j * I] = v;\n"
        "      vals[(o * n + j) * I + i] = xr[v * I];\n"
        "    }\n"
        "  }\n}\n")


# ---------------------------------------------------------------- stream compaction (nonzero, masked_*)
# Three steps over a flat predicate array split in chunks of CH elements: count per chunk (parallel),
# an exclusive scan of the counts (one thread: there are few chunks), then each chunk writes its
# entries from its offset on (parallel), in order: the CPU's row-major order, deterministic.
def _chunk_loop(D):
    """The grid-stride loop over the chunks (g) of CH of the n elements: [lo, hi) is chunk g."""
    return ("  const llong total = (n + CH - 1) / CH;\n" + D.grid() +
            "    const llong lo = g * CH, hi = lo + CH < n ? lo + CH : n;\n")


def count_chunks_source(D, dn: str):
    T, _A, ld, _ = D.io(dn)
    name = _nm(D, f"nee_count_chunks_{dn}")
    return name, (
        D.sig(name, f"const {T}* m", "llong* cnt", "const llong n", "const llong CH") +
        _chunk_loop(D) +
        "    llong k = 0;\n"
        f"    for (llong i = lo; i < hi; i++) k += ({ld('m[i]')} != 0);\n"
        "    cnt[g] = k;\n"
        "  }\n}\n")


def scan_chunks_source(D):
    name = _nm(D, "nee_scan_chunks")
    return name, (
        D.sig(name, "llong* cnt", "const llong nch") +
        "  const llong total = 1;\n" + D.grid() +
        "    llong s = 0;\n"
        "    for (llong c = 0; c < nch; c++) { const llong k = cnt[c]; cnt[c] = s; s += k; }\n"
        "  }\n}\n")


def nonzero_source(D, dn: str):
    """out (count, nd) int64: the coordinates of every nonzero of contiguous x (``shape``: nd int64)."""
    T, _A, ld, _ = D.io(dn)
    name = _nm(D, f"nee_nonzero_{dn}")
    return name, (
        D.sig(name, f"const {T}* m", "llong* y", "const llong* cnt", "const llong* shape", "const llong n",
              "const llong CH", "const int nd") +
        _chunk_loop(D) +
        "    llong r = cnt[g];\n"
        "    for (llong i = lo; i < hi; i++) {\n"
        f"      if (!({ld('m[i]')} != 0)) continue;\n"
        "      llong t = i;\n"
        "      for (int k = nd - 1; k >= 0; k--) { y[r * nd + k] = t % shape[k]; t /= shape[k]; }\n"
        "      r++;\n"
        "    }\n"
        "  }\n}\n")


def masked_source(D, isz: int, scatter: bool):
    """masked_select (``y[r] = x[i]`` for the r-th true mask entry i) or masked_scatter (``y[i] =
    x[r]``, y already holding the input); mask: bool (uchar) of the same flat size."""
    U = BITS[isz]
    name = _nm(D, f"nee_masked_{'scatter' if scatter else 'select'}_{U}")
    mv = "y[i] = x[r]" if scatter else "y[r] = x[i]"
    return name, (
        D.sig(name, "const uchar* m", f"const {U}* x", f"{U}* y", "const llong* cnt", "const llong n",
              "const llong CH") +
        _chunk_loop(D) +
        "    llong r = cnt[g];\n"
        f"    for (llong i = lo; i < hi; i++) if (m[i]) {{ {mv}; r++; }}\n"
        "  }\n}\n")


def index_put_source(D, dn: str, accumulate: bool):
    """``y[pos[q]] = v[q]`` (or ``+=``) for q in order, by ONE thread: the CPU's serial semantics
    (the last of duplicate positions wins; accumulation adds every duplicate), no atomics."""
    T, _A, ld, st = D.io(dn)
    name = _nm(D, f"nee_index_put_{dn}_{int(accumulate)}")
    if not accumulate:
        body = "      y[pos[q]] = v[q];\n"
    elif dn == "bool":
        body = "      y[pos[q]] = (uchar)((y[pos[q]] | v[q]) != 0);\n"
    else:
        body = f"      y[pos[q]] = {st(ld('y[pos[q]]') + ' + ' + ld('v[q]'))};\n"
    return name, (
        D.sig(name, f"{T}* y", "const llong* pos", f"const {T}* v", "const llong k") +
        "  const llong total = 1;\n" + D.grid() +
        "    for (llong q = 0; q < k; q++)\n" + body +
        "  }\n}\n")


def median_pick_source(D, dn: str):
    """median along the middle dim of contiguous x (O, n, I) from its stable ascending sort ``order``
    (NaN last): the lower median ``order[(n - 1) / 2]``, or the FIRST NaN of the column when it holds
    one (the CPU kernel's rule); values and int64 indices, one thread per column."""
    T, A, ld, _ = D.io(dn)
    isf = dn in FLOATS
    name = _nm(D, f"nee_median_pick_{dn}")
    # (loaded into the compute type: float16 storage is bits, NaN shows only after nee_h2f)
    find = (f"    for (llong j = 0; j < n; j++) {{ const {A} v = {ld('x[(o * n + j) * I + i]')}; "
            "if (v != v) { bi = j; break; } }\n") if isf else ""
    return name, (
        D.sig(name, f"const {T}* x", "const llong* order", f"{T}* vals", "llong* idx", "const llong O",
              "const llong n", "const llong I") +
        "  const llong total = O * I;\n" + D.grid() +
        "    const llong o = g / I, i = g % I;\n"
        "    llong bi = order[(o * n + (n - 1) / 2) * I + i];\n" + find +
        "    vals[g] = x[(o * n + bi) * I + i]; idx[g] = bi;\n"
        "  }\n}\n")


def channel_moments_source(D, dn: str):
    """batch_norm statistics of x (A, C, B) (contiguous): per channel the mean and the population
    variance over (A, B) in float64 (two passes, like the CPU kernel), one block per channel."""
    T, _A, ld, st = D.io(dn)
    bs = D.bsum("double")
    name = _nm(D, f"nee_channel_moments_{dn}")
    return name, D.prelude + D.block_helpers + (
        D.sig(name, f"const {T}* x", f"{T}* mean", f"{T}* var", "const llong A", "const llong C",
              "const llong B") +
        f"  {D.shared} double sh[{D.slots}];\n"
        "  const llong n = A * B;\n"
        f"  for (llong c = {D.bid}; c < C; c += {D.nblocks}) {{\n"
        "    double s = 0;\n"
        f"    for (llong j = {D.tid}; j < n; j += {D.bdim}) s += (double){ld('x[((j / B) * C + c) * B + j % B]')};\n"
        f"    const double m = {bs}(s, sh) / (double)n;\n"
        "    double q = 0;\n"
        f"    for (llong j = {D.tid}; j < n; j += {D.bdim}) {{\n"
        f"      const double d = (double){ld('x[((j / B) * C + c) * B + j % B]')} - m; q += d * d;\n"
        "    }\n"
        f"    const double v = {bs}(q, sh) / (double)n;\n"
        f"    if ({D.tid} == 0) {{ mean[c] = {st('m')}; var[c] = {st('v')}; }}\n"
        "  }\n}\n")


# ---------------------------------------------------------------- loss terms
def nll_terms_source(D, dn: str):
    """nll_loss_terms over contiguous lp (N, C, K), targets (N * K) int64 and float64 class weights:
    per (n, k) ``nll = -w[t] * lp[n, t, k]`` and (``smooth``) ``-sum_c w[c] * lp[n, c, k]`` in float64
    (0 where ``t == ignore``), stored in the lp dtype; the float64 terms and weights also go to ``part``
    (3 x N*K) for :func:`nll_totals_source`.  An out-of-range target raises ``err[0]`` (never read out
    of bounds); the host then finds the first one, like the CPU kernel."""
    T, _A, ld, st = D.io(dn)
    name = _nm(D, f"nee_nll_terms_{dn}")
    return name, (
        D.sig(name, f"const {T}* lp", "const llong* tgt", "const double* w", f"{T}* nll", f"{T}* sm",
              "double* part", "int* err", "const llong N", "const llong C", "const llong K", "const llong ignore",
              "const int smooth") +
        "  const llong total = N * K;\n" + D.grid() +
        "    const llong n = g / K, k = g % K, t = tgt[g];\n"
        "    part[g] = 0; part[total + g] = 0; part[2 * total + g] = 0;\n"
        f"    if (t == ignore) {{ nll[g] = {st('0')}; sm[g] = {st('0')}; continue; }}\n"
        f"    if (t < 0 || t >= C) {{ err[0] = 1; nll[g] = {st('0')}; sm[g] = {st('0')}; continue; }}\n"
        "    const llong p = n * C * K + k;\n"
        f"    const double wt = w[t], v = -wt * (double){ld('lp[p + t * K]')};\n"
        f"    nll[g] = {st('v')}; part[g] = v; part[total + g] = wt;\n"
        "    double a = 0;\n"
        f"    if (smooth) for (llong c = 0; c < C; c++) a += w[c] * (double){ld('lp[p + c * K]')};\n"
        f"    sm[g] = {st('-a')}; part[2 * total + g] = -a;\n"
        "  }\n}\n")


def nll_totals_source(D):
    """tot = [sum nll, sum smooth, sum w[t]] of the float64 ``part`` (3 x m), by ONE thread in index
    order: the CPU kernel's serial sums, bit for bit."""
    name = _nm(D, "nee_nll_totals")
    return name, (
        D.sig(name, "const double* part", "double* tot", "const llong m") +
        "  const llong total = 1;\n" + D.grid() +
        "    double s0 = 0, s1 = 0, s2 = 0;\n"
        "    for (llong q = 0; q < m; q++) { s0 += part[q]; s1 += part[2 * m + q]; s2 += part[m + q]; }\n"
        "    tot[0] = s0; tot[1] = s1; tot[2] = s2;\n"
        "  }\n}\n")


def renorm_rows_source(D, dn: str):
    """embedding_renorm_: for each listed row (unique indices) of the contiguous (V, Dm) table, its
    p-norm in float64 (``kind``: 0 p = 2, 1 inf, 2 -inf, 3 p = 0, 4 any other p, numpy's vector norms);
    rows above ``max_norm`` are scaled by ``max_norm / (norm + 1e-7)`` in float64, one thread per row."""
    T, _A, ld, st = D.io(dn)
    name = _nm(D, f"nee_renorm_rows_{dn}")
    return name, (
        D.sig(name, f"{T}* w", "const llong* rows", "const llong nr", "const llong Dm", "const double max_norm",
              "const double p", "const int kind") +
        "  const llong total = nr;\n" + D.grid() +
        f"    {D.G}{T}* r = w + rows[g] * Dm;\n"
        "    double s = kind == 2 ? INFINITY : 0.0;\n"
        "    for (llong j = 0; j < Dm; j++) {\n"
        f"      const double v = (double){ld('r[j]')}, a = v < 0 ? -v : v;\n"
        "      if (kind == 0) s += v * v;\n"
        "      else if (kind == 1) s = a > s ? a : s;\n"
        "      else if (kind == 2) s = a < s ? a : s;\n"
        "      else if (kind == 3) s += (v != 0);\n"
        "      else s += pow(a, p);\n"
        "    }\n"
        "    const double nrm = kind == 0 ? sqrt(s) : (kind == 4 ? pow(s, 1.0 / p) : s);\n"
        "    if (!(nrm > max_norm)) continue;\n"
        "    const double sc = max_norm / (nrm + 1e-7);\n"
        f"    for (llong j = 0; j < Dm; j++) r[j] = {st('(double)' + ld('r[j]') + ' * sc')};\n"
        "  }\n}\n")


def unique_finish_source(D):
    """unique of a sorted 1-D array from its group-start flags: ``inv[perm[i]] = cum[i] - 1`` (cum: the
    inclusive count of group starts up to i) and, per group k starting at ``starts[k]``, its size."""
    name = _nm(D, "nee_unique_finish")
    return name, (
        D.sig(name, "const llong* perm", "const llong* cum", "const llong* starts", "llong* inv", "llong* cnt",
              "const llong n", "const llong u") +
        "  const llong total = n;\n" + D.grid() +
        "    inv[perm[g]] = cum[g] - 1;\n"
        "    if (g < u) cnt[g] = (g + 1 < u ? starts[g + 1] : n) - starts[g];\n"
        "  }\n}\n")


def unique_rows_source(D, dn: str):
    """unique along a dim, on x as contiguous rows (n, m): ``order`` = a stable merge sort of the row
    indices in lexicographic order (one thread: ``tmp`` is its scratch), then ``flags[i]`` = row
    order[i] starts a group (differs from the previous in some element; NaN differs from itself)."""
    T, A, ld, _ = D.io(dn)
    G = D.G
    name = _nm(D, f"nee_unique_rows_{dn}")
    return name, (
        D.sig(name, f"const {T}* x", "llong* order", "llong* tmp", "uchar* flags", "const llong n",
              "const llong m") +
        "  const llong total = 1;\n" + D.grid() +
        f"    {G}llong* src = order; {G}llong* dst = tmp;\n"
        "    for (llong j = 0; j < n; j++) src[j] = j;\n"
        "    for (llong w = 1; w < n; w *= 2) {\n"
        "      for (llong lo = 0; lo < n; lo += 2 * w) {\n"
        "        const llong mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;\n"
        "        llong p = lo, q = mid, k = lo;\n"
        "        while (p < mid && q < hi) {\n"
        "          int c = 0;   /* row src[q] vs row src[p]: -1 less, 1 greater (lexicographic) */\n"
        "          for (llong e = 0; e < m && c == 0; e++) {\n"
        f"            const {A} a = {ld('x[src[q] * m + e]')}, b = {ld('x[src[p] * m + e]')};\n"
        "            c = a < b ? -1 : (b < a ? 1 : 0);\n"
        "          }\n"
        "          if (c < 0) { dst[k] = src[q]; q++; } else { dst[k] = src[p]; p++; }\n"
        "          k++;\n"
        "        }\n"
        "        while (p < mid) { dst[k] = src[p]; p++; k++; }\n"
        "        while (q < hi) { dst[k] = src[q]; q++; k++; }\n"
        "      }\n"
        f"      {G}llong* s = src; src = dst; dst = s;\n"
        "    }\n"
        "    if (src != order) for (llong j = 0; j < n; j++) order[j] = src[j];\n"
        "    for (llong i = 0; i < n; i++) {\n"
        "      uchar f = i == 0;\n"
        "      for (llong e = 0; e < m && !f; e++)\n"
        f"        f = {ld('x[order[i] * m + e]')} != {ld('x[order[i - 1] * m + e]')};\n"
        "      flags[i] = f;\n"
        "    }\n"
        "  }\n}\n")


def take_first_source(D):
    """``first[k] = order[starts[k]]``: the row that represents group k."""
    name = _nm(D, "nee_take_first")
    return name, (
        D.sig(name, "const llong* order", "const llong* starts", "llong* first", "const llong u") +
        "  const llong total = u;\n" + D.grid() +
        "    first[g] = order[starts[g]];\n"
        "  }\n}\n")
