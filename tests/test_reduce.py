"""T.reduce_sum / max / min / absmax / abssum on the emulated device, against torch: rows (dim=1) and columns (dim=0)
held by one thread, by several lanes, by several waves; fp32, fp16 and bf16 sources and 16-bit destinations;
clear=False, in a loop over tiles too; one reduction a trip of a T.serial loop; a fragment only a reduction reads computed as it sums; NaN and inf as torch; gemm accumulators, a reduction's output, a 3-d
fragment; each output element written once; the cross-lane route each arch takes; bad calls refused with the user's
line."""
import pytest
import torch

import tilegcn
from tilegcn import language as T
from tilegcn.errors import CompileError
from tilegcn.runtime import emulator

OPS = ("sum", "max", "min", "absmax", "abssum")
ARCHES = ("gfx942", "gfx950")


@pytest.fixture(autouse=True)
def _emulator(monkeypatch):
    monkeypatch.setenv("TILEGCN_DEVICE", "emulator")


@tilegcn.jit
def reductions(X, S, Mx, Mn, AMx, AS, *, block_M=8, block_N=64, threads=64, dim=1, clear=True, out_dtype="float32"):
    """Every reduction of one [block_M, block_N] tile per workgroup: along dim 1 the workgroups go down the rows,
    along dim 0 across the columns."""
    outs = (S, Mx, Mn, AMx, AS)
    kept = block_M if dim == 1 else block_N
    with T.Kernel(T.ceildiv(X.shape[1 - dim], kept), threads=threads) as b:
        x = T.alloc_fragment((block_M, block_N), X.dtype)
        T.copy(X[b * block_M, 0] if dim == 1 else X[0, b * block_N], x)
        for op, out in zip(OPS, outs):
            y = T.alloc_fragment((kept,), out_dtype)
            if not clear:
                T.copy(out[b * kept], y)
            getattr(T, f"reduce_{op}")(x, y, dim=dim, clear=clear)
            T.copy(y, out[b * kept])


def torch_reductions(x: torch.Tensor, dim: int) -> tuple:
    x = x.float()
    return x.sum(dim), x.amax(dim), x.amin(dim), x.abs().amax(dim), x.abs().sum(dim)


def run_reductions(x, dim, arch, outs=None, **config):
    kept = x.shape[1 - dim]
    outs = outs if outs is not None else [torch.full((kept,), 123.0) for _ in OPS]
    reductions(x, *outs, dim=dim, arch=arch, **config)
    return outs


def assert_reduced(outs, refs, x, dim):
    """max/min exact; sums within the rounding bound of n fp32 additions (n * 2^-24 * sum |x|, doubled)."""
    bound = 2 * x.shape[dim] * 2.0 ** -24 * x.float().abs().sum(dim)
    for op, got, want in zip(OPS, outs, refs):
        if op.endswith("sum"):
            assert ((got - want).abs() <= bound).all(), (op, (got - want).abs().max())
        else:
            assert torch.equal(got, want), op


# (block_M, block_N, threads, dim): a row held by one thread; by 16 lanes; by 4 waves; a column held by 4 lanes
# (bits 4 and 5: ds_swizzle / v_permlane16_swap and ds_bpermute / v_permlane32_swap); by all 4 waves
LAYOUTS = [(64, 4, 64, 1), (4, 64, 64, 1), (2, 1024, 256, 1), (4, 64, 64, 0), (256, 8, 256, 0)]


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("block_M,block_N,threads,dim", LAYOUTS)
def test_fp32_reductions_equal_torch(arch, block_M, block_N, threads, dim):
    torch.manual_seed(0)
    shape = (3 * block_M, block_N) if dim == 1 else (block_M, 3 * block_N)
    x = torch.randn(shape)
    outs = run_reductions(x, dim, arch, block_M=block_M, block_N=block_N, threads=threads)
    assert_reduced(outs, torch_reductions(x, dim), x, dim)


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16bit_sources_reduce_in_fp32(arch, dtype):
    torch.manual_seed(1)
    x = (torch.randn(4, 512) * 8).to(dtype)  # the fragment holds 16-bit values, two per register
    outs = run_reductions(x, 1, arch, block_M=2, block_N=512, threads=128)
    assert_reduced(outs, torch_reductions(x, 1), x, 1)


