"""Graph mode (@nee.jit) against neetorch eager, torch eager and torch.compile (inductor, CPU).

Workloads from the graph-mode issue: fused gelu(x*w+b) on 4M float32, layer_norm and softmax on
(4096, 1024), a 2-layer MLP block, a transformer block (attention + MLP, seq 128, d 256).
``track_fraction_of_copy`` divides the jitted kernels' GB/s by this machine's parallel copy GB/s
measured in the same process; ``track_compile_seconds`` times cold (empty cache) and warm (second
process) compilation of the transformer block in fresh processes.
"""
import os
import subprocess
import sys
import tempfile
import textwrap

from . import _workloads as W

MODES = ("nee-jit", "nee-jit-freeze", "nee-eager", "torch", "torch.compile", "torch.compile-freeze")
# nee-jit-freeze: ``nee.jit(fn, freeze=True)`` (captured weights are frozen constants, re-laid out);
# torch.compile-freeze: inductor with ``torch._inductor.config.freezing = True``, its counterpart


def _shapes():
    return dict(ew=W.tiny((4096, 1024), (64, 32)), nn=W.tiny((4096, 1024), (64, 32)),
                mlp=W.tiny((256, 1024, 4096), (8, 32, 64)), tf=W.tiny((128, 256, 4), (16, 32, 4)))


def _workload(lib, name):
    """(fn, args) for ``name`` written once against the torch-like API of ``lib`` (neetorch or torch)."""
    F = lib.nn.functional
    S = _shapes()
    lib.manual_seed(0)
    if name == "gelu_affine":
        x, w, b = lib.randn(*S["ew"]), lib.randn(S["ew"][1]), lib.randn(S["ew"][1])
        return (lambda x, w, b: F.gelu(x * w + b)), (x, w, b)
    if name == "layer_norm":
        x, g, b = lib.randn(*S["nn"]), lib.randn(S["nn"][1]), lib.randn(S["nn"][1])
        return (lambda x, g, b: F.layer_norm(x, (x.shape[-1],), g, b)), (x, g, b)
    if name == "softmax":
        return (lambda x: F.softmax(x, dim=-1)), (lib.randn(*S["nn"]),)
    if name == "mlp":
        n, d, h = S["mlp"]
        w1, b1, w2, b2 = lib.randn(h, d) * 0.02, lib.randn(h) * 0.02, lib.randn(d, h) * 0.02, lib.randn(d) * 0.02
        return (lambda x: F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2)), (lib.randn(n, d),)
    if name == "transformer":
        return transformer_block(lib, *S["tf"])
    raise KeyError(name)


