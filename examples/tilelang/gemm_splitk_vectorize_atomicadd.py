"""Split-K GEMM with a tile atomic add, ported from TileLang:
examples/gemm_splitk/example_tilelang_gemm_splitk_vectorize_atomicadd.py at tile-ai/tilelang commit
a35008a42531c62b976ae4cec3855d4383db0f3c.

Mechanical changes only:
- imports: `tilegcn` and `from tilegcn import language as T`; `@tilegcn.jit` for `@tilelang.jit`;
- `main()` runs CPU tensors on the emulated device (`.cuda()` dropped) at a smaller shape, and takes the arch;
  `run_regression_perf` (a CUDA profiler run) is left out.

The kernel body is TileLang's, line for line.
"""
import torch

import tilegcn
from tilegcn import language as T


@tilegcn.jit
def matmul(A, B, C, block_M, block_N, block_K, split_k, dtype=T.float16, accum_dtype=T.float32, out_dtype=T.float32):
    M, N, K = T.const("M, N, K")
    splitK = K // split_k

    A: T.Tensor((M, K), dtype)
    B: T.Tensor((K, N), dtype)
    C: T.Tensor((M, N), out_dtype)

    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), split_k, threads=128) as (bx, by, bz):
        A_shared = T.alloc_shared((block_M, block_K), dtype)
        B_shared = T.alloc_shared((block_K, block_N), dtype)
        C_local = T.alloc_fragment((block_M, block_N), accum_dtype)

        T.clear(C_local)
        for ko in T.Pipelined(T.ceildiv(splitK, block_K), num_stages=0):
            T.copy(A[by * block_M, bz * splitK + ko * block_K], A_shared)
            T.copy(B[bz * splitK + ko * block_K, bx * block_N], B_shared)
            T.gemm(A_shared, B_shared, C_local)

        T.atomic_add(C[by * block_M, bx * block_N], C_local)


def main(M=128, N=128, K=256, block_M=64, block_N=64, block_K=32, split_k=4, arch=None):
    torch.random.manual_seed(42)
    a = torch.randn(M, K).half()
    b = torch.randn(K, N).half()
    c = torch.zeros(M, N).float()
    matmul(a, b, c, block_M, block_N, block_K, split_k, arch=arch)

    ref_c = a.float() @ b.float()

    torch.testing.assert_close(c, ref_c.to(c.dtype), rtol=1e-2, atol=1e-2)
    print("All checks pass.")


if __name__ == "__main__":
    main()
