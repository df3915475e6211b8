"""GEMM, ported from TileLang: examples/gemm/example_gemm.py at tile-ai/tilelang commit
a35008a42531c62b976ae4cec3855d4383db0f3c (`matmul`, its output returned through `T.empty`).

Mechanical changes only:
- imports: `tilegcn` and `from tilegcn import language as T`;
- `matmul.compile(M=..., N=..., K=..., block_M=...)` then `kernel(a, b)` became one call `matmul(a, b, block_M=...)`
  (tilegcn compiles on the first call, M, N, K read from the tensors' shapes); CPU tensors on the emulated device at
  a smaller shape; the CUDA source dump and the profiler's timings are dropped.

The kernel body is TileLang's, line for line.
"""
import torch

import tilegcn
from tilegcn import language as T


@tilegcn.jit
def matmul(A, B, block_M, block_N, block_K, dtype=T.float16, accum_dtype=T.float32):
    M, N, K = T.const("M, N, K")

    A: T.Tensor((M, K), dtype)
    B: T.Tensor((K, N), dtype)
    C = T.empty((M, N), dtype)

    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
        A_shared = T.alloc_shared((block_M, block_K), dtype)
        B_shared = T.alloc_shared((block_K, block_N), dtype)
        C_local = T.alloc_fragment((block_M, block_N), accum_dtype)

        T.clear(C_local)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
            T.copy(A[by * block_M, k * block_K], A_shared)
            T.copy(B[k * block_K, bx * block_N], B_shared)
            T.gemm(A_shared, B_shared, C_local)

        T.copy(C_local, C[by * block_M, bx * block_N])

    return C


def main():
    a = torch.randn(256, 256).half()
    b = torch.randn(256, 256).half()

    c = matmul(a, b, block_M=128, block_N=128, block_K=32)

    ref_c = a.float() @ b.float()

    torch.testing.assert_close(c, ref_c.half(), rtol=1e-2, atol=1e-2)
    print("All check passed.")


if __name__ == "__main__":
    main()
