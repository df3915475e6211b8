"""Stream-K GEMM (a first wave of programs sharing the K iterations of the leftover tiles, then whole tiles), ported
from TileLang: examples/gemm_streamk/example_tilelang_gemm_streamk.py at tile-ai/tilelang commit
a35008a42531c62b976ae4cec3855d4383db0f3c.

Mechanical changes only:
- imports: `tilegcn` and `from tilegcn import language as T`; `tilelang.jit` / `tilelang.cdiv` became
  `tilegcn.jit` / `tilegcn.cdiv`; `torch.backends.cuda.matmul.allow_tf32 = False` is dropped (no CUDA here: the
  reference is a CPU matmul);
- upstream's module-level setup (the problem size, `total_sm = 108`, the inputs and the stream-k partition the
  kernel reads as globals) is the body of `setup(m, n, k, total_sm)`, run at import with upstream's values, so a
  test can redo it at a smaller size (`setup(...)` then `main()`); its lines are upstream's;
- CPU tensors on the emulated device (`device="cuda"` dropped); `main()` takes the arch;
  `run_regression_perf` (a CUDA profiler run) is left out; the command line takes the setup's size (`--m 80 --n 128
  --k 128 --total-sm 2`; without arguments it runs upstream's 256 x 1024 x 512 over 108 programs, as upstream).

The kernel body is TileLang's, line for line.
"""
import argparse

import torch

import tilegcn
from tilegcn import language as T
import math


def cdiv(a, b):
    return math.ceil(a / b)


