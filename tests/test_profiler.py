"""nee.profile: kernel launches (eager and fused), compile events, table and Chrome trace export."""
import json

import neetorch as nee
from neetorch.ops.elementwise import gelu


def test_profile_records_eager_and_fused_kernels(tmp_path):
    f = nee.jit(lambda x, w: gelu(x * w + 1))
    x, w = nee.randn(300, 40), nee.randn(40)
    f(x, w)  # specialize outside the profile
    with nee.profile() as prof:
        f(x, w)
        (x + 1).exp()
        (x + 1).exp()
    names = [e.name for e in prof.kernels()]
    assert names == ["fused[mul+add+gelu]", "add", "exp", "add", "exp"]
    fused = prof.kernels()[0]
    assert fused.nbytes == 300 * 40 * 4 * 2 + 40 * 4 + 4 and fused.dur > 0
    assert any(e.kind == "cache_hit" for e in prof.events)
    table = prof.table()
    assert "fused[mul+add+gelu]" in table and "GB/s" in table.splitlines()[0]
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(path)
    evs = json.loads(path.read_text())["traceEvents"]
    assert {e["name"] for e in evs} >= {"fused[mul+add+gelu]", "add", "exp"}
    assert all(e["ph"] == "X" and e["dur"] > 0 for e in evs)


def test_nothing_recorded_outside_profile():
    x = nee.randn(10)
    with nee.profile() as prof:
        pass
    (x * 2).exp()
    assert prof.events == []



def test_debug_level_2_prints_each_kernel():
    import os
    import subprocess
    import sys
    env = dict(os.environ, NEE_DEBUG="2")
    code = "import neetorch as nee; x = nee.ones(5); print((x + x).tolist())"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[2.0, 2.0, 2.0, 2.0, 2.0]"
    assert any(line.startswith("[neetorch] add") and " cpu " in line for line in r.stderr.splitlines()), r.stderr
