"""`T.cumsum(src, dst=None, dim=0, reverse=False)`: an inclusive prefix sum along one dimension (TileLang's
`tilelang/language/scan_op.py` signature and semantics).

A fragment is staged as TileLang stages it (`cumsum_fragment`): copied into a shared buffer, scanned there, copied
into dst; tilegcn's staging buffer is float32, so the running sums are fp32 and rounded once to dst's dtype. A
float32 shared buffer is scanned in place or into another (ops/scan.py, lowered by passes/scan.py).
"""
from __future__ import annotations

from .. import ops
from ..errors import CompileError, user_location
from ..ir import nodes as N
from ..ir.types import float32
from .builtins import copy
from .proxies import BufferProxy, RegionRef
from .tracer import current


def _buffer(x, what: str) -> N.Buffer:
    if isinstance(x, RegionRef):
        raise CompileError(f"T.cumsum {what}: a region of {x.buffer.name} is not supported yet; allocate a buffer of "
                           "the region's shape, T.copy the region into it and scan that")
    if not isinstance(x, BufferProxy):
        raise CompileError(f"T.cumsum {what} must be a fragment or a shared buffer, got {type(x).__name__} {x!r}")
    if x.buffer.scope not in (N.FRAGMENT, N.SHARED):
        raise CompileError(f"T.cumsum {what} must be a fragment or a shared buffer, {x.buffer.name} is a "
                           f"{x.buffer.scope} tensor; T.copy its tile into a fragment (T.alloc_fragment) first")
    return x.buffer


def _check(src: N.Buffer, dst: N.Buffer, dim) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int) or not -len(src.shape) <= dim < len(src.shape):
        raise CompileError(f"T.cumsum: dim={dim!r} is not a dimension of {src.name}{list(src.shape)}")
    if list(dst.shape) != list(src.shape):
        raise CompileError(f"T.cumsum: dst {dst.name}{list(dst.shape)} must have the shape of src "
                           f"{src.name}{list(src.shape)}")
    if src.scope != dst.scope:
        raise CompileError(f"T.cumsum: src {src.name} is a {src.scope} buffer and dst {dst.name} a {dst.scope} "
                           "one; scan within one memory space and T.copy the result across")
    if src.scope == N.SHARED and (src.dtype != float32 or dst.dtype != float32):
        raise CompileError(f"T.cumsum of shared buffers scans float32 ones ({src.name} is {src.dtype}, {dst.name} "
                           f"{dst.dtype}); T.copy a 16-bit tile into a fragment and scan that")
    return dim % len(src.shape)


def cumsum(src, dst=None, dim: int = 0, reverse: bool = False, annotations=None):
    """dst = the inclusive cumulative sum of `src` along `dim` (torch.cumsum); `reverse=True` sums from the last
    element backwards (torch.flip(torch.cumsum(torch.flip(x, [dim]), dim), [dim])). Without `dst`, src is
    overwritten.

    `src` and `dst` are fragments (any float dtype: the sums run in fp32 and each is rounded once to dst's dtype)
    or float32 shared buffers (TileLang's `annotations=` is accepted and ignored). Each line along `dim` is summed in
    order by one thread, in LDS; a fragment goes there and back through a float32 shared buffer of its shape, as
    TileLang stages it (the LDS budget counts it; along the last dimension its rows are a word longer, so that the
    threads scanning neighbouring rows read different LDS banks).

    Example:

    ```python
    x = T.alloc_fragment((block_M, block_N), "float32")
    T.copy(X[by * block_M, 0], x)
    T.cumsum(x, dim=1)
    T.copy(x, Y[by * block_M, 0])
    ```
    """
    tracer = current()
    loc = user_location()
    try:
        if tracer.parallel is not None:
            raise CompileError("T.cumsum is not allowed inside T.Parallel: scan the whole buffer before or after "
                               "the loop")
        s = _buffer(src, "source")
        d = _buffer(src if dst is None else dst, "destination")
        dim = _check(s, d, dim)
    except CompileError as e:
        raise CompileError(e.raw_message, location=loc) from None
    if s.scope == N.SHARED:
        tracer.record(ops.Cumsum(s, d, dim, bool(reverse), loc=loc))
        return
    _scan_fragment(src, src if dst is None else dst, s, dim, bool(reverse), loc)


def _scan_fragment(src, dst, s: N.Buffer, dim: int, reverse: bool, loc):
    """Through a float32 shared buffer, as TileLang's cumsum_fragment; along the last dimension of a 2-d or larger
    tile its rows are padded by one word, so that the threads scanning neighbouring rows read different LDS banks
    (passes/scan.py)."""
    shape = tuple(s.shape)
    padded = len(shape) > 1 and dim == len(shape) - 1
    staging = current().alloc(N.SHARED, shape[:-1] + (shape[-1] + 1,) if padded else shape, "float32",
                              f"{s.name}_scan")
    region = staging[tuple(slice(0, e) for e in shape)] if padded else staging
    copy(src, region)
    current().record(ops.Cumsum(staging.buffer, staging.buffer, dim, reverse, extent=shape if padded else None,
                                loc=loc))
    copy(region, dst)
