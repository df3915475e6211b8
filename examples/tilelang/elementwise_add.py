"""Elementwise add, ported from TileLang: examples/elementwise/example_elementwise_add.py at tile-ai/tilelang commit
a35008a42531c62b976ae4cec3855d4383db0f3c (`elementwise_add` and `ref_program`).

The kernel stages both inputs in shared memory, adds them inside T.Parallel into a fragment, and stores the sum
through a shared tile (`T.copy(C_local, C_shared)` then `T.copy(C_shared, C[...])`).

Mechanical changes only:
- imports: `tilegcn` and `from tilegcn import language as T`;
- `main()` runs on CPU tensors on the emulated device at a smaller default shape; the perf-regression entry point
  (`tilelang.profiler.do_bench` with CUPTI) is dropped.

The kernel body is TileLang's, line for line.
"""
import argparse

import torch

import tilegcn
from tilegcn import language as T


def ref_program(x, y):
    return x + y


@tilegcn.jit
def elementwise_add(A, B, block_M, block_N, in_dtype, out_dtype, threads):
    M, N = T.const("M, N")

    A: T.Tensor((M, N), in_dtype)
    B: T.Tensor((M, N), in_dtype)
    C = T.empty((M, N), out_dtype)

    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        A_shared = T.alloc_shared((block_M, block_N), in_dtype)
        B_shared = T.alloc_shared((block_M, block_N), in_dtype)
        C_local = T.alloc_fragment((block_M, block_N), out_dtype)
        C_shared = T.alloc_shared((block_M, block_N), out_dtype)

        T.copy(A[by * block_M, bx * block_N], A_shared)
        T.copy(B[by * block_M, bx * block_N], B_shared)
        for local_y, local_x in T.Parallel(block_M, block_N):
            C_local[local_y, local_x] = A_shared[local_y, local_x] + B_shared[local_y, local_x]
        T.copy(C_local, C_shared)
        T.copy(C_shared, C[by * block_M, bx * block_N])

    return C


def main(M=128, N=128):
    a = torch.randn(M, N, dtype=torch.float32)
    b = torch.randn(M, N, dtype=torch.float32)

    out = elementwise_add(a, b, block_M=32, block_N=32, threads=128, in_dtype=T.float32, out_dtype=T.float32)

    torch.testing.assert_close(out, ref_program(a, b), rtol=1e-2, atol=1e-2)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", type=int, default=128)
    parser.add_argument("--n", type=int, default=128)
    args, _ = parser.parse_known_args()
    main(args.m, args.n)
