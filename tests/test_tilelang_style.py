"""TileLang's ways of writing a kernel, as tilegcn reads them: the closure style (a jitted factory returning a
@T.prim_func), the eager style (tensors annotated in the body, sizes from T.const), T.serial / T.Serial loops,
T.alloc_local and T.alloc_var. Small kernels on the emulated device, checked against torch."""
import pytest
import torch

import tilegcn
from tilegcn import language as T
from tilegcn.errors import ArgumentError, CompileError

M = 3  # a module-level name that an eager kernel's annotation also uses: the annotation's size must win


@tilegcn.jit
def scale_rows(rows, cols, factor=2.0):
    @T.prim_func
    def main(X: T.Tensor((rows, cols), "float32"), Y: T.Tensor((rows, cols), "float32")):
        with T.Kernel(rows, threads=64) as bx:
            x = T.alloc_fragment((1, cols), "float32")
            T.copy(X[bx, 0], x)
            for i, j in T.Parallel(1, cols):
                x[i, j] = x[i, j] * factor
            T.copy(x, Y[bx, 0])

    return main


def test_closure_style_factory_gives_a_kernel_per_argument_set():
    x = torch.randn(4, 64)
    y = torch.empty_like(x)
    kernel = scale_rows(4, 64)
    kernel(x, y)
    assert torch.equal(y, 2 * x)
    assert scale_rows(4, 64) is kernel  # the same arguments: the same kernel, no new trace
    scale_rows(4, 64, factor=3.0)(x, y)
    assert torch.equal(y, 3 * x)


def test_closure_style_annotations_are_checked():
    with pytest.raises(ArgumentError, match=r"dimension 0 must be 4"):
        scale_rows(4, 64)(torch.randn(5, 64), torch.empty(5, 64))


def test_a_factory_must_return_its_prim_func():
    @tilegcn.jit
    def forgets_to_return(n):
        @T.prim_func
        def main(X: T.Tensor((n,), "float32")):
            pass

    with pytest.raises(CompileError, match=r"must return that prim_func; it returned None"):
        forgets_to_return(64)


@tilegcn.jit
def add_rows(X, Y, Z, block_N, scale=1.0):
    R, C = T.const("R, C")
    X: T.Tensor((R, C), "float32")
    Y: T.Tensor((R, C), "float32")
    Z: T.Tensor((R, C), "float32")
    with T.Kernel(R, T.ceildiv(C, block_N), threads=64) as (bx, by):
        x = T.alloc_fragment((1, block_N), "float32")
        y = T.alloc_fragment((1, block_N), "float32")
        T.copy(X[bx, by * block_N], x)
        T.copy(Y[bx, by * block_N], y)
        for i, j in T.Parallel(1, block_N):
            x[i, j] = (x[i, j] + y[i, j]) * scale
        T.copy(x, Z[bx, by * block_N])
    return Z


def test_eager_style_tensors_from_body_annotations_constants_by_position_or_name():
    x, y = torch.randn(5, 200), torch.randn(5, 200)
    z = torch.empty_like(x)
    add_rows(x, y, z, 64)  # block_N by position: a compile-time constant, not a runtime scalar
    torch.testing.assert_close(z, x + y)
    add_rows(x, y, Z=z, block_N=128, scale=0.5)
    torch.testing.assert_close(z, (x + y) * 0.5)
    assert add_rows.compile(x, y, z, 64).ir.splitlines()[0].startswith("kernel add_rows grid=(5, 4, 1)")


def test_eager_style_sizes_named_in_annotations_must_agree():
    with pytest.raises(ArgumentError, match=r"Y.shape\[1\] = 100 but C = 200 from argument X"):
        add_rows(torch.randn(5, 200), torch.randn(5, 100), torch.empty(5, 200), 64)


def test_eager_style_missing_tensor_argument():
    with pytest.raises(ArgumentError, match=r"missing tensor argument\(s\) Z"):
        add_rows(torch.randn(5, 200), torch.randn(5, 200), block_N=64)


@tilegcn.jit
def copy_vector(X, Y, block=64, dtype: T.dtype = T.float32):
    X: T.Tensor([M], dtype)  # M is only named here: the tensor's size, not the module's M = 3
    Y: T.Tensor[[M], dtype]  # TileLang's subscript spelling
    with T.Kernel(T.ceildiv(M, block), threads=64) as bx:
        x = T.alloc_fragment((block,), dtype)
        T.copy(X[bx * block], x)
        T.copy(x, Y[bx * block])


