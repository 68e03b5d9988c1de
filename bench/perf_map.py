#!/usr/bin/env python3
"""Name neetorch's LLVM kernels in ``perf`` profiles: a JIT symbol map (/tmp/perf-PID.map) of every kernel compiled in
this process, with its true size read from llvm_render's cached object (``nm``), which ``perf report`` reads.

    python3 bench/perf_map.py MODEL [--threads 2] [--seconds 10]
    # then, while it runs:  perf record -e cpu-clock -F 2000 -p PID -o perf.data -- sleep 6
    #                       perf report -i perf.data --sort sym --stdio      (or --sort pid,sym: per thread)

Runs the ONNX model's session in a loop after writing the map (prints its pid and "ready" first).  From other code:
``from perf_map import write_map; write_map()`` after the kernels are compiled (a model's first runs).  Numba's
functions are not named (llvm_render's kernels only).  Without the true sizes, a kernel's range runs on to the next
known address and takes other code's samples with it.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_HDR = 40       # llvm_render's cached objects: a sha1 hex header, then the ELF object


def write_map(pid: int | None = None) -> str:
    """Write /tmp/perf-PID.map for the kernels compiled so far in this process; returns its path."""
    from neetorch.devices.cpu import llvm_render as LR
    d = LR.cache_dir()
    rows = []
    for key, addr in list(LR._addresses.items()):
        size = 0x40
        sym = "nee_" + key.rsplit("_", 1)[-1]
        try:
            with open(os.path.join(d, f"{key}.o"), "rb") as f:
                obj = f.read()[_HDR:]
            with tempfile.NamedTemporaryFile(suffix=".o") as t:
                t.write(obj)
                t.flush()
                out = subprocess.run(["nm", "-S", t.name], capture_output=True, text=True).stdout
            for line in out.splitlines():
                parts = line.split()
                if len(parts) == 4 and parts[3] == sym:
                    size = int(parts[1], 16)
        except (OSError, ValueError):
            pass
        rows.append((addr, size, key))
    path = f"/tmp/perf-{pid or os.getpid()}.map"
    with open(path, "w") as f:
        for addr, size, key in sorted(rows):
            f.write(f"{addr:x} {size:x} {key}\n")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    os.environ["NEE_NUM_THREADS"] = str(args.threads)
    sys.path.insert(0, ROOT)
    from asv_benchmarks import _onnx_models as M
    spec = M.spec(args.model)
    fn = M.run_fn(M.nee_session(spec.model, args.threads), spec.feed)
    for _ in range(5):
        fn()
    print(f"pid {os.getpid()} map {write_map()} ready", flush=True)
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < args.seconds:
        fn()
        n += 1
    print(f"{n} runs, {(time.perf_counter() - t0) / n * 1e3:.2f} ms per run")


if __name__ == "__main__":
    main()