@pytest.mark.parametrize("arch", ARCHES)
def test_16bit_destinations_round_once(arch):
    """A bf16 destination (two outputs per register): the fp32 result rounded once, as torch's fp32 result
    rounded to bf16 (sums may differ by the rounding of their last fp32 bits: one bf16 step at most)."""
    torch.manual_seed(4)
    x = torch.randn(12, 64)
    outs = run_reductions(x, 1, arch, block_M=6, block_N=64, threads=64, out_dtype="bfloat16")
    for op, got, want in zip(OPS, outs, torch_reductions(x, 1)):
        want = want.to(torch.bfloat16).float()
        if op.endswith("sum"):
            assert ((got - want).abs() <= want.abs() * 2.0 ** -7).all(), op
        else:
            assert torch.equal(got, want), op


@pytest.mark.parametrize("arch", ARCHES)
def test_clear_false_combines_with_the_old_values(arch):
    torch.manual_seed(2)
    x = torch.randn(8, 256)
    old = torch.randn(8)
    old[0], old[1] = 1e3, -1e3  # the old value wins the max / the min
    # rows of 256 over 2 waves (2 elements a thread): the old value joins after the cross-wave step
    outs = run_reductions(x, 1, arch, outs=[old.clone() for _ in OPS], block_M=2, block_N=256, threads=256,
                          clear=False)
    s, mx, mn, amx, asum = torch_reductions(x, 1)
    want = (old + s, torch.maximum(old, mx), torch.minimum(old, mn), torch.maximum(old, amx), old + asum)
    assert_reduced(outs, want, x, 1)


@pytest.mark.parametrize("arch", ARCHES)
def test_nan_and_inf_as_torch(arch):
    """Each row over 2 waves of 64 threads (2 elements a thread): a NaN reaches the other wave's threads."""
    x = torch.randn(8, 256)
    x[0, 5] = float("nan")  # row 0: NaN in the first wave
    x[1, 200] = float("nan")  # row 1: in its second wave
    x[2, 7], x[2, 200] = float("inf"), float("-inf")  # row 2: sum NaN, max inf, min -inf, abssum inf
    x[3, :] = float("-inf")  # row 3: max of -inf only
    x[4, 3] = float("inf")  # row 4: one inf
    outs = run_reductions(x, 1, arch, block_M=2, block_N=256, threads=256)
    for op, got, want in zip(OPS, outs, torch_reductions(x, 1)):
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-4, equal_nan=True), (op, got[:5], want[:5])
        assert torch.equal(got.isnan(), want.isnan()), op


@tilegcn.jit
def row_sum(X, Y, *, block_M=2, block_N=256, threads=128):
    with T.Kernel(T.ceildiv(X.shape[0], block_M), threads=threads) as b:
        x = T.alloc_fragment((block_M, block_N), "float32")
        y = T.alloc_fragment((block_M,), "float32")
        T.copy(X[b * block_M, 0], x)
        T.reduce_sum(x, y)
        T.copy(y, Y[b * block_M])


def test_each_output_element_is_written_once():
    """128 threads hold the 2 sums of a tile (64 copies of each); the store writes 2 elements, not 128."""
    x, y = torch.randn(4, 256), torch.zeros(4)
    k = row_sum.compile(x, y, arch="gfx942")
    stats = emulator.load(k.hsaco).launch(k.name, k.grid, k.block, args=[x, y])
    assert torch.allclose(y, x.sum(1), rtol=1e-5, atol=1e-5)
    assert stats.bytes_vgpr_to_global == 4 * 4


