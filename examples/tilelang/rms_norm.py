"""RMSNorm, ported from TileLang: examples/norm/rms_norm.py at tile-ai/tilelang commit
a35008a42531c62b976ae4cec3855d4383db0f3c (both kernels: `rms_norm_splitk` and `rms_norm`).

Mechanical changes only:
- imports: `tilegcn` and `from tilegcn import language as T` (`pass_configs` is accepted and ignored: there is no
  TMA on AMD GPUs);
- `kernel = rms_norm.compile(M=M, N=N, blk_m=blk_m)` plus `kernel.get_profiler().assert_allclose(ref_program)`
  became a call on torch tensors checked with `torch.testing.assert_close` in `main()` (CPU tensors, the emulated
  device, a smaller shape; the profiler's timings dropped).

The kernel bodies are TileLang's, line for line.
"""
import torch

import tilegcn
from tilegcn import language as T


@tilegcn.jit(pass_configs={"tl.disable_tma_lower": True})
def rms_norm_splitk(A, blk_m, blk_k):
    M, N = T.const("M, N")
    dtype = T.float

    A: T.Tensor((M, N), dtype)
    B = T.empty((M, N), dtype)

    with T.Kernel(T.ceildiv(M, blk_m), threads=128) as bx:
        A_shared = T.alloc_shared((blk_m, blk_k), dtype)
        A_local = T.alloc_fragment((blk_m, blk_k), dtype)
        A_powsum = T.alloc_fragment((blk_m,), dtype)

        num_k_step = T.ceildiv(N, blk_k)
        T.clear(A_local)
        for k in T.Serial(num_k_step):
            T.copy(A[bx * blk_m, k * blk_k], A_shared)
            for i, j in T.Parallel(blk_m, blk_k):
                A_local[i, j] += A_shared[i, j] * A_shared[i, j]
        T.reduce_sum(A_local, A_powsum, dim=1)
        for i in T.Parallel(blk_m):
            A_powsum[i] = T.rsqrt(A_powsum[i] / N + 1e-12)

        for k in T.Serial(num_k_step):
            # reverse, better cache hit rate
            T.copy(A[bx * blk_m, (num_k_step - 1 - k) * blk_k], A_shared)
            for i, j in T.Parallel(blk_m, blk_k):
                A_shared[i, j] *= A_powsum[i]
            T.copy(A_shared, B[bx * blk_m, (num_k_step - 1 - k) * blk_k])

    return B


@tilegcn.jit(pass_configs={"tl.disable_tma_lower": True})
def rms_norm(A, blk_m):
    M, N = T.const("M, N")
    dtype = T.float

    A: T.Tensor((M, N), dtype)
    B = T.empty((M, N), dtype)

    with T.Kernel(T.ceildiv(M, blk_m), threads=128) as bx:
        A_local = T.alloc_fragment((blk_m, N), dtype)
        A_pow_local = T.alloc_fragment((blk_m, N), dtype)
        A_powsum = T.alloc_fragment((blk_m,), dtype)

        T.copy(A[bx * blk_m : (bx + 1) * blk_m, :], A_local)
        for i, j in T.Parallel(blk_m, N):
            A_pow_local[i, j] = A_local[i, j] * A_local[i, j]
        T.reduce_sum(A_pow_local, A_powsum, dim=1)
        for i in T.Parallel(blk_m):
            A_powsum[i] = T.rsqrt(A_powsum[i] / N + 1e-12)
        for i, j in T.Parallel(blk_m, N):
            A_local[i, j] *= A_powsum[i]
        T.copy(A_local, B[bx * blk_m : (bx + 1) * blk_m, :])

    return B


def ref_program(x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-12)


def main(M=8, N=256, blk_m=1, blk_k=128):
    A = torch.randn(M, N)
    B = rms_norm(A, blk_m)
    torch.testing.assert_close(B, ref_program(A), rtol=0.01, atol=0.01)
    B = rms_norm_splitk(A, blk_m, blk_k)
    torch.testing.assert_close(B, ref_program(A), rtol=0.01, atol=0.01)
    print("All checks pass.")


if __name__ == "__main__":
    main()
