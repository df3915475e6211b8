"""Layout inference on the emulated device: broadcast reads (x[i], x[j], x[0] inside T.Parallel), fragments with
fewer elements than threads, and row vectors of a T.gemm accumulator, against torch on gfx942 and gfx950."""
import pytest
import torch

import tilegcn
from tilegcn import language as T
from tilegcn.errors import CompileError

from kernels import fma_f32

ARCHES = ["gfx942", "gfx950"]
DTYPES = [torch.float32, torch.bfloat16]


@pytest.fixture(autouse=True)
def _emulator(monkeypatch):
    monkeypatch.setenv("TILEGCN_DEVICE", "emulator")


@tilegcn.jit
def scale_rows_shift_cols(X, RowScale, ColShift, Y, *, block_M=32, block_N=64):
    """Y = X * RowScale[:, None] + ColShift[None, :] with both vectors held in fragments."""
    M, N = X.shape
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
        x = T.alloc_fragment((block_M, block_N), X.dtype)
        rows = T.alloc_fragment((block_M,), RowScale.dtype)  # 32 elements for 128 threads
        cols = T.alloc_fragment((block_N,), ColShift.dtype)
        T.copy(X[by * block_M, bx * block_N], x)
        T.copy(RowScale[by * block_M], rows)
        T.copy(ColShift[bx * block_N], cols)
        for i, j in T.Parallel(block_M, block_N):
            x[i, j] = x[i, j] * rows[i] + cols[j]
        T.copy(x, Y[by * block_M, bx * block_N])


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_row_and_column_broadcasts_equal_torch(arch, dtype):
    torch.manual_seed(0)
    x, s, c = torch.randn(64, 128).to(dtype), torch.randn(64).to(dtype), torch.randn(128).to(dtype)
    y = torch.full_like(x, float("nan"))
    scale_rows_shift_cols(x, s, c, y, arch=arch)
    # one fp32 fused multiply-add per element (v_fma_f32: CompileOptions.fp_contract), rounded once to the dtype
    want = fma_f32(x.float(), s.float()[:, None], c.float()[None, :]).to(dtype)
    assert torch.equal(y, want)


@tilegcn.jit
def row_vector_out(X, Scale, Y, *, block_M=16, threads=64):
    """Y[i] = exp2(X[i]) * Scale[0]: a 16-element fragment over 64 threads and a 1-element one read at [0]."""
    (M,) = X.shape
    with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
        x = T.alloc_fragment((block_M,), "float32")
        c = T.alloc_fragment((1,), "float32")
        T.copy(X[bx * block_M], x)
        T.copy(Scale[0], c)
        for i in T.Parallel(block_M):
            x[i] = T.exp2(x[i]) * c[0]
        T.copy(x, Y[bx * block_M])


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_fragments_smaller_than_the_workgroup_write_each_element_once(arch, dtype):
    torch.manual_seed(1)
    x, scale = torch.randn(40).to(dtype), torch.tensor([1.5]).to(dtype)
    base = torch.full((48,), 7.0, dtype=dtype)
    y = base[:40]  # elements 40..47 are outside the tensor the kernel writes: they must stay 7
    row_vector_out(x, scale, y, arch=arch)
    want = (torch.exp2(x.float()) * scale.float()).to(dtype)  # v_exp_f32: within 1 ulp of torch.exp2
    torch.testing.assert_close(y, want, rtol=4e-7 if dtype == torch.float32 else 8e-3, atol=0)
    assert (base[40:] == 7).all()


@tilegcn.jit
def scaled_gemm(A, B, RowScale, C, *, block_M=64, block_N=64, block_K=32):
    """C = (A @ B) * RowScale[:, None]: a row vector broadcast over the MFMA accumulator."""
    M, K = A.shape
    _, N = B.shape
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=256) as (bx, by):
        A_s = T.alloc_shared((block_M, block_K), A.dtype)
        B_s = T.alloc_shared((block_K, block_N), B.dtype)
        acc = T.alloc_fragment((block_M, block_N), "float32")
        scale = T.alloc_fragment((block_M,), "float32")
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=1):
            T.copy(A[by * block_M, k * block_K], A_s)
            T.copy(B[k * block_K, bx * block_N], B_s)
            T.gemm(A_s, B_s, acc)
        T.copy(RowScale[by * block_M], scale)
        for i, j in T.Parallel(block_M, block_N):
            acc[i, j] = acc[i, j] * scale[i]
        T.copy(acc, C[by * block_M, bx * block_N])
        T.copy(scale, RowScale[by * block_M])  # stored from the accumulator's row slice: each row once


