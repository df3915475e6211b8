"""Tutorial 3: RMSNorm. Y = X / sqrt(mean(X ** 2) + eps) * W along each row: a reduction, a per-row statistic
broadcast back over the row, and a second input (the weight W) read once per workgroup.

    python examples/tutorials/rms_norm.py
"""
import torch

import tilegcn
from tilegcn import language as T


@tilegcn.jit
def rms_norm(X, W, Y, *, eps=1e-6, block_M=4, threads=256):
    M, N = X.shape
    with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:  # block_M rows per workgroup
        x = T.alloc_fragment((1, N), "float32")  # one whole row, spread over the threads
        w = T.alloc_fragment((N,), W.dtype)  # kept as W's type: bf16 takes half the registers of fp32
        squares = T.alloc_fragment((1, N), "float32")  # read only by the reduction: computed as it sums
        rms = T.alloc_fragment((1,), "float32")
        T.copy(W[0], w)  # once per workgroup: the registers keep W for all its rows
        for r in T.serial(block_M):  # the rows one after another, as in the fused softmax
            T.copy(X[bx * block_M + r, 0], x)
            for i, j in T.Parallel(1, N):
                squares[i, j] = x[i, j] * x[i, j]
            T.reduce_sum(squares, rms, dim=1)  # the sum of squares of the row
            for i in T.Parallel(1):
                rms[i] = T.rsqrt(rms[i] / N + eps)  # a T.Parallel over the row vector itself
            for i, j in T.Parallel(1, N):
                x[i, j] = x[i, j] * rms[i] * w[j]  # rms[i] broadcast along the row, w[j] down the columns
            T.copy(x, Y[bx * block_M + r, 0])


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
