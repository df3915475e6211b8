"""Tile IR: nodes, printer, verifier."""
from .nodes import Kernel
from .printer import print_kernel
from .types import DType, TensorSpec, as_dtype

__all__ = ["Kernel", "print_kernel", "DType", "TensorSpec", "as_dtype"]
