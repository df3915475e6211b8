"""`T.alloc_local` and `T.alloc_var`: TileLang's thread-private buffers, as tilegcn holds them.

In TileLang a local buffer is private to each thread. tilegcn has no per-thread index in the language: every
element of a register buffer is written by `T.Parallel`, `T.fill`, `T.copy` or a reduction, which give each
element one value whichever thread computes it. A local buffer is therefore a fragment (the layout pass chooses
which threads hold its elements, replicated where it is smaller than the workgroup), with the values TileLang's
thread-private copies would all hold.
"""
from __future__ import annotations

import numbers

from ..errors import CompileError, user_location
from ..ir import nodes as N
from .builtins import fill
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
    (`while v[0] < n:`; docs/language.md, "Control flow").

    Example:

    ```python
    total = T.alloc_var("float32", init=0.0)   # shape (1,), filled with 0.0
    while total[0] < 4.0:                      # a device loop on the variable
        total[0] = total[0] + 1.0
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
    var = current().alloc(N.FRAGMENT, (1,), dtype, "var")
    if init is not None:
        fill(var, init)
    return var
