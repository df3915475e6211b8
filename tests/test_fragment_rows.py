"""One row of a 2-d fragment, picked by a constant or by the variable of a loop with a compile-time trip count:
`y[i] = x[k, i]` inside T.Parallel and `T.copy(x[k, :], y)` (TileLang's flash-decoding combine kernel reads its
per-split log-sum-exp so). Such a loop is unrolled while tracing (language/unroll.py) and x is held whole along k
beside each thread's own elements. Run on the emulated device against torch; a loop whose trip count only the
device knows is refused with the way around it."""
import pytest
import torch

import tilegcn
from tilegcn import language as T
from tilegcn.errors import CompileError

ROWS, COLS = 4, 128


@tilegcn.jit
def weighted_rows(X, W, Y):
    """Y = sum over k of exp2(X[k] - max_k X[k]) * W[k]: every row of x read at [k, i] and copied out as x[k, :]."""
    with T.Kernel(1, threads=128) as bx:
        x = T.alloc_fragment((ROWS, COLS), "float32")
        row = T.alloc_fragment((COLS,), "float32")
        top = T.alloc_fragment((COLS,), "float32")
        acc = T.alloc_fragment((COLS,), "float32")
        T.copy(X[0, 0], x)
        T.reduce_max(x, top, dim=0)
        T.clear(acc)
        for k in T.Pipelined(ROWS):
            T.copy(x[k, :], row)
            for i in T.Parallel(COLS):
                acc[i] += T.exp2(row[i] - top[i]) * W[k]
        for i in T.Parallel(COLS):
            acc[i] += x[ROWS - 1, i] * 0.0 + x[0, i]  # a constant row index as well
        T.copy(acc, Y[0])


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_rows_picked_by_a_loop_variable(arch):
    g = torch.Generator().manual_seed(0)
    X, W = torch.randn(ROWS, COLS, generator=g), torch.randn(ROWS, generator=g)
    Y = torch.empty(COLS)
    weighted_rows(X, W, Y, arch=arch)
    ref = (torch.exp2(X - X.max(0).values) * W[:, None]).sum(0) + X[0]
    torch.testing.assert_close(Y, ref, rtol=1e-5, atol=1e-5)


@tilegcn.jit
def two_columns(X, Y):
    with T.Kernel(1, threads=64) as bx:
        x = T.alloc_fragment((COLS, ROWS), "float32")
        y = T.alloc_fragment((COLS,), "float32")
        T.copy(X[0, 0], x)
        for i in T.Parallel(COLS):
            y[i] = x[i, 0] + x[i, ROWS - 1] * 2.0  # the constant on the last dim: x whole along it per thread
        T.copy(y, Y[0])


def test_columns_picked_by_constants():
    X, Y = torch.randn(COLS, ROWS, generator=torch.Generator().manual_seed(1)), torch.empty(COLS)
    two_columns(X, Y, arch="gfx950")
    torch.testing.assert_close(Y, X[:, 0] + 2.0 * X[:, ROWS - 1])


@tilegcn.jit
def row_at_device_index(X, Y, n):
    with T.Kernel(1, threads=128) as bx:
        x = T.alloc_fragment((ROWS, COLS), "float32")
        acc = T.alloc_fragment((COLS,), "float32")
        T.copy(X[0, 0], x)
        T.clear(acc)
        for k in T.serial(n):  # a trip count only the device knows: not unrolled
            for i in T.Parallel(COLS):
                acc[i] += x[k, i]
        T.copy(acc, Y[0])


def test_a_row_picked_at_run_time_is_refused():
    with pytest.raises(CompileError, match=r"must be a constant in \[0, 4\).*unrolls"):
        row_at_device_index(torch.zeros(ROWS, COLS), torch.empty(COLS), 2, arch="gfx950")
