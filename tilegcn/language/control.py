"""Device loops that are not pipelined: `T.serial` (and TileLang's alias `T.Serial`)."""
from __future__ import annotations

import sympy

from .. import ops
from ..errors import CompileError, user_location
from ..ir import nodes as N
from .builtins import _concrete, _integer
from .proxies import IndexProxy
from .tracer import current


def _trip_count(start: int, stop: int, step: int) -> int:
    return max(0, -(-(stop - start) // step))


def serial(start, stop=None, step=None):
    """`for k in T.serial(n):` a device loop over k = 0..n-1, one trip after the other; `T.serial(start, stop)`
    runs k = start..stop-1 and `T.serial(start, stop, step)` every step-th of them, as TileLang and `range` read it.

    The body is recorded once and may hold any tile statement (copies, `T.Parallel`, reductions, fills, `T.gemm`);
    it runs on the device `trip count` times with k as a device index (use it in tile starts, `A[bx, k * 64]`).
    Bounds are ints (shapes, constants) or values only the device knows (a runtime int scalar, a block id, index
    arithmetic such as `T.min(T.ceildiv(K - k0, 32), n)`): those are evaluated once before the first trip, and an
    empty range runs no trip. The loop is never pipelined (that is `T.Pipelined`). A Python `range` loop with int
    bounds is unrolled while tracing; with a device bound it is this loop.

    Example:

    ```python
    for k in T.serial(T.ceildiv(N, block_N)):
        T.copy(X[bx, k * block_N], x)
        for i, j in T.Parallel(1, block_N):
            x[i, j] = x[i, j] * 2.0
        T.copy(x, Y[bx, k * block_N])
    ```
    """
    tracer = current()
    loc = user_location()
    if tracer.parallel is not None:
        raise CompileError("T.serial is not allowed inside T.Parallel: put the T.Parallel loop inside the serial "
                           "loop", location=loc)
    first, end = (0, start) if stop is None else (start, stop)
    step = 1 if step is None else _concrete(step, "the T.serial step")
    if step <= 0:
        raise CompileError(f"T.serial step {step}: must be positive (count a descending index as "
                           "`stop - 1 - k` over an ascending loop)", location=loc)
    first = _integer(first, "the T.serial start")
    end = _integer(end, "the T.serial stop" if stop is not None else "the T.serial trip count")
    if not (isinstance(first, int) and isinstance(end, int)):
        yield from device_loop(tracer, first, end, step, "the T.serial loop variable", loc)
        return
    trips = _trip_count(first, end, step)
    var = sympy.Symbol(f"s{len(list(N.walk(tracer.body())))}", integer=True, nonnegative=True)
    body: list = []
    tracer.bodies.append(body)
    try:
        yield IndexProxy.of(var * step + first, "the T.serial loop variable")
    finally:
        tracer.bodies.pop()
    if trips > 0:  # an empty range runs nothing, as Python's range
        tracer.record(ops.Loop(var, trips, 1, body, loc=loc))


def device_loop(tracer, first, end, step: int, role: str, loc):
    """The body of a loop whose bounds only the device knows (a runtime scalar, a block id, index arithmetic on
    them): a DeviceLoop op; its variable counts first, first + step, ... while below end (maybe no trip)."""
    var = sympy.Symbol(f"s{len(list(N.walk(tracer.body())))}", integer=True)
    body: list = []
    tracer.bodies.append(body)
    try:
        yield IndexProxy.of(var, role)
    finally:
        tracer.bodies.pop()
    tracer.record(ops.DeviceLoop(var, sympy.sympify(first), sympy.sympify(end), step, body, loc=loc))


def Serial(start, stop=None, step=None):  # noqa: N802 - TileLang's spelling
    """TileLang's capitalised alias of `T.serial` (a tile-level loop).

    Example:

    ```python
    for k in T.Serial(T.ceildiv(N, blk_k)):
        T.copy(A[bx * blk_m, k * blk_k], A_local)
    ```
    """
    return serial(start, stop, step)
