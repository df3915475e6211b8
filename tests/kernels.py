"""Tile programs shared by the tests (the same ones the README shows)."""
import tilegcn
from tilegcn import language as T


@tilegcn.jit
def copy2d(X, Y, *, block_M=64, block_N=128, threads=256):
    M, N = X.shape
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        tile = T.alloc_fragment((block_M, block_N), X.dtype)
        T.copy(X[by * block_M, bx * block_N], tile)
        T.copy(tile, Y[by * block_M, bx * block_N])


@tilegcn.jit
def axpb_relu(X, Y, *, a=2.0, b=1.0, block_M=256, block_N=128, threads=256):
    """Y = relu(a * X + b), computed in fp32 on the fragment, stored in Y's dtype."""
    M, N = X.shape
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        x = T.alloc_fragment((block_M, block_N), "float32")
        T.copy(X[by * block_M, bx * block_N], x)
        for i, j in T.Parallel(block_M, block_N):
            x[i, j] = T.max(x[i, j] * a + b, 0.0)
        T.copy(x, Y[by * block_M, bx * block_N])


@tilegcn.jit
def gemm(A, B, C, *, block_M=128, block_N=128, block_K=64, threads=256, transpose_B=False, num_stages=1, ping_pong=None):
    """C = A @ B (B given as (N, K) when transpose_B), fp32 accumulation, stored in C's dtype (ping_pong: T.Pipelined's)."""
    M, K = A.shape
    N = C.shape[1]
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        A_s = T.alloc_shared((block_M, block_K), A.dtype)
        B_s = T.alloc_shared((block_N, block_K) if transpose_B else (block_K, block_N), B.dtype)
        acc = T.alloc_fragment((block_M, block_N), "float32")
        T.use_swizzle(panel_size=4, num_xcds=8)
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages, annotations={"ping_pong": ping_pong}):
            T.copy(A[by * block_M, k * block_K], A_s)
            if transpose_B:
                T.copy(B[bx * block_N, k * block_K], B_s)
            else:
                T.copy(B[k * block_K, bx * block_N], B_s)
            T.gemm(A_s, B_s, acc, transpose_B=transpose_B)
        T.copy(acc, C[by * block_M, bx * block_N])


@tilegcn.jit
def gemm_bias_relu(A, B, Bias, C, *, block_M=128, block_N=128, block_K=64, threads=256, transpose_B=False,
                   num_stages=1):
    """C = relu(A @ B + Bias[None, :]): the epilogue runs on the accumulator fragment."""
    M, K = A.shape
    N = C.shape[1]
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        A_s = T.alloc_shared((block_M, block_K), A.dtype)
        B_s = T.alloc_shared((block_N, block_K) if transpose_B else (block_K, block_N), B.dtype)
        acc = T.alloc_fragment((block_M, block_N), "float32")
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
            T.copy(A[by * block_M, k * block_K], A_s)
            if transpose_B:
                T.copy(B[bx * block_N, k * block_K], B_s)
            else:
                T.copy(B[k * block_K, bx * block_N], B_s)
            T.gemm(A_s, B_s, acc, transpose_B=transpose_B)
        for i, j in T.Parallel(block_M, block_N):
            acc[i, j] = T.max(acc[i, j] + Bias[bx * block_N + j], 0.0)
        T.copy(acc, C[by * block_M, bx * block_N])


@tilegcn.jit
def gemm_grid_order(A, B, C, *, block_M=256, block_N=192, block_K=64, threads=256, swizzle=True, num_xcds=8):
    """C = A @ B in row-major workgroup order, or with T.use_swizzle(panel_size=8, num_xcds=num_xcds) when
    `swizzle` (num_xcds=1: panel order alone)."""
    M, K = A.shape
    N = B.shape[1]
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        A_s = T.alloc_shared((block_M, block_K), A.dtype)
        B_s = T.alloc_shared((block_K, block_N), B.dtype)
        acc = T.alloc_fragment((block_M, block_N), "float32")
        if swizzle:
            T.use_swizzle(panel_size=8, num_xcds=num_xcds)
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=1):
            T.copy(A[by * block_M, k * block_K], A_s)
            T.copy(B[k * block_K, bx * block_N], B_s)
            T.gemm(A_s, B_s, acc)
        T.copy(acc, C[by * block_M, bx * block_N])


M_rows = T.dynamic("M")


