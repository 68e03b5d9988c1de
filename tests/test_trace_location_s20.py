"""Session 20: a trace error names the user's line even when the user's code lives under a folder named
``neetorch`` (a project or a clone of this repository: the fresh-clone check ran from /tmp/fc20/neetorch/tests and
the errors named pytest's frame).  Frames are neetorch's only under the package's own folder."""
import importlib.util

import pytest

import neetorch as nee


def test_location_under_a_folder_named_neetorch(tmp_path):
    d = tmp_path / "neetorch" / "proj"
    d.mkdir(parents=True)
    f = d / "user_code_s20.py"
    f.write_text("def f(x):\n    y = x * 2\n    return y.item()\n")
    spec = importlib.util.spec_from_file_location("user_code_s20", f)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(RuntimeError, match=r"user_code_s20\.py:3 \(\"return y\.item\(\)\"\)"):
        nee.jit(mod.f)(nee.ones(1))
