"""A copy of a statement, expression or region with some index symbols replaced: loop unrolling at trace time
(language/unroll.py) and the software pipeliner's unrolled steps (passes/pipelining.py) both rename a loop
variable in every statement of a loop body, whatever the op."""
from __future__ import annotations

import copy
import dataclasses

import sympy

from . import nodes as N
from .ops import TileOp

SUBSTITUTED = (TileOp, N.Expr, N.Region, N.Condition)  # what holds index expressions (Buffers and Params do not)


def substituted(obj, mapping: dict):
    """A copy of `obj` (a statement, expression or region, with what it nests) with the symbols of `mapping`
    replaced; buffers, parameters and other leaves are shared."""
    if isinstance(obj, sympy.Basic):
        return obj.xreplace(mapping)
    if isinstance(obj, list):
        return [substituted(x, mapping) for x in obj]
    if isinstance(obj, tuple):
        return tuple(substituted(x, mapping) for x in obj)
    if isinstance(obj, SUBSTITUTED):
        new = copy.copy(obj)
        for f in dataclasses.fields(obj):
            object.__setattr__(new, f.name, substituted(getattr(obj, f.name), mapping))
        return new
    return obj
