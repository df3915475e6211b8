"""Render the final instruction list, kernel descriptor and metadata (templates/kernel.s.tmpl)."""
from __future__ import annotations

import functools
import string
from importlib import resources

from .. import __version__
from .abi import metadata_args

VCC_SGPRS = 2  # VCC is allocated after the addressable SGPRs the descriptor counts


@functools.lru_cache(maxsize=None)
def _template() -> string.Template:
    return string.Template(resources.files("tilegcn.templates").joinpath("kernel.s.tmpl").read_text())


def render(kernel, arch, abi, insts, lds_bytes: int, counts: dict) -> str:
    """`counts`: the register fields (regalloc.register_counts) of the allocated `insts`."""
    grid = "x".join(map(str, kernel.grid))
    block = "x".join(map(str, kernel.block))
    return _template().substitute(
        version=__version__, name=kernel.name, arch=arch.name, source=kernel.loc or "?", grid=grid,
        block=block, lds_bytes=lds_bytes, kernarg_size=abi.kernarg_size, threads=kernel.threads,
        sgpr_count=counts["sgprs"] + VCC_SGPRS, args=metadata_args(abi.args),
        body="\n".join([i.text() for i in insts]), **counts)
