"""The timing model on K loops whose trip count only the device knows, pipelined by `_pipeline_on_device`
(passes/pipelining.py), against the same loop with a compile-time trip count:

    PYTHONPATH=$PWD python bench/device_trip_pipelining.py [--arch gfx942,gfx950]

1. A bf16 GEMM, M = N = 2048, K = 4096, 128x128x64 tiles, 256 threads, num_stages=2: K static (`_pipeline`) and K
   declared `T.dynamic` (a device trip count). Every workgroup runs all K trips, so the workgroup the model
   simulates in detail (`CompiledKernel.estimate()`: the first round of one XCD, copies of workgroup 0's streams)
   is representative.
2. TileLang's causal GQA forward (examples/tilelang/example_gqa_fwd_bshd.py; 16 query heads over 4 KV heads,
   2048 tokens, head dim 128, block 64 x 64, 128 threads, num_stages=2): its KV loop ends at
   min(ceildiv(seq, 64), bx + 1). The model simulates five workgroups along x (bx = 0, the quarter points, the
   last: 1 to 32 KV tiles), interpolates the others' cycles linearly in bx and dispatches the grid greedily
   (perfmodel/grid.py `sample_workgroups`). TFLOP/s here count the causal half of the FLOPs, 2 * B * H * S^2 * D.

Run it with PYTHONPATH at a checkout before the device-loop pipeliner for the serial figures."""

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "examples" / "tilelang")]

import torch  # noqa: E402

import tilegcn  # noqa: E402
from tilegcn import language as T  # noqa: E402

import example_gqa_fwd_bshd  # noqa: E402

KD = T.dynamic("KD")
M = N = 2048
K = 4096


def _k_loop(A, B, C, bm, bn, bk):
    """The body both GEMMs share: its K loop's trip count is ceildiv(A.shape[1], bk)."""
    with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=256) as (bx, by):
        A_s = T.alloc_shared((bm, bk), "bfloat16")
        B_s = T.alloc_shared((bk, bn), "bfloat16")
        acc = T.alloc_fragment((bm, bn), "float32")
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(A.shape[1], bk), num_stages=2):
            T.copy(A[by * bm, k * bk], A_s)
            T.copy(B[k * bk, bx * bn], B_s)
            T.gemm(A_s, B_s, acc)
        T.copy(acc, C[by * bm, bx * bn])


@tilegcn.jit
def gemm_static_k(A: T.Tensor((M, K), "bfloat16"), B: T.Tensor((K, N), "bfloat16"), C: T.Tensor((M, N), "bfloat16"),
                  *, bm=128, bn=128, bk=64):
    _k_loop(A, B, C, bm, bn, bk)


@tilegcn.jit
def gemm_dynamic_k(A: T.Tensor((M, KD), "bfloat16"), B: T.Tensor((KD, N), "bfloat16"),
                   C: T.Tensor((M, N), "bfloat16"), *, bm=128, bn=128, bk=64):
    _k_loop(A, B, C, bm, bn, bk)


def _tflops(flops: float, e) -> str:
    return f"{flops / e.seconds / 1e12:7.1f} TFLOP/s ({e.seconds * 1e6:.1f} us, {e.breakdown['workgroups_per_cu']} " \
           f"workgroup(s)/CU)"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--arch", default="gfx942,gfx950")
    args = p.parse_args()
    for arch in args.arch.split(","):
        a, b, c = torch.zeros(M, K, dtype=torch.bfloat16), torch.zeros(K, N, dtype=torch.bfloat16), \
            torch.zeros(M, N, dtype=torch.bfloat16)
        for name, kernel in (("K static ", gemm_static_k), ("K dynamic", gemm_dynamic_k)):
            compiled = kernel.compile(a, b, c, arch=arch)
            print(f"{arch} GEMM {M}x{N}x{K} {name}: {_tflops(2 * M * N * K, compiled.estimate(args=[a, b, c]))}")
        B_, H, S, D = 1, 16, 2048, 128
        q, kv = torch.zeros(B_, S, H, D).half(), torch.zeros(B_, S, H // 4, D).half()
        attn = example_gqa_fwd_bshd.flashattn(B_, H, S, D, True, groups=4, block_M=64, block_N=64, num_stages=2,
                                              threads=128).compile(q, kv, kv, arch=arch)
        print(f"{arch} causal GQA {H}/{H // 4} heads, S={S}, d={D}: "
              f"{_tflops(2 * B_ * H * S * S * D, attn.estimate())}, {attn.metadata['vgprs']} VGPRs")


if __name__ == "__main__":
    main()
