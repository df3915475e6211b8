"""Kernels for tests/test_autotune.py, in a module of their own so that spawned compile workers and child
processes can import them."""
import tilegcn
from tilegcn import language as T
from tilegcn.autotune import Score


class ShapeRanker:
    """A stand-in ranker for the sweep mechanics (not a timing model): the lowest `prefer(config, args)` wins;
    configs `fail(config)` selects raise; calls are counted."""

    name = "test-ranker"

    def __init__(self, prefer, fail=lambda config: False):
        self.prefer, self.fail, self.calls = prefer, fail, 0

    def __call__(self, kernel, args):
        self.calls += 1
        if self.fail(kernel.constants):
            raise RuntimeError(f"cannot run {kernel.constants}")
        return Score(self.prefer(kernel.constants, args), limit="test", kind="test")


def small_tiles_for_small_inputs(config, args):
    """Prefers small tiles when X has few rows and big tiles otherwise, so winners differ by shape."""
    tile = config["block_M"] * config["block_N"]
    return 1e-6 * (tile if args[0].shape[0] <= 32 else 1 / tile) * (2 if config.get("threads") == 64 else 1)


ranker = ShapeRanker(small_tiles_for_small_inputs, fail=lambda c: c["block_N"] == 32)


@tilegcn.autotune(configs=tilegcn.Space(block_M=[16, 32], block_N=[32, 64], threads=[256]),
                  ranker=ranker, workers=2, progress=False, verbose=False)
@tilegcn.jit
def scale(X: T.Tensor(("M", "N")), Y: T.Tensor(("M", "N")), *, a=2.0, block_M=16, block_N=64, threads=64):
    M, N = X.shape
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        x = T.alloc_fragment((block_M, block_N), "float32")
        T.copy(X[by * block_M, bx * block_N], x)
        for i, j in T.Parallel(block_M, block_N):
            x[i, j] = x[i, j] * a
        T.copy(x, Y[by * block_M, bx * block_N])


# Y = 2 X in one workgroup whose size is the only tuned constant (the compile-worker and cluster tests)
@tilegcn.jit
def double(X, Y, *, threads=64):
    M, N = X.shape
    with T.Kernel(1, 1, threads=threads) as (bx, by):
        x = T.alloc_fragment((M, N), "float32")
        T.copy(X[0, 0], x)
        for i, j in T.Parallel(M, N):
            x[i, j] = x[i, j] * 2.0
        T.copy(x, Y[0, 0])
