"""Every environment switch neetorch reads, in one place (documented in README).

NEE_DEBUG        0..4: 1 compile events and fallbacks, 2 per-kernel timing,
                 3 fusion decisions, 4 generated source.
NEE_CACHE_DIR    where compiled kernels are cached (default ~/.cache/neetorch); also
                 Numba's cache dir for neetorch's static kernels unless NUMBA_CACHE_DIR is set.
NEE_STRICT       1: any fallback to another device raises instead of running.
NEE_NUM_THREADS  threads for CPU kernels (default: number of cores).
NEE_DEVICE       default device for new tensors (default cpu).

Read where they are used (CPU backend tuning):
NEE_CPU_RENDERER             llvm (default) | numba: how elementwise/fused/row kernels are built
                             (devices/cpu/elementwise.py).
NEE_CPU_POOL_BYTES           bytes of large output buffers kept for reuse (default 1 GiB).
NEE_CPU_NT_BYTES             elementwise / layer_norm / rms_norm / log_softmax launches writing at least
                             this many bytes use non-temporal (streaming) stores (default: half the
                             last-level cache; 0: never) (devices/cpu/llvm_render.py nt_threshold).
NEE_CPU_NATIVE_CHUNKS        1 (default) | 0: the chunks of large elementwise launches, norm rows and direct conv
                             tiles run on gemm_driver's native workers (one call job), not the Python pool.
NEE_CONV_DIRECT              unset: cost rule | 0 never | 1 always: direct LLVM conv kernels for float32
                             (devices/cpu/kernels/conv_direct.py).
NEE_CONV_EPILOGUE            1 (default) | 0: jit conv2d + bias/residual/relu epilogue chains run inside the
                             conv kernel (devices/cpu/kernels/conv_epilogue.py), not as a pass after it.
NEE_CONV_PROLOGUE            1 (default) | 0: a jit per-channel mul/add/relu group read only by a 1x1 conv
                             (DenseNet's BatchNorm + ReLU) is applied by the packed 1x1 kernel as it packs its
                             input (devices/cpu/kernels/conv_epilogue.py compile_conv_prologue).
NEE_CONV_DIRECT_REPLAY       1 (default) | 0: a bound direct conv replays its native calls while its arrays are the
                             same objects (devices/cpu/kernels/conv_direct.py _replay).
NEE_WINOGRAD_NATIVE          1 (default) | 0: Winograd convs (2+ threads, V and M up to 16 MB) as three native jobs.
NEE_JIT_CHAIN                3 (default) | N | 0: from a thread's N-th call of a compiled graph, the native calls of
                             its bound steps replay as one loop (jit/executable.py _chain_build); 0 off.
NEE_JIT_CAT                  1 (default) | 0: the jit memory plan writes a cat's inputs straight into
                             their slices of its output and drops the copy (jit/executable.py plan_cats).
NEE_ONNX_FOLD                1 (default) | 0: fold Conv/Gemm + BatchNorm/affine at ONNX load (onnx/optimize.py),
                             and keep transposed initializers as views (no ``freeze="views"`` row-major copies
                             for products: jit/passes.py freeze_constants).
NEE_MATMUL_PAR_FLOPS         products from this many flops are split over the thread pool (8e6).
NEE_MATMUL_PAR_BYTES         matrix-vector products split by weight columns from this weight size (4 MiB).
NEE_MATMUL_BLOCKS_PER_THREAD blocks per thread for split products (4).
Plugins read their own (simnpu: NEE_SIMNPU_SRAM, NEE_SIMNPU_DRAM); tests read NEE_ONNX_FULL,
NEE_ONNX_DEVICES, NEE_CUDA_EMULATE, NEE_BENCH_* (README).
"""
import os

DEBUG = int(os.environ.get("NEE_DEBUG", "0") or 0)
CACHE_DIR = os.environ.get("NEE_CACHE_DIR") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "neetorch")
STRICT = os.environ.get("NEE_STRICT", "0") not in ("", "0", "false", "False")
NUM_THREADS = int(os.environ.get("NEE_NUM_THREADS", "0") or 0) or (os.cpu_count() or 1)
DEFAULT_DEVICE = os.environ.get("NEE_DEVICE", "cpu")
JIT_CAT = os.environ.get("NEE_JIT_CAT", "1") not in ("0", "false", "False")

# Numba's own cache for neetorch's static kernels (njit(cache=True) in devices/cpu/kernels)
# lives in the same neetorch cache dir, not beside the installed sources; an explicit
# NUMBA_CACHE_DIR wins.  Set before numba is imported (neetorch imports it lazily).
os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(CACHE_DIR, "numba-static"))
