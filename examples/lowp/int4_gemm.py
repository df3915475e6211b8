"""Weight-only int4 GEMM on the bf16 matrix cores: C = A @ dequant(QB)^T, the int4 weights unpacked in registers.

    python examples/lowp/int4_gemm.py --check                       # 256 x 256 x 512 on the default device
    python examples/lowp/int4_gemm.py --arch gfx942 --m 128 --n 192 --k 256 --group 64 --check

QB (N, K / 2) uint8 holds two signed int4 weights a byte, the low nibble first (k even), each nibble two's
complement (-8 .. 7); S (N, K / group) bf16 scales each run of `group` weights along K. Each K step copies the
packed tile into a fragment, and every thread unpacks its weights in registers (shift the nibble to the top of a
byte, read it as int8, shift back down arithmetically: TileLang's `_tir_u8_to_i4_to_i8`), scales them to bf16,
and stores them into B's shared tile for a bf16 T.gemm: what gfx942, whose matrix cores have no 4-bit input, runs
(TileLang's dequantize GEMMs do the same in bf16 / fp16; its int4 one, the W4A8 port in examples/tilelang, multiplies
int8).
"""
import argparse

import torch

import tilegcn
from tilegcn import language as T


@tilegcn.jit
def int4_gemm(A, QB, S, C, *, block_M=64, block_N=64, block_K=64, num_stages=2, threads=256):
    M, K = A.shape
    N = QB.shape[0]
    group = K // S.shape[1]
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        A_s = T.alloc_shared((block_M, block_K), T.bfloat16)
        QB_s = T.alloc_shared((block_N, block_K // 2), T.uint8)
        QB_local = T.alloc_fragment((block_N, block_K // 2), T.uint8)
        B_local = T.alloc_fragment((block_N, block_K), T.bfloat16)
        B_s = T.alloc_shared((block_N, block_K), T.bfloat16)
        acc = T.alloc_fragment((block_M, block_N), T.float32)
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
            T.copy(A[by * block_M, k * block_K], A_s)
            T.copy(QB[bx * block_N, k * block_K // 2], QB_s)
            T.copy(QB_s, QB_local)
            for i, j in T.Parallel(block_N, block_K):
                nibble_at_top = (QB_local[i, j // 2] << (4 - 4 * (j % 2))).astype(T.uint8)
                weight = T.reinterpret(T.int8, nibble_at_top) >> 4  # -8 .. 7
                B_local[i, j] = weight * S[bx * block_N + i, (k * block_K + j) // group]
            T.copy(B_local, B_s)
            T.gemm(A_s, B_s, acc, transpose_B=True)
        T.copy(acc, C[by * block_M, bx * block_N])


def dequantize(QB: torch.Tensor, S: torch.Tensor) -> torch.Tensor:
    """The weights as fp32, from the format's definition: nibble k % 2 of byte k // 2, two's complement, times
    the scale of its group."""
    nibbles = torch.stack((QB & 0xF, QB >> 4), dim=-1).reshape(QB.shape[0], -1).long()
    group = nibbles.shape[1] // S.shape[1]
    return (nibbles - 16 * (nibbles >= 8)).float() * S.float().repeat_interleave(group, dim=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default=None)
    ap.add_argument("--m", type=int, default=256)
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--k", type=int, default=512)
    ap.add_argument("--group", type=int, default=128)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(0)
    A = torch.randn(args.m, args.k, generator=gen).to(torch.bfloat16)
    QB = torch.randint(0, 256, (args.n, args.k // 2), dtype=torch.uint8, generator=gen)
    S = (torch.rand(args.n, args.k // args.group, generator=gen) / 8).to(torch.bfloat16)
    C = torch.empty(args.m, args.n, dtype=torch.bfloat16)
    int4_gemm(A, QB, S, C, arch=args.arch)
    arch = int4_gemm.compile(A, QB, S, C, arch=args.arch).metadata["arch"]
    print(f"int4 weight GEMM {args.m}x{args.n}x{args.k}, group {args.group}, on {arch}")
    if args.check:
        # the kernel rounds each scaled weight to bf16 (B's tile), sums exact products in fp32, rounds C to bf16
        want = (A.float() @ dequantize(QB, S).to(torch.bfloat16).float().T).to(torch.bfloat16).float()
        err = (C.float() - want).abs()
        bound = 2 ** -7 * want.abs() + 1e-3  # one bf16 rounding of C apart
        assert bool((err <= bound).all()), f"max error {err.max().item():.4g}"
        print(f"PASS: max error {err.max().item():.4g} <= {bound.max().item():.3g} against torch")


if __name__ == "__main__":
    main()
