"""Persistent and non-persistent GEMM, ported from TileLang: examples/gemm/example_gemm_persistent.py at
tile-ai/tilelang commit a35008a42531c62b976ae4cec3855d4383db0f3c.

Mechanical changes only:
- imports: `tilegcn` and `from tilegcn import language as T`; `tilelang.jit` became `tilegcn.jit`;
- `driver.get_num_sms()` (the CUDA driver's SM count) became `get_num_sms()` below, the workgroup count of the
  persistent grid: the CU count of the GPU by default (MI300X: 304), overridable with `NUM_SMS` (`--num-sms`) so a
  small GEMM on the emulated device still has several waves of tiles;
- `.compile(...)` and the profiler's `assert_allclose` / `do_bench` became a call on torch tensors checked against
  `A @ B` in `main()` (CPU tensors, the emulated device, a smaller shape).

The kernel bodies are TileLang's, line for line.
"""
import argparse

import torch

import tilegcn
from tilegcn import language as T
from tilegcn.amdgcn.arch import TIMING, get_arch
from tilegcn.jit import resolve_arch

NUM_SMS = None  # None: the CU count of the target GPU (tilegcn's default arch)


def get_num_sms():
    return NUM_SMS if NUM_SMS is not None else TIMING[get_arch(resolve_arch()).name].cus


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


@tilegcn.jit
def matmul_persistent(
    A, B, block_M, block_N, block_K, threads, num_stages, dtype=T.float16, accum_dtype=T.float32, use_persistent_primitive=True
):
    M, N, K = T.const("M, N, K")

    A: T.Tensor((M, K), dtype)
    B: T.Tensor((K, N), dtype)
    C = T.empty((M, N), dtype)

    sm_num = get_num_sms()
    m_blocks = T.ceildiv(M, block_M)
    n_blocks = T.ceildiv(N, block_N)
    waves = T.ceildiv(m_blocks * n_blocks, sm_num)
    group_size = 8

    with T.Kernel(sm_num, threads=threads) as (block_id):
        A_shared = T.alloc_shared((block_M, block_K), dtype)
        B_shared = T.alloc_shared((block_K, block_N), dtype)
        C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
        C_shared = T.alloc_shared((block_M, block_N), dtype)

        if use_persistent_primitive:
            for bx, by in T.Persistent([T.ceildiv(M, block_M), T.ceildiv(N, block_N)], sm_num, block_id):
                T.clear(C_local)
                for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                    T.copy(A[bx * block_M, k * block_K], A_shared)
                    T.copy(B[k * block_K, by * block_N], B_shared)
                    T.gemm(A_shared, B_shared, C_local)

                T.copy(C_local, C_shared)
                T.copy(C_shared, C[bx * block_M, by * block_N])
        else:
            for w in T.serial(waves):
                tile_id = sm_num * w + block_id
                bx = (tile_id // group_size) % m_blocks
                by = (tile_id % group_size) + (tile_id // group_size) // m_blocks * group_size

                if bx * block_M < M and by * block_N < N:
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


def main(M=256, N=512, K=128):
    BLOCK_M = 64
    BLOCK_N = 64
    BLOCK_K = 32
    threads = 256
    num_stages = 2
    A = torch.randn(M, K).half()
    B = torch.randn(K, N).half()
    want = ref_program(A.float(), B.float()).half()

    C = matmul_persistent(A, B, BLOCK_M, BLOCK_N, BLOCK_K, threads, num_stages)
    torch.testing.assert_close(C, want, rtol=0.01, atol=0.01)
    print("Persistent GEMM: All check passed.")

    C = matmul_non_persistent(A, B, BLOCK_M, BLOCK_N, BLOCK_K, threads, num_stages)
    torch.testing.assert_close(C, want, rtol=0.01, atol=0.01)
    print("Non-Persistent GEMM: All check passed.")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--M", type=int, default=256, help="M dimension")
    parser.add_argument("--N", type=int, default=512, help="N dimension")
    parser.add_argument("--K", type=int, default=128, help="K dimension")
    parser.add_argument("--num-sms", type=int, default=None, help="workgroups of the persistent grid")
    args = parser.parse_args()
    M, N, K = args.M, args.N, args.K
    NUM_SMS = args.num_sms
    main(M, N, K)
