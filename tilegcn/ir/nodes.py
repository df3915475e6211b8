"""Tile IR: buffers, element expressions and statements recorded by the tracer.

Index expressions (region starts, loop variables, block ids, parallel indices) are SymPy
expressions over integer symbols. Element expressions (what T.Parallel computes) are the small
`Expr` tree below; they are evaluated in fp32 and rounded to the destination's dtype on store.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import sympy

from ..errors import CompileError
from . import elemfn
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
    # a dynamic size (T.dynamic): the launch passes tensor parameter `size_of[0]`.shape[size_of[1]] // size_of[2]
    size_of: tuple | None = None


@dataclass(eq=False)
class Region:
    """A box of a buffer: `starts` (SymPy) and `extents` (ints). Missing leading dims have extent 1."""

    buffer: Buffer
    starts: tuple
    extents: tuple


# ---- element expressions ---------------------------------------------------------------------

_ELEMENT_OPS = "+ - * /, comparisons with T.if_then_else, and the T. math functions (docs/reference.md)"
_INSTEAD = {
    "**": "multiply (x * x) for small integer powers; T.exp2 / T.exp for exponentials",
    "%": f"the tile language has {_ELEMENT_OPS}",
    "//": "divide with `/` (element math is floating point)",
    "abs()": "write T.abs(x)",
    "comparison": "compare elements inside `for i, j in T.Parallel(...)` (x[i, j] > 0.0) and pick with "
                  "T.if_then_else(cond, a, b)",
    "truth value": "an element comparison has no value while the program is traced (each element decides on the "
                   "device); pick per element with T.if_then_else(cond, a, b), or T.max / T.min",
    "conversion": "elements have no value while the program is traced (math.* functions call float() on "
                  "their argument); use T.exp, T.log, T.sqrt, T.tanh, ... (docs/reference.md)",
    "bitwise": f"element math is floating point: {_ELEMENT_OPS}",
}


def _refuse(subject: str, what: str, kind: str):
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
        name = getattr(func, "__name__", str(func))
        raise CompileError(f"torch.{name} cannot run on tile elements while the program is traced: write it "
                           f"with {_ELEMENT_OPS} (e.g. torch.sigmoid(x) is T.sigmoid(x), torch.exp(x) is T.exp(x))")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        raise CompileError(f"numpy.{ufunc.__name__} cannot run on tile elements: write it with {_ELEMENT_OPS} "
                           "(e.g. numpy.exp(x) is T.exp(x))")


def lift(x) -> "Expr":
    """An element expression from an expression, a Python number or an object that converts itself (the tracer's
    proxies define `__element_expr__`: a runtime scalar becomes a ScalarRef, an index an IndexValue inside
    T.Parallel), so that the IR needs nothing from the language layer."""
    if isinstance(x, Expr):
        return x
    convert = getattr(type(x), "__element_expr__", None)
    if convert is not None:
        return convert(x)
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise CompileError(f"cannot use {x!r} ({type(x).__name__}) in an element expression")
    return Const(float(x))


def apply(name: str, *args) -> "Call":
    """The element function `name` (a row of ir/elemfn.py) applied to `args` (lifted): a CompileError names a
    condition where a value belongs and the other way round."""
    row = elemfn.fn(name)
    operands = tuple(lift(a) for a in args)
    if len(operands) != row.arity:
        raise CompileError(f"{name} takes {row.arity} operand(s), got {len(operands)}")
    for operand, kind in zip(operands, row.operand_kinds):
        wants_condition = kind == elemfn.CONDITION
        if is_condition(operand) != wants_condition:
            raise CompileError(_misplaced(operand, name, wants_condition))
    return Call(name, operands)


def is_condition(e: "Expr") -> bool:
    return isinstance(e, Call) and elemfn.fn(e.fn).result == elemfn.CONDITION


def _misplaced(operand: "Expr", name: str, wants_condition: bool) -> str:
    operator = elemfn.fn(name).operator
    if wants_condition and operator:
        return (f"`{operator}` combines comparisons (conditions), got the value {_describe(operand)}: compare it "
                f"first ({_describe(operand)} != 0.0); on numbers, `{operator}` is not in the tile language")
    if wants_condition:
        return (f"T.{name} takes a comparison as its condition (e.g. x[i, j] > 0.0), got the value "
                f"{_describe(operand)}; compare it: T.{name}({_describe(operand)} != 0.0, a, b)")
    return (f"the comparison {_describe(operand)} is a condition, not a value, and cannot be an operand of {name}: "
            "pick a value with T.if_then_else(cond, a, b)")


def _describe(e: "Expr") -> str:
    from .printer import print_expr

    return print_condition(e) if is_condition(e) else print_expr(e)


def print_condition(e: "Call") -> str:
    """A condition as the user wrote it (`x[pi, pj] > 0.0`, `(a) & (b)`), for messages."""
    from .printer import print_expr

    operator = elemfn.fn(e.fn).operator
    texts = [f"({print_condition(x)})" if is_condition(x) else print_expr(x) for x in e.args]
    return f"{operator}{texts[0]}" if len(texts) == 1 else f" {operator} ".join(texts)


class Expr(RefusesPythonOperators):
    """Base of element expressions; operators build the tree (the tracer's proxies forward here). A comparison
    builds a condition (an Expr too) for T.if_then_else; its truth value is refused (decided on the device)."""

    def __add__(self, o): return apply("add", self, o)
    def __radd__(self, o): return apply("add", o, self)
    def __sub__(self, o): return apply("sub", self, o)
    def __rsub__(self, o): return apply("sub", o, self)
    def __mul__(self, o): return apply("mul", self, o)
    def __rmul__(self, o): return apply("mul", o, self)
    def __truediv__(self, o): return apply("div", self, o)
    def __rtruediv__(self, o): return apply("div", o, self)
    def __neg__(self): return apply("neg", self)  # a sign flip: -(+0.0) is -0.0, as in torch
    def __pos__(self): return self
    def __lt__(self, o): return apply("lt", self, o)
    def __le__(self, o): return apply("le", self, o)
    def __gt__(self, o): return apply("gt", self, o)
    def __ge__(self, o): return apply("ge", self, o)
    def __eq__(self, o): return apply("eq", self, o)
    def __ne__(self, o): return apply("ne", self, o)

    # conditions combine with & | ~ (Python's `and` / `or` / `not` would ask for a truth value: refused)
    def __and__(self, o): return apply("and", self, o) if is_condition(self) else super().__and__(o)
    def __rand__(self, o): return apply("and", o, self) if is_condition(self) else super().__rand__(o)
    def __or__(self, o): return apply("or", self, o) if is_condition(self) else super().__or__(o)
    def __ror__(self, o): return apply("or", o, self) if is_condition(self) else super().__ror__(o)
    def __invert__(self): return apply("not", self) if is_condition(self) else super().__invert__()

    __hash__ = object.__hash__  # identity: expressions may key dicts; `==` builds a comparison

    def __bool__(self):
        if getattr(self, "refusal", None):
            raise CompileError(self.refusal)
        raise CompileError(f"a truth test (if/and/or/not) on an element expression ({_describe(self)}) would be "
                           "decided once, while tracing, not per element: a comparison has no trace-time truth "
                           "value; pick per element with T.if_then_else(cond, a, b)")


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
class IndexValue(Expr):
    """An integer index expression (SymPy: T.Parallel indices, block ids, loop variables, runtime int scalars) as an
    element value: fp32, exact below 2^24."""

    expr: object


@dataclass(eq=False)
class Call(Expr):
    """An element function of ir/elemfn.py (`fn` names its row) applied to `args`. `refusal`: the message for a truth
    test of this condition, where its operands have a more specific one (a comparison of indices)."""

    fn: str
    args: tuple
    refusal: str | None = None


@dataclass(eq=False)
class Cast(Expr):
    """x rounded to `dtype` (and read back as fp32)."""

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
    if isinstance(e, Call):
        return tuple(e.args)
    if isinstance(e, Cast):
        return (e.x,)
    return ()


def walk_expr(e: Expr):
    yield e
    for c in expr_children(e):
        yield from walk_expr(c)
