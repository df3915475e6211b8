"""Tile IR: buffers, element expressions and statements recorded by the tracer.

Index expressions (region starts, loop variables, block ids, parallel indices) are SymPy
expressions over integer symbols. Element expressions (what T.Parallel computes) are the small
`Expr` tree below; they are evaluated in fp32 and rounded to the destination's dtype on store.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from .types import DType, TensorSpec

GLOBAL, SHARED, FRAGMENT = "global", "shared", "fragment"


@dataclass(eq=False)
class Buffer:
    name: str
    scope: str  # GLOBAL, SHARED or FRAGMENT
    dtype: DType
    shape: tuple
    loc: str | None = None
    spec: TensorSpec | None = None  # global buffers only
    param_index: int | None = None  # global buffers only

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def strides(self) -> tuple:
        if self.spec is not None:
            return self.spec.strides
        out, acc = [], 1
        for s in reversed(self.shape):
            out.append(acc)
            acc *= s
        return tuple(reversed(out))

    def __repr__(self):
        return f"{self.name}"


@dataclass(eq=False)
class Param:
    name: str
    kind: str  # "tensor" or "scalar"
    dtype: DType
    buffer: Buffer | None = None  # tensors
    symbol: sympy.Symbol | None = None  # scalars: the runtime value, usable in index math


@dataclass(eq=False)
class Region:
    """A box of a buffer: `starts` (SymPy) and `extents` (ints). Missing leading dims have extent 1."""

    buffer: Buffer
    starts: tuple
    extents: tuple


# ---- element expressions ---------------------------------------------------------------------

_ELEMENT_OPS = "+ - * /, T.max, T.min, T.exp, T.exp2, T.abs, T.cast"
_INSTEAD = {
    "**": "multiply (x * x) for small integer powers; T.exp2 / T.exp for exponentials",
    "%": f"the tile language has {_ELEMENT_OPS}",
    "//": "divide with `/` (element math is floating point)",
    "abs()": "write T.abs(x)",
    "comparison": "elements have no value while the program is traced, so Python cannot branch on them; "
                  "write relu/clamp as T.max(x, 0.0) / T.min(x, hi)",
    "truth value": "elements have no value while the program is traced; use T.max / T.min instead of "
                   "`if`, `and`, `or`",
    "conversion": "elements have no value while the program is traced (math.* functions call float() on "
                  "their argument); use T.exp, T.exp2, T.abs, T.max, T.min",
    "bitwise": f"element math is floating point: {_ELEMENT_OPS}",
}


def _refuse(subject: str, what: str, kind: str):
    from ..errors import CompileError

    raise CompileError(f"{what} of {subject} is not in the tile language: {_INSTEAD[kind]}")


class RefusesPythonOperators:
    """Python operators that have no tile-language meaning raise a CompileError that says what to write
    instead (rather than a TypeError naming an internal class). `_subject()` names the operand."""

    def _subject(self) -> str:
        return "a tile element"

    def __pow__(self, o): _refuse(self._subject(), "`**`", "**")
    def __rpow__(self, o): _refuse(self._subject(), "`**`", "**")
    def __mod__(self, o): _refuse(self._subject(), "`%`", "%")
    def __rmod__(self, o): _refuse(self._subject(), "`%`", "%")
    def __floordiv__(self, o): _refuse(self._subject(), "`//`", "//")
    def __rfloordiv__(self, o): _refuse(self._subject(), "`//`", "//")
    def __divmod__(self, o): _refuse(self._subject(), "divmod()", "//")
    def __abs__(self): _refuse(self._subject(), "abs()", "abs()")
    def __lt__(self, o): _refuse(self._subject(), "comparison `<`", "comparison")
    def __le__(self, o): _refuse(self._subject(), "comparison `<=`", "comparison")
    def __gt__(self, o): _refuse(self._subject(), "comparison `>`", "comparison")
    def __ge__(self, o): _refuse(self._subject(), "comparison `>=`", "comparison")
    def __bool__(self): _refuse(self._subject(), "the truth value (in a Python `if`, `and`, `or`)", "truth value")
    def __float__(self): _refuse(self._subject(), "float()", "conversion")
    def __int__(self): _refuse(self._subject(), "int()", "conversion")
    def __index__(self): _refuse(self._subject(), "int()", "conversion")
    def __complex__(self): _refuse(self._subject(), "complex()", "conversion")
    def __round__(self, n=None): _refuse(self._subject(), "round()", "conversion")
    def __trunc__(self): _refuse(self._subject(), "math.trunc()", "conversion")
    def __floor__(self): _refuse(self._subject(), "math.floor()", "conversion")
    def __ceil__(self): _refuse(self._subject(), "math.ceil()", "conversion")
    def __and__(self, o): _refuse(self._subject(), "`&`", "bitwise")
    def __rand__(self, o): _refuse(self._subject(), "`&`", "bitwise")
    def __or__(self, o): _refuse(self._subject(), "`|`", "bitwise")
    def __ror__(self, o): _refuse(self._subject(), "`|`", "bitwise")
    def __xor__(self, o): _refuse(self._subject(), "`^`", "bitwise")
    def __rxor__(self, o): _refuse(self._subject(), "`^`", "bitwise")
    def __lshift__(self, o): _refuse(self._subject(), "`<<`", "bitwise")
    def __rshift__(self, o): _refuse(self._subject(), "`>>`", "bitwise")
    def __invert__(self): _refuse(self._subject(), "`~`", "bitwise")
    def __matmul__(self, o): _refuse(self._subject(), "`@`", "bitwise")
    def __rmatmul__(self, o): _refuse(self._subject(), "`@`", "bitwise")

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        from ..errors import CompileError

        name = getattr(func, "__name__", str(func))
        raise CompileError(f"torch.{name} cannot run on tile elements while the program is traced: write it "
                           f"with {_ELEMENT_OPS} (e.g. sigmoid(x) = 1 / (1 + T.exp(-x)))")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        from ..errors import CompileError

        raise CompileError(f"numpy.{ufunc.__name__} cannot run on tile elements: write it with {_ELEMENT_OPS}")


class Expr(RefusesPythonOperators):
    """Base of element expressions; operators build the tree (the tracer's proxies forward here)."""

    def _wrap(self, other):
        from ..language.proxies import as_expr

        return as_expr(other)

    def __add__(self, o): return BinOp("add", self, self._wrap(o))
    def __radd__(self, o): return BinOp("add", self._wrap(o), self)
    def __sub__(self, o): return BinOp("sub", self, self._wrap(o))
    def __rsub__(self, o): return BinOp("sub", self._wrap(o), self)
    def __mul__(self, o): return BinOp("mul", self, self._wrap(o))
    def __rmul__(self, o): return BinOp("mul", self._wrap(o), self)
    def __truediv__(self, o): return BinOp("div", self, self._wrap(o))
    def __rtruediv__(self, o): return BinOp("div", self._wrap(o), self)
    def __neg__(self): return Call("neg", (self,))  # a sign flip: -(+0.0) is -0.0, as in torch

    # Python would answer these at trace time (identity, truthiness), silently: refuse instead.
    __hash__ = object.__hash__

    def __eq__(self, o): _refuse_python_logic("==")
    def __ne__(self, o): _refuse_python_logic("!=")
    def __bool__(self): _refuse_python_logic("a truth test (if/and/or/not)")


def _refuse_python_logic(what: str):
    from ..errors import CompileError

    raise CompileError(f"{what} on an element expression would be decided once, while tracing, not per "
                       "element: the tile language has no comparisons; write the arithmetic (T.max, T.min, "
                       "T.abs) that gives the value you want")


@dataclass(eq=False)
class Const(Expr):
    value: float


@dataclass(eq=False)
class ScalarRef(Expr):
    param: Param


@dataclass(eq=False)
class ElemRef(Expr):
    """buffer[index...] inside T.Parallel; fragments are indexed by the parallel variables."""

    buffer: Buffer
    index: tuple  # SymPy expressions


@dataclass(eq=False)
class BinOp(Expr):
    op: str  # add sub mul div max min
    a: Expr
    b: Expr


@dataclass(eq=False)
class Call(Expr):
    fn: str  # exp2 exp abs neg
    args: tuple


@dataclass(eq=False)
class Cast(Expr):
    dtype: DType
    x: Expr


# ---- statements are tile ops: ir/ops.py (protocol, registry), tilegcn/ops/ (one file per op) ---------------

@dataclass(eq=False)
class Kernel:
    name: str
    params: list
    buffers: list  # every buffer: global (params), shared, fragment
    grid: tuple  # (gx, gy, gz) workgroups
    block: tuple  # (threads, 1, 1)
    block_ids: tuple  # SymPy symbols (bx, by, bz)
    body: list  # tile ops (ir/ops.py)
    loc: str | None = None

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]


def walk(stmts):
    """Every statement, nested bodies (a loop's) included, in program order."""
    for s in stmts:
        yield s
        for body in s.bodies():
            yield from walk(body)


def expr_children(e: Expr):
    if isinstance(e, BinOp):
        return (e.a, e.b)
    if isinstance(e, Call):
        return tuple(e.args)
    if isinstance(e, Cast):
        return (e.x,)
    return ()


def walk_expr(e: Expr):
    yield e
    for c in expr_children(e):
        yield from walk_expr(c)
