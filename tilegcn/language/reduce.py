"""`T.reduce_sum / reduce_max / reduce_min / reduce_absmax / reduce_abssum`: reductions of a fragment along one
dimension into a smaller fragment (TileLang's `tilelang/language/reduce_op.py` signature and semantics).

Lowered by passes/reduce.py: in-thread first, then across the lanes that hold one output element (DPP,
ds_swizzle, ds_bpermute, v_permlane*_swap: passes/xlane.py), then across waves through LDS.
"""
from __future__ import annotations

from .. import ops
from ..errors import CompileError, user_location
from ..ir import nodes as N
from .proxies import BufferProxy
from .tracer import current


_INSTEAD = {
    N.GLOBAL: "T.copy the tile from global memory into a fragment first",
    N.SHARED: "reductions of shared buffers are not supported yet (TileLang copies them through a fragment)",
}


def _fragment(x, what: str) -> N.Buffer:
    if not isinstance(x, BufferProxy):
        raise CompileError(f"{what} must be a fragment (T.alloc_fragment), got {x!r}")
    if x.buffer.scope != N.FRAGMENT:
        raise CompileError(f"{what} must be a fragment (T.alloc_fragment), got {x.buffer.scope} buffer "
                           f"{x.buffer.name}; {_INSTEAD[x.buffer.scope]}")
    return x.buffer


def _reduce(op: str, buffer, out, dim: int, clear: bool):
    tracer = current()
    loc = user_location()
    try:
        if tracer.parallel is not None:
            raise CompileError(f"T.reduce_{op} is not allowed inside T.Parallel: reduce the whole fragment "
                               "before or after the loop")
        src, dst = _fragment(buffer, f"T.reduce_{op} source"), _fragment(out, f"T.reduce_{op} destination")
        if src is dst:
            raise CompileError(f"T.reduce_{op}: {src.name} is both the source and the destination; reduce into "
                               "another fragment (T.alloc_fragment) and copy it back if needed")
        if isinstance(dim, bool) or not isinstance(dim, int) or not -len(src.shape) <= dim < len(src.shape):
            raise CompileError(f"T.reduce_{op}: dim={dim!r} is not a dimension of {src.name}{list(src.shape)}")
        dim %= len(src.shape)
        kept = list(src.shape[:dim]) + list(src.shape[dim + 1:])
        keep_one = list(src.shape[:dim]) + [1] + list(src.shape[dim + 1:])
        if list(dst.shape) not in (kept, keep_one) and not (not kept and list(dst.shape) == [1]):
            raise CompileError(f"T.reduce_{op}: {dst.name}{list(dst.shape)} cannot hold {src.name}"
                               f"{list(src.shape)} reduced along dim {dim}: allocate it as {kept or [1]}")
    except CompileError as e:
        raise CompileError(e.raw_message, location=loc) from None
    tracer.record(ops.Reduce(op, src, dst, dim, bool(clear), loc=loc))


def reduce_sum(buffer, out, dim: int = -1, clear: bool = True):
    """out = the sum of `buffer` along `dim`; with `clear=False`, out += that sum.

    Sums in fp32 (each thread its elements in element order, then pairwise across lanes, then the waves' partials
    in wave order), rounded once to out's dtype: it matches torch.sum to fp32 rounding (an error of at most about
    n * 2^-24 * sum(|x|) for n elements). inf and NaN behave as in torch: a NaN gives NaN, +inf and -inf give NaN.

    Example:

    ```python
    x = T.alloc_fragment((block_M, block_N), "float32")
    row_sum = T.alloc_fragment((block_M,), "float32")
    T.copy(X[by * block_M, 0], x)
    T.reduce_sum(x, row_sum, dim=1)
    ```
    """
    _reduce("sum", buffer, out, dim, clear)


def reduce_max(buffer, out, dim: int = -1, clear: bool = True):
    """out = the maximum of `buffer` along `dim`; with `clear=False`, out = max(out, that maximum).

    Exact (no rounding). NaN as torch.amax: a NaN anywhere in a row gives NaN (on both gfx942 and gfx950), -inf
    is the maximum of a row of -inf only.

    Example:

    ```python
    row_max = T.alloc_fragment((block_M,), "float32")
    T.reduce_max(x, row_max, dim=1)
    ```
    """
    _reduce("max", buffer, out, dim, clear)


def reduce_min(buffer, out, dim: int = -1, clear: bool = True):
    """out = the minimum of `buffer` along `dim`; with `clear=False`, out = min(out, that minimum).

    Exact; NaN as torch.amin (a NaN anywhere gives NaN).

    Example:

    ```python
    col_min = T.alloc_fragment((block_N,), "float32")
    T.reduce_min(x, col_min, dim=0)
    ```
    """
    _reduce("min", buffer, out, dim, clear)


def reduce_absmax(buffer, out, dim: int = -1, clear: bool = True):
    """out = the maximum of |buffer| along `dim` (e.g. a quantisation scale); with `clear=False`,
    out = max(out, that maximum).

    Exact; NaN as torch.amax(x.abs()) (a NaN anywhere gives NaN).

    Example:

    ```python
    amax = T.alloc_fragment((block_M,), "float32")
    T.reduce_absmax(x, amax, dim=1)
    ```
    """
    _reduce("absmax", buffer, out, dim, clear)


def reduce_abssum(buffer, out, dim: int = -1, clear: bool = True):
    """out = the sum of |buffer| along `dim` (an L1 norm); with `clear=False`, out += that sum.

    fp32 rounding as T.reduce_sum; NaN as torch.sum(x.abs()) (a NaN gives NaN, an inf gives inf).

    Example:

    ```python
    l1 = T.alloc_fragment((block_M,), "float32")
    T.reduce_abssum(x, l1, dim=1)
    ```
    """
    _reduce("abssum", buffer, out, dim, clear)
