"""``python3 -m neetorch.compare model.onnx --devices cpu,opencl [--dtype float16]`` (see ``main``)."""
import sys

from . import main

sys.exit(main())
