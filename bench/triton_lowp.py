"""Compile Triton 3.9's fp8 matmul and `tl.dot_scaled` MXFP4 matmul for an 8192^3 launch (bench/lowp_gemm.py --triton).

Benchmark-only (Triton is never a tilegcn dependency; the code objects are not committed). Run it with the Triton
environment, which compiles for AMD targets without a GPU (as bench/corpus/make_corpus.py does):

    /work/venvs/triton/bin/python bench/triton_lowp.py --out /tmp/triton_lowp

Writes NAME.ARCH.hsaco and a manifest.json ({file: kernel, arch, kind, BM/BN/BK, num_warps, num_stages, block,
shared_mem}) for:
- `fp8`: C [M, N] bf16 = A [M, K] @ B^T, A and B^T [N, K] row-major in the arch's e4m3 (gfx942: fp8e4b8 /
  float8_e4m3fnuz; gfx950: fp8e4nv / float8_e4m3fn), the same layout as tilegcn's fp8 T.gemm (B K-major), fp32
  accumulation; the grouped program order of Triton's matmul tutorial (GROUP_SIZE_M). Tiles: the large tiles of
  Triton's AMD matmul autotune lists, num_warps=8, num_stages=2, matrix_instr_nonkdim=16.
- `mxfp4` (gfx950 only, which has the scaled f8f6f4 MFMAs): C fp32 = dot_scaled(A e2m1, B^T e2m1) with one E8M0
  scale per 32 K elements, A [M, K/2] and B^T [N, K/2] packed bytes, scales [M, K/32] / [N, K/32].
M, N, K are i32 arguments marked divisible by 16 (as Triton's launcher specialises them for 8192).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

FP8 = {"gfx942": "fp8e4b8", "gfx950": "fp8e4nv"}
# (BM, BN, BK, num_warps, num_stages): BK in elements
FP8_TILES = [(256, 256, 128, 8, 2), (256, 256, 64, 8, 2), (256, 128, 128, 8, 2), (128, 256, 128, 8, 2),
             (128, 128, 128, 4, 2)]
MXFP4_TILES = [(256, 256, 256, 8, 2), (256, 128, 256, 8, 2), (128, 128, 256, 4, 2)]


@triton.jit
def _grouped_tile(M, N, BM: tl.constexpr, BN: tl.constexpr, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) in groups of GROUP_M tile rows, for L2 reuse (Triton's matmul tutorial's order)."""
    pid = tl.program_id(0)
    n_m = tl.cdiv(M, BM)
    n_n = tl.cdiv(N, BN)
    group = pid // (GROUP_M * n_n)
    first_m = group * GROUP_M
    size_m = min(n_m - first_m, GROUP_M)
    return first_m + (pid % size_m), (pid % (GROUP_M * n_n)) // size_m


@triton.jit
def fp8_matmul(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    pid_m, pid_n = _grouped_tile(M, N, BM, BN, GROUP_M)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptr = a + rm[:, None] * K + rk[None, :]
    b_ptr = b + rn[None, :] * K + rk[:, None]
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for _ in range(0, tl.cdiv(K, BK)):
        acc += tl.dot(tl.load(a_ptr), tl.load(b_ptr))
        a_ptr += BK
        b_ptr += BK
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16))


@triton.jit
def mxfp4_matmul(a, a_scale, b, b_scale, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                 GROUP_M: tl.constexpr):
    pid_m, pid_n = _grouped_tile(M, N, BM, BN, GROUP_M)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rkp = tl.arange(0, BK // 2)
    rks = tl.arange(0, BK // 32)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k0 in range(0, K, BK):
        at = tl.load(a + rm[:, None] * (K // 2) + (k0 // 2 + rkp)[None, :])
        bt = tl.load(b + rn[:, None] * (K // 2) + (k0 // 2 + rkp)[None, :])
        sa = tl.load(a_scale + rm[:, None] * (K // 32) + (k0 // 32 + rks)[None, :])
        sb = tl.load(b_scale + rn[:, None] * (K // 32) + (k0 // 32 + rks)[None, :])
        acc = tl.dot_scaled(at, sa, "e2m1", tl.trans(bt), sb, "e2m1", acc)
    tl.store(c + rm[:, None] * N + rn[None, :], acc)


def compile_one(fn, sig, tile, arch):
    bm, bn, bk, warps, stages = tile
    constexprs = {"BM": bm, "BN": bn, "BK": bk, "GROUP_M": 8}
    signature = dict(sig, **{k: "constexpr" for k in constexprs})
    ints = [i for i, (name, ty) in enumerate(sig.items()) if ty == "i32" or ty.startswith("*")]
    attrs = {(i,): [["tt.divisibility", 16]] for i in ints}
    src = ASTSource(fn, signature=signature, constexprs=constexprs, attrs=attrs)
    options = {"num_warps": warps, "num_stages": stages, "matrix_instr_nonkdim": 16}
    return triton.compile(src, target=GPUTarget("hip", arch, 64), options=options)


def builds():
    """[(kind, fn, signature, tile, arch)]."""
    out = []
    for arch, e4 in FP8.items():
        sig = {"a": f"*{e4}", "b": f"*{e4}", "c": "*bf16", "M": "i32", "N": "i32", "K": "i32"}
        out += [("fp8", fp8_matmul, sig, t, arch) for t in FP8_TILES]
    sig = {"a": "*u8", "a_scale": "*u8", "b": "*u8", "b_scale": "*u8", "c": "*fp32", "M": "i32", "N": "i32",
           "K": "i32"}
    out += [("mxfp4", mxfp4_matmul, sig, t, "gfx950") for t in MXFP4_TILES]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    manifest = {}
    for kind, fn, sig, tile, arch in builds():
        bm, bn, bk, warps, stages = tile
        stem = f"{kind}_{bm}x{bn}x{bk}_w{warps}_s{stages}.{arch}"
        try:
            k = compile_one(fn, sig, tile, arch)
        except Exception as exc:  # one config that does not compile must not stop the others
            print(f"FAILED {stem}: {type(exc).__name__}: {str(exc)[:200]}", file=sys.stderr)
            continue
        with open(os.path.join(args.out, stem + ".hsaco"), "wb") as f:
            f.write(k.asm["hsaco"])
        manifest[stem + ".hsaco"] = dict(kind=kind, arch=arch, kernel=k.name, BM=bm, BN=bn, BK=bk, num_warps=warps,
                                         num_stages=stages, block=[64 * k.metadata.num_warps, 1, 1],
                                         shared_mem=k.metadata.shared, compiler=f"triton {triton.__version__}")
        print(f"built {stem}: {k.metadata.shared} B LDS")
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
