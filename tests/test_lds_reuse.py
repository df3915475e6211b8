"""LDS reuse across the phases of a kernel (passes/lds.py): a shared buffer's bytes serve a later buffer once its last
statement is done, with the barrier that takes (the in-flight LDS DMA of a K loop's stages ahead included), and the
LDS budget error names the buffers live together at the peak. On the emulated device, against torch."""
import sys

import pytest
import torch

import tilegcn
import tilegcn.compiler
import tilegcn.passes.lds
from conftest import REPO
from tilegcn import language as T
from tilegcn.errors import HazardError, ResourceError

sys.path.insert(0, str(REPO / "examples" / "tilelang"))

import gemm_persistent  # noqa: E402

ARCHES = ["gfx942", "gfx950"]


@pytest.fixture(autouse=True)
def _emulator(monkeypatch):
    monkeypatch.setenv("TILEGCN_DEVICE", "emulator")


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).half()


def _gemm(a, b, arch, **tiles):
    config = dict(block_M=64, block_N=64, block_K=32, threads=128, num_stages=2) | tiles
    return gemm_persistent.matmul_non_persistent(a, b, arch=arch, **config)


@pytest.mark.parametrize("arch", ARCHES)
def test_c_staged_through_shared_takes_the_bytes_of_the_operand_stages(arch):
    """C_shared (64 x 64 f16, 8 KiB) is written after the K loop's last gemm: the kernel asks for the A and B stages'
    LDS only (2 stages x 4 KiB each), not 8 KiB more, and computes A @ B."""
    a, b = _randn(64, 96), _randn(96, 64, seed=1)
    kernel = gemm_persistent.matmul_non_persistent.compile(a, b, arch=arch, block_M=64, block_N=64, block_K=32,
                                                                threads=128, num_stages=2)
    assert kernel.metadata["lds_bytes"] == 2 * 2 * 64 * 32 * 2
    torch.testing.assert_close(_gemm(a, b, arch), (a.float() @ b.float()).half(), rtol=1e-2, atol=1e-2)


def test_without_the_reuse_barrier_c_overwrites_operand_stages_still_in_flight(monkeypatch):
    """The K loop's last trips issue the LDS DMA of stages no trip reads; C_shared's bytes are theirs. Without the
    barrier (and its wait for those writes) the emulator catches C_shared read while a DMA still writes it."""
    monkeypatch.setattr(tilegcn.compiler, "reuse_barrier", lambda ctx, stmt: None)
    unsafe = tilegcn.jit(gemm_persistent.matmul_non_persistent.fn)  # its own compiles, kept from the other tests
    with pytest.raises(HazardError, match="LDS DMA"):
        unsafe(_randn(96, 64), _randn(64, 80, seed=1), arch="gfx950", block_M=64, block_N=64, block_K=32,
               threads=128, num_stages=2)


@tilegcn.jit
def two_phases(X, Y, Z, *, block=64):
    """Phase 1: Y = 2 X through shared S1 (fp32); phase 2: Z = X + 1 through S2 (f16), S2 placed on S1's bytes."""
    N, = X.shape
    with T.Kernel(T.ceildiv(N, block), threads=64) as bx:
        S1 = T.alloc_shared((block,), "float32")
        S2 = T.alloc_shared((block,), X.dtype)
        T.copy(X[bx * block], S1)
        for i in T.Parallel(block):
            S1[i] = S1[i] * 2.0
        T.copy(S1, Y[bx * block])
        T.copy(X[bx * block], S2)
        for i in T.Parallel(block):
            S2[i] = S2[i] + 1.0
        T.copy(S2, Z[bx * block])


@pytest.mark.parametrize("arch", ARCHES)
def test_a_buffer_of_a_later_phase_reuses_an_earlier_ones_bytes(arch):
    x = _randn(100)
    y, z = torch.empty(100), torch.empty_like(x)
    kernel = two_phases.compile(x, y, z, arch=arch)
    assert kernel.metadata["lds_bytes"] == 64 * 4  # S1's 256 bytes; S2's 128 lie in them
    assert "LDS reuse: S2 takes the bytes of S1" in kernel.asm
    two_phases(x, y, z, arch=arch)
    assert torch.equal(y, x.float() * 2) and torch.equal(z, (x.float() + 1).half())


