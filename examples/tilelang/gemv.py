"""GEMV with a reducer, ported from TileLang: examples/gemv/example_gemv.py (`gemv_alloc_reducer`) at
tile-ai/tilelang commit a35008a42531c62b976ae4cec3855d4383db0f3c.

Mechanical changes only:
- imports: `tilegcn` and `from tilegcn import language as T`; `tilegcn.jit(pass_configs=...)` accepts and ignores
  TileLang's pass configs, here given by their string values (`"tl.disable_tma_lower"`,
  `"tl.disable_warp_specialized"`: neither TMA nor warp specialisation exists on AMD GPUs);
- `gemv_alloc_reducer.compile(M=N, N=K, ...)` and the profiler's `assert_allclose` became a call on torch tensors
  checked against `a @ x` in `main()` (CPU tensors, the emulated device, a smaller shape).

The kernel body is TileLang's, line for line.
"""
import torch

import tilegcn
from tilegcn import language as T


@tilegcn.jit(pass_configs={"tl.disable_tma_lower": True, "tl.disable_warp_specialized": True})
def gemv_alloc_reducer(
    a, x, block_M=128, block_N=128, num_stages=2, threads=256, dtype: T.dtype = T.float16, accum_dtype: T.dtype = T.float
):
    M, N = T.const("M, N")
    a: T.Tensor((M, N), dtype)
    x: T.Tensor((N,), dtype)
    o = T.empty((M,), dtype)

    with T.Kernel(T.ceildiv(M, block_M), threads=threads) as i0_m:
        o_reducer = T.alloc_reducer(block_M, accum_dtype, replication="all")
        T.clear(o_reducer)
        for i0_n in T.Pipelined(T.ceildiv(N, block_N), num_stages=num_stages):
            a_smem = T.alloc_shared((block_M, block_N), dtype)
            T.copy(a[i0_m * block_M, i0_n * block_N], a_smem)
            a_frag = T.alloc_fragment((block_M, block_N), dtype)
            T.copy(a_smem, a_frag)
            x_frag = T.alloc_fragment(block_N, dtype)
            T.copy(x[i0_n * block_N], x_frag)
            for i1_m, i1_n in T.Parallel(block_M, block_N):
                o_reducer[i1_m] += a_frag[i1_m, i1_n] * x_frag[i1_n]
        T.finalize_reducer(o_reducer)
        T.copy(o_reducer, o[i0_m * block_M])

    return o


def main(M=256, N=256, dtype=torch.float16):
    a, x = torch.randn(M, N, dtype=dtype), torch.randn(N, dtype=dtype)
    o = gemv_alloc_reducer(a, x, dtype=dtype)
    torch.testing.assert_close(o, (a.float() @ x.float()).to(dtype), atol=1e-2, rtol=1e-2)
    print("Test passed!")


if __name__ == "__main__":
    main()
