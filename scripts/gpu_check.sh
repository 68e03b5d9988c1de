#!/usr/bin/env bash
# Everything that needs an NVIDIA GPU, in one go, with the results recorded.
#
#   scripts/gpu_check.sh [OUTDIR]        # default: bench/results/gpu_check_<UTC timestamp>
#
# Steps (each logged; the script goes on after a failing step and exits non-zero at the end):
#   0. environment: nvidia-smi, nvcc, python, the installed neetorch[cuda] (cupy-cuda12x), nee.devices()
#   1. tests/test_cuda.py, test_cuda_nn.py   the CUDA backend: nvcc compile of every kernel + the GPU half
#   2. tests/test_cross_device.py    the op suite and the jit functions on every available device (cuda included)
#   3. tests/test_jit.py             the JIT suite (CPU; guards the shared renderer code)
#   4. bench/cuda_bench.py           fused chain vs copy bandwidth, matmul vs cupy @, launch overhead
#   5. the ONNX conformance subset (tests/test_onnx_conformance.py's selection) on the cuda device,
#      through neetorch.onnx.backend.prepare(model, "CUDA"), with the fallback report
#      (NEE_ONNX_FULL=1: every case)
# Environment: STEPS="devices test_cuda ..." runs only the named steps (default: all); STEP_TIMEOUT=S stops
# a step after S seconds (a hang must not eat a short GPU lease); XDIST=N runs the device suites on N workers;
# SKIP_INSTALL=1 never installs (default: install only when CuPy is missing; FORCE_INSTALL=1
# always); PYTEST_ARGS adds pytest options, BENCH_ARGS bench options (--quick); PYTHON picks the interpreter.
set -u
cd "$(dirname "$0")/.."
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=${1:-bench/results/gpu_check_$STAMP}
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
PY=${PYTHON:-python3}
FAILED=()

say() { echo "$*" | tee -a "$LOG"; }
step() {  # step NAME CMD...
    local name=$1; shift
    if [ -n "${STEPS:-}" ] && [[ " $STEPS " != *" $name "* ]]; then return; fi
    if [ "${STEP_TIMEOUT:-0}" != "0" ]; then set -- timeout -k 10 "$STEP_TIMEOUT" "$@"; fi
    say ""
    say "=== $name: $* ($(date -u +%H:%M:%S))"
    local t0=$SECONDS
    "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    tail -n 40 "$OUT/$name.log" >> "$LOG"
    say "=== $name: exit $rc in $((SECONDS - t0)) s (full output: $OUT/$name.log)"
    [ $rc -eq 0 ] || FAILED+=("$name")
}

say "gpu_check $STAMP  git $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo '+dirty')"
{ nvidia-smi || true; nvcc --version 2>/dev/null | tail -2 || true; $PY --version; } >> "$LOG" 2>&1

# install the cuda extra unless CuPy is already importable (a GPU box may have no network); without
# network, at least register this checkout's entry points (the cuda backend is found through them)
if [ "${SKIP_INSTALL:-0}" != "1" ]; then
    if [ "${FORCE_INSTALL:-0}" = "1" ] || ! $PY -c "import cupy" 2>/dev/null; then
        step install $PY -m pip install -e ".[cuda,test,onnx]"
    elif ! $PY -c "from importlib.metadata import entry_points as e
assert 'cuda' in {x.name for x in e(group='neetorch.devices')}" 2>/dev/null; then
        step install_entry_points $PY -m pip install --no-deps --no-build-isolation -e .
    fi
fi
step devices $PY -c "
import neetorch as nee
for d in nee.devices(): print(d)
import cupy; print('cupy', cupy.__version__, 'CUDA runtime', cupy.cuda.runtime.runtimeGetVersion(),
                   'driver', cupy.cuda.runtime.driverGetVersion())
assert any(d.type == 'cuda' and d.available for d in nee.devices()), 'the cuda backend sees no device'
"
step test_cuda $PY -m pytest -v -rs ${XDIST:+-n $XDIST} tests/test_cuda.py tests/test_cuda_nn.py ${PYTEST_ARGS:-}
step test_cross_device $PY -m pytest -q -rs ${XDIST:+-n $XDIST} tests/test_cross_device.py -k "cuda or fallback" ${PYTEST_ARGS:-}
step test_jit $PY -m pytest -q tests/test_jit.py ${PYTEST_ARGS:-}
step cuda_bench $PY bench/cuda_bench.py --json "$OUT/cuda_bench.json" ${BENCH_ARGS:-}
step onnx_on_cuda $PY - <<'EOF'
import os, sys, time
sys.path.insert(0, "tests")
import neetorch as nee
import onnx_conformance_harness as H
from onnx_expected_failures import EXPECTED_FAILURES
import test_onnx_conformance as T          # its selection (NEE_ONNX_FULL=1: everything)
from neetorch.onnx import backend

def run_cuda(case, jit=False):
    if case.model is None or case.data_sets is None:
        raise FileNotFoundError(f"{case.name}: model or data not available locally")
    rep = backend.prepare(case.model, "CUDA", jit=jit)
    for ins, outs in case.data_sets:
        H.assert_similar(outs, list(rep.run(list(ins))), case.rtol, case.atol)

bad = []
nodes = T._select(H.node_cases())
t0 = time.time()
res = H.evaluate(nodes, run_cuda, jit=False)
print(f"ONNX node cases on cuda ({time.time() - t0:.1f}s):")
print(H.summarize(nodes, res, None))
bad += [(c.name, res[c.name]) for c in nodes if res[c.name] is not None and c.name not in EXPECTED_FAILURES]
for cat in H.CATEGORIES:
    cases = [c for c in T._select(H.model_cases(cat)) if c.model is not None and c.data_sets is not None]
    if not cases:
        continue
    r = H.evaluate(cases, run_cuda, jit=True)
    print(f"ONNX model tests on cuda [{cat}]: {sum(v is None for v in r.values())}/{len(cases)} pass")
    bad += [(c.name, r[c.name]) for c in cases if r[c.name] is not None and c.name not in EXPECTED_FAILURES]
print("\nfallbacks (ops the cuda device did not run):")
print(nee.fallback_report())
for name, why in bad:
    print(f"FAIL {name}: {why}")
sys.exit(1 if bad else 0)
EOF

say ""
if [ ${#FAILED[@]} -eq 0 ]; then
    say "gpu_check: all steps passed; results in $OUT"
    exit 0
fi
say "gpu_check: FAILED steps: ${FAILED[*]}; results in $OUT"
exit 1