def test_cross_wave_scratch_counts_in_lds_and_shows_in_the_ir():
    """A row over 4 waves: one partial per wave in LDS (the 64 lanes of a wave hold one value)."""
    k = row_sum.compile(torch.randn(4, 256), torch.zeros(4), arch="gfx942", block_M=1, threads=256)
    assert "alloc shared y_partials: float32[4]" in k.ir and "reduce_sum x dim=1 -> y" in k.ir
    assert k.metadata["lds_bytes"] >= 4 * 4
    single_wave = row_sum.compile(torch.randn(4, 256), torch.zeros(4), arch="gfx942", block_M=1, threads=64)
    assert single_wave.metadata["lds_bytes"] == 0


@pytest.mark.parametrize("arch", ARCHES)
def test_routes_per_arch(arch):
    """A row over a whole wave: DPP for lane distances 1..8, then on gfx942 DPP row_bcast into lane 63 and
    v_readlane back, on gfx950 the permlane swaps. Columns of [4, 64] (lanes 16 and 32 apart hold parts of one): on
    gfx942 ds_swizzle and ds_bpermute. Every route is run against torch by the tests above."""
    row = row_sum.compile(torch.randn(4, 256), torch.zeros(4), arch=arch, block_M=1, threads=64).asm
    cols = reductions.compile(torch.randn(4, 192), *[torch.zeros(192) for _ in OPS], block_M=4, block_N=64,
                              threads=64, dim=0, arch=arch).asm
    if arch == "gfx942":
        assert row.count("v_add_f32_dpp") == 6 and "row_bcast:31" in row and "v_readlane_b32" in row
        assert "ds_" not in row and "permlane" not in row
        assert "ds_swizzle_b32" in cols and "ds_bpermute_b32" in cols and "permlane" not in cols
    else:
        assert row.count("v_add_f32_dpp") == 4 and "v_permlane16_swap_b32" in row and "v_permlane32_swap_b32" in row
        assert "ds_" not in row and "row_bcast" not in row
        assert "v_permlane16_swap_b32" in cols and "v_permlane32_swap_b32" in cols and "ds_" not in cols


@tilegcn.jit
def bad_reduce(X, Y, *, case="shape"):
    with T.Kernel(1, threads=64) as b:
        x = T.alloc_fragment((4, 64), "float32")
        y = T.alloc_fragment((64,) if case == "shape" else (4,), "float32")
        T.copy(X[0, 0], x)
        if case == "shape":
            T.reduce_max(x, y, dim=1)
        elif case == "dim":
            T.reduce_max(x, y, dim=2)
        elif case == "global":
            T.reduce_max(X, y)
        elif case == "same":
            T.reduce_max(x, x, dim=0)
        else:
            for i in T.Parallel(4):
                T.reduce_max(x, y)
        T.copy(y, Y[0])


@pytest.mark.parametrize("case,message", [
    ("shape", r"y\[64\] cannot hold x\[4, 64\] reduced along dim 1: allocate it as \[4\]"),
    ("dim", r"dim=2 is not a dimension of x\[4, 64\]"),
    ("global", r"source must be a fragment .*got global buffer X"),
    ("same", r"x is both the source and the destination"),
    ("parallel", r"not allowed inside T.Parallel"),
])
def test_bad_reductions_are_refused_with_the_line(case, message):
    with pytest.raises(CompileError, match=message) as info:
        bad_reduce(torch.zeros(4, 64), torch.zeros(64), case=case, arch="gfx942")
    assert "test_reduce.py" in str(info.value)