@tilegcn.jit
def gemm_dynamic_m(A: T.Tensor((M_rows, "K")), B, C: T.Tensor((M_rows, "N")), *, block_M=128, block_N=128,
                   block_K=64, threads=256, transpose_B=False, num_stages=1):
    """`gemm` with a dynamic M (T.dynamic): one compile per divisibility class of M by 16 serves every M. Without
    `gemm`'s T.use_swizzle, whose remap needs compile-time grid sizes (docs/refusals.md)."""
    M, K = A.shape
    N = C.shape[1]
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        A_s = T.alloc_shared((block_M, block_K), A.dtype)
        B_s = T.alloc_shared((block_N, block_K) if transpose_B else (block_K, block_N), B.dtype)
        acc = T.alloc_fragment((block_M, block_N), "float32")
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
            T.copy(A[by * block_M, k * block_K], A_s)
            if transpose_B:
                T.copy(B[bx * block_N, k * block_K], B_s)
            else:
                T.copy(B[k * block_K, bx * block_N], B_s)
            T.gemm(A_s, B_s, acc, transpose_B=transpose_B)
        T.copy(acc, C[by * block_M, bx * block_N])


@tilegcn.jit
def mx_gemm(A, B, SA, SB, C, *, block_M=64, block_N=64, block_K=128, threads=256, num_stages=1, scaled=True):
    """C = (A * 2**(SA - 127)) @ (B * 2**(SB - 127))^T: MXFP8 / MXFP4 operands A (M, K), B (N, K) with E8M0 scales SA
    (M, K / 32), SB (N, K / 32) (gfx950); packed fp4 (float4_e2m1fn_x2) operands are (M, K / 2) / (N, K / 2) bytes.
    `scaled=False`: A @ B^T (the scales unread)."""
    M, N = C.shape
    per_byte = 2 if A.dtype == T.float4_e2m1fn_x2 else 1
    K = A.shape[1] * per_byte
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        A_s = T.alloc_shared((block_M, block_K // per_byte), A.dtype)
        B_s = T.alloc_shared((block_N, block_K // per_byte), B.dtype)
        SA_s = T.alloc_shared((block_M, block_K // 32), T.uint8)
        SB_s = T.alloc_shared((block_N, block_K // 32), T.uint8)
        acc = T.alloc_fragment((block_M, block_N), T.float32)
        T.use_swizzle(panel_size=4, num_xcds=8)
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
            T.copy(A[by * block_M, k * block_K // per_byte], A_s)
            T.copy(B[bx * block_N, k * block_K // per_byte], B_s)
            if scaled:
                T.copy(SA[by * block_M, k * block_K // 32], SA_s)
                T.copy(SB[bx * block_N, k * block_K // 32], SB_s)
                T.gemm(A_s, B_s, acc, transpose_B=True, scale_A=SA_s, scale_B=SB_s)
            else:
                T.gemm(A_s, B_s, acc, transpose_B=True)
        T.copy(acc, C[by * block_M, bx * block_N])


def fma_f32(a, b, c):
    """fp32 a * b + c with one rounding (to nearest, ties to even), elementwise over torch tensors: the oracle for
    tilegcn's contracted `a * b + c` (CompileOptions.fp_contract), computed outside tilegcn and torch's fp32 math:
    exact rationals (fractions), then the nearest fp32 chosen among float32(the value) and its two neighbours.
    Python 3.11 has no math.fma; NaN / inf inputs go through numpy's float64 (no rounding question there)."""
    import math
    from fractions import Fraction

    import numpy as np
    import torch

    a, b, c = torch.broadcast_tensors(*(torch.as_tensor(t, dtype=torch.float32) for t in (a, b, c)))
    out = []
    for x, y, z in zip(a.flatten().tolist(), b.flatten().tolist(), c.flatten().tolist()):
        if not all(map(math.isfinite, (x, y, z))):
            out.append(np.float32(np.float64(x) * np.float64(y) + np.float64(z)))
            continue
        exact = Fraction(x) * Fraction(y) + Fraction(z)
        guess = np.float32(float(exact))
        candidates = [guess, np.nextafter(guess, np.float32(-np.inf)), np.nextafter(guess, np.float32(np.inf))]
        finite = [f for f in candidates if np.isfinite(f)]
        best = min(finite, key=lambda f: (abs(Fraction(float(f)) - exact), int(np.float32(f).view(np.uint32)) & 1))
        out.append(best if finite else guess)
    return torch.tensor(np.array(out, dtype=np.float32)).reshape(a.shape)
