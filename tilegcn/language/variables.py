"""One-element register variables (`T.alloc_var`, `T.alloc_local((1,), ...)`, `T.alloc_fragment((1,), dtype,
"local")`) whose int value is used as an index: a tile start (`A[pid_m * block_M, 0]` with `pid_m = v[0] // 4`), a
T.Parallel element index, a device loop bound (`T.Pipelined(end[0] - start[0])`).

TileLang binds `pid_m = v[0] // 4` where Python runs the line (a LetStmt): the value is the variable's at that
point, whatever the program assigns to it later. tilegcn reads it at the same point: each read `v[0]` outside
T.Parallel notes where in the program it stands, and when an index needs its value, a LetIndex op (ops/let.py) is
inserted right there, reading the variable into an SGPR that the index math names. Other index math on it is
SymPy, as on block ids and loop variables: `//` and `%` floor (as TVM's floordiv / floormod, and the element ops).
"""
from __future__ import annotations

import sympy

from .. import ops
from ..errors import CompileError, user_location
from ..ir import nodes as N
from ..ir.printer import print_expr
from .tracer import current

# element functions with an index (SymPy) meaning, on ints
_INDEX_MATH = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "neg": lambda a: -a,
    "floordiv": lambda a, b: sympy.floor(a / b),
    "mod": sympy.Mod,
    "min": sympy.Min,
    "max": sympy.Max,
}


def is_variable(buffer: N.Buffer) -> bool:
    return buffer.scope == N.FRAGMENT and buffer.numel == 1


def note_read(ref: N.ElemRef) -> None:
    """Remember where the program reads the variable `ref` names: the body being traced and the statement before."""
    tracer = current()
    if tracer.bodies:
        body = tracer.body()
        tracer.variable_reads[id(ref)] = [ref, body, body[-1] if body else None, None]


def variable_index(e: N.Expr, what: str) -> sympy.Expr:
    """The SymPy index of the int element expression `e` (block ids, loop variables, ints and variables)."""
    if N.value_kind(e) == N.FLOAT:
        raise CompileError(f"{what}: {print_expr(e)} is a float value; an "
                           "index is an int (an int32 variable, a block id, a loop variable): convert it with "
                           "T.cast(value, \"int32\")", location=user_location())
    return _index(e, what)


def _index(e: N.Expr, what: str):
    if isinstance(e, N.Const) and isinstance(e.value, int):
        return sympy.Integer(e.value)
    if isinstance(e, N.IndexValue):
        return sympy.sympify(e.expr)
    if isinstance(e, N.ScalarRef) and e.param.symbol is not None:
        return e.param.symbol
    if isinstance(e, N.ElemRef) and is_variable(e.buffer):
        return _read_symbol(e)
    if isinstance(e, N.Call) and e.fn in _INDEX_MATH:
        return _INDEX_MATH[e.fn](*(_index(a, what) for a in e.args))
    if isinstance(e, N.Cast) and e.dtype.is_int and N.value_kind(e.x) != N.FLOAT:
        return _index(e.x, what)
    raise CompileError(f"{what}: cannot make an index of {print_expr(e)}: an index is int math (+ - * // % "
                       "T.min T.max) on ints, block ids, loop variables and one-element int variables (v[0] of "
                       "T.alloc_var)", location=user_location())


def _read_symbol(ref: N.ElemRef) -> sympy.Symbol:
    """The symbol holding the variable's value where the program read it (one LetIndex per read)."""
    tracer = current()
    entry = tracer.variable_reads.get(id(ref))
    if entry is not None and entry[3] is not None:
        return entry[3]
    var = sympy.Symbol(tracer.unique_name(f"{ref.buffer.name}_value"), integer=True)
    let = ops.LetIndex(var, ref, loc=user_location())
    if entry is None:  # not read through BufferProxy (made by the compiler): read it here
        tracer.body().append(let)
        return var
    _, body, before, _ = entry
    at = 0 if before is None else next((i + 1 for i, s in enumerate(body) if s is before), None)
    if at is None:  # the statement it followed is gone from that body (no tracer step removes one today)
        raise CompileError(f"internal: the read of {ref.buffer.name}[0] lost its place in the program; please "
                           "report this kernel", location=user_location())
    body.insert(at, let)
    entry[3] = var
    return var
