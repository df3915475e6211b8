"""Tutorial 3: RMSNorm. Y = X / sqrt(mean(X ** 2) + eps) * W along each row: a reduction, a per-row statistic
broadcast back over the row, and a second input (the weight W) read once per workgroup.

    python examples/tutorials/rms_norm.py
"""
import torch

import tilegcn
from tilegcn import language as T


@tilegcn.jit
def rms_norm(X, W, Y, *, eps=1e-6, block_M=1, threads=256):
    M, N = X.shape
    with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
        x = T.alloc_fragment((block_M, N), "float32")
        w = T.alloc_fragment((N,), "float32")
        squares = T.alloc_fragment((block_M, N), "float32")
        rms = T.alloc_fragment((block_M,), "float32")
        T.copy(X[bx * block_M, 0], x)
        T.copy(W[0], w)
        for i, j in T.Parallel(block_M, N):
            squares[i, j] = x[i, j] * x[i, j]
        T.reduce_sum(squares, rms, dim=1)  # the sum of squares of each row
        for i in T.Parallel(block_M):
            rms[i] = T.rsqrt(rms[i] / N + eps)  # a T.Parallel over the row vector itself
        for i, j in T.Parallel(block_M, N):
            x[i, j] = x[i, j] * rms[i] * w[j]  # rms[i] broadcast along the row, w[j] down the columns
        T.copy(x, Y[bx * block_M, 0])


def main():
    x = torch.randn(10, 1024, dtype=torch.bfloat16)
    w = torch.randn(1024, dtype=torch.bfloat16)
    y = torch.empty_like(x)
    rms_norm(x, w, y)
    expected = torch.nn.functional.rms_norm(x.float(), (1024,), w.float(), eps=1e-6).to(torch.bfloat16)
    torch.testing.assert_close(y, expected, rtol=2e-2, atol=2e-2)
    print("PASS: rms_norm matches torch")


if __name__ == "__main__":
    main()
