"""Workgroup remap for T.use_swizzle. Placeholder."""
from __future__ import annotations

from ..errors import CompileError
from ..ir import nodes as N


def lower_swizzle(ctx):
    for s in ctx.kernel.body:
        if isinstance(s, N.Swizzle):
            raise CompileError("T.use_swizzle is not lowered yet", location=s.loc)
