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
