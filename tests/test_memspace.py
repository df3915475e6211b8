"""Memory spaces inside T.Parallel and T.copy (passes/memspace.py, passes/lds_elements.py), on the emulated device
for gfx942 and gfx950 against torch: element reads and writes of shared buffers, element stores to global tensors
(masked at ragged edges, each element written once), copies global -> shared (1-D included) and shared -> global,
the barrier a shared read of other threads' writes needs, T.fill of a shared tile, shared -> shared copies, and
the refusals."""
import pytest
import torch

import tilegcn
import tilegcn.passes.lds_elements as lds_elements
from tilegcn import language as T
from tilegcn.errors import CompileError, RaceError

ARCHES = ["gfx942", "gfx950"]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
CASES = [pytest.param(arch, dtype, id=f"{arch}-{str(dtype)[6:]}") for arch in ARCHES for dtype in DTYPES]


@pytest.fixture(autouse=True)
def _emulator(monkeypatch):
    monkeypatch.setenv("TILEGCN_DEVICE", "emulator")


def _randn(*shape, dtype, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@tilegcn.jit
def shared_round_trip(X, Y, *, block_M=16, block_N=32):
    """Y = X * 2 + 1 computed in place in a shared tile: global -> shared, shared read and write inside T.Parallel,
    shared -> global."""
    M, N = X.shape
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=64) as (bx, by):
        S = T.alloc_shared((block_M, block_N), X.dtype)
        T.copy(X[by * block_M, bx * block_N], S)
        for i, j in T.Parallel(block_M, block_N):
            S[i, j] = S[i, j] * 2.0 + 1.0
        T.copy(S, Y[by * block_M, bx * block_N])


@pytest.mark.parametrize("arch,dtype", CASES)
def test_shared_tile_updated_in_place_and_copied_out_with_ragged_rows(arch, dtype):
    x = _randn(40, 64, dtype=dtype)  # 40 rows: the last row block holds 8 rows past the end
    base = torch.full((48, 64), 7.0, dtype=dtype)
    y = base[:40]
    shared_round_trip(x, y, arch=arch)
    assert torch.equal(y, (x.float() * 2 + 1).to(dtype))  # one multiply-add in fp32, rounded once
    assert (base[40:] == 7).all()  # the rows past M are not written


@tilegcn.jit
def fragment_through_shared(X, Y, *, block_M=16, block_N=32):
    """Y = X via T.copy fragment -> shared -> fragment (of another dtype) -> global."""
    M, N = X.shape
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=64) as (bx, by):
        x = T.alloc_fragment((block_M, block_N), X.dtype)
        y = T.alloc_fragment((block_M, block_N), "float32")
        S = T.alloc_shared((block_M, block_N), X.dtype)
        T.copy(X[by * block_M, bx * block_N], x)
        T.copy(x, S)
        T.copy(S, y)
        T.copy(y, Y[by * block_M, bx * block_N])


@pytest.mark.parametrize("arch,dtype", CASES)
def test_fragment_to_shared_and_back(arch, dtype):
    x = _randn(32, 64, dtype=dtype)
    y = torch.full_like(x, float("nan"))
    fragment_through_shared(x, y, arch=arch)
    assert torch.equal(y, x)


@tilegcn.jit
def scale_by_shared_vector(X, Gamma, Y, *, block_M=4):
    """Y[r, j] = X[r, j] * (Gamma[j] * 2): a 1-D T.copy into shared, a shared vector written by one T.Parallel and
    read as a broadcast (G[j]) by another, whose threads hold other elements; the result stored to global inside
    T.Parallel."""
    M, N = X.shape
    with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
        G = T.alloc_shared((N,), Gamma.dtype)
        x = T.alloc_fragment((block_M, N), "float32")
        T.copy(Gamma, G)
        for j in T.Parallel(N):
            G[j] = G[j] * 2.0
        T.copy(X[bx * block_M, 0], x)
        for i, j in T.Parallel(block_M, N):
            Y[bx * block_M + i, j] = x[i, j] * G[j]


@pytest.mark.parametrize("arch,dtype", CASES)
def test_broadcast_of_a_shared_vector_and_global_stores_in_parallel(arch, dtype):
    x, g = _randn(10, 64, dtype=dtype), _randn(64, dtype=dtype, seed=1)
    base = torch.full((12, 64), 7.0, dtype=dtype)
    y = base[:10]  # 10 rows in blocks of 4: the last block has 2 rows past the end
    scale_by_shared_vector(x, g, y, arch=arch)
    g2 = (g.float() * 2).to(dtype)  # G[j] * 2 is rounded to G's dtype when stored
    assert torch.equal(y, (x.float() * g2.float()).to(dtype))
    assert (base[10:] == 7).all()


