"""Memoised pure SymPy queries for the address lowering.

SymPy recomputes `free_symbols` by walking the expression tree on every access, and `sympify` runs its
dispatch even on SymPy objects; the lowering asks both about the same address expressions for every ds_read,
ds_write and store of a kernel. SymPy expressions are immutable and cache their hash, so these memoise on the
expression itself.
"""
from __future__ import annotations

import functools

import sympy

MEMO_SIZE = 1 << 16  # entries per memoised function: far more than the distinct expressions of a kernel
_memos: list = []


def memo(fn):
    """`fn` memoised on its (hashable) arguments; `clear()` empties every such memo."""
    cached = functools.lru_cache(maxsize=MEMO_SIZE)(fn)
    _memos.append(cached)
    return cached


def clear():
    """Forget every memoised result (bench/compile_time.py measures a first lowering in a process with it)."""
    for cached in _memos:
        cached.cache_clear()


def sym(expr) -> sympy.Basic:
    """`expr` as a SymPy object (sympify only what is not one already)."""
    return expr if isinstance(expr, sympy.Basic) else sympy.sympify(expr)


@memo
def free_symbols(expr: sympy.Basic) -> frozenset:
    """expr.free_symbols, memoised on every subexpression (address expressions share most of theirs)."""
    if expr.is_Symbol:
        return frozenset((expr,))
    if expr.is_Atom:
        return frozenset()
    return frozenset().union(*map(free_symbols, expr.args))