@pytest.mark.parametrize("arch", ARCHES)
def test_row_vector_of_a_gemm_accumulator(arch):
    torch.manual_seed(2)
    a, b = torch.randn(64, 64).to(torch.bfloat16), torch.randn(64, 128).to(torch.bfloat16)
    s = torch.randn(64)
    c = torch.zeros(64, 128)
    k = scaled_gemm.compile(a, b, s, c, arch=arch)
    assert "scale: float32[64] layout=slice(mfma_acc(" in k.ir  # kernel.ir shows the inferred layouts
    scaled_gemm(a, b, s, c, arch=arch)
    want = (a.float() @ b.float()) * s[:, None]
    torch.testing.assert_close(c, want, rtol=1e-5, atol=1e-4)


@tilegcn.jit
def two_layouts(A, B, X, V, C, Y, *, block=64):
    """One row vector broadcast over an MFMA accumulator and over a narrower tile: the two uses want different
    layouts of v (the rows as the accumulator holds them, as the blocked tile does), so layout inference
    converts v (through LDS) for the second."""
    with T.Kernel(1, threads=256) as bx:
        A_s = T.alloc_shared((block, 32), A.dtype)
        B_s = T.alloc_shared((32, block), B.dtype)
        acc = T.alloc_fragment((block, block), "float32")
        x = T.alloc_fragment((block, 32), X.dtype)
        v = T.alloc_fragment((block,), V.dtype)
        T.clear(acc)
        T.copy(A[0, 0], A_s)
        T.copy(B[0, 0], B_s)
        T.gemm(A_s, B_s, acc)
        T.copy(X[0, 0], x)
        T.copy(V[0], v)
        for i, j in T.Parallel(block, block):
            acc[i, j] = acc[i, j] * v[i]
        for i, j in T.Parallel(block, 32):
            x[i, j] = x[i, j] + v[i]
        T.copy(acc, C[0, 0])
        T.copy(x, Y[0, 0])


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_uses_that_disagree_get_a_layout_conversion(arch, dtype):
    torch.manual_seed(3)
    a, b = torch.randn(64, 32).bfloat16(), torch.randn(32, 64).bfloat16()
    x, v = torch.randn(64, 32).to(dtype), torch.randn(64).to(dtype)
    c, y = torch.zeros(64, 64), torch.zeros(64, 32, dtype=dtype)
    k = two_layouts.compile(a, b, x, v, c, y, arch=arch)
    assert "convert_layout v -> v_as0" in k.ir and "v_as0: " in k.ir
    two_layouts(a, b, x, v, c, y, arch=arch)
    torch.testing.assert_close(c, (a.float() @ b.float()) * v.float()[:, None], rtol=1e-5, atol=1e-4)
    assert torch.equal(y, (x.float() + v.float()[:, None]).to(dtype))


@tilegcn.jit
def transposed_read(X, Y):
    with T.Kernel(1, threads=64) as bx:
        x = T.alloc_fragment((8, 8), "float32")
        T.copy(X[0, 0], x)
        for i, j in T.Parallel(8, 8):
            x[i, j] = x[j, i]
        T.copy(x, Y[0, 0])


def test_a_read_at_permuted_indices_reads_other_threads_elements():
    """x[j, i] names other threads' registers: read through LDS (all reads before the statement's writes)."""
    x, y = torch.randn(8, 8), torch.zeros(8, 8)
    transposed_read(x, y, arch="gfx942")
    assert torch.equal(y, x.T)


