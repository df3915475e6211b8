"""The `T.` surface: what a tile program calls. Each function records tile IR on the current tracer."""
from __future__ import annotations

import builtins as _py
import contextlib
import dataclasses
import math
import numbers

import sympy

from .. import ops
from ..amdgcn.arch import HSA_MAX_GRID_WORKITEMS, get_arch
from ..errors import CompileError, user_location
from ..ir import nodes as N
from ..ir.types import TensorSpec, float32
from .proxies import BufferProxy, IndexProxy, RegionRef, ScalarProxy
from .tracer import KernelBlock, TensorAnnotation, current

Tensor = TensorAnnotation


def ceildiv(a, b):
    """ceil(a / b) for ints (an int) or index expressions (a SymPy expression); b must be positive.

    Example: a grid that covers a ragged size.

    ```python
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=256) as (bx, by):
        ...
    ```
    """
    if isinstance(b, numbers.Integral) and not isinstance(b, bool) and b <= 0:
        raise CompileError(f"T.ceildiv({a}, {b}): " + ("division by zero" if b == 0 else
                           "the divisor must be positive") + " (check the block-size constants)")
    a_index = _integer(a, "T.ceildiv numerator")
    b_index = _integer(b, "T.ceildiv divisor")
    if isinstance(a_index, int) and isinstance(b_index, int):
        return -(-a_index // b_index)
    roles = tuple(role for x in (a, b) for role in _roles(x))
    return IndexProxy(sympy.ceiling(sympy.sympify(a_index) / b_index), roles)


def _roles(x) -> tuple:
    """What the device values in `x` are (for messages about an expression built from it)."""
    if isinstance(x, IndexProxy):
        return x.roles
    if isinstance(x, ScalarProxy):
        return (x.describe(),)
    return ()


def _integer(value, what: str):
    """An int, or a SymPy index expression (block ids, loop variables, runtime int scalars)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, IndexProxy):
        value = value.expr
    if isinstance(value, sympy.Expr) and value.is_integer:
        return int(value) if value.is_Integer else value
    if isinstance(value, ScalarProxy) and value.param.symbol is not None:
        return value.param.symbol
    if isinstance(value, N.Expr) and not N.is_condition(value):  # int math on one-element variables
        from .variables import variable_index

        return variable_index(value, what)
    raise CompileError(f"{what} must be an integer, got {value!r} ({type(value).__name__}){_runtime_scalar_hint(value)}")


def _runtime_scalar_hint(value) -> str:
    """When `value` depends on a runtime scalar: how to make that parameter a compile-time constant instead (an int
    passed to a positional parameter without default is a runtime int32, as in TileLang's prim_func)."""
    symbols = getattr(value, "free_symbols", set())
    if isinstance(value, IndexProxy):
        symbols = value.expr.free_symbols
    if isinstance(value, ScalarProxy):
        symbols = {value.param.symbol}
    names = sorted(p.name for p in current().params if p.kind == "scalar" and p.symbol in symbols)
    if not names:
        return ""
    name = names[0]
    return (f"; {name} is a runtime scalar (a positional parameter without default receives an int as a runtime "
            f"int32): to make it a compile-time constant give it a default (`{name}=64`) or make it keyword-only "
            f"(after `*`)")


def _concrete(value, what: str) -> int:
    """An int known while tracing: not a float, not a block id, loop variable or runtime scalar."""
    value = _integer(value, what)
    if isinstance(value, int):
        return value
    dynamic = _dynamic_names(value.free_symbols)
    if dynamic:
        raise CompileError(f"{what} must be known at compile time, got {_show_sizes(value)}, which depends on the "
                           f"dynamic size {dynamic[0]} (T.dynamic: known only at launch): use a compile-time block "
                           f"size instead (a constant such as block_M) and cover {dynamic[0]} with the grid "
                           f"(T.Kernel(T.ceildiv({dynamic[0]}, block_M))); copies mask the ragged edge. Or drop "
                           f"T.dynamic to compile per size (docs/refusals.md)")
    names = ", ".join(sorted(str(sym) for sym in value.free_symbols))
    raise CompileError(f"{what} must be known at compile time, got {value}, which depends on {names} "
                       "(block ids, loop variables and runtime scalars are only known on the device)"
                       f"{_runtime_scalar_hint(value)}")


def _dynamic_names(symbols) -> list:
    """The T.dynamic sizes among `symbols`, by the names the user gave them."""
    return sorted(b.name for b in current().dynamic_sizes.values() if b.symbol in symbols)


def _show_sizes(value) -> str:
    """An expression with each dynamic size's `DIVISOR * M_div16` form written as the user's name M."""
    names = {b.expr: sympy.Symbol(b.name) for b in current().dynamic_sizes.values()}
    return str(sympy.sympify(value).subs(names))


def dynamic_size_symbols() -> set:
    """The symbols of the T.dynamic sizes this specialisation binds (runtime values the launch knows)."""
    return {b.symbol for b in current().dynamic_sizes.values()}


def _size(value, what: str):
    """An int known while tracing, or an expression of T.dynamic sizes only (the launch evaluates it: a grid size, an
    output's shape); anything else as _concrete refuses it."""
    value = _integer(value, what)
    if isinstance(value, int) or not value.free_symbols <= dynamic_size_symbols():
        return _concrete(value, what)
    return value


def _grid_sizes(grid, threads: int) -> tuple:
    """Three workgroup counts; each dimension's work-items must fit the dispatch packet's 32-bit grid size (checked
    at launch for a dimension of T.dynamic sizes)."""
    sizes = [_size(g, "the grid size") for g in grid] + [1] * (3 - len(grid))
    if any(isinstance(s, int) and s <= 0 for s in sizes):
        raise CompileError(f"grid {tuple(sizes)} has an empty dimension")
    block = (threads, 1, 1)
    for axis, (n, per) in enumerate(zip(sizes, block)):
        if isinstance(n, int) and n * per > HSA_MAX_GRID_WORKITEMS:
            raise CompileError(f"grid {tuple(sizes)} with {threads} threads: dimension {axis} has {n * per} "
                               f"work-items; a dispatch allows at most {HSA_MAX_GRID_WORKITEMS} per dimension")
    return tuple(sizes)


def _thread_count(threads, loc) -> int:
    """The workgroup's thread count from `threads=N` or TileLang's `threads=(x, y[, z])`."""
    if isinstance(threads, (tuple, list)):
        if not 1 <= len(threads) <= 3:
            raise CompileError(f"T.Kernel(threads={tuple(threads)}): give 1 to 3 thread dimensions", location=loc)
        dims = [_concrete(t, f"threads dimension {axis}") for axis, t in enumerate(threads)]
        if any(d <= 0 for d in dims):
            raise CompileError(f"T.Kernel(threads={tuple(dims)}): every thread dimension must be positive",
                               location=loc)
        return math.prod(dims)
    return _concrete(threads, "threads")


@contextlib.contextmanager
def Kernel(*grid, threads: int = 128):
    """`with T.Kernel(gx, gy=1, gz=1, threads=N) as (bx, by):` opens the kernel body.

    Yields one block-id symbol per grid dimension given (a single symbol for a 1-d grid). `threads` is a
    multiple of 64 (the wave size), at most 1024. A program may hold several blocks one after the other (not
    nested), as TileLang's flash decoding does: each is a kernel and a launch of its own, run in program order, a
    later one seeing the earlier ones' global writes (`T.alloc_global` scratch hands data over). TileLang's
    `threads=(x, y)` / `(x, y, z)` gives a workgroup of x * y * z threads (tilegcn's tile ops spread work over the
    workgroup's threads in one linear order, x fastest, so the split into dimensions changes nothing else).

    Example:

    ```python
    with T.Kernel(T.ceildiv(n, 256), threads=64) as bx:             # 1-d grid
        ...
    with T.Kernel(T.ceildiv(N, 128), T.ceildiv(M, 128), threads=256) as (bx, by):
        ...
    ```
    """
    tracer = current()
    loc = user_location()
    if tracer.bodies:
        raise CompileError("`with T.Kernel(...)` inside another T.Kernel block: a T.Kernel block is one grid launch; "
                           "close the first block before opening the next (several blocks run in program order)",
                           location=loc)
    if not 1 <= len(grid) <= 3:
        raise CompileError(f"T.Kernel takes 1 to 3 grid dimensions, got {len(grid)}", location=loc)
    arch = get_arch(tracer.arch)
    threads = _thread_count(threads, loc)
    if threads <= 0 or threads % arch.wave_size or threads > arch.max_workgroup_threads:
        raise CompileError(f"threads={threads}: must be a multiple of {arch.wave_size} (the wave size) between "
                           f"{arch.wave_size} and {arch.max_workgroup_threads}", location=loc)
    sizes = _grid_sizes(grid, threads)
    ids = tuple(sympy.Symbol(n, integer=True, nonnegative=True) for n in ("bx", "by", "bz"))
    body: list = []
    first_buffer = len(tracer.buffers)  # the buffers this block allocates follow
    tracer.bodies.append(body)
    try:
        proxies = tuple(IndexProxy.of(s, f"the block index {s}") for s in ids[: len(grid)])
        tracer.grid_ids = tuple(zip(sizes, ids[: len(grid)]))
        yield proxies[0] if len(grid) == 1 else proxies
    finally:
        tracer.bodies.pop()
        tracer.grid_ids = ()
    local = [b for b in tracer.buffers[first_buffer:] if b.scope != N.GLOBAL]  # T.alloc_global stays the program's
    tracer.kernel_blocks.append(KernelBlock(sizes, (threads, 1, 1), ids, body, loc, local))


def empty(shape, dtype):
    """An output tensor the kernel allocates and returns (TileLang's eager style): `B = T.empty((M, N), dtype)` ...
    `return B`. tilegcn allocates it (torch.empty, on the inputs' device) at each call and the call returns it;
    several returned outputs come back as a tuple in the order of the `return`.

    Example:

    ```python
    @tilegcn.jit
    def twice(X, block=64):
        N = T.const("N")
        X: T.Tensor((N,), "float32")
        Y = T.empty((N,), "float32")
        with T.Kernel(T.ceildiv(N, block), threads=64) as bx:
            x = T.alloc_fragment((block,), "float32")
            T.copy(X[bx * block], x)
            for i in T.Parallel(block):
                x[i] = x[i] * 2.0
            T.copy(x, Y[bx * block])
        return Y

    x = torch.randn(100)
    assert torch.equal(twice(x), 2 * x)
    ```
    """
    from .elementwise import program_dtype
    from .tracer import contiguous_spec

    tracer = current()
    loc = user_location()
    if tracer.bodies:
        raise CompileError("T.empty declares an output tensor: call it before `with T.Kernel(...)`", location=loc)
    dims = shape if isinstance(shape, (tuple, list)) else (shape,)
    shape = tuple(_size(s, f"T.empty shape {tuple(dims)}: dimension {axis}") for axis, s in enumerate(dims))
    if any(isinstance(s, int) and s < 0 for s in shape):
        raise CompileError(f"T.empty shape {shape} has a negative dimension", location=loc)
    spec = contiguous_spec(shape, program_dtype(dtype))
    name = tracer.name_from_source(loc, "out")
    buf = N.Buffer(name, N.GLOBAL, spec.dtype, shape, spec=spec, param_index=len(tracer.params), loc=loc)
    tracer.params.append(N.Param(name, "tensor", spec.dtype, buffer=buf))
    tracer.buffers.append(buf)
    tracer.empties.append(buf)
    return BufferProxy(buf)


def alloc_global(shape, dtype, scope="global"):
    """Scratch global memory for the program (TileLang's spelling): `glse = T.alloc_global(shape, dtype)`. tilegcn
    allocates it at each call (torch.empty on the inputs' device: uninitialised, as in TileLang) and passes it to
    every `T.Kernel` block that uses it; the call does not return it. Its main use is handing data from one
    `T.Kernel` block to the next: the blocks launch in program order, each sees the global writes of those before.
    Call it inside the program, outside or inside a T.Kernel block.

    Example:

    ```python
    @tilegcn.jit(out_idx=[1])
    def twice_then_add_one(N, block=64):
        @T.prim_func
        def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
            tmp = T.alloc_global((N,), "float32")          # scratch: the first kernel writes it, the second reads
            with T.Kernel(T.ceildiv(N, block), threads=64) as bx:
                x = T.alloc_fragment((block,), "float32")
                T.copy(X[bx * block], x)
                for i in T.Parallel(block):
                    x[i] = x[i] * 2.0
                T.copy(x, tmp[bx * block])
            with T.Kernel(T.ceildiv(N, block), threads=64) as bx:
                y = T.alloc_fragment((block,), "float32")
                T.copy(tmp[bx * block], y)
                for i in T.Parallel(block):
                    y[i] = y[i] + 1.0
                T.copy(y, Y[bx * block])
        return main

    x = torch.randn(100)
    assert torch.equal(twice_then_add_one(100)(x), x * 2 + 1)
    ```
    """
    from .elementwise import program_dtype
    from .tracer import contiguous_spec

    tracer = current()
    loc = user_location()
    if scope != "global":
        raise CompileError(f"T.alloc_global(scope={scope!r}): only scope \"global\" is global memory; use "
                           "T.alloc_shared / T.alloc_fragment for the other scopes", location=loc)
    dims = shape if isinstance(shape, (tuple, list)) else (shape,)
    shape = tuple(_size(s, f"T.alloc_global shape {tuple(dims)}: dimension {axis}") for axis, s in enumerate(dims))
    if any(isinstance(s, int) and s <= 0 for s in shape):
        raise CompileError(f"T.alloc_global shape {shape} must be positive", location=loc)
    spec = contiguous_spec(shape, program_dtype(dtype))
    name = tracer.name_from_source(loc, "scratch")
    buf = N.Buffer(name, N.GLOBAL, spec.dtype, shape, spec=spec, param_index=len(tracer.params), loc=loc)
    tracer.params.append(N.Param(name, "tensor", spec.dtype, buffer=buf))
    tracer.buffers.append(buf)
    tracer.scratch.append(buf)
    return BufferProxy(buf)


def alloc_shared(shape, dtype):
    """A buffer in LDS, shared by the workgroup (the operands of `T.gemm` live here).

    Example:

    ```python
    A_s = T.alloc_shared((block_M, block_K), A.dtype)
    T.copy(A[by * block_M, k * block_K], A_s)
    ```
    """
    return current().alloc(N.SHARED, shape, dtype, "shared")


# TileLang's register scopes; tilegcn holds each as a fragment (language/local.py says why "local" may be one)
_REGISTER_SCOPES = ("local.fragment", "local", "local.var")


def alloc_fragment(shape, dtype, scope="local.fragment"):
    """A tile held in registers, spread over the workgroup's threads (elementwise work, gemm accumulators).

    `scope` is TileLang's third argument: `"local.fragment"` (the default), or `"local"` / `"local.var"` for a
    thread-private buffer, which tilegcn holds the same way (as `T.alloc_local` does).

    Example:

    ```python
    acc = T.alloc_fragment((block_M, block_N), "float32")
    x = T.alloc_fragment((block,), "float32")
    start = T.alloc_fragment((1,), T.int32, "local")   # a counter, as TileLang's stream-k GEMM writes it
    ```
    """
    if scope not in _REGISTER_SCOPES:
        raise CompileError(f"T.alloc_fragment(scope={scope!r}): a fragment lives in registers (scope "
                           f"{', '.join(map(repr, _REGISTER_SCOPES))}); for a buffer in shared memory use "
                           "T.alloc_shared(shape, dtype)", location=user_location())
    return current().alloc(N.FRAGMENT, shape, dtype, "frag")


def _as_region(x, other_extents, what: str) -> N.Region:
    if isinstance(x, BufferProxy):
        buf = x.buffer
        if buf.scope == N.GLOBAL and other_extents is None:
            raise CompileError(f"{what}: give a start index into global tensor {buf.name}")
        return N.Region(buf, tuple(sympy.Integer(0) for _ in buf.shape), tuple(buf.shape))
    if isinstance(x, N.ElemRef) and x.buffer.scope == N.FRAGMENT:  # `v[0]` of a variable: the variable itself
        x = RegionRef(x.buffer, x.index, tuple(x.buffer.shape))
    if isinstance(x, RegionRef) and x.sliced:
        return N.Region(x.buffer, tuple(x.starts), tuple(_sliced_extents(x, other_extents, what)))
    if isinstance(x, RegionRef):
        extents = list(x.extents)
        if other_extents is not None:
            want = list(other_extents)
            if len(want) > len(extents):
                raise CompileError(f"{what}: a {len(want)}-d tile does not fit {x.buffer.name}, "
                                   f"which has {len(extents)} dims")
            want = [1] * (len(extents) - len(want)) + want  # leading dims of extent 1
            for axis, (have, need) in enumerate(zip(extents, want)):
                if have is not None and int(have) != need:
                    raise CompileError(f"{what}: {x.buffer.name} slice extent {have} on dim {axis} "
                                       f"does not match the tile's {need}")
            extents = want
        if any(e is None for e in extents):
            raise CompileError(f"{what}: the extent of the {x.buffer.name} region is unknown; "
                               "copy to or from a whole shared buffer or fragment")
        return N.Region(x.buffer, tuple(x.starts), tuple(int(e) for e in extents))
    raise CompileError(f"{what}: expected a tensor region, shared buffer or fragment, got {x!r}")


def _sliced_extents(x, other_extents, what: str) -> list:
    """The extents of sliced region `x` as TileLang's T.copy settles them (tilelang/utils/language.py,
    legalize_pairwise_extents): a slice spans its extent and an index 1 (`Q[b, s0:s1, h, :]` is 1 x (s1 - s0) x 1 x D,
    copied into a (s1 - s0) x D tile); where the two sides differ in how many dims are not 1, the region's 1s
    broadcast to the other side's extents from the right (`A[by * bm:(by + 1) * bm, k * bk]` into a bm x bk tile)."""
    extents = x.sliced_extents()
    if any(e is None for e in extents):
        raise CompileError(f"{what}: the extent of the {x.buffer.name} region is unknown; "
                           "give each slice of a dynamic dim its end (`A[0:n]`)")
    if other_extents is None:
        return extents
    want = list(other_extents)
    if sum(e != 1 for e in extents) != sum(e != 1 for e in want):
        for k in range(1, min(len(extents), len(want)) + 1):
            if extents[-k] == 1:
                extents[-k] = want[-k]
    have = [(axis, e) for axis, e in enumerate(extents) if e != 1]
    for (axis, e), need in zip(have, [e for e in want if e != 1]):
        if e != need:
            raise CompileError(f"{what}: {x.buffer.name} slice extent {e} on dim {axis} does not match the tile's "
                               f"{need}")
    return extents


def _whole_extents(x):
    if isinstance(x, N.ElemRef):  # `v[0]` of a one-element variable (proxies.BufferProxy._variable_index)
        return tuple(x.buffer.shape)
    if isinstance(x, BufferProxy) and x.buffer.scope != N.GLOBAL:
        return tuple(x.buffer.shape)
    if isinstance(x, RegionRef) and x.sliced and None not in x.sliced_extents():
        return _squeeze(x.sliced_extents())
    if isinstance(x, RegionRef) and all(e is not None for e in x.extents):
        return tuple(int(e) for e in x.extents)
    return None


def _squeeze(extents):
    return tuple(e for e in extents if e != 1) or (1,)


def copy(src, dst, coalesced_width=None, disable_tma=False):
    """Copy a tile: global <-> shared/fragment, shared <-> fragment, shared -> shared, fragment -> fragment.

    `coalesced_width` (TileLang's vector-width hint) is accepted and ignored: tilegcn picks the widest access the
    layout and alignment allow. So is `disable_tma` (TileLang's switch off NVIDIA's TMA engine, which AMD GPUs do
    not have: every copy here is the plain load/store path).

    A global side is given by its start index (`A[by * 128, k * 32]`); its extent is the shape of
    the other side. Or by slices, as TileLang writes regions: a slice spans its extent, an index one element
    (`Q[b, s0:s1, h, :]` is a (s1 - s0, D) tile of a BSHD tensor); where the sides differ in how many dims are not
    1, the region's 1s take the tile's extents from the right (`A[by * bm:(by + 1) * bm, k * bk]`). Casts to the
    destination dtype. Rows and columns past a tensor's end read 0 and are not written. Not allowed inside
    `T.Parallel`. Between fragments the source is whole, or one row of it into a fragment of the row's shape
    (`T.copy(lse[k, :], row)`, k a constant or the variable of a loop with int bounds, which is then unrolled).

    Example:

    ```python
    T.copy(X[by * block_M, bx * block_N], x)      # global -> fragment
    T.copy(x, Y[by * block_M, bx * block_N])      # fragment -> global (fp32 -> Y.dtype)
    T.copy(C_local, C_shared)                     # a gemm accumulator -> shared (fp32 -> C_shared.dtype)
    T.copy(C_shared, C[by * block_M, bx * block_N])
    T.copy(Q[bz, bx * block_M:(bx + 1) * block_M, by, :], Q_shared)   # BSHD rows of one head
    T.copy(lse_local[k, :], lse_split)            # row k of a (num_split, block_M) fragment
    ```
    """
    tracer = current()
    loc = user_location()
    if tracer.parallel is not None:
        raise CompileError("T.copy is not allowed inside T.Parallel: copy whole tiles before or after the "
                           "loop", location=loc)
    if all(isinstance(x, (BufferProxy, RegionRef)) and x.buffer.scope == N.GLOBAL for x in (src, dst)):
        raise CompileError("T.copy from global to global: stage the tile through a fragment", location=loc)
    try:
        src_r = _as_region(src, _whole_extents(dst), "T.copy source")
        dst_r = _as_region(dst, _whole_extents(src), "T.copy destination")
    except CompileError as e:
        raise CompileError(e.raw_message, location=loc) from None
    if _squeeze(src_r.extents) != _squeeze(dst_r.extents):
        raise CompileError(f"T.copy extents differ: {src_r.extents} vs {dst_r.extents}", location=loc)
    if _record_fragment_slice_copy(tracer, src_r, dst_r, loc):
        return
    tracer.record(ops.Copy(src_r, dst_r, loc=loc))


def _record_fragment_slice_copy(tracer, src: N.Region, dst: N.Region, loc) -> bool:
    """`T.copy(x[k, :], y)` between fragments (TileLang's flash-decoding combine reads one split's row so): the
    element loop `y[i] = x[k, i]`, which each thread runs on the elements it holds (x held whole along k beside
    them: ops/parallel.py's ExpandOf). Other fragment regions are left to the verifier's refusal."""
    if not (src.buffer.scope == dst.buffer.scope == N.FRAGMENT) or \
            any(s != 0 for s in dst.starts) or tuple(dst.extents) != tuple(dst.buffer.shape):
        return False
    looped = [d for d, (start, extent, size) in enumerate(zip(src.starts, src.extents, src.buffer.shape))
              if start == 0 and extent == size and size > 1]
    fixed = [d for d in range(len(src.extents)) if d not in looped]
    if not fixed or any(src.extents[d] != 1 for d in fixed) or \
            tuple(src.extents[d] for d in looped) != _squeeze(tuple(dst.buffer.shape)) or \
            len(looped) != len(dst.buffer.shape):
        return False
    indices = tuple(sympy.Symbol(f"p_c{axis}", integer=True, nonnegative=True) for axis in range(len(looped)))
    index = list(src.starts)
    for d, i in zip(looped, indices):
        index[d] = i
    tracer.parallel = (tuple(dst.buffer.shape), indices)
    try:
        tracer.record_parallel_store(dst.buffer, indices, N.ElemRef(src.buffer, tuple(index)))
    finally:
        tracer.parallel = None
    return True


def _buffer_of(x, what: str) -> N.Buffer:
    if not isinstance(x, BufferProxy):
        raise CompileError(f"{what}: expected a buffer from T.alloc_shared/T.alloc_fragment, got {x!r}")
    return x.buffer


def fill(buf, value):
    """Set every element of a fragment or shared buffer to `value`, a number known at compile time.

    On a gemm accumulator an inline constant (0, ±0.5, ±1, ±2, ±4) is written by MFMAs, a few instructions. A
    shared buffer is filled through a fragment of its shape (not a T.gemm operand: its tile is swizzled).

    Example:

    ```python
    acc = T.alloc_fragment((block_M, block_N), "float32")
    T.fill(acc, 1.0)          # C = 1 + A @ B after the K loop
    T.clear(S)                # S = T.alloc_shared((block_M, block_N), "float16")
    ```
    """
    tracer = current()
    b = _buffer_of(buf, "T.fill")
    if b.scope == N.GLOBAL:
        raise CompileError("T.fill takes a fragment or shared buffer, not a global tensor")
    if isinstance(value, ScalarProxy):
        raise CompileError(f"T.fill value must be a number known at compile time; {value.param.name} is a "
                           f"runtime scalar: assign it inside T.Parallel instead ({b.name}[i, j] = "
                           f"{value.param.name})")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise CompileError(f"T.fill value must be a number, got {value!r} ({type(value).__name__})")
    tracer.record(ops.Fill(b, float(value), loc=user_location()))


def clear(buf):
    """Set every element of a fragment or shared buffer to 0 (`T.fill(buf, 0.0)`).

    Example:

    ```python
    T.clear(acc)              # before the K loop that accumulates into it
    ```
    """
    fill(buf, 0.0)


# the arch decides which fp8 encodings it has (arch.fp8_dtypes: fnuz on gfx942, OCP on gfx950): the gemm plan says
_GEMM_OPERAND_DTYPES = ("bfloat16", "float16", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3fn", "float8_e5m2",
                        "float4_e2m1fn_x2", "int8")
_MX_OPERAND_DTYPES = ("float8_e4m3fn", "float8_e5m2", "float4_e2m1fn_x2")  # MXFP8 / MXFP4 elements (OCP MX)
MX_BLOCK = 32  # K elements sharing one E8M0 scale (OCP MX)


def gemm(A, B, C, transpose_A: bool = False, transpose_B: bool = False, k_pack: int = 1, policy=None, *,
         scale_A=None, scale_B=None):
    """C += A @ B on matrix cores. A, B: shared tiles of bfloat16 / float16, fp8 (float8_e4m3fnuz / e5m2fnuz on
    gfx942, float8_e4m3fn / e5m2 on gfx950), int8 or, on gfx950, packed fp4 (float4_e2m1fn_x2: a (M, K / 2) byte
    tile holds K values, the even one in the low nibble); A and B of one dtype or one fp8 format each (e4m3 x e5m2:
    `v_mfma_f32_*_fp8_bf8` on gfx942, f8f6f4 with cbsz / blgp on gfx950); C: a float32 fragment (int32 for int8
    operands). 8-bit operands may be stored either way, as 16-bit ones; packed fp4 must be K-major: A as (M, K / 2),
    B as (N, K / 2) with transpose_B=True.

    MX block scales (gfx950, OCP MXFP8 / MXFP4): `scale_A` and `scale_B` are shared uint8 tiles of E8M0 exponents,
    scale_A[i, k // 32] scaling A[i, k] by 2**(e - 127) and scale_B[j, k // 32] scaling B's row j (column j of the
    product); the operands are float8_e4m3fn / float8_e5m2 or float4_e2m1fn_x2, both of one dtype. It lowers to
    `v_mfma_scale_f32_32x32x64_f8f6f4` / `16x16x128`. gfx942 has no scaled MFMA: dequantize the operand in
    registers and use a bf16 T.gemm (examples/tilelang/dequant_gemm_bf16_mxfp4_cdna4.py).

    ```python
    T.copy(A[by * block_M, k * block_K // 2], A_s)              # float4_e2m1fn_x2, (block_M, block_K // 2)
    T.copy(SA[by * block_M, k * block_K // 32], SA_s)           # uint8, (block_M, block_K // 32)
    T.gemm(A_s, B_s, acc, transpose_B=True, scale_A=SA_s, scale_B=SB_s)
    ```

    A may also be a 16-bit fragment (TileLang's `gemm_rs`), such as a T.gemm accumulator cast to 16 bits by
    `T.copy(acc_s, acc_s_cast)`: it takes the MFMA operand layout, and where the accumulator's layout already is
    that layout (wave grids with the whole row of a tile in one wave, 64 // MFMA-size lane groups) the cast stays in
    registers; elsewhere it goes through LDS. kernel.ir says which (`convert_layout ... via registers` or
    `via <scratch>`). An 8-bit fragment A (fp8, int8: TileLang's W4A8 dequantize GEMM unpacks int4 weights into one)
    is copied into a shared tile `<name>_lds` right before the gemm, which reads it from there (kernel.ir shows the
    copy): the 8-bit MFMAs take A as packed bytes, which tilegcn assembles from LDS reads only.

    `k_pack` (TileLang's MFMA packing hint) is accepted and ignored: tilegcn plans the MFMA shape itself. `policy`
    (T.GemmWarpPolicy) picks how the waves split C: FullRow (each wave whole rows: what lets the cast accumulator
    of one T.gemm be the register A operand of the next), FullCol (whole columns); by default (or Square) the
    squarest wave tile.

    `transpose_A` / `transpose_B`: the operand is stored transposed ((K, M) / (N, K)) in its shared tile.

    Example:

    ```python
    for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
        T.copy(A[by * block_M, k * block_K], A_s)
        T.copy(B[k * block_K, bx * block_N], B_s)
        T.gemm(A_s, B_s, acc)
    ```

    Flash attention's second GEMM, its A operand in registers:

    ```python
    T.copy(acc_s, acc_s_cast)            # fp32 accumulator -> fp16 fragment
    T.gemm(acc_s_cast, V_shared, acc_o)
    ```
    """
    tracer = current()
    loc = user_location()
    a, b, c = (_buffer_of(x, f"T.gemm {n}") for x, n in ((A, "A"), (B, "B"), (C, "C")))
    if a.scope not in (N.SHARED, N.FRAGMENT) or b.scope != N.SHARED:
        raise CompileError(f"T.gemm: A must be a shared buffer or a fragment and B a shared buffer (got {a.scope} "
                           f"{a.name}, {b.scope} {b.name}); copy B's tile into a shared buffer", location=loc)
    if a.scope == N.FRAGMENT and transpose_A:
        raise CompileError(f"T.gemm: A fragment {a.name} with transpose_A: a fragment A operand is [M, K]; "
                           "store it untransposed, or stage it in a shared buffer", location=loc)
    if a.scope == N.FRAGMENT and a.dtype.bytes == 1 and a.dtype.name in _GEMM_OPERAND_DTYPES:
        a = _staged_in_lds(a, loc)
    if a.scope == N.FRAGMENT and a.dtype.name not in ("bfloat16", "float16"):
        raise CompileError(f"T.gemm: A fragment {a.name} is {a.dtype.name}; a fragment A operand is bfloat16 or "
                           "float16, or an 8-bit type (fp8, int8): T.copy it into a fragment of one of those first",
                           location=loc)
    _refuse_mixed_mx(a, b, loc)
    mixed_fp8 = {a.dtype.short, b.dtype.short} == {"fp8", "bf8"}  # e4m3 x e5m2: the fp8_bf8 / bf8_fp8 MFMAs
    if (a.dtype != b.dtype and not mixed_fp8) or a.dtype.name not in _GEMM_OPERAND_DTYPES:
        raise CompileError(f"T.gemm: A and B must have one dtype of {', '.join(_GEMM_OPERAND_DTYPES)} (got "
                           f"{a.dtype.name}, {b.dtype.name}), or be the arch's e4m3 and e5m2 fp8 formats", location=loc)
    acc = "int32" if a.dtype.name == "int8" else "float32"
    if c.scope != N.FRAGMENT or c.dtype.name != acc:
        article = "an" if acc == "int32" else "a"
        raise CompileError(f"T.gemm: C must be {article} {acc} fragment for {a.dtype.name} operands (got {c.scope} "
                           f"{c.dtype.name} {c.name})", location=loc)
    if len(a.shape) != 2 or len(b.shape) != 2 or len(c.shape) != 2:
        raise CompileError("T.gemm operands must be 2-d", location=loc)
    M, K = a.shape[::-1] if transpose_A else a.shape
    Kb, Nb = b.shape[::-1] if transpose_B else b.shape
    if K != Kb or tuple(c.shape) != (M, Nb):
        raise CompileError(f"T.gemm shapes do not agree: A {a.shape}{'^T' if transpose_A else ''} @ "
                           f"B {b.shape}{'^T' if transpose_B else ''} -> C {c.shape}", location=loc)
    if policy not in (None, *GemmWarpPolicy.ALL):
        raise CompileError(f"T.gemm: policy={policy!r}; use one of T.GemmWarpPolicy.Square, .FullRow, .FullCol",
                           location=loc)
    scales = _mx_scales(scale_A, scale_B, a, M, Nb, K, loc)
    tracer.record(ops.Gemm(a, b, c, bool(transpose_A), bool(transpose_B),
                           policy=None if policy == GemmWarpPolicy.Square else policy, loc=loc, **scales))


def _refuse_mixed_mx(a, b, loc):
    """MXFP8 x MXFP4 (one packed fp4 operand, the other OCP fp8): gfx950's f8f6f4 MFMA takes a format per operand
    (cbsz / blgp), but a gemm plan has one element width for both operands' K step, registers and LDS reads."""
    fp8 = ("float8_e4m3fn", "float8_e5m2")
    if {a.dtype.is_packed_fp4, b.dtype.is_packed_fp4} != {True, False} or \
            (b.dtype if a.dtype.is_packed_fp4 else a.dtype).name not in fp8:
        return
    wide = (b if a.dtype.is_packed_fp4 else a).dtype.name
    raise CompileError(f"T.gemm: A {a.dtype.name} x B {b.dtype.name}: mixed MX formats (MXFP8 x MXFP4) are not "
                       "supported (tilegcn plans one element width for both operands); widen the fp4 operand to "
                       f"{wide} before the kernel (every e2m1 value is exact in it; its scales stay) and multiply "
                       "as MXFP8, or give both operands as float4_e2m1fn_x2", location=loc)


def _mx_scales(scale_A, scale_B, a, M: int, N_: int, K: int, loc) -> dict:
    """{scale_A, scale_B: shared uint8 Buffers} of an MX-scaled T.gemm, checked against the operands ({} unscaled).
    K counts the operand tile's columns: bytes, two values each, for float4_e2m1fn_x2."""
    if scale_A is None and scale_B is None:
        return {}
    if scale_A is None or scale_B is None:
        raise CompileError("T.gemm: scale_A and scale_B come together (an MX-scaled product scales both operands; "
                           "pass a tile of 127s, 2**0, for an operand without scales)", location=loc)
    if a.dtype.name not in _MX_OPERAND_DTYPES:
        raise CompileError(f"T.gemm: scale_A / scale_B scale MX operands ({', '.join(_MX_OPERAND_DTYPES)}), not "
                           f"{a.dtype.name}; scale a {a.dtype.name} product in the epilogue instead", location=loc)
    values = K * 2 if a.dtype.is_packed_fp4 else K
    if values % MX_BLOCK:
        raise CompileError(f"T.gemm: an MX-scaled tile needs K a multiple of {MX_BLOCK} values (one E8M0 scale a "
                           f"block), got K = {values}", location=loc)
    out = {}
    for name, x, rows in (("scale_A", scale_A, M), ("scale_B", scale_B, N_)):
        buf = _buffer_of(x, f"T.gemm {name}")
        want = (rows, values // MX_BLOCK)
        if buf.scope != N.SHARED or buf.dtype.name != "uint8" or tuple(buf.shape) != want:
            raise CompileError(f"T.gemm: {name} must be a shared uint8 tile of shape {want} (E8M0 exponents, one per "
                               f"{MX_BLOCK} K values of each {'row of A' if name == 'scale_A' else 'column of C'}); "
                               f"got {buf.scope} {buf.dtype.name} {buf.name}{list(buf.shape)}", location=loc)
        out[name] = buf
    return out


def _staged_in_lds(frag: N.Buffer, loc) -> N.Buffer:
    """A shared tile `<frag>_lds` that an 8-bit fragment A operand is copied into right before its T.gemm (kernel.ir
    shows the copy): the 8-bit MFMAs read A as packed bytes, 4 to 16 a lane, which tilegcn assembles from LDS reads
    only (a 16-bit fragment is read in place: its MfmaOperand layout)."""
    staged = N.Buffer(f"{frag.name}_lds", N.SHARED, frag.dtype, frag.shape, loc=loc)
    current().buffers.append(staged)
    copy(BufferProxy(frag), BufferProxy(staged))
    return staged


class GemmWarpPolicy:
    """How T.gemm splits C over the waves (`policy=`, TileLang's names): `FullRow`, every wave a band of whole rows
    (the waves stacked along M); `FullCol`, whole columns (along N); `Square` (the default), the squarest wave tile.
    FullRow / FullCol take the grid with the most waves along M / N that tiles the block, as TileLang does.

    Example:

    ```python
    T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
    ```
    """

    Square, FullRow, FullCol = "Square", "FullRow", "FullCol"
    ALL = (Square, FullRow, FullCol)


def Parallel(*extents):
    """`for i, j in T.Parallel(M, N):` elementwise statements over a fragment's elements.

    The body may use `+ - * /`, the math functions (`T.exp`, `T.log`, `T.sqrt`, `T.tanh`, `T.max`, ...), comparisons
    with `T.if_then_else`, `T.cast` and read global elements; it is computed in fp32 and rounded to the
    destination's dtype on store. Not nestable. A global element named before the loop by whole indices
    (`s = scales_b[bx, k]`, TileLang's BufferLoad) is read where the body uses it.

    Example:

    ```python
    for i, j in T.Parallel(block_M, block_N):
        x[i, j] = T.max(x[i, j] * a + b, 0.0)
    Scale_B = scales_b[bx * block_N // 128, k]           # one element, DeepGEMM's per-block scale
    for i, j in T.Parallel(block_M, block_N):
        acc_total[i, j] += acc[i, j] * (scales_a[by * block_M + i, k] * Scale_B)
    ```
    """
    tracer = current()
    if tracer.parallel is not None:
        raise CompileError("T.Parallel cannot be nested")
    extents = tuple(_concrete(e, "T.Parallel extent") for e in extents)
    names = ("i", "j", "l", "m")[: len(extents)]
    indices = tuple(sympy.Symbol(f"p{n}", integer=True, nonnegative=True) for n in names)
    tracer.parallel = (extents, indices)
    proxies = tuple(IndexProxy.of(s, f"the T.Parallel index {n}") for s, n in zip(indices, names))
    try:
        yield proxies[0] if len(proxies) == 1 else proxies
    finally:
        tracer.parallel = None


def Pipelined(start, stop=None, num_stages: int = 1, order=None, stage=None, sync=None, group=None,
              annotations=None):
    """`for k in T.Pipelined(n, num_stages=s):` the K loop over k = 0..n-1; `T.Pipelined(start, stop, ...)` runs
    k = start..stop-1, as TileLang reads it (so `T.Pipelined(1, 3)` is two trips, not three stages). The body is
    recorded once; the loop counts 0..stop-start-1 and the body sees k as that counter plus `start`.

    With `num_stages > 1` and a body of global -> shared copies and `T.gemm`, the loop is software-pipelined
    over that many LDS buffers (docs/internals.md); pass `num_stages` by name. `annotations={"ping_pong": True}`
    (tilegcn's key; TileLang's loop annotations) runs the two halves of the workgroup's waves half a K phase apart,
    one group's MFMAs beside the other's LDS reads and copies, with two barriers a phase (num_stages=2: LDS DMA on
    gfx950, copies staged through VGPRs on gfx942); False keeps both groups in step; not given, the arch table
    decides (Arch.gemm_ping_pong_waves, Arch.gemm_ping_pong_staged_waves: 8 waves on both). Bounds only the
    device knows (a runtime scalar, a dynamic K, a causal bound on block ids: `T.Pipelined(T.min(n, bx + 1), ...)`)
    make it a device loop, pipelined the same way with the trip count the device computes (zero or more trips;
    the steps past the end load nothing), in step (no K phases, no ping-pong).

    Example:

    ```python
    for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
        ...
    ```
    """
    tracer = current()
    loc = user_location()
    for name, value in (("order", order), ("stage", stage), ("sync", sync), ("group", group)):
        if value is not None:
            raise CompileError(f"T.Pipelined({name}=...) is not supported: tilegcn orders the pipelined loop "
                               "itself; pass num_stages only", location=loc)
    ping_pong = _pipelined_annotations(annotations, loc)
    first, end = (0, start) if stop is None else (start, stop)
    first = _integer(first, "the T.Pipelined start")
    end = _integer(end, "the T.Pipelined trip count" if stop is None else "the T.Pipelined stop")
    if not (isinstance(first, int) and isinstance(end, int)):  # bounds only the device knows: a device loop
        from .control import device_loop

        stages = max(_concrete(num_stages, "num_stages"), 1)
        if ping_pong:
            raise CompileError("T.Pipelined(annotations={'ping_pong': True}): the loop's trip count is a device "
                               "value, and a ping-pong loop needs one known when compiling; drop the annotation "
                               "(the loop is pipelined in step)", location=loc)
        yield from device_loop(tracer, first, end, 1, "the T.Pipelined loop variable", loc, stages)
        return
    if first < 0:
        raise CompileError(f"T.Pipelined({first}, {end}): a negative start is not supported (it would address "
                           "tiles before the tensor's origin)", location=loc)
    n = end - first
    if n <= 0:
        shown = f"T.Pipelined({end})" if stop is None else f"T.Pipelined({first}, {end})"
        raise CompileError(f"{shown}: trip count must be positive, got {n}", location=loc)
    num_stages = _concrete(num_stages, "num_stages")
    if num_stages < 0:
        raise CompileError(f"num_stages must be >= 0, got {num_stages}", location=loc)
    num_stages = max(num_stages, 1)  # TileLang's 0 (no software pipelining) is tilegcn's 1: one buffer, no overlap
    var = sympy.Symbol(f"k{len(list(N.walk(tracer.body())))}", integer=True, nonnegative=True)
    body: list = []
    tracer.bodies.append(body)
    try:
        yield IndexProxy.of(var + first, "the T.Pipelined loop variable")
    finally:
        tracer.bodies.pop()
    tracer.record(ops.Loop(var, n, int(num_stages), body, ping_pong=ping_pong, loc=loc))


def _pipelined_annotations(annotations, loc):
    """The ping_pong choice of T.Pipelined's `annotations` (None: not given); any other key is refused."""
    if annotations is None:
        return None
    if not isinstance(annotations, dict) or set(annotations) - {"ping_pong"}:
        raise CompileError(f"T.Pipelined(annotations={annotations!r}): tilegcn knows only the key 'ping_pong' "
                           "(True / False / None); leave the others out", location=loc)
    value = annotations.get("ping_pong")
    if value not in (None, True, False):
        raise CompileError(f"T.Pipelined(annotations={{'ping_pong': {value!r}}}): pass True, False or None",
                           location=loc)
    return value


@dataclasses.dataclass(frozen=True)
class PrintSite:
    """One `T.print` call: the hidden float32 tensor parameter it writes (one slot per workgroup, indexed
    [bz, by, bx, *tile] for the grid dims given) and what the host shows after the launch."""

    param: str  # the hidden parameter's name
    msg: str
    buffer: str  # the printed tile's name
    grid_dims: int  # 1 to 3 (the grid dimensions given to T.Kernel)
    shape: tuple  # the hidden tensor's: ([gz,] [gy,] gx, *tile)
    loc: str | None


def print(obj, msg: str = ""):  # noqa: A001 - the T. namespace mirrors TileLang
    """Print a fragment's values from every workgroup, after the launch: a debugging aid, as TileLang's.

    At this point of the program each workgroup copies the fragment's current values (as float32) into a
    hidden output tensor (one slot per workgroup and `T.print` call); after the kernel ran, the host prints
    them with Python's `print`, call by call in program order and per call one line per workgroup in dispatch
    order (bx fastest): `T.print: <msg> <name> block <bx or (bx, by)>: tensor(...)`. The jit function's
    `.printed` keeps them (`PrintedTile`s: `.msg`, `.name`, `.block`, `.values`). Works on the emulated device
    and on HIP alike (the copy is device code). Not inside `T.Pipelined` or `T.Parallel`: print after the loop
    (the values of the last trip). Shared buffers, global tensors and scalars are refused.

    Example:

    ```python
    x = T.alloc_fragment((block,), "float32")
    T.copy(X[bx * block], x)
    T.print(x, msg="loaded")         # after the launch: T.print: loaded x block 0: tensor([...])
    ```
    """
    tracer = current()
    loc = user_location()
    if tracer.parallel is not None:
        raise CompileError("T.print is not allowed inside T.Parallel: print the whole tile after the loop",
                           location=loc)
    if not isinstance(msg, str):
        raise CompileError(f"T.print msg must be a string, got {msg!r} ({type(msg).__name__})", location=loc)
    if not tracer.bodies or not tracer.grid_ids:
        raise CompileError("T.print must be inside `with T.Kernel(...)`", location=loc)
    if len(tracer.bodies) > 1:
        raise CompileError("T.print is not supported inside a T.Pipelined loop: print the tile after the loop "
                           "(it then shows the values of the last trip)", location=loc)
    if not isinstance(obj, BufferProxy) or obj.buffer.scope == N.GLOBAL:
        what = "a global tensor" if isinstance(obj, (BufferProxy, RegionRef)) else \
            f"{obj!r} ({type(obj).__name__})"
        raise CompileError(f"T.print prints a fragment (from T.alloc_fragment), got {what}; copy the values "
                           "into a fragment first and print that", location=loc)
    tile = obj.buffer
    if tile.scope == N.SHARED:
        raise CompileError(f"T.print of shared buffer {tile.name} is not supported: tilegcn reads shared memory "
                           "only as T.gemm operands (no copy out of it); print a fragment instead, e.g. copy the "
                           "same global tile into a T.alloc_fragment and print that", location=loc)
    site, out = _hidden_print_output(tracer, tile, msg, loc)
    ids = tuple(block_id for _, block_id in reversed(tracer.grid_ids))
    slot = N.Region(out, ids + _whole(tile).starts, (1,) * len(ids) + tuple(tile.shape))
    tracer.record(ops.Copy(_whole(tile), slot, loc=loc))
    tracer.prints.append(site)


def _whole(buf: N.Buffer) -> N.Region:
    return N.Region(buf, tuple(sympy.Integer(0) for _ in buf.shape), tuple(buf.shape))


def _hidden_print_output(tracer, buf: N.Buffer, msg: str, loc) -> tuple:
    """Declare the float32 tensor parameter, [gz, gy, gx, *tile] (the grid dims given), that one T.print writes."""
    name = f"__print{len(tracer.prints)}"
    dynamic = _dynamic_names(set().union(*(sympy.sympify(n).free_symbols for n, _ in tracer.grid_ids)))
    if dynamic:
        raise CompileError(f"T.print in a kernel whose grid depends on the dynamic size {dynamic[0]} (T.dynamic): "
                           "its output holds a tile per workgroup, sized at compile time; drop T.dynamic while "
                           "debugging with T.print (a compile per size)", location=loc)
    shape = tuple(size for size, _ in reversed(tracer.grid_ids)) + tuple(buf.shape)
    strides = tuple(math.prod(shape[axis + 1:]) for axis in range(len(shape)))
    spec = TensorSpec(float32, shape, strides, True)
    out = N.Buffer(name, N.GLOBAL, float32, shape, spec=spec, param_index=len(tracer.params))
    tracer.params.append(N.Param(name, "tensor", float32, buffer=out))
    tracer.buffers.append(out)
    return PrintSite(name, msg, buf.name, len(tracer.grid_ids), shape, loc), out


def use_swizzle(panel_size: int = 8, order: str = "row", enable: bool = True, num_xcds: int = 8):
    """Remap workgroup ids for L2 reuse: chunk per XCD, then rasterise panels of `panel_size` rows.

    TileLang's spelling: `order="row"` (the only order tilegcn rasterises) and `enable=False` (no remapping).

    Example:

    ```python
    with T.Kernel(T.ceildiv(N, 256), T.ceildiv(M, 256), threads=512) as (bx, by):
        T.use_swizzle(panel_size=8, num_xcds=8)   # before any use of bx, by
    ```
    """
    if order != "row":
        raise CompileError(f"T.use_swizzle(order={order!r}): tilegcn rasterises row panels only; pass order=\"row\" "
                           "(or drop it), or swap the roles of bx and by", location=user_location())
    if not enable:
        return
    dynamic = _dynamic_names(set().union(*(sympy.sympify(n).free_symbols for n, _ in current().grid_ids)))
    if dynamic:
        raise CompileError(f"T.use_swizzle: the grid depends on the dynamic size {dynamic[0]} (T.dynamic), and the "
                           "remap is computed from compile-time grid sizes: drop T.use_swizzle (or pass "
                           "enable=False), or drop T.dynamic to compile per size", location=user_location())
    sizes = _concrete(panel_size, "T.use_swizzle panel_size"), _concrete(num_xcds, "T.use_swizzle num_xcds")
    current().record(ops.Swizzle(*sizes, loc=user_location()))


del _py
