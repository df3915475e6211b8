"""Index expressions with the T.Parallel indices replaced by a layout's coordinates, built around a SymPy fault.

SymPy 1.14 evaluates `Mod(a * Mod(x, n), q)` wrongly when the product holds a Mod: it keeps the inner Mod in both
of its factor lists and multiplies them, so `Mod(4*Mod(t, 4), 3)` becomes `Mod(Mod(t, 4)**2, 3)` (t = 2: 1, not
8 % 3 = 2). That is what `j % 3` inside T.Parallel meets when j's coordinate is `4*Mod(tid, 4) + c`. `substitute`
builds a Mod of an expression holding a Mod unevaluated (its value is its definition; the lowering reads any Mod
as x - floor(x / q) * q).
"""
from __future__ import annotations

import sympy


def _holds_mod(x) -> bool:
    return isinstance(x, sympy.Basic) and x.has(sympy.Mod)


def substitute(expr, mapping: dict):
    """`expr.xreplace(mapping)` (mapping: symbol -> expression), except that a Mod whose new first argument holds a
    Mod is left unevaluated: SymPy's own reductions (`Mod(4*x + 3, 3)` -> `Mod(4*x, 3)`) reach the faulty product
    case from sums too (see the module docstring)."""
    expr = sympy.sympify(expr)
    if expr in mapping:
        return mapping[expr]
    if not expr.args or not (expr.free_symbols & mapping.keys()):
        return expr
    args = [substitute(a, mapping) for a in expr.args]
    if isinstance(expr, sympy.Mod) and _holds_mod(args[0]):
        # expanded now, so that a later sympy.expand finds nothing to change in it and keeps the node as it is
        return sympy.Mod(sympy.expand(args[0]), args[1], evaluate=False)
    return expr.func(*args)