@tilegcn.jit
def gemm_then_reduce(A, B, RowMax, ColSum, *, block=64, block_K=32):
    """Reductions of a T.gemm accumulator (the MFMA layout): row maxima (scaled by 2 in a T.Parallel over the
    reduced fragment) and column sums."""
    with T.Kernel(T.ceildiv(B.shape[1], block), T.ceildiv(A.shape[0], block), threads=256) as (bx, by):
        a = T.alloc_shared((block, block_K), A.dtype)
        b = T.alloc_shared((block_K, block), B.dtype)
        c = T.alloc_fragment((block, block), "float32")
        row_max = T.alloc_fragment((block,), "float32")
        col_sum = T.alloc_fragment((block,), "float32")
        T.clear(c)
        for k in T.Pipelined(T.ceildiv(A.shape[1], block_K), num_stages=2):
            T.copy(A[by * block, k * block_K], a)
            T.copy(B[k * block_K, bx * block], b)
            T.gemm(a, b, c)
        T.reduce_max(c, row_max, dim=1)
        for i in T.Parallel(block):
            row_max[i] = row_max[i] * 2.0
        T.copy(row_max, RowMax[bx, by * block])
        T.reduce_sum(c, col_sum, dim=0)
        T.copy(col_sum, ColSum[by, bx * block])


@pytest.mark.parametrize("arch", ARCHES)
def test_reductions_of_a_gemm_accumulator(arch):
    torch.manual_seed(3)
    A, B = torch.randn(128, 64).half(), torch.randn(64, 128).half()
    row_max, col_sum = torch.zeros(2, 128), torch.zeros(2, 128)
    gemm_then_reduce(A, B, row_max, col_sum, arch=arch)
    C = A.float() @ B.float()
    assert torch.allclose(row_max, 2 * torch.stack([C[:, :64].amax(1), C[:, 64:].amax(1)]), rtol=1e-5, atol=1e-4)
    assert torch.allclose(col_sum, torch.stack([C[:64].sum(0), C[64:].sum(0)]), rtol=1e-5, atol=1e-3)


@tilegcn.jit
def max_of_row_sums(X, Y, *, threads=64):
    """A reduction of a reduction's output (replicated over 16 lanes: each row sum is counted once)."""
    with T.Kernel(1, threads=threads) as b:
        x = T.alloc_fragment((4, 64), "float32")
        sums = T.alloc_fragment((4,), "float32")
        total = T.alloc_fragment((1,), "float32")
        T.copy(X[0, 0], x)
        T.reduce_sum(x, sums, dim=1)
        T.reduce_sum(sums, total, dim=0)
        T.copy(total, Y[0])


@pytest.mark.parametrize("threads", [64, 256])
def test_a_reduction_of_a_reduction_counts_each_element_once(threads):
    x, y = torch.randn(4, 64), torch.zeros(1)
    max_of_row_sums(x, y, threads=threads, arch="gfx942")
    assert torch.allclose(y, x.sum().reshape(1), rtol=1e-5, atol=1e-4)


def test_a_reduction_beside_a_k_phased_gemm_compiles():
    """The pipeliner splits gfx950's 256x256x32 K loop into phases after asking which statements use its tiles: a
    reduction's fragments are among the statements it asks (this once crashed the compiler)."""
    A, B = torch.zeros(512, 512, dtype=torch.bfloat16), torch.zeros(512, 512, dtype=torch.bfloat16)
    k = gemm_then_reduce.compile(A, B, torch.zeros(2, 512), torch.zeros(2, 512), block=256, arch="gfx950")
    assert "reduce_max c dim=1 -> row_max" in k.ir


@tilegcn.jit
def row_stats_by_tiles(X, Max, Sum, *, block_M=2, block_N=256, threads=256):
    """A loop over column tiles accumulating row maxima and sums (clear=False), each row over 2 waves: the LDS
    partials of one trip are overwritten by the next (the emulated device raises a race error on a missing
    barrier)."""
    M, N = X.shape
    with T.Kernel(T.ceildiv(M, block_M), threads=threads) as b:
        x = T.alloc_fragment((block_M, block_N), "float32")
        row_max = T.alloc_fragment((block_M,), "float32")
        row_sum = T.alloc_fragment((block_M,), "float32")
        T.fill(row_max, -float("inf"))
        T.clear(row_sum)
        for k in T.Pipelined(T.ceildiv(N, block_N), num_stages=1):
            T.copy(X[b * block_M, k * block_N], x)
            T.reduce_max(x, row_max, dim=1, clear=False)
            T.reduce_sum(x, row_sum, dim=1, clear=False)
        T.copy(row_max, Max[b * block_M])
        T.copy(row_sum, Sum[b * block_M])


