"""Row and column reductions, ported from TileLang's tests of `T.reduce_*`:
testing/python/language/test_tilelang_language_reduce.py at tile-ai/tilelang commit
a35008a42531c62b976ae4cec3855d4383db0f3c:
- row reduction (`dim=1`): the kernel of `test_reduce` (fragment source and destination), with its helper
  `_reduce_op`;
- column reduction (`dim=0`): `_make_allreduce_dim0_scale_kernel`.
TileLang's `examples/` has no stand-alone row or column reduction at that commit (its old `examples/reduce_example.py`
was removed), so the tests' kernels are the ports.

Mechanical changes only:
- imports: `tilegcn` and `from tilegcn import language as T`; `tilegcn.jit(prim_func, out_idx=-1)` for
  `tilelang.compile(prim_func, out_idx=-1, target="cuda")` on the column kernel (tilegcn compiles on the first
  call);
- `T.copy(A, src, disable_tma=src_scope == "shared")` became `T.copy(A, src)` (there is no TMA on AMD GPUs).

The kernel bodies are TileLang's, line for line.
"""
import torch

import tilegcn
from tilegcn import language as T


def _reduce_op(T, op, src, dst, dim, batch=1):
    kwargs = {} if batch == 1 else {"batch": batch}
    if op == "sum":
        T.reduce_sum(src, dst, dim=dim, **kwargs)
    elif op == "max":
        T.reduce_max(src, dst, dim=dim, **kwargs)
    elif op == "min":
        T.reduce_min(src, dst, dim=dim, **kwargs)
    elif op == "abssum":
        T.reduce_abssum(src, dst, dim=dim, **kwargs)
    elif op == "absmax":
        T.reduce_absmax(src, dst, dim=dim, **kwargs)


@tilegcn.jit(out_idx=-1)
def row_reduce(M, N, dtype, op, src_scope, dst_scope, threads, batch):
    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M,), dtype)):
        with T.Kernel(1, threads=threads):
            if src_scope == "fragment":
                src = T.alloc_fragment((M, N), dtype)
            else:
                src = T.alloc_shared((M, N), dtype)
            if dst_scope == "fragment":
                dst = T.alloc_fragment((M,), dtype)
            else:
                dst = T.alloc_shared((M,), dtype)
            T.copy(A, src)
            _reduce_op(T, op, src, dst, dim=1, batch=batch)
            T.copy(dst, B)

    return main


def _make_allreduce_dim0_scale_kernel(reduce_fn, logical_width, scale):
    @T.prim_func
    def kernel(
        A: T.Tensor((logical_width, scale), T.float32),
        B: T.Tensor((scale,), T.float32),
    ):
        with T.Kernel(1, threads=logical_width * scale):
            src = T.alloc_fragment((logical_width, scale), T.float32)
            dst = T.alloc_fragment((scale,), T.float32)
            T.copy(A, src)
            reduce_fn(src, dst, dim=0)
            T.copy(dst, B)

    return kernel


def column_reduce(reduce_fn, logical_width, scale):
    """The column kernel jitted (upstream compiled it with `tilelang.compile(..., out_idx=-1)`)."""
    return tilegcn.jit(_make_allreduce_dim0_scale_kernel(reduce_fn, logical_width, scale), out_idx=-1)


REFERENCES = {"sum": lambda a, d: a.sum(dim=d), "max": lambda a, d: a.max(dim=d).values,
              "min": lambda a, d: a.min(dim=d).values, "abssum": lambda a, d: a.abs().sum(dim=d),
              "absmax": lambda a, d: a.abs().max(dim=d).values}


def main():
    A = torch.randn(64, 128)
    B = row_reduce(64, 128, T.float32, "sum", "fragment", "fragment", 128, 1)(A)
    torch.testing.assert_close(B, A.sum(dim=1), rtol=1e-4, atol=1e-4)
    A = torch.randn(64, 2)
    B = column_reduce(T.reduce_max, 64, 2)(A)
    torch.testing.assert_close(B, A.max(dim=0).values)
    print("row and column reductions match torch")


if __name__ == "__main__":
    main()
