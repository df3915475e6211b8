"""`T.alloc_local` and `T.alloc_var`: TileLang's thread-private buffers, as tilegcn holds them.

In TileLang a local buffer is private to each thread. tilegcn has no per-thread index in the language: every
element of a register buffer is written by `T.Parallel`, `T.fill`, `T.copy` or a reduction, which give each
element one value whichever thread computes it. A local buffer is therefore a fragment (the layout pass chooses
which threads hold its elements, replicated where it is smaller than the workgroup), with the values TileLang's
thread-private copies would all hold.
"""
from __future__ import annotations

import numbers

import sympy

from .. import ops
from ..errors import CompileError, user_location
from ..ir import nodes as N
from .builtins import fill
from .proxies import BufferProxy, IndexProxy
from .tracer import current

_LOCAL_SCOPES = ("local", "local.var")


def alloc_local(shape, dtype, scope: str = "local"):
    """A small register buffer (TileLang's thread-private `local` scope): counters, per-row statistics, scalars.

    Held as a fragment: written by `T.Parallel`, `T.fill`, `T.copy` and reductions, read at the `T.Parallel`
    indices; see `tilegcn/language/local.py` for why that gives TileLang's values.

    Example:

    ```python
    row_sum = T.alloc_local((block_M,), "float32")
    T.clear(row_sum)
    ```
    """
    if scope not in _LOCAL_SCOPES:
        raise CompileError(f"T.alloc_local(scope={scope!r}): tilegcn holds local buffers in registers; leave scope "
                           "out (\"local\")", location=user_location())
    return current().alloc(N.FRAGMENT, shape, dtype, "local")


def alloc_var(dtype, *args, scope: str = "local.var", init=None):
    """A one-element register variable, `T.alloc_var(dtype, init=0)` (TileLang's `local.var`); address it as `v[0]`.

    `init` (also the second positional argument, as TileLang takes it) is a number known at compile time; without
    it the variable starts undefined, as in TileLang. A string second argument is TileLang's scope. Outside
    `T.Parallel`, `v[0]` reads it and `v[0] = ...` assigns it, and a device `if` / `while` may test it
    (`while v[0] < n:`; docs/language.md, "Control flow"). TileLang's spellings too: `v = value` assigns it,
    `while v < n:` tests it, and `cur = v` takes an int variable's value now, as an index for tile starts and loop
    bounds.

    Example:

    ```python
    total = T.alloc_var("float32", init=0.0)   # shape (1,), filled with 0.0
    while total[0] < 4.0:                      # a device loop on the variable
        total[0] = total[0] + 1.0
    ```

    TileLang's spelling (a persistent walk over tiles, as its AMD flash attention writes it):

    ```python
    bx = T.alloc_var(T.int32)
    bx = b_split                               # stores into bx
    while bx < num_tiles:
        cur = bx                               # bx's value now: an index
        T.copy(Q[cur * 64:(cur + 1) * 64, :], Q_shared)
        bx = cur + num_split
    ```
    """
    loc = user_location()
    if len(args) > 2:
        raise CompileError(f"T.alloc_var takes (dtype, init, scope); got {len(args) + 1} positional arguments",
                           location=loc)
    for arg in args:
        if isinstance(arg, str):
            scope = arg
        elif init is not None:
            raise CompileError("T.alloc_var: the initial value is given twice (positionally and as init=)",
                               location=loc)
        else:
            init = arg
    if scope not in _LOCAL_SCOPES:
        raise CompileError(f"T.alloc_var(scope={scope!r}): tilegcn holds variables in registers; leave scope out",
                           location=loc)
    if init is not None and (isinstance(init, bool) or not isinstance(init, numbers.Real)):
        raise CompileError(f"T.alloc_var init must be a number known at compile time, got {init!r}; assign other "
                           "values inside T.Parallel", location=loc)
    var = VarProxy(current().alloc(N.FRAGMENT, (1,), dtype, "var").buffer)
    if init is not None:
        fill(var, init)
    return var


class VarProxy(BufferProxy):
    """A T.alloc_var variable. Besides `v[0]`, TileLang's spellings: its name in a comparison or in arithmetic
    reads it (`while v < n:`; `v + 1`), assigning the name stores into it (`v = b_split`: flow.py's `assign`), and
    binding another name to it (`cur = v`) takes its value at that point (`snapshot`)."""

    is_var = True

    def snapshots(self) -> bool:
        """Whether reading it gives an index (`snapshot`): an int32 variable, outside T.Parallel."""
        return current().parallel is None and self.buffer.dtype.name == "int32"

    def _value(self):
        """The variable read now: an index symbol (an int32 variable outside T.Parallel: usable in tile starts and
        loop bounds), else its element expression."""
        return snapshot(self) if self.snapshots() else self[0]

    def __lt__(self, o): return self[0] < o
    def __le__(self, o): return self[0] <= o
    def __gt__(self, o): return self[0] > o
    def __ge__(self, o): return self[0] >= o
    def __add__(self, o): return self._value() + o
    def __radd__(self, o): return o + self._value()
    def __sub__(self, o): return self._value() - o
    def __rsub__(self, o): return o - self._value()
    def __mul__(self, o): return self._value() * o
    def __rmul__(self, o): return o * self._value()
    def __floordiv__(self, o): return self._value() // o
    def __rfloordiv__(self, o): return o // self._value()
    def __mod__(self, o): return self._value() % o
    def __rmod__(self, o): return o % self._value()
    __hash__ = BufferProxy.__hash__


def snapshot(var: VarProxy) -> IndexProxy:
    """The value int variable `var` holds now, as an index (a Let op: later assignments to `var` leave it as read)."""
    tracer = current()
    tracer.lets = getattr(tracer, "lets", 0) + 1
    symbol = sympy.Symbol(f"{var.buffer.name}_let{tracer.lets}", integer=True)
    tracer.record(ops.LetIndex(symbol, N.ElemRef(var.buffer, (sympy.Integer(0),)), loc=user_location()))
    return IndexProxy.of(symbol, f"the value of variable {var.buffer.name}")