@tilegcn.jit
def row_statistics(X, Rows, Y, RowsOut, *, block_M=16, block_N=64):
    """A per-row vector (16 elements for 128 threads) updated by its own 1-D T.Parallel, broadcast over the tile,
    and stored: the row-statistics shape of softmax and RMSNorm."""
    M, N = X.shape
    with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
        x = T.alloc_fragment((block_M, block_N), X.dtype)
        r = T.alloc_fragment((block_M,), "float32")
        T.copy(X[bx * block_M, 0], x)
        T.copy(Rows[bx * block_M], r)
        for i in T.Parallel(block_M):
            r[i] = T.exp2(r[i] * 0.5)
        for i, j in T.Parallel(block_M, block_N):
            x[i, j] = x[i, j] / r[i]
        T.copy(x, Y[bx * block_M, 0])
        T.copy(r, RowsOut[bx * block_M])


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_row_vector_updated_broadcast_and_stored(arch, dtype):
    torch.manual_seed(4)
    x, rows = torch.randn(48, 64).to(dtype), torch.randn(48)
    y, out = torch.zeros_like(x), torch.full((48,), float("nan"))
    k = row_statistics.compile(x, rows, y, out, arch=arch)
    assert "r: float32[16] layout=slice(blocked(" in k.ir
    row_statistics(x, rows, y, out, arch=arch)
    torch.testing.assert_close(out, torch.exp2(rows * 0.5), rtol=4e-7, atol=0)  # v_exp_f32: within 1 ulp
    assert torch.equal(y, (x.float() / out[:, None]).to(dtype))  # IEEE division by the stored row value


@tilegcn.jit
def short_broadcast(X, Y):
    with T.Kernel(1, threads=64) as bx:
        x = T.alloc_fragment((8, 8), "float32")
        v = T.alloc_fragment((4,), "float32")
        T.copy(X[0, 0], x)
        T.fill(v, 1.0)
        for i, j in T.Parallel(8, 8):
            x[i, j] = x[i, j] + v[i]
        T.copy(x, Y[0, 0])


def test_a_broadcast_of_a_vector_shorter_than_the_loop_is_refused():
    with pytest.raises(CompileError, match=r"v\[4\] read at \[i\] in T.Parallel\(8, 8\): its shape must be"):
        short_broadcast.compile(torch.zeros(8, 8), torch.zeros(8, 8), arch="gfx942")


@tilegcn.jit
def row_softmax(X, Y, *, block_M=8, N=128, threads=128):
    """Softmax over rows: two reductions whose row vectors (slices of x's layout) are broadcast back over x."""
    M = X.shape[0]
    with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
        x = T.alloc_fragment((block_M, N), "float32")
        row_max = T.alloc_fragment((block_M,), "float32")
        row_sum = T.alloc_fragment((block_M,), "float32")
        T.copy(X[bx * block_M, 0], x)
        T.reduce_max(x, row_max, dim=1)
        for i, j in T.Parallel(block_M, N):
            x[i, j] = T.exp2((x[i, j] - row_max[i]) * 1.4426950408889634)
        T.reduce_sum(x, row_sum, dim=1)
        for i, j in T.Parallel(block_M, N):
            x[i, j] = x[i, j] / row_sum[i]
        T.copy(x, Y[bx * block_M, 0])


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_from_reductions_and_broadcasts(arch, dtype):
    torch.manual_seed(5)
    x = (torch.randn(24, 128) * 4).to(dtype)
    y = torch.zeros_like(x)
    k = row_softmax.compile(x, y, arch=arch)
    assert "row_max: float32[8] layout=slice(blocked(" in k.ir
    row_softmax(x, y, arch=arch)
    torch.testing.assert_close(y.float(), torch.softmax(x.float(), dim=1), rtol=2e-6 if dtype == torch.float32
                               else 1e-2, atol=1e-7 if dtype == torch.float32 else 1e-3)


