"""A GEMM whose M is dynamic (`T.dynamic("m")`), ported from TileLang's test of dynamic shapes:
testing/python/jit/test_tilelang_jit_gemm_cython.py at tile-ai/tilelang commit
a35008a42531c62b976ae4cec3855d4383db0f3c: the kernel factory `matmul` and the runner `run_cython_dynamic_shape`
(its first case, `test_cython_dynamic_shape`: `T.dynamic("m")`, N = 256, K = 192). TileLang's
examples/dynamic_shape/example_dynamic.py makes K dynamic too (tilegcn runs a dynamic K as a device loop,
software pipelined: tests/test_dynamic.py), but the test's kernel is the port.

Mechanical changes only:
- imports: `tilegcn` and `from tilegcn import language as T`; `tilegcn.jit(program)` for
  `tilelang.compile(program, execution_backend="cython")` (tilegcn compiles on the first call);
- tensors on the CPU (the emulated device) instead of `.cuda()`;
- `isinstance(M, T.Var)` is `not isinstance(M, int)` (tilegcn has no `T.Var`), `T.dtype(d).as_torch()` is
  `getattr(torch, T.dtype(d).name)`, and `tilelang.testing.torch_assert_close(..., max_mismatched_ratio=0.05)` is
  `torch.testing.assert_close` (every element checked);
- the runner takes the sizes it runs a dynamic dimension at (`sizes`, upstream's 256 / 256 / 192 by default), so
  that a test can run several M.

The kernel body is TileLang's, line for line.
"""
import torch

import tilegcn
from tilegcn import language as T


def matmul(
    M,
    N,
    K,
    block_M,
    block_N,
    block_K,
    trans_A,
    trans_B,
    in_dtype,
    out_dtype,
    accum_dtype,
    num_stages,
    threads,
):
    A_shape = (K, M) if trans_A else (M, K)
    B_shape = (N, K) if trans_B else (K, N)
    A_shared_shape = (block_K, block_M) if trans_A else (block_M, block_K)
    B_shared_shape = (block_N, block_K) if trans_B else (block_K, block_N)

    @T.prim_func
    def main(
        A: T.Tensor(A_shape, in_dtype),
        B: T.Tensor(B_shape, in_dtype),
        C: T.Tensor((M, N), out_dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared(A_shared_shape, in_dtype)
            B_shared = T.alloc_shared(B_shared_shape, in_dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                if trans_A:
                    T.copy(A[k * block_K, by * block_M], A_shared)
                else:
                    T.copy(A[by * block_M, k * block_K], A_shared)
                if trans_B:
                    T.copy(B[bx * block_N, k * block_K], B_shared)
                else:
                    T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local, trans_A, trans_B)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return main


def run_cython_dynamic_shape(
    M, N, K, trans_A, trans_B, in_dtype, out_dtype, dtypeAccum, block_M, block_N, block_K, num_stages=3, num_threads=128,
    sizes=(256, 256, 192),
):
    program = matmul(
        M,
        N,
        K,
        block_M,
        block_N,
        block_K,
        trans_A,
        trans_B,
        in_dtype,
        out_dtype,
        dtypeAccum,
        num_stages,
        num_threads,
    )

    matmul_kernel = tilegcn.jit(program)
    if not isinstance(M, int):
        M = sizes[0]
    if not isinstance(N, int):
        N = sizes[1]
    if not isinstance(K, int):
        K = sizes[2]

    in_dtype = getattr(torch, T.dtype(in_dtype).name)
    out_dtype = getattr(torch, T.dtype(out_dtype).name)

    tensor_a = torch.randn(M, K, dtype=in_dtype)
    tensor_b = torch.randn(K, N, dtype=in_dtype)

    if trans_A:
        tensor_a = tensor_a.T
    if trans_B:
        tensor_b = tensor_b.T
    tensor_c = torch.randn(M, N, dtype=out_dtype)

    matmul_kernel(tensor_a, tensor_b, tensor_c)

    tensor_ref_c = torch.matmul(tensor_a.to(torch.float), tensor_b.to(torch.float)).to(out_dtype)
    torch.testing.assert_close(tensor_c, tensor_ref_c, atol=1e-2, rtol=1e-2)


def main():
    # upstream's case (T.dynamic("m"), N = 256, K = 192) at a small shape: N = K = 64 in 64x64x32 tiles, two M
    for m in (100, 37):
        run_cython_dynamic_shape(T.dynamic("m"), 64, 64, False, False, T.float16, T.float16, T.float32, 64, 64, 32, 2,
                                 sizes=(m, 64, 64))
    print("the dynamic-M GEMM matches torch")


if __name__ == "__main__":
    main()
