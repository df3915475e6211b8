"""CompileOptions: everything besides the tile IR that decides the code a compile makes.

It lives apart from tilegcn/compiler.py (which re-exports it) because `@tilegcn.jit`, the cache and the
compile workers need the options on every call, and importing the compiler imports the lowering passes
(torch, SymPy: ~2 s); a cache hit must never pay that.
"""
from __future__ import annotations

import dataclasses

from .amdgcn.arch import COPY_MODES, get_arch
from .amdgcn.schedule import INTERLEAVE, SCHEDULES
from .errors import ArgumentError


@dataclasses.dataclass(frozen=True)
class CompileOptions:
    """The options of one compile; every field is part of the disk-cache key.

    `arch`: the target ("gfx942", "gfx950"); None only on a `tilegcn.jit` function that resolves it per call.
    `schedule`: "interleave" (default) list-schedules the code around MFMAs; "plain" keeps the emitted order
    (to measure what scheduling buys). `copy`: how a pipelined K loop copies GEMM operands into LDS: "auto"
    (the arch's choice), "lds_dma" or "registers" (see `tilegcn.jit`). `fp_contract`: True (default, as HIP's
    -ffp-contract=fast and Triton's enable_fp_fusion) contracts an fp32 `a * b + c` in element code into one FMA
    (one rounding); False rounds the product and the sum apart (`tilegcn.jit(compile_flags=["-ffp-contract=off"])`).

    Example:

    ```python
    from tilegcn import CompileOptions

    options = CompileOptions(arch="gfx942", schedule="plain")
    print(options.with_arch("gfx950"))   # the same options for another target
    ```
    """

    arch: str | None = None
    schedule: str = INTERLEAVE
    copy: str = "auto"
    fp_contract: bool = True

    def __post_init__(self):
        if self.arch is not None:
            object.__setattr__(self, "arch", get_arch(self.arch).name)  # UnsupportedArchError names the choices
        _check_choice("schedule", self.schedule, SCHEDULES)
        _check_choice("copy", self.copy, COPY_MODES)
        _check_choice("fp_contract", self.fp_contract, (True, False))

    @classmethod
    def of(cls, options) -> "CompileOptions":
        """`options` itself, or the default options for an arch name (`lower(kernel, "gfx942")`)."""
        return options if isinstance(options, CompileOptions) else cls(arch=options)

    def with_arch(self, arch) -> "CompileOptions":
        return dataclasses.replace(self, arch=arch)

    def key_fields(self) -> dict:
        """The fields as JSON values, for the cache key and meta.json."""
        return dataclasses.asdict(self)

    @classmethod
    def jit_options(cls) -> tuple:
        """The fields `tilegcn.jit(...)` takes as decorator options (the arch may also be given per call)."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.name != "arch")


def _check_choice(name: str, value, choices) -> None:
    if value not in choices:
        raise ArgumentError(f"tilegcn: unknown {name}={value!r}; choose one of " + ", ".join(map(repr, choices)))