def test_eager_style_free_size_names_and_dtype_parameter():
    x = torch.randn(130)
    y = torch.zeros(130)
    copy_vector(x, y)
    assert torch.equal(x, y)
    with pytest.raises(ArgumentError, match=r"argument X has dtype float32, the kernel declares float16"):
        copy_vector(x, y, dtype=T.float16)


def test_t_const_names_must_label_an_annotated_dimension():
    @tilegcn.jit
    def unknown(X):
        N, K = T.const("N, K")
        X: T.Tensor((N,), "float32")

    with pytest.raises(CompileError, match=r"T.const: K labels no dimension .* \(named sizes: N\)"):
        unknown(torch.randn(64))

    @tilegcn.jit
    def not_eager(X):
        N = T.const("N")

    with pytest.raises(CompileError, match=r"annotates none: read sizes from the tensor instead"):
        not_eager(torch.randn(64))


@tilegcn.jit
def sum_tiles(X, Y, *, start=0, stop=4, step=1, capital=False):
    """Y[r, :] = sum of X[r, k*64:(k+1)*64] over k in range(start, stop, step)."""
    with T.Kernel(X.shape[0], threads=64) as bx:
        acc = T.alloc_local((1, 64), "float32")
        x = T.alloc_fragment((1, 64), "float32")
        T.clear(acc)
        loop = T.Serial if capital else T.serial
        for k in loop(start, stop, step):
            T.copy(X[bx, k * 64], x)
            for i, j in T.Parallel(1, 64):
                acc[i, j] = acc[i, j] + x[i, j]
        T.copy(acc, Y[bx, 0])


@pytest.mark.parametrize("start,stop,step", [(0, 4, 1), (1, 3, 1), (0, 4, 2), (3, 2, 1)])
def test_serial_runs_python_range(start, stop, step):
    x = torch.randn(3, 256)
    y = torch.empty(3, 64)
    sum_tiles(x, y, start=start, stop=stop, step=step, capital=step == 2)
    tiles = x.view(3, 4, 64)[:, list(range(start, stop, step))]
    torch.testing.assert_close(y, tiles.sum(dim=1), rtol=1e-5, atol=1e-5)


def test_serial_with_one_argument_counts_from_zero():
    @tilegcn.jit
    def first_tiles(X, Y):
        with T.Kernel(1, threads=64):
            acc = T.alloc_fragment((64,), "float32")
            x = T.alloc_fragment((64,), "float32")
            T.fill(acc, 1.0)
            for k in T.serial(3):
                T.copy(X[k * 64], x)
                for i in T.Parallel(64):
                    acc[i] = acc[i] * x[i]
            T.copy(acc, Y[0])

    x, y = torch.randn(256), torch.empty(64)
    first_tiles(x, y)
    torch.testing.assert_close(y, x[:64] * x[64:128] * x[128:192])


@pytest.mark.parametrize("bounds,message", [
    ((0, 4, 0), r"T.serial step 0: must be positive"),
    ((4, 0, -1), r"T.serial step -1: must be positive"),
])
def test_serial_refuses_steps_that_are_not_positive(bounds, message):
    with pytest.raises(CompileError, match=message):
        sum_tiles.compile(torch.randn(3, 256), torch.empty(3, 64), start=bounds[0], stop=bounds[1], step=bounds[2])


def test_serial_bounds_must_be_integers():
    @tilegcn.jit
    def runtime_bound(X, n):
        with T.Kernel(1, threads=64):
            for k in T.serial(n):
                pass

    # an int runtime scalar is a bound the device computes (tests/test_control_flow.py); a float is no trip count
    with pytest.raises(CompileError, match=r"the T.serial trip count must be an integer"):
        runtime_bound.compile(torch.randn(64), 3.0)


def test_alloc_var_is_a_one_element_buffer_filled_with_init():
    @tilegcn.jit
    def var_kernel(Y):
        with T.Kernel(1, threads=64):
            v = T.alloc_var("float32", init=1.5)
            T.copy(v, Y[0])

    y = torch.zeros(1)
    var_kernel(y)
    assert y.item() == 1.5


