"""GEMM storing C through shared memory, ported from TileLang: `matmul_non_persistent` of
examples/gemm/example_gemm_persistent.py at tile-ai/tilelang commit a35008a42531c62b976ae4cec3855d4383db0f3c.
The accumulator goes fragment -> shared (`T.copy(C_local, C_shared)`, fp32 -> f16 on the way) -> global.

Mechanical changes only:
- imports: `tilegcn` and `from tilegcn import language as T`; only the non-persistent kernel is ported (the file's
  `matmul_persistent` needs `T.Persistent` and the device's SM count, `driver.get_num_sms()`, which this kernel does
  not use);
- `matmul_non_persistent.compile(M=..., ...)` plus the profiler's `assert_allclose(ref_program)` became a call on
  CPU tensors checked with `torch.testing.assert_close` in `main()` (the emulated device, a smaller shape; the
  profiler's timings dropped).

The kernel body is TileLang's, line for line.
"""
import torch

import tilegcn
from tilegcn import language as T


@tilegcn.jit
def matmul_non_persistent(A, B, block_M, block_N, block_K, threads, num_stages, dtype=T.float16, accum_dtype=T.float32):
    M, N, K = T.const("M, N, K")

    A: T.Tensor((M, K), dtype)
    B: T.Tensor((K, N), dtype)
    C = T.empty((M, N), dtype)

    with T.Kernel(T.ceildiv(M, block_M), T.ceildiv(N, block_N), threads=threads) as (bx, by):
        A_shared = T.alloc_shared((block_M, block_K), dtype)
        B_shared = T.alloc_shared((block_K, block_N), dtype)
        C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
        C_shared = T.alloc_shared((block_M, block_N), dtype)

        T.use_swizzle(10)

        T.clear(C_local)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
            T.copy(A[bx * block_M, k * block_K], A_shared)
            T.copy(B[k * block_K, by * block_N], B_shared)
            T.gemm(A_shared, B_shared, C_local)

        T.copy(C_local, C_shared)
        T.copy(C_shared, C[bx * block_M, by * block_N])

    return C


def ref_program(A, B):
    return A @ B


def main(M=256, N=256, K=256):
    BLOCK_M = 128
    BLOCK_N = 256
    BLOCK_K = 64
    threads = 256
    num_stages = 3

    A = torch.randn(M, K).half()
    B = torch.randn(K, N).half()
    C = matmul_non_persistent(A, B, block_M=BLOCK_M, block_N=BLOCK_N, block_K=BLOCK_K, threads=threads,
                              num_stages=num_stages)
    torch.testing.assert_close(C, ref_program(A.float(), B.float()).half(), rtol=0.01, atol=0.01)
    print("Non-Persistent GEMM: All check passed.")


if __name__ == "__main__":
    main()
