"""tilegcn: a Python tile language lowered straight to AMDGCN assembly for AMD Instinct GPUs."""
__version__ = "0.1.0"

from . import errors  # noqa: E402
from .errors import (  # noqa: E402
    ArgumentError,
    CacheError,
    ExportError,
    CompileError,
    DeviceError,
    EmulatorError,
    HazardError,
    RaceError,
    ResourceError,
    TilegcnError,
    ToolchainError,
    UnsupportedArchError,
)
from .cache import CacheWarning  # noqa: E402
from .options import CompileOptions  # noqa: E402
from .jit import CompiledKernel, JITFunction, jit  # noqa: E402
from .autotune import Autotuner, Space, TuneError, autotune  # noqa: E402
from . import aot  # noqa: E402
from .aot import load  # noqa: E402  (ahead-of-time exports: `python -m tilegcn export`)


def cdiv(a: int, b: int) -> int:
    """`a / b` rounded up, for Python ints: the number of `b`-sized blocks that cover `a` (TileLang's
    `tilelang.cdiv`, for host-side grid arithmetic; in a tile program, `T.ceildiv`).

    Example:

    ```python
    assert tilegcn.cdiv(1000, 128) == 8   # 8 blocks of 128 cover 1000
    ```
    """
    return -(-a // b)


def __getattr__(name):
    # `tilegcn.language` on first use: it imports torch, which `python -m tilegcn cache ...` does not need.
    if name in ("language", "layout"):  # `tilegcn.layout` (make_swizzled_layout) imports the language
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "__version__", "jit", "JITFunction", "CompiledKernel", "CompileOptions", "autotune", "Autotuner", "Space", "TuneError",
    "language", "errors", "CacheWarning", "aot", "load", "cdiv",
    "TilegcnError", "ArgumentError", "CacheError", "CompileError", "DeviceError", "EmulatorError", "ExportError",
    "HazardError", "RaceError", "ResourceError", "ToolchainError", "UnsupportedArchError",
]