@pytest.mark.parametrize("call,message", [
    (lambda: T.alloc_var("float32", 1.0, init=2.0), r"the initial value is given twice"),
    (lambda: T.alloc_var("float32", init=T), r"init must be a number known at compile time"),
    (lambda: T.alloc_local((64,), "float32", scope="shared"), r"leave scope\s+out"),
])
def test_alloc_var_and_alloc_local_refusals(call, message):
    @tilegcn.jit
    def bad(Y):
        with T.Kernel(1, threads=64):
            call()

    with pytest.raises(CompileError, match=message):
        bad.compile(torch.empty(1))


def test_dtype_spellings():
    assert T.dtype("float") == T.float32 and T.float == T.float32
    assert T.dtype(torch.bfloat16) == T.bfloat16


@tilegcn.jit
def row_sums(A, out, *, block_N=64, op="sum"):
    """out[r] = 1 (op) the op-reduction of 2 * A[r, :], through a reducer updated over column tiles."""
    M, N = A.shape
    with T.Kernel(1, threads=64):
        r = T.alloc_reducer((M,), "float32", op=op)
        a = T.alloc_fragment((M, block_N), "float32")
        T.fill(r, 1.0)
        for k in T.serial(T.ceildiv(N, block_N)):
            T.copy(A[0, k * block_N], a)
            for i, j in T.Parallel(M, block_N):
                if op == "sum":
                    r[i] += a[i, j] * 2.0
                else:
                    r[i] = T.max(r[i], a[i, j] * 2.0)
        T.finalize_reducer(r)
        T.copy(r, out[0])


@pytest.mark.parametrize("op", ["sum", "max"])
def test_reducer_combines_updates_from_every_trip(op):
    a = torch.randn(64, 192)
    out = torch.empty(64)
    row_sums(a, out, op=op)
    expected = 1 + (2 * a).sum(dim=1) if op == "sum" else torch.clamp((2 * a).max(dim=1).values, min=1.0)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("update,message", [
    (lambda r, a, i, j: r.__setitem__(i, a[i, j]), r"updated inside T.Parallel only as `r\[...\] \+= value`"),
    (lambda r, a, i, j: r.__setitem__(0, r[0] + a[i, j]), r"leaving out exactly one"),
])
def test_reducer_update_refusals(update, message):
    @tilegcn.jit
    def bad(A, out):
        with T.Kernel(1, threads=64):
            r = T.alloc_reducer((64,), "float32")
            a = T.alloc_fragment((64, 64), "float32")
            T.copy(A[0, 0], a)
            for i, j in T.Parallel(64, 64):
                update(r, a, i, j)

    with pytest.raises(CompileError, match=message):
        bad.compile(torch.randn(64, 64), torch.empty(64))


def test_finalize_reducer_takes_a_reducer_once():
    @tilegcn.jit
    def twice(out):
        with T.Kernel(1, threads=64):
            r = T.alloc_reducer((64,), "float32")
            T.finalize_reducer(r)
            T.finalize_reducer(r)

    with pytest.raises(CompileError, match=r"T.finalize_reducer\(r\) twice"):
        twice.compile(torch.empty(64))

    @tilegcn.jit
    def not_a_reducer(out):
        with T.Kernel(1, threads=64):
            T.finalize_reducer(T.alloc_fragment((64,), "float32"))

    with pytest.raises(CompileError, match=r"takes a buffer from T.alloc_reducer"):
        not_a_reducer.compile(torch.empty(64))


def test_a_cross_wave_reduction_in_every_trip_of_a_serial_loop():
    """Trip k + 1 writes the reduction's LDS partials that trip k's waves read: the loop head needs a barrier
    (the emulator reported a write-after-read race before the loop lowering counted the reduction's scratch)."""
    @tilegcn.jit
    def row_sums_by_trip(X, Y, *, rows=2):
        M, N = X.shape
        with T.Kernel(T.ceildiv(M, rows), threads=128) as bx:  # two waves: the sum crosses waves through LDS
            x = T.alloc_fragment((1, N), "float32")
            s = T.alloc_fragment((1,), "float32")
            for k in T.serial(rows):
                T.copy(X[bx * rows + k, 0], x)
                T.reduce_sum(x, s, dim=1)
                T.copy(s, Y[bx * rows + k])

    x, y = torch.randn(4, 256), torch.empty(4)
    row_sums_by_trip(x, y)
    torch.testing.assert_close(y, x.sum(dim=1), rtol=1e-5, atol=1e-5)
