"""Tensor, dtypes, creation and views."""
from .dtypes import *  # noqa: F401,F403
from .tensor import Size, Tensor  # noqa: F401
