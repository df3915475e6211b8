"""Device loops: `T.serial` (and TileLang's alias `T.Serial`), never pipelined, and `device_loop`, which a `T.Pipelined`
with a bound only the device knows shares (the software pipeliner may rewrite that one)."""
from __future__ import annotations

import math

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


def device_loop(tracer, first, end, step: int, role: str, loc, num_stages: int = 1):
    """The body of a loop whose bounds only the device knows (a runtime scalar, a block id, index arithmetic on
    them): a DeviceLoop op; its variable counts first, first + step, ... while below end (maybe no trip);
    `num_stages`: T.Pipelined's (the pipeliner's to take or leave)."""
    var = sympy.Symbol(tracer.unique_name(f"s{len(list(N.walk(tracer.body())))}"), integer=True)  # nested: distinct
    body: list = []
    tracer.bodies.append(body)
    try:
        yield IndexProxy.of(var, role)
    finally:
        tracer.bodies.pop()
    tracer.record(ops.DeviceLoop(var, sympy.sympify(first), sympy.sympify(end), step, body, num_stages, loc=loc))


def Serial(start, stop=None, step=None):  # noqa: N802 - TileLang's spelling
    """TileLang's capitalised alias of `T.serial` (a tile-level loop).

    Example:

    ```python
    for k in T.Serial(T.ceildiv(N, blk_k)):
        T.copy(A[bx * blk_m, k * blk_k], A_local)
    ```
    """
    return serial(start, stop, step)


def Persistent(domain, wave_size, index, group_size=8):  # noqa: N802 - TileLang's spelling
    """`for bx, by in T.Persistent([m_blocks, n_blocks], sm_num, block_id):` a persistent-kernel loop over tiles:
    a grid of `wave_size` workgroups (`T.Kernel(sm_num)`) walks all `m_blocks * n_blocks` tiles, workgroup
    `block_id` taking tile `w * wave_size + block_id` on trip w, as TileLang's `T.Persistent` defines it.

    Tiles are ordered in groups of `group_size` along the last dimension (an L2-friendly order): tile t has last
    coordinate `(t // (group_size * m_blocks)) * group_size + t % group_size` and first `(t // group_size) %
    m_blocks` (for more dims, the middle ones in between, as TileLang's). A trip whose tile lies past the
    domain (the last wave, or a last group cut short) runs nothing. `domain` and `wave_size` are ints; the
    body may hold any tile statement (a pipelined K loop, `T.gemm`, copies).

    Example:

    ```python
    with T.Kernel(sm_num, threads=128) as block_id:
        for bx, by in T.Persistent([T.ceildiv(M, block_M), T.ceildiv(N, block_N)], sm_num, block_id):
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[bx * block_M, k * block_K], A_shared)
                T.copy(B[k * block_K, by * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[bx * block_M, by * block_N])
    ```
    """
    tracer = current()
    loc = user_location()
    if tracer.parallel is not None:
        raise CompileError("T.Persistent is not allowed inside T.Parallel", location=loc)
    if not isinstance(domain, (list, tuple)) or not domain:
        raise CompileError(f"T.Persistent(domain, ...): domain is a list of tile counts, got {domain!r}",
                           location=loc)
    dims = [_concrete(d, f"T.Persistent domain dimension {axis}") for axis, d in enumerate(domain)]
    waves_of = _concrete(wave_size, "the T.Persistent wave size")
    group = _concrete(group_size, "the T.Persistent group size")
    if any(d <= 0 for d in dims) or waves_of <= 0:
        raise CompileError(f"T.Persistent({dims}, {waves_of}, ...): tile counts and the wave size must be positive",
                           location=loc)
    last = dims[-1]
    group = max(1, min(group, last))
    grouped = [-(-last // group)] + dims[:-1] + [group]  # TileLang's grouped domain (src/ir.cc PersistentFor)
    padded = math.prod(grouped)
    waves = -(-padded // waves_of)
    position = IndexProxy(sympy.Integer(0)) + index  # checks index is an index expression (the block id)
    var = sympy.Symbol(tracer.unique_name(f"w{len(list(N.walk(tracer.body())))}"), integer=True, nonnegative=True)
    tile = var * waves_of + position.expr
    coords, rest = [None] * len(grouped), tile
    for axis in range(len(grouped) - 1, 0, -1):
        coords[axis] = sympy.Mod(rest, grouped[axis])
        rest = sympy.floor(rest / grouped[axis])
    coords[0] = rest
    last_coord = coords[0] * group + coords[-1]
    names = [IndexProxy(c, ("the T.Persistent tile coordinate",)) for c in coords[1:-1]]
    names.append(IndexProxy(last_coord, ("the T.Persistent tile coordinate",)))
    inside = N.Condition("and", (N.Condition("lt", (tile, sympy.Integer(padded))),
                                 N.Condition("lt", (last_coord, sympy.Integer(last)))))
    loop_body: list = []
    then_body: list = []
    tracer.bodies.extend([loop_body, then_body])
    try:
        yield names[0] if len(names) == 1 else tuple(names)
    finally:
        del tracer.bodies[-2:]
    loop_body.append(ops.If(inside, then_body, [], loc=loc))
    tracer.record(ops.Loop(var, waves, 1, loop_body, loc=loc))
