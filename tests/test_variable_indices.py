"""One-element int variables (T.alloc_var, `T.alloc_fragment((1,), T.int32, "local")`) used as indices: tile
starts, T.Parallel global indices and device loop trip counts read the variable where the program reads it
(TileLang binds `src = v[0] % 4` there), with `//` and `%` flooring. TileLang's eager annotations may take their
shape from a body variable (`X_shape = (N, M) if trans else (M, N)`). Emulated device, checks on, against torch."""
import pytest
import torch

import tilegcn
from tilegcn import language as T
from tilegcn.errors import ArgumentError, CompileError

ARCHES = ["gfx942", "gfx950"]


@tilegcn.jit
def shuffled_row_blocks(A, Order, O):
    with T.Kernel(4, threads=64) as bx:
        v = T.alloc_var(T.int32)
        t = T.alloc_fragment((16, 32), "float32")
        T.copy(Order[bx], v)
        src = v[0] % 4  # read here: the assignment below does not change src
        v[0] = v[0] + 1
        T.copy(A[src * 16, 0], t)
        T.copy(t, O[bx * 16, 0])


@tilegcn.jit
def sum_rows_from(A, Start, O):
    with T.Kernel(2, threads=64) as bx:
        s = T.alloc_fragment((1,), T.int32, "local")
        acc = T.alloc_fragment((64,), "float32")
        T.copy(Start[bx], s)
        T.clear(acc)
        for k in T.Pipelined(8 - s[0], num_stages=2):  # a trip count only the device knows
            for j in T.Parallel(64):
                acc[j] = acc[j] + A[s[0] + k, j]
        T.copy(acc, O[bx, 0])


@pytest.mark.parametrize("arch", ARCHES)
def test_a_variable_picks_the_tile_where_it_was_read(arch):
    A = torch.randn(64, 32)
    order = torch.tensor([-1, 5, 2, -4], dtype=torch.int32)  # floor mod 4: 3, 1, 2, 0
    O = torch.empty(64, 32)
    shuffled_row_blocks(A, order, O, arch=arch)
    blocks = A.view(4, 16, 32)
    torch.testing.assert_close(O.view(4, 16, 32), blocks[torch.remainder(order, 4).long()])


@pytest.mark.parametrize("arch", ARCHES)
def test_a_variable_bounds_a_loop_and_indexes_a_parallel_read(arch):
    A = torch.randn(8, 64)
    start = torch.tensor([2, 7], dtype=torch.int32)
    O = torch.empty(2, 64)
    sum_rows_from(A, start, O, arch=arch)
    torch.testing.assert_close(O, torch.stack([A[2:].sum(0), A[7:].sum(0)]), rtol=1e-5, atol=1e-5)


def test_a_float_variable_as_an_index_is_refused():
    @tilegcn.jit
    def float_index(A, O):
        with T.Kernel(1, threads=64) as bx:
            f = T.alloc_var("float32", init=1.0)
            t = T.alloc_fragment((16, 32), "float32")
            T.copy(A[f[0], 0], t)
            T.copy(t, O[0, 0])

    with pytest.raises(CompileError, match=r"float value; an index is an int.*T\.cast"):
        float_index(torch.randn(32, 32), torch.empty(16, 32))


def test_alloc_fragment_refuses_a_shared_scope():
    @tilegcn.jit
    def shared_fragment(A):
        with T.Kernel(1, threads=64) as bx:
            T.alloc_fragment((16,), "float32", "shared")

    with pytest.raises(CompileError, match=r"alloc_fragment\(scope='shared'\).*T\.alloc_shared"):
        shared_fragment(torch.randn(16))


@tilegcn.jit
def copy_maybe_transposed(X, Y, trans):
    M, N = T.const("M, N")
    X_shape = (N, M) if trans else (M, N)

    X: T.Tensor(X_shape, "float32")
    Y: T.Tensor((M, N), "float32")

    with T.Kernel(1, threads=64) as bx:
        y = T.alloc_fragment((M, N), "float32")
        for i, j in T.Parallel(M, N):
            y[i, j] = X[j, i] if trans else X[i, j]
        T.copy(y, Y[0, 0])


def test_an_annotation_takes_its_shape_from_a_body_variable():
    X = torch.randn(8, 16)
    Y = torch.empty(16, 8)
    copy_maybe_transposed(X, Y, True)  # X is (N, M): M = 16, N = 8
    torch.testing.assert_close(Y, X.T)
    Y = torch.empty(8, 16)
    copy_maybe_transposed(X, Y, False)
    torch.testing.assert_close(Y, X)
    with pytest.raises(ArgumentError, match="mismatched shapes"):
        copy_maybe_transposed(X, torch.empty(8, 16), True)


def test_a_shape_variable_python_cannot_evaluate_early_is_refused():
    @tilegcn.jit
    def decided_by_size(X, Y):
        M, N = T.const("M, N")
        X_shape = (M, N) if M > 4 else (N, M)
        X: T.Tensor(X_shape, "float32")
        Y: T.Tensor((M, N), "float32")
        with T.Kernel(1, threads=64) as bx:
            T.copy(X[0, 0], Y[0, 0])

    with pytest.raises(CompileError, match=r"X_shape = .*write the shape as a tuple"):
        decided_by_size(torch.randn(8, 8), torch.empty(8, 8))


@tilegcn.jit
def count_to_the_block(O):
    with T.Kernel(3, threads=64) as bx:
        n = T.alloc_var(T.int32, init=0)
        f = T.alloc_var("float32", init=0.0)
        o = T.alloc_fragment((2,), "float32")
        while n[0] < bx + 2:  # an int variable against an index
            n[0] = n[0] + 1
        while f[0] < bx * 2:  # a float one against an index (converted once)
            f[0] = f[0] + 1.0
        for i in T.Parallel(2):
            o[i] = T.if_then_else(i == 0, T.cast(n[0], "float32"), f[0])
        T.copy(o, O[bx, 0])


@pytest.mark.parametrize("arch", ARCHES)
def test_a_while_compares_a_variable_with_an_index(arch):
    O = torch.empty(3, 2)
    count_to_the_block(O, arch=arch)
    torch.testing.assert_close(O, torch.tensor([[2.0, 0.0], [3.0, 2.0], [4.0, 4.0]]))


def test_a_shape_variable_naming_a_dynamic_size_is_refused():
    @tilegcn.jit
    def dynamic_in_a_variable(X, Y):
        M = T.dynamic("M")
        X_shape = (M, 16)
        Y_shape = (M, 16) if True else (16, M)
        X: T.Tensor(X_shape, "float32")
        Y: T.Tensor(Y_shape, "float32")
        with T.Kernel(1, threads=64) as bx:
            T.copy(X[0, 0], Y[0, 0])

    with pytest.raises(CompileError, match=r"Y_shape, which names a T\.dynamic size.*as a tuple"):
        dynamic_in_a_variable(torch.randn(8, 16), torch.empty(8, 16))
