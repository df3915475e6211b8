"""Verifier: structural rules of tile IR that later passes rely on, each failing with the user's line."""
from __future__ import annotations

import sympy

from ..errors import CompileError
from . import nodes as N


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
                           f"region at {list(r.starts)} of extent {list(r.extents)}", location=loc)


def _check_statement(s: N.Stmt, depth: int, seen_swizzle: list):
    if isinstance(s, N.Copy):
        _check_region_bounds(s.src, s.loc)
        _check_region_bounds(s.dst, s.loc)
        scopes = (s.src.buffer.scope, s.dst.buffer.scope)
        if scopes in ((N.SHARED, N.GLOBAL), (N.FRAGMENT, N.SHARED), (N.SHARED, N.SHARED)):
            raise CompileError(f"T.copy from {scopes[0]} to {scopes[1]} is not supported yet", location=s.loc)
    elif isinstance(s, N.Fill) and s.buffer.scope != N.FRAGMENT:
        raise CompileError(f"T.fill/T.clear of {s.buffer.scope} buffer {s.buffer.name} is not supported; "
                           "fill a fragment", location=s.loc)
    elif isinstance(s, N.ParallelStore):
        for e in N.walk_expr(s.value):
            if isinstance(e, N.ElemRef) and e.buffer.scope == N.SHARED:
                raise CompileError(f"reading shared buffer {e.buffer.name} inside T.Parallel is not "
                                   "supported; copy it to a fragment first", location=s.loc)
    elif isinstance(s, N.Swizzle):
        if depth:
            raise CompileError("T.use_swizzle must be at the top of the kernel body", location=s.loc)
        if seen_swizzle:
            raise CompileError("T.use_swizzle given twice", location=s.loc)
        if s.panel_size < 1 or s.num_xcds < 1:
            raise CompileError("T.use_swizzle panel_size and num_xcds must be positive", location=s.loc)
        seen_swizzle.append(s)
    elif isinstance(s, N.Loop):
        for inner in s.body:
            _check_statement(inner, depth + 1, seen_swizzle)


def verify(kernel: N.Kernel):
    seen_swizzle: list = []
    for s in kernel.body:
        _check_statement(s, 0, seen_swizzle)
