"""Tutorial 5: autotuning. Sweep tile sizes and thread counts; the best config is remembered per shape.

    python examples/tutorials/autotuning.py

On the emulated device configs are ranked by the timing model's estimate for `device`; on a HIP device by
measured time. Results are cached on disk (`python -m tilegcn tune list`), so a second run does not sweep.
"""
import torch

import tilegcn
from tilegcn import language as T

SPACE = tilegcn.Space(block_M=[16, 64], block_N=[64, 256], threads=[64, 256])


@tilegcn.autotune(configs=SPACE, key=["M", "N"], device="MI355X", workers=1)
@tilegcn.jit
def scale(X: T.Tensor(("M", "N")), Y: T.Tensor(("M", "N")), *, block_M=64, block_N=256, threads=256):
    # the T.Tensor annotations name the sizes: the key ["M", "N"] tunes each shape once
    M, N = X.shape
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        x = T.alloc_fragment((block_M, block_N), "float32")
        T.copy(X[by * block_M, bx * block_N], x)
        for i, j in T.Parallel(block_M, block_N):
            x[i, j] = x[i, j] * 2.0
        T.copy(x, Y[by * block_M, bx * block_N])


def main():
    x = torch.randn(256, 1024)
    y = torch.empty_like(x)
    scale(x, y)  # the first call with this shape sweeps the configs, then runs the winner
    torch.testing.assert_close(y, 2 * x)
    print(scale.report)  # config, estimate, TFLOP/s, limiting resource, status
    assert scale.tune(x, y) == scale.report.best  # the winner, remembered: no second sweep
    assert scale.stats["sweeps"] == 1
    print("PASS: the tuned kernel matches torch; best config:", scale.report.best)


if __name__ == "__main__":
    main()
