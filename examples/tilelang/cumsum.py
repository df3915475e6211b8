"""Cumulative sums of shared buffers and fragments, ported from TileLang's tests of `T.cumsum`:
testing/python/language/test_tilelang_language_scan.py at tile-ai/tilelang commit
a35008a42531c62b976ae4cec3855d4383db0f3c: the kernels of `cumsum_smem_test`, `cumsum_fragment_test`,
`cumsum_smem_test_1d` and `cumsum_fragment_test_1d`, and the reference of `run_cumsum` (`ref_program`).
TileLang's `examples/` has no stand-alone cumsum kernel at that commit (examples/gdn/example_cumsum.py is a chunked
gated-delta-net kernel), so the tests' kernels are the ports.

Mechanical changes only:
- imports: `tilegcn` and `from tilegcn import language as T`; `tilegcn.jit(prim_func, out_idx=-1)` for
  `tl.compile(program, out_idx=-1)` (tilegcn compiles on the first call);
- the reference takes the tile sizes as arguments (upstream reads them from `run_cumsum`'s closure).

The kernel bodies are TileLang's, line for line.
"""
import torch

import tilegcn
from tilegcn import language as T


def cumsum_smem_test(M, N, block_M, block_N, dim=0, reverse=False, dtype=T.float32):
    @T.prim_func
    def cumsum(
        A: T.Tensor((M, N), dtype),
        B: T.Tensor((M, N), dtype),
    ):
        # Initialize Kernel Context
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=256) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_N), dtype)

            T.copy(A[by * block_M, bx * block_N], A_shared)
            T.cumsum(src=A_shared, dim=dim, reverse=reverse)
            T.copy(A_shared, B[by * block_M, bx * block_N])

    return cumsum


def cumsum_fragment_test(M, N, block_M, block_N, dim=0, reverse=False, dtype=T.float32):
    @T.prim_func
    def cumsum(
        A: T.Tensor((M, N), dtype),
        B: T.Tensor((M, N), dtype),
    ):
        # Initialize Kernel Context
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=256) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_N), dtype)
            A_fragment = T.alloc_fragment((block_M, block_N), dtype)

            T.copy(A[by * block_M, bx * block_N], A_shared)
            T.copy(A_shared, A_fragment)
            T.cumsum(src=A_fragment, dim=dim, reverse=reverse)
            T.copy(A_fragment, B[by * block_M, bx * block_N])

    return cumsum


def cumsum_smem_test_1d(N, block_N, reverse=False, dtype=T.float32):
    @T.prim_func
    def cumsum(
        A: T.Tensor((N,), dtype),
        B: T.Tensor((N,), dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_N), threads=block_N) as bx:
            A_shared = T.alloc_shared((block_N,), dtype)

            T.copy(A[bx * block_N], A_shared)
            T.cumsum(src=A_shared, dim=0, reverse=reverse)
            T.copy(A_shared, B[bx * block_N])

    return cumsum


def cumsum_fragment_test_1d(N, block_N, reverse=False, dtype=T.float32):
    @T.prim_func
    def cumsum(
        A: T.Tensor((N,), dtype),
        B: T.Tensor((N,), dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_N), threads=block_N) as bx:
            A_shared = T.alloc_shared((block_N,), dtype)
            A_fragment = T.alloc_fragment((block_N,), dtype)

            T.copy(A[bx * block_N], A_shared)
            T.copy(A_shared, A_fragment)
            T.cumsum(src=A_fragment, dim=0, reverse=reverse)
            T.copy(A_fragment, B[bx * block_N])

    return cumsum


def ref_program(A, M, N, block_M, block_N, dim, reverse):
    ref_b = torch.empty_like(A)
    for i in range(M // block_M):
        for j in range(N // block_N):
            ref_b[i * block_M : (i + 1) * block_M, j * block_N : (j + 1) * block_N] = A[
                i * block_M : (i + 1) * block_M, j * block_N : (j + 1) * block_N
            ].cumsum(dim=dim)
            if reverse:
                ref_b[i * block_M : (i + 1) * block_M, j * block_N : (j + 1) * block_N] = (
                    A[i * block_M : (i + 1) * block_M, j * block_N : (j + 1) * block_N]
                    .flip(dims=[dim])
                    .cumsum(dim=dim)
                    .flip(dims=[dim])
                )
    return ref_b


def main():
    A = torch.randn(128, 128)
    B = tilegcn.jit(cumsum_fragment_test(128, 128, 64, 64, dim=1, reverse=True), out_idx=-1)(A)
    torch.testing.assert_close(B, ref_program(A, 128, 128, 64, 64, 1, True), atol=1e-3, rtol=1e-3)
    A = torch.randn(512)
    B = tilegcn.jit(cumsum_smem_test_1d(512, 64), out_idx=-1)(A)
    torch.testing.assert_close(B, A.view(8, 64).cumsum(dim=1).view(512), atol=1e-3, rtol=1e-3)
    print("cumsum of shared buffers and fragments matches torch")


if __name__ == "__main__":
    main()
