"""Cold start: ``import neetorch`` and the README demo (examples/demo.py), each in a fresh process."""
from . import _workloads as W


def timeraw_import_neetorch():
    # asv runs this code in a fresh interpreter and times it
    return "import neetorch"


timeraw_import_neetorch.timeout = 120


def track_import_seconds():
    """Seconds spent inside ``import neetorch`` in a fresh subprocess (target < 1 s)."""
    return W.import_time_subprocess()[0]


track_import_seconds.unit = "s"


class Demo:
    unit = "s"
    timeout = 600

    def setup(self):
        self.path = W.demo_path()  # NotImplementedError (skip) until examples/demo.py exists

    def track_demo_seconds(self):
        """Wall seconds of ``python examples/demo.py`` in a second fresh process (warm caches; target < 2 s)."""
        return W.demo_run_seconds(warm=not W.TINY)