@tilegcn.jit
def reduce_into_another_layout(X, Z, Y, *, block_M=16, threads=64):
    """A row sum of a [16, 64] tile broadcast over a [16, 8] tile: the reduction gives the slice of the first
    tile's layout, the broadcast wants the second's, so the sum is converted."""
    with T.Kernel(1, threads=threads) as bx:
        x = T.alloc_fragment((block_M, 64), "float32")
        z = T.alloc_fragment((block_M, 8), "float32")
        s = T.alloc_fragment((block_M,), "float32")
        T.copy(X[0, 0], x)
        T.copy(Z[0, 0], z)
        T.reduce_sum(x, s, dim=1)
        for i, j in T.Parallel(block_M, 8):
            z[i, j] = z[i, j] * s[i]
        T.copy(z, Y[0, 0])


@pytest.mark.parametrize("arch", ARCHES)
def test_a_reduction_broadcast_over_a_tile_of_another_layout(arch):
    torch.manual_seed(6)
    x, z = torch.randn(16, 64), torch.randn(16, 8)
    y = torch.zeros(16, 8)
    k = reduce_into_another_layout.compile(x, z, y, arch=arch)
    assert "convert_layout" in k.ir
    reduce_into_another_layout(x, z, y, arch=arch)
    torch.testing.assert_close(y, z * x.sum(dim=1, keepdim=True), rtol=1e-5, atol=1e-5)


@tilegcn.jit
def gemm_scaled_by_row_sums(A, B, X, C, *, block=64):
    """acc * rowsum(X)[:, None]: the row sums are reduced from a blocked tile but broadcast over the MFMA
    accumulator, whose slice layout the broadcast fixes first; the reduction goes through a converted temporary."""
    with T.Kernel(1, threads=256) as bx:
        A_s = T.alloc_shared((block, 32), A.dtype)
        B_s = T.alloc_shared((32, block), B.dtype)
        acc = T.alloc_fragment((block, block), "float32")
        x = T.alloc_fragment((block, 32), "float32")
        s = T.alloc_fragment((block,), "float32")
        T.clear(acc)
        T.copy(A[0, 0], A_s)
        T.copy(B[0, 0], B_s)
        T.gemm(A_s, B_s, acc)
        T.copy(X[0, 0], x)
        T.reduce_sum(x, s, dim=1)
        for i, j in T.Parallel(block, block):
            acc[i, j] = acc[i, j] * s[i]
        T.copy(acc, C[0, 0])


@pytest.mark.parametrize("arch", ARCHES)
def test_a_reduction_into_a_fragment_laid_out_by_a_gemm(arch):
    torch.manual_seed(7)
    a, b, x = torch.randn(64, 32).bfloat16(), torch.randn(32, 64).bfloat16(), torch.randn(64, 32)
    c = torch.zeros(64, 64)
    k = gemm_scaled_by_row_sums.compile(a, b, x, c, arch=arch)
    assert "reduce_sum x dim=1 -> s_as0" in k.ir and "convert_layout s_as0 -> s" in k.ir
    gemm_scaled_by_row_sums(a, b, x, c, arch=arch)
    torch.testing.assert_close(c, (a.float() @ b.float()) * x.sum(dim=1, keepdim=True), rtol=1e-5, atol=1e-4)


@tilegcn.jit
def whole_and_sliced(X, V, Y):
    """v read whole (v[0]) and broadcast (v[i]) in one loop: replicated for the first, the loop's row slice for the
    second; every thread holds all of v, so the conversion is register moves (no LDS)."""
    with T.Kernel(1, threads=64) as bx:
        x = T.alloc_fragment((8, 64), "float32")
        v = T.alloc_fragment((8,), "float32")
        T.copy(X[0, 0], x)
        T.copy(V[0], v)
        for i, j in T.Parallel(8, 64):
            x[i, j] = x[i, j] * v[i] + v[0]
        T.copy(x, Y[0, 0])


@pytest.mark.parametrize("arch", ARCHES)
def test_a_conversion_from_a_replicated_fragment_is_register_moves(arch):
    torch.manual_seed(8)
    x, v, y = torch.randn(8, 64), torch.randn(8), torch.zeros(8, 64)
    k = whole_and_sliced.compile(x, v, y, arch=arch)
    assert "convert_layout v -> v_as0 via registers" in k.ir and "_lds" not in k.ir
    whole_and_sliced(x, v, y, arch=arch)
    assert torch.equal(y, fma_f32(x, v[:, None], v[0]))  # (contracted: one rounding)