@pytest.mark.parametrize("arch", ARCHES)
def test_reductions_in_a_loop_accumulate_over_tiles(arch):
    torch.manual_seed(5)
    x = torch.randn(4, 1024)
    row_max, row_sum = torch.zeros(4), torch.zeros(4)
    row_stats_by_tiles(x, row_max, row_sum, arch=arch)
    assert torch.equal(row_max, x.amax(1))
    assert ((row_sum - x.sum(1)).abs() <= 2 * 1024 * 2.0 ** -24 * x.abs().sum(1)).all()


@tilegcn.jit
def row_sums_one_row_a_trip(X, S, *, rows=4, threads=256):
    """One cross-wave reduction per trip of a T.serial loop: each trip rewrites the LDS partials the previous
    trip's slower waves may still be reading."""
    N = X.shape[1]
    with T.Kernel(T.ceildiv(X.shape[0], rows), threads=threads) as b:
        x = T.alloc_fragment((1, N), "float32")
        s = T.alloc_fragment((1,), "float32")
        for r in T.serial(rows):
            T.copy(X[b * rows + r, 0], x)
            T.reduce_sum(x, s, dim=1)
            T.copy(s, S[b * rows + r])


@pytest.mark.parametrize("arch", ARCHES)
def test_a_cross_wave_reduction_in_a_serial_loop_waits_for_the_previous_trips_reads(arch):
    torch.manual_seed(8)
    x = torch.randn(8, 512)
    s = torch.zeros(8)
    row_sums_one_row_a_trip(x, s, arch=arch)  # the emulator rejects the write-after-read race without the barrier
    assert ((s - x.sum(1)).abs() <= 2 * 512 * 2.0 ** -24 * x.abs().sum(1)).all()


@tilegcn.jit
def sum_of_squares(X, S, Y, *, reuse=False, threads=64):
    """squares = x * x, then reduced: with reuse=False only the reduction reads squares (it computes each square as
    it sums, holding no squares fragment); with reuse=True Y = squares is stored too, so the fragment must exist."""
    N = X.shape[1]
    with T.Kernel(X.shape[0], threads=threads) as b:
        x = T.alloc_fragment((1, N), "float32")
        squares = T.alloc_fragment((1, N), "float32")
        s = T.alloc_fragment((1,), "float32")
        T.copy(X[b, 0], x)
        for i, j in T.Parallel(1, N):
            squares[i, j] = x[i, j] * x[i, j]
        T.reduce_sum(squares, s, dim=1)
        T.copy(s, S[b])
        if reuse:
            T.copy(squares, Y[b, 0])
        else:
            T.copy(x, Y[b, 0])


@pytest.mark.parametrize("arch", ARCHES)
def test_a_fragment_only_a_reduction_reads_takes_no_registers(arch):
    torch.manual_seed(9)
    x = torch.randn(2, 2048)  # 32 elements a thread
    s, y = torch.zeros(2), torch.zeros(2, 2048)
    sum_of_squares(x, s, y, arch=arch)
    assert ((s - (x * x).sum(1)).abs() <= 2 * 2048 * 2.0 ** -24 * (x * x).sum(1)).all()
    assert torch.equal(y, x)
    # x's 32 registers a thread and a few more; holding the 32 squares as well would take over 64
    assert sum_of_squares.compile(x, s, y, arch=arch).metadata["vgprs"] < 48
    s2, y2 = torch.zeros(2), torch.zeros(2, 2048)
    sum_of_squares(x, s2, y2, reuse=True, arch=arch)  # squares read again after the reduction: kept
    assert torch.equal(s2, s) and torch.equal(y2, x * x)