def setup(m_=256, n_=1024, k_=512, total_sm_=108):
    """Upstream's module-level setup at the given size (upstream's defaults): sets this module's globals."""
    global m, n, k, total_sm, A, B, streamk_programs, BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, two_tiles
    global M, N, K, num_block_m, num_block_n, iters_per_tile, total_tiles, streamk_tiles, blocking_tiles
    global streamk_iters, streamk_full_tiles, streamk_partial_tiles, sm_patition_factor
    m = m_
    n = n_
    k = k_

    total_sm = total_sm_

    torch.random.manual_seed(0)
    # uniform distribution from -1 to 1
    A = torch.rand(m, k, dtype=torch.float16) * 2 - 1
    B = torch.rand(n, k, dtype=torch.float16) * 2 - 1

    streamk_programs = total_sm
    BLOCK_SIZE_M = 16
    BLOCK_SIZE_N = 128
    BLOCK_SIZE_K = 32
    two_tiles = False
    M, K = A.shape
    N, K = B.shape
    # accumulator types
    # compute grid (work to do per SM on the first wave)
    num_block_m = tilegcn.cdiv(M, BLOCK_SIZE_M)
    num_block_n = tilegcn.cdiv(N, BLOCK_SIZE_N)
    iters_per_tile = tilegcn.cdiv(K, BLOCK_SIZE_K)
    total_tiles = num_block_m * num_block_n

    # Two-tile SK + DP
    streamk_tiles = total_tiles % streamk_programs
    if total_tiles - streamk_tiles > streamk_programs:  # (total_tiles // total_programs > 1)
        streamk_tiles += streamk_programs

    blocking_tiles = total_tiles - streamk_tiles
    streamk_iters = streamk_tiles * iters_per_tile

    streamk_full_tiles = streamk_iters // streamk_programs
    streamk_partial_tiles = streamk_iters % streamk_programs

    print(f"{total_tiles=} ")
    print(f"{iters_per_tile=} ")

    sm_patition_factor = max(blocking_tiles // total_sm, 1)


setup()


@tilegcn.jit
def tl_matmul_streamk(
    A,
    B,
    C,
    streamk_tiles,
    block_M,
    block_N,
    block_K,
    trans_A,
    trans_B,
    dtypeAB,
    dtypeC,
    accum_dtype,
    num_stages,
    threads,
):
    assert not trans_A
    M, N, K = T.const("M, N, K")
    A_shape = (M, K) if not trans_A else (K, M)
    B_shape = (K, N) if not trans_B else (N, K)
    A_shared_shape = (block_M, block_K) if not trans_A else (block_K, block_M)
    B_shared_shape = (block_K, block_N) if not trans_B else (block_N, block_K)

    A: T.Tensor(A_shape, dtypeAB)
    B: T.Tensor(B_shape, dtypeAB)
    C: T.Tensor((M, N), dtypeC)

    with T.Kernel(streamk_programs, threads=threads) as pid:
        A_shared = T.alloc_shared(A_shared_shape, dtypeAB)
        B_shared = T.alloc_shared(B_shared_shape, dtypeAB)
        A_shared_full_tiles = T.alloc_shared(A_shared_shape, dtypeAB)
        B_shared_full_tiles = T.alloc_shared(B_shared_shape, dtypeAB)
        C_local = T.alloc_fragment((block_M, block_N), accum_dtype)

        # compute first wave
        start_iter = T.alloc_fragment((1,), T.int32, "local")
        end_iter = T.alloc_fragment((1,), T.int32, "local")

        start_iter[0] = pid * streamk_full_tiles + T.min(pid, streamk_partial_tiles)
        last_iter = (pid + 1) * streamk_full_tiles + T.min(pid + 1, streamk_partial_tiles)

        while start_iter[0] < last_iter:
            end_iter[0] = T.min(
                start_iter[0] + (iters_per_tile - (start_iter[0] % iters_per_tile)),
                last_iter,
            )

            tile_id = start_iter[0] // iters_per_tile
            remain_iters = start_iter[0] % iters_per_tile
            pid_m = tile_id // T.ceildiv(N, block_N)
            pid_n = tile_id % T.ceildiv(N, block_N)

            T.clear(C_local)
            for k in T.Pipelined(end_iter[0] - start_iter[0], num_stages=num_stages):
                T.copy(
                    A[pid_m * block_M, (k + (start_iter[0] % iters_per_tile)) * block_K],
                    A_shared,
                )
                T.copy(
                    B[pid_n * block_N, (k + (start_iter[0] % iters_per_tile)) * block_K],
                    B_shared,
                )
                T.gemm(A_shared, B_shared, C_local, transpose_B=trans_B)

            # last iteration of the tile always happens before its start on another SM
            if remain_iters == 0 and (end_iter[0] % iters_per_tile == 0):
                T.copy(C_local, C[pid_m * block_M, pid_n * block_N])
            else:
                for i, j in T.Parallel(block_M, block_N):
                    T.atomic_add(C[pid_m * block_M + i, pid_n * block_N + j], C_local[i, j])

            start_iter[0] = end_iter[0]

        # compute full tiles
        if sm_patition_factor > 0:
            for p in T.serial(sm_patition_factor):
                tile_id = pid + streamk_tiles + p * total_sm
                pid_m = tile_id // T.ceildiv(N, block_N)
                pid_n = tile_id % T.ceildiv(N, block_N)
                T.clear(C_local)

                for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=1):
                    T.copy(A[pid_m * block_M, k * block_K], A_shared_full_tiles)
                    T.copy(B[pid_n * block_N, k * block_K], B_shared_full_tiles)
                    T.gemm(A_shared_full_tiles, B_shared_full_tiles, C_local, transpose_B=trans_B)
                T.copy(C_local, C[pid_m * block_M, pid_n * block_N])


def main(arch=None):
    b_c = torch.zeros((m, n), dtype=torch.float32)

    tl_matmul_streamk(
        A,
        B,
        b_c,
        streamk_tiles,
        BLOCK_SIZE_M,
        BLOCK_SIZE_N,
        BLOCK_SIZE_K,
        False,
        True,
        T.float16,
        T.float32,  # fp32 for atom add
        T.float32,
        2,
        64,
        arch=arch,
    )
    b_c = b_c.to(torch.float16)

    C = torch.matmul(A, B.T)

    print(b_c)
    print(C)
    torch.testing.assert_close(C, b_c, rtol=1e-2, atol=1e-2)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", type=int, default=256)
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--k", type=int, default=512)
    parser.add_argument("--total-sm", type=int, default=108, help="programs of the stream-k wave (upstream: 108)")
    args = parser.parse_args()
    if (args.m, args.n, args.k, args.total_sm) != (m, n, k, total_sm):
        setup(args.m, args.n, args.k, args.total_sm)
    main()
