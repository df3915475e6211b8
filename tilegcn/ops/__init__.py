"""The tile ops: one module per statement kind, each its TileOp class (tilegcn/ir/ops.py) and its registration.

Importing this package registers every op; `tilegcn.ir.ops.REGISTRY` then maps op names to these classes.
Adding an op: docs/internals.md, "Adding a tile op".
"""
from .async_copy import AsyncCopy
from .atomic import Atomic, ParallelAtomic
from .branch import If
from .convert_layout import ConvertLayout
from .copy import Copy
from .device_loop import DeviceLoop, LoopExit
from .fill import Fill
from .gemm import Gemm
from .groups import CommitGroup, WaitGroup
from .let import LetIndex
from .loop import Loop
from .parallel import ParallelStore
from .reduce import Reduce
from .scan import Cumsum
from .swizzle import Swizzle
from .while_loop import While

__all__ = ["AsyncCopy", "Atomic", "CommitGroup", "ConvertLayout", "Copy", "Cumsum", "DeviceLoop", "Fill", "Gemm", "If",
           "LetIndex", "Loop", "LoopExit", "ParallelAtomic", "ParallelStore", "Reduce", "Swizzle", "WaitGroup", "While"]
