"""Tile IR: buffers, element expressions and statements recorded by the tracer.

Index expressions (region starts, loop variables, block ids, parallel indices) are SymPy
expressions over integer symbols. Element expressions (what T.Parallel computes) are the small
`Expr` tree below; they are evaluated in fp32 and rounded to the destination's dtype on store.
"""
from __future__ import annotations

from dataclasses import dataclass, field

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

class Expr:
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


# ---- statements --------------------------------------------------------------------------------

@dataclass(eq=False)
class Stmt:
    loc: str | None = field(default=None, kw_only=True)


@dataclass(eq=False)
class Copy(Stmt):
    src: Region
    dst: Region


@dataclass(eq=False)
class Fill(Stmt):
    buffer: Buffer
    value: float


@dataclass(eq=False)
class ParallelStore(Stmt):
    """for idx in Parallel(extents): buffer[idx] = value."""

    extents: tuple
    indices: tuple  # SymPy symbols, one per extent
    buffer: Buffer
    value: Expr


@dataclass(eq=False)
class Gemm(Stmt):
    A: Buffer
    B: Buffer
    C: Buffer
    transpose_A: bool = False
    transpose_B: bool = False
    stage: int = 0  # pipeline stage of A and B read (passes/pipeline.py)


@dataclass(eq=False)
class AsyncCopy(Copy):
    """A global -> shared copy into pipeline stage `stage` of its shared buffer; in flight until a WaitGroup
    retires its group (passes/pipeline.py)."""

    stage: int = 0


@dataclass(eq=False)
class CommitGroup(Stmt):
    """Close the group of async copies issued since the previous commit."""


@dataclass(eq=False)
class WaitGroup(Stmt):
    """Wait until at most `pending` committed groups (the newest) are in flight; the copies of the older groups
    are then visible to every thread of the workgroup."""

    pending: int


@dataclass(eq=False)
class Loop(Stmt):
    var: sympy.Symbol
    extent: int
    num_stages: int
    body: list


@dataclass(eq=False)
class Swizzle(Stmt):
    """Remap workgroup ids: chunk workgroups per XCD, then rasterise in panels of `panel_size`."""

    panel_size: int
    num_xcds: int


@dataclass(eq=False)
class Kernel:
    name: str
    params: list
    buffers: list  # every buffer: global (params), shared, fragment
    grid: tuple  # (gx, gy, gz) workgroups
    block: tuple  # (threads, 1, 1)
    block_ids: tuple  # SymPy symbols (bx, by, bz)
    body: list
    loc: str | None = None

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]


def walk(stmts):
    """Every statement, loops' bodies included, in program order."""
    for s in stmts:
        yield s
        if isinstance(s, Loop):
            yield from walk(s.body)


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
