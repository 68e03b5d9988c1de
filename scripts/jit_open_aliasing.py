#!/usr/bin/env python3
"""Jit-vs-eager discrepancies found in session 24 (see its closing note). Each section prints the eager result and the
jitted one; they agree since session 25: f_float / f_detach (writes through an alias), f_crash (a fill then an in-place op
on an input) fixed in session 24; ``p.data = new`` through views of a captured weight (a retrace) and aliased inputs (the
call runs eagerly) in session 25 (tests/test_jit_aliasing_s25.py).

    python3 scripts/jit_open_aliasing.py
"""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# ---- repro_alias_float_detach
# x.float() on a float32 tensor and x.detach() return tensors sharing x's storage (eager, as torch).
# An in-place write through them is lost under nee.jit: later reads of x use the old values
# (.detach(): the caller's input is not even written back).
import neetorch as nee

def f_float(x):
    y = x * 1
    y.float().fill_(1.5)     # y.float() is y itself for float32
    return y + 1             # eager: 2.5 everywhere

def f_detach(x):
    x.detach().mul_(2)       # writes the caller's x
    return x * 1             # eager: 2*x

for f in (f_float, f_detach):
    jf = nee.jit(f)
    xe, xj = nee.ones(3), nee.ones(3)
    print(f"{f.__name__}: eager {f(xe).tolist()} jit {jf(xj).tolist()} | input after: eager {xe.tolist()} jit {xj.tolist()}")

# and a variant that crashes with a misleading message (no captured tensor is involved):
def f_crash(x):
    x.float().fill_(1.5)
    x.exp_()
    return x + 1
xe = nee.ones(3); print("f_crash eager:", f_crash(xe).tolist())
try:
    print(nee.jit(f_crash)(nee.ones(3)))
except Exception as e:
    print("f_crash jit raised", type(e).__name__, e)

# ---- repro_linear_data_replace
# Default (non-frozen) jit of a module with nn.Linear: replacing a parameter's storage with
# `p.data = new_tensor` (same shape/dtype) is not seen by the compiled function: it keeps using the
# guarded row-major copy of the old weight. Eager (and the docs: "`.data =` ... bumps the counter",
# "captured tensors are read live") see the new weight.
import neetorch as nee
import neetorch.nn as nn

nee.manual_seed(0)
m = nn.Linear(4, 3, bias=False)
jm = nee.jit(m)
x = nee.ones(1, 4)
print("before  : eager", m(x).tolist(), " jit", jm(x).tolist())
m.weight.data = m.weight.data * 2
print("after .data = 2*W: eager", m(x).tolist(), " jit", jm(x).tolist())
m.weight.data = nee.zeros(3, 4)
print("after .data = 0  : eager", m(x).tolist(), " jit", jm(x).tolist())

# the same without modules: any view of a captured tensor (W[0], W.t()) keeps the old storage
W = nee.ones(3, 4)
f = lambda x: x * W[0]
jf = nee.jit(f)
x = nee.ones(4)
jf(x)
W.data = W.data * 5
print("x * W[0] after W.data = 5*W: eager", f(x).tolist(), " jit", jf(x).tolist())

# ---- repro_aliased_inputs
# A jitted function whose tensor inputs alias each other (the same tensor passed twice, overlapping
# views of one buffer) or alias captured state, and which writes one of them in place: later reads of
# the other alias see the old values (the trace assumes distinct inputs; no alias guard / error).
import neetorch as nee

def f(a, b):
    a.add_(1)
    return a + b

t, te = nee.ones(3), nee.ones(3)
print("same tensor twice : eager", f(te, te).tolist(), " jit", nee.jit(f)(t, t).tolist())

def g(a, b):
    a.mul_(2)
    return b * 1
base, basee = nee.arange(6.), nee.arange(6.)
print("overlapping views : eager", g(basee[:4], basee[2:]).tolist(), " jit", nee.jit(g)(base[:4], base[2:]).tolist())

C, Ce = nee.zeros(3), nee.zeros(3)
def h(x):
    C.add_(1)
    return x * 1
def he(x):
    Ce.add_(1)
    return x * 1
jh = nee.jit(h)
for i in range(2):
    print(f"input is a view of a captured tensor the function writes (call {i}): eager", he(Ce[:2]).tolist(), " jit", jh(C[:2]).tolist())