@tilegcn.jit
def scale_in_a_serial_loop(X, Gamma, Y, *, trips=2):
    """Y = X * Gamma^trips: G written before a T.serial loop whose body only reads it (a broadcast G[j], held by
    other threads than those that wrote it), so the first trip's reads must wait at a barrier."""
    M, N = X.shape
    with T.Kernel(1, threads=128):  # two waves: a wave's own LDS accesses are ordered, other waves' are not
        G = T.alloc_shared((N,), "float32")
        x = T.alloc_fragment((M, N), "float32")
        T.copy(Gamma, G)
        T.copy(X[0, 0], x)
        for _ in T.serial(trips):
            for i, j in T.Parallel(M, N):
                x[i, j] = x[i, j] * G[j]
        T.copy(x, Y[0, 0])


@pytest.mark.parametrize("arch", ARCHES)
def test_a_loop_reading_shared_written_before_it(arch):
    x, g = _randn(4, 64, dtype=torch.float32), _randn(64, dtype=torch.float32, seed=1)
    y = torch.empty_like(x)
    scale_in_a_serial_loop(x, g, y, arch=arch)
    assert torch.equal(y, x * g * g)


@tilegcn.jit
def global_only(X, Y, *, block_M=8, block_N=32):
    """Y = 2 * X + 1 with no fragment and no shared buffer: the loop takes the default blocked layout."""
    M, N = X.shape
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=64) as (bx, by):
        for i, j in T.Parallel(block_M, block_N):
            Y[by * block_M + i, bx * block_N + j] = X[by * block_M + i, bx * block_N + j] * 2.0 + 1.0


@pytest.mark.parametrize("arch", ARCHES)
def test_global_to_global_inside_parallel_with_ragged_rows(arch):
    x = _randn(13, 64, dtype=torch.bfloat16)
    base = torch.full((16, 64), 7.0, dtype=torch.bfloat16)
    y = base[:13]
    global_only(x, y, arch=arch)
    assert torch.equal(y, (x.float() * 2 + 1).to(torch.bfloat16))
    assert (base[13:] == 7).all()


@pytest.mark.parametrize("arch", ARCHES)
def test_a_missing_barrier_between_shared_writes_and_reads_is_a_race(arch, monkeypatch):
    """Without the s_barrier lds_elements places, threads read G[j] that other threads have just written: the
    emulator reports the race (so the barrier the passing test relies on is the one placed)."""
    monkeypatch.setattr(lds_elements, "lds_barrier", lambda ctx, access: None)
    x, g = _randn(4, 64, dtype=torch.float32), _randn(64, dtype=torch.float32, seed=1)
    with pytest.raises(RaceError):
        scale_by_shared_vector(x, g, torch.empty_like(x), arch=arch)


@tilegcn.jit
def row_sums(X, Sums, *, block_M=2):
    """Sums[r] = sum_j X[r, j], stored inside T.Parallel(block_M) from a row vector of 2 elements held by 64
    threads (replicated: one writer thread per element)."""
    M, N = X.shape
    with T.Kernel(T.ceildiv(M, block_M), threads=64) as bx:
        x = T.alloc_fragment((block_M, N), "float32")
        s = T.alloc_fragment((block_M,), "float32")
        T.copy(X[bx * block_M, 0], x)
        T.reduce_sum(x, s, dim=1)
        for i in T.Parallel(block_M):
            Sums[bx * block_M + i] = s[i] * 0.5


@pytest.mark.parametrize("arch,dtype", CASES)
def test_replicated_row_vector_stored_to_global_once_per_element(arch, dtype):
    x = _randn(5, 64, dtype=dtype)
    base = torch.full((6,), 7.0, dtype=dtype)
    sums = base[:5]  # 5 rows in blocks of 2: row 5 of the last block is past the end
    row_sums(x, sums, arch=arch)
    torch.testing.assert_close(sums.float(), x.float().sum(dim=1) * 0.5, rtol=1e-2, atol=1e-2)
    assert base[5] == 7


def test_element_access_to_a_gemm_operand_is_refused_at_the_users_line():
    @tilegcn.jit
    def touch_operand(A, B, C):
        with T.Kernel(1, threads=256):
            A_s = T.alloc_shared((64, 32), A.dtype)
            B_s = T.alloc_shared((32, 64), B.dtype)
            acc = T.alloc_fragment((64, 64), "float32")
            T.clear(acc)
            T.copy(A[0, 0], A_s)
            T.copy(B[0, 0], B_s)
            for i, j in T.Parallel(64, 32):
                A_s[i, j] = A_s[i, j] * 2.0
            T.gemm(A_s, B_s, acc)
            T.copy(acc, C[0, 0])

    a, b = torch.randn(64, 32).half(), torch.randn(32, 64).half()
    with pytest.raises(CompileError, match=r"A_s, a T.gemm operand: .*XOR-swizzled") as e:
        touch_operand.compile(a, b, torch.empty(64, 64), arch="gfx942")
    assert "test_memspace.py" in str(e.value)