@tilegcn.jit
def middle_dim(X, S, Mx, *, threads=64):
    """[8, 4, 8] reduced along the middle dim: with 4 elements a thread, the 4 holders of an output element are
    the threads that differ in thread-id bits 1 and 2 (bit 2 without bit 0: no mirror DPP, a ds_swizzle)."""
    with T.Kernel(1, threads=threads) as b:
        x = T.alloc_fragment((8, 4, 8), "float32")
        s = T.alloc_fragment((8, 8), "float32")
        m = T.alloc_fragment((8, 1, 8), "float32")
        T.copy(X[0, 0, 0], x)
        T.reduce_sum(x, s, dim=1)
        T.reduce_max(x, m, dim=1)
        T.copy(s, S[0, 0])
        T.copy(m, Mx[0, 0, 0])


@pytest.mark.parametrize("arch", ARCHES)
def test_a_middle_dimension_over_scattered_thread_bits(arch):
    torch.manual_seed(6)
    x = torch.randn(8, 4, 8)
    s, m = torch.zeros(8, 8), torch.zeros(8, 1, 8)
    middle_dim(x, s, m, arch=arch)
    assert torch.allclose(s, x.sum(1), rtol=1e-6, atol=1e-6)
    assert torch.equal(m, x.amax(1, keepdim=True))
    assert "ds_swizzle_b32" in middle_dim.compile(x, s, m, arch=arch).asm


@tilegcn.jit
def reduce_beside_a_live_tile(X, ColSum, Y):
    """Column sums of X while a 64 KiB shared tile S stays live (read again after them)."""
    with T.Kernel(1, threads=256) as bx:
        S = T.alloc_shared((128, 128), "float32")
        x = T.alloc_fragment((128, 128), "float32")
        col_sum = T.alloc_fragment((128,), "float32")
        T.copy(X[0, 0], S)
        T.copy(S, x)
        T.reduce_sum(x, col_sum, dim=0)
        T.copy(col_sum, ColSum[0])
        T.copy(S, Y[0, 0])


def test_scratch_behind_64_kib_of_a_live_shared_tile():
    """gfx950: the reduction's partials lie behind S's 64 KiB, past the 16-bit offset of ds_read / ds_write (their
    base address goes into the address register)."""
    X, col_sum, Y = torch.randn(128, 128), torch.zeros(128), torch.zeros(128, 128)
    k = reduce_beside_a_live_tile.compile(X, col_sum, Y, arch="gfx950")
    assert k.metadata["lds_bytes"] > 64 * 1024
    reduce_beside_a_live_tile(X, col_sum, Y, arch="gfx950")
    assert torch.allclose(col_sum, X.sum(0), rtol=1e-5, atol=1e-4) and torch.equal(Y, X)


def test_scratch_after_the_k_loop_takes_the_bytes_of_the_gemm_stages():
    """gfx950: a 256x256 tile's two LDS stages take 128 KiB; the reductions after the K loop put their partials in
    those bytes (LDS reuse, passes/lds.py), so the kernel asks for no more."""
    torch.manual_seed(7)
    A, B = torch.randn(256, 128).half(), torch.randn(128, 256).half()
    row_max, col_sum = torch.zeros(1, 256), torch.zeros(1, 256)
    k = gemm_then_reduce.compile(A, B, row_max, col_sum, block=256, block_K=64, arch="gfx950")
    assert k.metadata["lds_bytes"] == 128 * 1024
    gemm_then_reduce(A, B, row_max, col_sum, block=256, block_K=64, arch="gfx950")
    C = A.float() @ B.float()
    assert torch.allclose(row_max[0], 2 * C.amax(1), rtol=1e-5, atol=1e-4)
    assert torch.allclose(col_sum[0], C.sum(0), rtol=1e-5, atol=1e-3)