def transformer_block(lib, s, d, h):
    """A pre-norm transformer block (causal attention + GELU MLP) for neetorch or torch."""
    F = lib.nn.functional
    lib.manual_seed(0)
    p = {k: lib.randn(*shape) * 0.05 for k, shape in dict(
        wq=(d, d), wk=(d, d), wv=(d, d), wo=(d, d), w1=(4 * d, d), w2=(d, 4 * d)).items()}
    p.update({k: lib.zeros(n) for k, n in dict(bq=d, bk=d, bv=d, bo=d, b1=4 * d, b2=d).items()})
    g1, be1, g2, be2 = lib.ones(d), lib.zeros(d), lib.ones(d), lib.zeros(d)

    def heads(t):
        return t.reshape(1, s, h, d // h).transpose(1, 2)

    def block(x):
        n = F.layer_norm(x, (d,), g1, be1)
        q, k, v = (heads(F.linear(n, p["w" + c], p["b" + c])) for c in "qkv")
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(1, s, d)
        x = x + F.linear(a, p["wo"], p["bo"])
        n = F.layer_norm(x, (d,), g2, be2)
        return x + F.linear(F.gelu(F.linear(n, p["w1"], p["b1"])), p["w2"], p["b2"])
    return block, (lib.randn(1, s, d),)


WORKLOADS = ("gelu_affine", "layer_norm", "softmax", "mlp", "transformer")


def build(name, mode):
    """A zero-argument callable running ``name`` in ``mode`` (compiled and warmed up).

    ``nee-jit-ew``: the jit with elementwise fusion only (no matmul epilogues, no reduction
    prologues), to measure what those fusions bring in the same process."""
    if mode == "nee-jit-ew":
        from neetorch.jit import fusion
        saved = list(fusion.FUSION_STAGES)
        fusion.FUSION_STAGES[:] = [s for s in saved if s[0] == "elementwise"]
        try:
            return build(name, "nee-jit")   # traced and compiled here, with these stages
        finally:
            fusion.FUSION_STAGES[:] = saved
    if mode.startswith("nee"):
        fn, args = _workload(W.nee(), name)
        if mode in ("nee-jit", "nee-jit-freeze"):
            fn = W.nee().jit(fn, freeze=mode == "nee-jit-freeze")
    else:
        torch = W.torch()
        fn, args = _workload(torch, name)
        if mode.startswith("torch.compile"):
            try:
                fn = torch.compile(fn)
            except Exception as e:  # inductor unavailable
                raise W.Missing(f"torch.compile: {e}") from e
        inner = fn
        fn = lambda *a: _with(torch.inference_mode, inner, a)  # noqa: E731
    call = lambda: fn(*args)  # noqa: E731
    if mode == "torch.compile-freeze":
        import torch._inductor.config as inductor_config
        with inductor_config.patch(freezing=True):    # read when the first call compiles
            call()
    call()
    call()
    return call


def _with(ctx, fn, a):
    with ctx():
        return fn(*a)


class JitVsEager:
    params = (list(WORKLOADS), list(MODES))
    param_names = ["workload", "mode"]
    timeout = 900

    def setup(self, workload, mode):
        self.fn = build(workload, mode)

    def time_call(self, workload, mode):
        self.fn()


def _bytes(name):
    S = _shapes()
    if name == "gelu_affine":
        r, c = S["ew"]
        return 4 * (2 * r * c + 2 * c)
    r, c = S["nn"]
    return 4 * (2 * r * c + (2 * c if name == "layer_norm" else 0))


class JitFractionOfCopy:
    """Jitted memory-bound workloads: GB/s of their minimal traffic / parallel copy GB/s, same process."""
    params = (["gelu_affine", "layer_norm", "softmax"],)
    param_names = ["workload"]
    unit = "fraction of copy GB/s"
    timeout = 600

    def setup(self, workload):
        self.fn = build(workload, "nee-jit")

    def track_fraction_of_copy(self, workload):
        copy = W.machine_copy_bandwidth(repeats=3, methods=("np.copyto", "threaded np.copyto"))["best"]
        return W.gbps(_bytes(workload), W.measure(self.fn, repeats=5)) / copy


_COMPILE_SCRIPT = textwrap.dedent("""
    import sys, time
    t0 = time.perf_counter()
    import neetorch as nee
    sys.path.insert(0, {root!r})
    from asv_benchmarks.bench_jit import transformer_block
    f, args = transformer_block(nee, 128, 256, 4)
    jf = nee.jit(f)
    t1 = time.perf_counter()
    jf(*args)
    print(time.perf_counter() - t1, t1 - t0)
""")


class JitCompileTime:
    """Seconds to the first result of the jitted transformer block in a fresh process:
    ``cold`` with an empty kernel cache, ``warm`` in a second process (import excluded)."""
    params = (["cold", "warm"],)
    param_names = ["cache"]
    unit = "seconds"
    timeout = 900
    number = 1
    repeat = 1

    def setup(self, cache):
        self.dir = tempfile.mkdtemp(prefix="nee-bench-cache-")
        self.root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        if cache == "warm":
            self._run()

    def _run(self):
        env = dict(os.environ, NEE_CACHE_DIR=self.dir)
        out = subprocess.run([sys.executable, "-c", _COMPILE_SCRIPT.format(root=self.root)], env=env,
                             capture_output=True, text=True, check=True)
        return float(out.stdout.split()[0])

    def track_compile_seconds(self, cache):
        return self._run()


def ratio_table(repeats=5):
    """(workload, {mode: seconds}) for bench/compare.py-style reports."""
    rows = []
    for name in WORKLOADS:
        times = {}
        for mode in MODES:
            try:
                times[mode] = W.measure(build(name, mode), repeats=repeats)
            except NotImplementedError:
                times[mode] = None
        rows.append((name, times))
    return rows


def interleaved_table(workloads=WORKLOADS, modes=MODES, repeats=9):
    """(workload, {mode: seconds}) sampled round-robin across modes, min of ``repeats``: the
    machine is shared, so ratios taken in one process, interleaved, are the meaningful numbers."""
    rows = []
    for name in workloads:
        fns = {}
        for mode in modes:
            try:
                fns[mode] = build(name, mode)
            except NotImplementedError:
                pass
        t = W.measure_interleaved(fns, repeats=repeats, stat="min")
        rows.append((name, {m: t.get(m) for m in modes}))
    return rows


_ALONE_SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    from asv_benchmarks import _workloads as W
    from asv_benchmarks.bench_jit import build
    print(W.measure(build({name!r}, {mode!r}), repeats={repeats}))
""")


def alone_table(workloads=WORKLOADS, modes=MODES, rounds=3, repeats=7):
    """(workload, {mode: seconds}) with each mode alone in a fresh process (min over ``rounds``
    rounds, modes alternating): torch's OpenMP threads spin after each op and, in one process, take
    cores from neetorch's threads (and the other way round)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rows = []
    for name in workloads:
        best: dict = {}
        for _ in range(rounds):
            for mode in modes:
                out = subprocess.run([sys.executable, "-c", _ALONE_SCRIPT.format(root=root, name=name, mode=mode,
                                                                                  repeats=repeats)],
                                     capture_output=True, text=True)
                if out.returncode == 0 and out.stdout.strip():
                    t = float(out.stdout.split()[-1])
                    best[mode] = min(best.get(mode, t), t)
        rows.append((name, {m: best.get(m) for m in modes}))
    return rows


def main(argv=None):
    """``python3 -m asv_benchmarks.bench_jit [--ew] [--alone [--rounds N]] [workload ...]``: time/jit-time ratios
    (min of interleaved repeats; ``--alone``: each mode in its own process, min of N (3) alternating rounds) and,
    for the memory-bound workloads, the jitted GB/s as a fraction of copy bandwidth.  ``--ew`` adds
    ``nee-jit-ew`` (elementwise fusion only)."""
    args = list(argv if argv is not None else sys.argv[1:])
    modes = MODES
    if "--ew" in args:   # also the jit with elementwise fusion only
        args.remove("--ew")
        modes = MODES + ("nee-jit-ew",)
    alone = "--alone" in args
    if alone:
        args.remove("--alone")
    rounds = 3
    if "--rounds" in args:
        i = args.index("--rounds")
        rounds = int(args[i + 1])
        del args[i:i + 2]
    names = args or list(WORKLOADS)
    copy = W.machine_copy_bandwidth(repeats=5, methods=("np.copyto", "threaded np.copyto"))["best"]
    print(f"parallel copy bandwidth: {copy:.1f} GB/s")
    table = (lambda n, m: alone_table(n, m, rounds=rounds)) if alone else interleaved_table
    for name, times in table(names, modes):
        base = times["nee-jit"]
        cells = "  ".join(f"{m} {t * 1e3:8.3f} ms ({t / base:5.2f}x)" if t else f"{m} n/a" for m, t in times.items())
        frac = f"  [{W.gbps(_bytes(name), base) / copy:.2f}x copy BW]" if name in ("gelu_affine", "layer_norm",
                                                                               "softmax") else ""
        print(f"{name:<12} {cells}{frac}", flush=True)


if __name__ == "__main__":
    main()