def test_a_global_store_at_a_sum_of_loop_indices_is_refused_with_the_users_index():
    @tilegcn.jit
    def diagonal_sums(X, Y):
        with T.Kernel(1, threads=64):
            x = T.alloc_fragment((8, 8), "float32")
            T.copy(X[0, 0], x)
            for i, j in T.Parallel(8, 8):
                Y[i + j] = x[i, j]

    with pytest.raises(CompileError, match=r"Y\[i \+ j\].*a start plus one T.Parallel index") as e:
        diagonal_sums.compile(torch.randn(8, 8), torch.empty(16), arch="gfx942")
    assert "test_memspace.py" in str(e.value)


def test_a_shared_vector_read_at_an_index_of_another_extent_is_refused_with_its_name():
    @tilegcn.jit
    def short_vector(X, Y):
        with T.Kernel(1, threads=64):
            G = T.alloc_shared((16,), "float32")
            x = T.alloc_fragment((8, 32), "float32")
            T.copy(X[0, 0], x)
            T.copy(X[0, 0:16], G)
            for i, j in T.Parallel(8, 32):
                x[i, j] = x[i, j] * G[j]
            T.copy(x, Y[0, 0])

    with pytest.raises(CompileError, match=r"shared G\[16\] read at \[j\] in T.Parallel\(8, 32\): its shape must be "
                                           r"the extents of those indices \[32\]") as e:
        short_vector.compile(torch.randn(8, 32), torch.empty(8, 32), arch="gfx942")
    assert "test_memspace.py" in str(e.value)


@tilegcn.jit
def shared_fill_and_shared_copy(X, Y, Z, *, block_M=16, block_N=32):
    """Y = X + 1 through X.dtype shared -> fp32 shared -> fragment -> local buffer -> global; Z = 0 from a cleared
    shared tile (Z.dtype)."""
    M, N = X.shape
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=64) as (bx, by):
        S = T.alloc_shared((block_M, block_N), X.dtype)
        S_f32 = T.alloc_shared((block_M, block_N), "float32")
        Zeros = T.alloc_shared((block_M, block_N), Z.dtype)
        x = T.alloc_fragment((block_M, block_N), "float32")
        y = T.alloc_local((block_M, block_N), "float32")
        T.clear(Zeros)
        T.copy(X[by * block_M, bx * block_N], S)
        T.copy(S, S_f32)
        T.copy(S_f32, x)
        T.copy(x, y)
        for i, j in T.Parallel(block_M, block_N):
            y[i, j] = y[i, j] + 1.0
        T.copy(y, Y[by * block_M, bx * block_N])
        T.copy(Zeros, Z[by * block_M, bx * block_N])


@pytest.mark.parametrize("arch", ARCHES)
def test_a_cleared_shared_tile_and_copies_between_shared_tiles_and_a_local_buffer(arch):
    x = _randn(40, 64, dtype=torch.float16)
    y, z = torch.empty(40, 64), torch.ones(40, 64, dtype=torch.bfloat16)
    shared_fill_and_shared_copy(x, y, z, arch=arch)
    assert torch.equal(y, x.float() + 1)
    assert (z == 0).all()


@tilegcn.jit
def through_shared(X, Y, *, block_M=16, block_N=64):
    """Y = X, global -> shared -> global."""
    M, N = X.shape
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=64) as (bx, by):
        S = T.alloc_shared((block_M, block_N), X.dtype)
        T.copy(X[by * block_M, bx * block_N], S)
        T.copy(S, Y[by * block_M, bx * block_N])


@pytest.mark.parametrize("arch", ARCHES)
def test_a_16_bit_tile_moves_through_shared_unconverted(arch):
    """Staged in a fragment of its own dtype (two values a register), an f16 tile is copied without a conversion."""
    x = _randn(40, 128, dtype=torch.float16)
    y = torch.empty_like(x)
    kernel = through_shared.compile(x, y, arch=arch)
    assert "v_cvt" not in kernel.asm and "ds_read_b128" in kernel.asm and "ds_write_b128" in kernel.asm
    through_shared(x, y, arch=arch)
    assert torch.equal(y, x)
