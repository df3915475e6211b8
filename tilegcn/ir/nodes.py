"""Tile IR: buffers, element expressions and statements recorded by the tracer.

Index expressions (region starts, loop variables, block ids, parallel indices) are SymPy
expressions over integer symbols. Element expressions (what T.Parallel computes) are the small
`Expr` tree below; they are evaluated in fp32, or in 32-bit ints where every operand is an integer (value_kind),
and converted to the destination's dtype on store (T.cast's rules: docs/dtypes.md).
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


@dataclass(eq=False)
class GatherRegion(Region):
    """The elements of a shared buffer a T.Parallel statement reads at computed indices (`B[i, j // 2]`), as a box
    of the loop's `extents`: box element (k0, k1, ...) is buffer element `index` with `loop` symbol d set to kd
    (passes/memspace.py stages such a read through a copy of this region into a fragment)."""

    index: tuple = ()  # SymPy, in the `loop` symbols
    loop: tuple = ()

    def element(self, coords) -> tuple:
        """The buffer index of box element `coords`."""
        subs = dict(zip(self.loop, coords))
        return tuple(sympy.sympify(k).xreplace(subs) for k in self.index)


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
    if isinstance(x, numbers.Integral):
        return Const(int(x))  # an int literal takes the other operand's domain (value_kind: WEAK)
    return Const(float(x))


# The domain an element expression is evaluated in (value_kind): FLOAT (fp32), INT (32-bit ints: every integer
# dtype, indices, int scalars) or WEAK (only int literals: it takes the domain of what it meets, a float operand or
# the destination, as Triton's and C's literals do).
FLOAT, INT, WEAK = "float", "int", "weak"


def value_kind(e: "Expr") -> str:
    """FLOAT, INT or WEAK for a value expression (C's usual arithmetic conversions: a float operand makes it FLOAT)."""
    if isinstance(e, Const):
        return WEAK if isinstance(e.value, int) else FLOAT
    if isinstance(e, ScalarRef):
        return INT if e.param.dtype.is_int else FLOAT
    if isinstance(e, ElemRef):
        return INT if e.buffer.dtype.is_int else FLOAT
    if isinstance(e, IndexValue):
        return INT
    if isinstance(e, Cast):
        return INT if e.dtype.is_int else FLOAT
    row = elemfn.fn(e.fn)
    if row.domain == elemfn.FLOAT:
        return FLOAT
    return join_kinds(value_kind(a) for a, k in zip(e.args, row.operand_kinds) if k == elemfn.VALUE)


def join_kinds(kinds) -> str:
    kinds = set(kinds)
    return FLOAT if FLOAT in kinds else INT if INT in kinds else WEAK


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
    if row.domain == elemfn.INT:
        for operand in operands:
            if value_kind(operand) == FLOAT:
                raise CompileError(_not_integer(operand, row))
    return Call(name, operands)


def _not_integer(operand: "Expr", row) -> str:
    what = f"`{row.operator.rstrip('x')}`" if row.operator else f"T.{row.name}"
    return (f"{what} takes integer operands (int8 .. int64 elements, indices, int literals), got the float "
            f"{_describe(operand)}: convert it first with T.cast({_describe(operand)}, \"int32\") (which truncates "
            "toward zero), or write float math with + - * / and the T. functions")


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

    # conditions combine with & | ~ (Python's `and` / `or` / `not` would ask for a truth value: refused); on
    # integer values & | ^ ~ << >> // % are the integer operations (ir/elemfn.py's INT rows)
    def __and__(self, o): return apply("and" if is_condition(self) else "bitand", self, o)
    def __rand__(self, o): return apply("and" if is_condition(self) else "bitand", o, self)
    def __or__(self, o): return apply("or" if is_condition(self) else "bitor", self, o)
    def __ror__(self, o): return apply("or" if is_condition(self) else "bitor", o, self)
    def __invert__(self): return apply("not" if is_condition(self) else "bitnot", self)
    def __xor__(self, o): return apply("bitxor", self, o)
    def __rxor__(self, o): return apply("bitxor", o, self)
    def __lshift__(self, o): return apply("shl", self, o)
    def __rlshift__(self, o): return apply("shl", o, self)
    def __rshift__(self, o): return apply("shr", self, o)
    def __rrshift__(self, o): return apply("shr", o, self)
    def __floordiv__(self, o): return apply("floordiv", self, o)
    def __rfloordiv__(self, o): return apply("floordiv", o, self)
    def __mod__(self, o): return apply("mod", self, o)
    def __rmod__(self, o): return apply("mod", o, self)

    def astype(self, dtype) -> "Cast":
        """TileLang's `x.astype(dtype)`: T.cast(x, dtype)."""
        from .types import as_dtype

        return Cast(as_dtype(dtype), self)

    __hash__ = object.__hash__  # identity: expressions may key dicts; `==` builds a comparison

    def __bool__(self):
        if getattr(self, "refusal", None):
            raise CompileError(self.refusal)
        raise CompileError(f"a truth test (if/and/or/not) on an element expression ({_describe(self)}) would be "
                           "decided once, while tracing, not per element: a comparison has no trace-time truth "
                           "value; pick per element with T.if_then_else(cond, a, b)")


@dataclass(eq=False)
class Const(Expr):
    value: float  # or an int (an int literal: value_kind WEAK)


@dataclass(eq=False)
class ScalarRef(Expr):
    param: Param


@dataclass(eq=False)
class ElemRef(Expr):
    """buffer[index...] inside T.Parallel; fragments are indexed by the parallel variables."""

    buffer: Buffer
    index: tuple  # SymPy expressions

    @property
    def dtype(self) -> DType:
        """The element's dtype (TVM's `val.dtype`, as TileLang's helpers check it)."""
        return self.buffer.dtype


@dataclass(eq=False)
class IndexValue(Expr):
    """An integer index expression (SymPy: T.Parallel indices, block ids, loop variables, runtime int scalars) as an
    element value: a 32-bit int (converted to fp32 where it meets a float)."""

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


@dataclass(eq=False)
class Reinterpret(Cast):
    """The bits of integer x (as wide as `dtype`) read as float `dtype` (T.reinterpret), held as fp32."""


@dataclass(eq=False)
class Condition:
    """A truth value only the device knows, the test of an If / While statement: `op` is a comparison ("eq", "ne",
    "lt", "le", "gt", "ge") of two integer index expressions (SymPy: block ids, loop variables, runtime int scalars),
    "element": an element condition (a Call, `v[0] < n`) on one-element register variables every thread holds
    alike, or "and" / "or" / "not" of conditions. Nothing here is decided while tracing: SymPy would answer `bx == 0`
    structurally (False), so the comparison is kept as written and evaluated by the device."""

    op: str
    args: tuple

    COMPARISONS = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}

    def text(self) -> str:
        """The condition as the user wrote it, for kernel.ir and messages."""
        if self.op == "element":
            return print_condition(self.args[0])
        if self.op in self.COMPARISONS:
            return f"{self.args[0]} {self.COMPARISONS[self.op]} {self.args[1]}"
        if self.op == "not":
            return f"not ({self.args[0].text()})"
        return f" {self.op} ".join(f"({a.text()})" for a in self.args)

    def reads_elements(self) -> bool:
        """Whether the condition reads a variable (an "element" part), which may change between trips."""
        return self.op == "element" or (self.op not in self.COMPARISONS and any(a.reads_elements() for a in self.args))

    def symbols(self) -> set:
        if self.op == "element":
            return set()
        if self.op in self.COMPARISONS:
            return set().union(*(sympy.sympify(a).free_symbols for a in self.args))
        return set().union(*(a.symbols() for a in self.args))


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


@dataclass(eq=False)
class Program:
    """A tile program of several `T.Kernel` blocks: one Kernel per block, launched in order on each call (each sees
    the global writes of those before). `params` are the program's (what a call passes, allocates or returns); each
    kernel takes the subsequence of them it uses."""
    name: str
    params: list
    kernels: list  # Kernel per T.Kernel block, in program order
    loc: str | None = None

    @property
    def body(self) -> list:
        """Every kernel's statements, in launch order (what the program reads and writes)."""
        return [s for k in self.kernels for s in k.body]

    @property
    def buffers(self) -> list:
        return [p.buffer for p in self.params if p.kind == "tensor"] + [
            b for k in self.kernels for b in k.buffers if b.scope != GLOBAL]

    @property
    def grid(self) -> tuple:
        """The first launch's grid (meta.json's top level; `kernels` there has each launch's)."""
        return self.kernels[0].grid

    @property
    def block(self) -> tuple:
        return self.kernels[0].block


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