def test_the_budget_error_names_the_buffers_live_at_the_peak():
    """256 x 256 x 64 f16 at num_stages=3 on gfx950 (LDS DMA: a buffer per stage): the K loop needs 192 KiB of its
    160; C_shared (128 KiB) is not counted on top, it reuses their bytes."""
    a, b = _randn(256, 256), _randn(256, 256, seed=1)
    with pytest.raises(ResourceError) as err:
        gemm_persistent.matmul_non_persistent.compile(a, b, arch="gfx950", block_M=256, block_N=256,
                                                          block_K=64, threads=256, num_stages=3)
    assert ("needs 196608 bytes (A_shared 3 stages x 32768, B_shared 3 stages x 32768, live together; C_shared "
            "reuses their bytes), gfx950 has 163840") in str(err.value)
    assert "num_stages=2 fits" in str(err.value)


@tilegcn.jit
def gemm_c_through_shared(A, B, C, *, block_M=64, block_N=128, block_K=32):
    """C = A @ B, C stored as TileLang's GEMMs store it: accumulator -> C_shared (f16) -> C."""
    M, K = A.shape
    N = B.shape[1]
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
        A_shared = T.alloc_shared((block_M, block_K), A.dtype)
        B_shared = T.alloc_shared((block_K, block_N), B.dtype)
        C_local = T.alloc_fragment((block_M, block_N), "float32")
        C_shared = T.alloc_shared((block_M, block_N), C.dtype)
        T.clear(C_local)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=1):
            T.copy(A[by * block_M, k * block_K], A_shared)
            T.copy(B[k * block_K, bx * block_N], B_shared)
            T.gemm(A_shared, B_shared, C_local)
        T.copy(C_local, C_shared)
        T.copy(C_shared, C[by * block_M, bx * block_N])


def _c_copy_conflicts(arch):
    a, b, c = _randn(64, 32), _randn(32, 128, seed=1), torch.empty(64, 128, dtype=torch.float16)
    stats = gemm_c_through_shared(a, b, c, arch=arch)
    torch.testing.assert_close(c, (a.float() @ b.float()).half(), rtol=1e-2, atol=1e-2)
    assert stats.by_mnemonic["ds_write_b64"]  # the accumulator's runs of 4 elements into C_shared
    return {m: n for m, n in stats.lds_bank_conflicts_by_mnemonic.items() if m in ("ds_write_b64", "ds_read_b128")}


@pytest.mark.parametrize("arch", ARCHES)
def test_the_accumulator_goes_into_padded_rows_of_c_shared_with_few_bank_conflicts(arch, monkeypatch, cache_dir):
    """A row of C_shared (128 f16) is a whole sweep of the LDS banks, and a wave's lanes hold one row each of the
    accumulator's columns: without padding every lane of a half wave writes the same banks; a 16-byte pad spreads
    them (what is left: lanes 16 rows apart share banks), and C_shared is still read in 16-byte pieces, conflict
    free: on gfx950 the pad comes after every 2 rows, the rows a half wave reads (in the measured phases,
    Arch.lds_phases, a pad between them would put chunks of both rows in one phase on the same banks)."""
    padded = _c_copy_conflicts(arch)
    monkeypatch.setattr(tilegcn.passes.lds, "row_pitches", lambda kernel, arch: {})
    monkeypatch.setenv("TILEGCN_CACHE_DIR", str(cache_dir / "unpadded"))  # a compile of its own
    gemm_c_through_shared.cache_clear()
    unpadded = _c_copy_conflicts(arch)
    assert padded.get("ds_read_b128", 0) == 0 and 10 * padded["ds_write_b64"] < unpadded["ds_write_b64"]
