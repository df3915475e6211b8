"""Unrolling, at the end of tracing, of a loop with a compile-time trip count whose variable indexes a fragment.

A fragment lives in registers, and a register is named in the instruction: `lse_local[k, i]` or
`T.copy(lse_local[k, :], row)` with k a device loop variable would need the register chosen at run time. TileLang's
flash-decoding combine kernel reads its log-sum-exp fragment so, one split per trip of `T.Pipelined(num_split)`;
CUDA unrolls such a loop. Here too: the loop (T.Pipelined or T.serial with int bounds) becomes one copy of its
body per trip with the variable replaced by that trip's value, so every fragment index is a constant again. Loops
whose variable indexes no fragment are left as they are (byte-identical code).
"""
from __future__ import annotations

import dataclasses

import sympy

from ..ir import nodes as N
from ..ir.substitute import SUBSTITUTED as _SUBSTITUTED
from ..ir.substitute import substituted as _substituted


def unroll_fragment_loops(body: list) -> list:
    """`body` with each constant-trip loop whose variable indexes a fragment unrolled (nested loops first)."""
    out = []
    for s in body:
        if s.bodies():
            s = s.with_bodies(tuple(unroll_fragment_loops(b) for b in s.bodies()))
        if s.opname == "for" and _indexes_a_fragment(s.body, s.var):  # a T.Pipelined / T.serial Loop op
            out.extend(_substituted(stmt, {s.var: sympy.Integer(trip)}) for trip in range(s.extent)
                       for stmt in s.body)
        else:
            out.append(s)
    return out


def _indexes_a_fragment(body: list, var) -> bool:
    return any(var in sympy.sympify(i).free_symbols for ref in _fragment_refs(body) for i in ref)


def _fragment_refs(obj):
    """The index (ElemRef) or starts (Region) of every fragment access in `obj`, nested bodies included."""
    if isinstance(obj, N.ElemRef) and obj.buffer.scope == N.FRAGMENT:
        yield tuple(obj.index)
    elif isinstance(obj, N.Region) and obj.buffer.scope == N.FRAGMENT:
        yield tuple(obj.starts)
    if isinstance(obj, (list, tuple)):
        for x in obj:
            yield from _fragment_refs(x)
    elif isinstance(obj, _SUBSTITUTED):
        for f in dataclasses.fields(obj):
            yield from _fragment_refs(getattr(obj, f.name))
