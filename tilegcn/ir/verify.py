"""Verifier: structural rules of tile IR that later passes rely on, each failing with the user's line.

The rules of each statement are its op's `verify` (tilegcn/ops/); this module walks the kernel and gives them
their scope."""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy

from ..errors import CompileError
from . import nodes as N


@dataclass
class VerifyScope:
    """What an op's `verify` may need beyond itself: how deep in nested bodies it is (0: the kernel body), and
    facts recorded once per kernel (`seen`: e.g. the T.use_swizzle already met), shared by every scope."""

    depth: int = 0
    seen: dict = field(default_factory=dict)

    def nested(self) -> VerifyScope:
        return VerifyScope(self.depth + 1, self.seen)

    def check_region_bounds(self, r: N.Region, loc):
        """A shared or fragment region is indexed with constants inside the buffer; a fragment is copied whole."""
        _check_region_bounds(r, loc)


def _check_region_bounds(r: N.Region, loc):
    if r.buffer.scope == N.GLOBAL:
        return
    for d, (start, extent, size) in enumerate(zip(r.starts, r.extents, r.buffer.shape)):
        start = sympy.sympify(start)
        if not start.is_Integer:
            raise CompileError(f"{r.buffer.name}: {r.buffer.scope} buffers are indexed with constants, "
                               f"got {start}", location=loc)
        if int(start) < 0 or int(start) + extent > size:
            raise CompileError(f"{r.buffer.name}: region [{start}, {int(start) + extent}) on dim {d} is "
                               f"outside its shape {r.buffer.shape}", location=loc)
    if r.buffer.scope == N.FRAGMENT and (any(s != 0 for s in r.starts) or tuple(r.extents) != r.buffer.shape):
        raise CompileError(f"{r.buffer.name}: T.copy takes a whole fragment ({list(r.buffer.shape)}), not the "
                           f"region at {list(r.starts)} of extent {list(r.extents)}: copy it whole into a shared "
                           "buffer of its shape and copy the region of that", location=loc)


def _check_statement(s, scope: VerifyScope):
    s.verify(scope)
    for body in s.bodies():
        inner = scope.nested()
        for stmt in body:
            _check_statement(stmt, inner)


def verify(kernel: N.Kernel):
    scope = VerifyScope()
    for s in kernel.body:
        _check_statement(s, scope)
