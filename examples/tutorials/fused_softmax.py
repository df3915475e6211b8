"""Tutorial 2: fused softmax. Y = softmax(X) along each row, with the whole row in registers: X is read once and Y
written once, so the kernel moves the fewest bytes a softmax can.

    python examples/tutorials/fused_softmax.py
"""
import torch

import tilegcn
from tilegcn import language as T

LOG2E = 1.4426950408889634  # exp(x) = 2 ** (x * log2(e)); 2 ** x is one instruction


@tilegcn.jit
def softmax(X, Y, *, block_M=4, threads=256):
    M, N = X.shape
    with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:  # block_M rows per workgroup
        x = T.alloc_fragment((1, N), "float32")  # one whole row, spread over the 256 threads
        row_max = T.alloc_fragment((1,), "float32")  # one value per row: fewer elements than threads
        row_sum = T.alloc_fragment((1,), "float32")
        for r in T.serial(block_M):  # the rows one after another, so one row's loads overlap another's math
            T.copy(X[bx * block_M + r, 0], x)  # rows past the end of X read 0 and are never written
            T.reduce_max(x, row_max, dim=1)  # in each thread, then across lanes, then across waves
            for i, j in T.Parallel(1, N):
                x[i, j] = T.exp2((x[i, j] - row_max[i]) * LOG2E)  # row_max[i]: every column reads its row's max
            T.reduce_sum(x, row_sum, dim=1)
            for i in T.Parallel(1):
                row_sum[i] = 1.0 / row_sum[i]  # one division per row, then a multiply per element
            for i, j in T.Parallel(1, N):
                x[i, j] = x[i, j] * row_sum[i]
            T.copy(x, Y[bx * block_M + r, 0])  # fp32 -> Y.dtype, rounded to nearest even


def main():
    x = torch.randn(10, 1024, dtype=torch.bfloat16)
    y = torch.empty_like(x)
    softmax(x, y)  # 3 workgroups of 4 rows (the last has 2)
    torch.testing.assert_close(y, torch.softmax(x.float(), dim=1).to(torch.bfloat16), rtol=1e-2, atol=1e-3)
    kernel = softmax.compile(x, y)
    print(kernel.metadata["arch"], kernel.metadata["vgprs"], "VGPRs")
    print("PASS: softmax matches torch")


if __name__ == "__main__":
    main()
