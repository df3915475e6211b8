"""T.gemm end to end on the emulated device: `gemm` and `gemm_bias_relu` from tests/kernels.py against an fp32
torch reference, for gfx942 and gfx950, bf16 and f16, B as (K, N) and as (N, K) (transpose_B=True), the three
tile configs, square / ragged / single-row shapes, with and without the epilogue; the compile-time errors of
configs that do not fit; LDS bank conflicts of the operand reads; the instructions the asm is made of.

Every launch runs with the emulator's checks on (the default `check=True` of Module.launch, which the jit call
uses): an asynchrony hazard, a missing MFMA wait state or an LDS race between waves raises HazardError /
RaceError and fails the test, so a passing case also shows zero hazards and races. LaunchStats has no hazard
counter to assert on; `test_launches_are_checked` pins that the checks are on.

Not the full cross product (the emulator takes seconds per GEMM): CASES is a covering set in which every value of
every axis appears, and each arch sees each tile with both B layouts. Every case runs at num_stages=1 and again at
num_stages 2 and 3 (`T.Pipelined`) on a smaller problem of the same kind; where the S stage buffers do not fit the
arch's LDS, the case asserts the ResourceError the user gets instead.
"""
from __future__ import annotations

import inspect
import math
import os
import re

import pytest
import torch

import kernels
from tilegcn.amdgcn.arch import get_arch
from tilegcn.errors import CompileError, ResourceError
from tilegcn.passes.gemm_plan import plan_gemm
from tilegcn.runtime.emulator import Module

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


@pytest.fixture(autouse=True)
def emulator(monkeypatch):
    """Launch on the emulated device whatever the machine has (the jit call reads TILEGCN_DEVICE per call)."""
    monkeypatch.setenv("TILEGCN_DEVICE", "emulator")


# ---- tolerance --------------------------------------------------------------------------------------------------
# Inputs are bf16/f16 values; the reference is torch's fp32 matmul of exactly those values. Each product a*b is
# exact in fp32 (8x8 or 11x11 significant bits <= 24), so kernel and reference differ by
#   1. the rounding of the fp32 result to the output dtype: at most a half ulp, u*|x| with u = 2^-8 (bf16, 8
#      significant bits) or 2^-11 (f16, 11 bits). rtol = 2u (bf16: 2^-7) and 4u (f16: 2^-9) covers it with margin;
#   2. fp32 accumulation in different orders (MFMA vs torch), and the fp32 bias add: each add rounds by
#      <= 2^-24 * |partial sum|; with N(0, 1) inputs the partial sums are O(sqrt(K)) (a few sqrt(K) at most), so
#      the total is <= ~4 * K * sqrt(K) * 2^-24 (2e-3 at K = 1024) and typically ~K * 2^-24 (6e-5).
#      atol = 2^-12 * sqrt(K) (7.8e-3 at K = 1024) covers it for every K here (<= 1024).
# Against the signal this is tight: an entry is ~N(0, K), one product a_k*b_k is ~1 (>> atol), a dropped K tile
# moves an entry by ~sqrt(block_K) (>> rtol*sqrt(K) + atol), so a missing / duplicated / mispaired k term shows;
# unwritten outputs stay NaN (C starts NaN-filled) and NaN never passes. `_negative_controls` checks that the
# tolerance indeed rejects a reference with one K tile dropped and one with A's k order permuted.
# Measured over CASES: max |C - ref| / tolerance is 0.49 (bf16) and 0.24 (f16): half the budget, as derived.
RTOL = {torch.bfloat16: 2.0 ** -7, torch.float16: 2.0 ** -9}


def outside_tolerance(C: torch.Tensor, ref: torch.Tensor, K: int) -> torch.Tensor:
    """Bool mask of the elements of C (bf16/f16) not within rtol*|ref| + atol of the fp32 reference (NaN: True)."""
    tol = RTOL[C.dtype] * ref.abs() + 2.0 ** -12 * math.sqrt(K)
    return ~((C.float() - ref).abs() <= tol)


def reference(A, B, bias, transpose_B):
    out = A.float() @ (B.float().T if transpose_B else B.float())
    if bias is not None:
        out = torch.relu(out + bias.float())
    return out


def inputs(M, N, K, dtype, transpose_B, epilogue, seed):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(M, K, generator=g).to(dtype)
    B = torch.randn(*((N, K) if transpose_B else (K, N)), generator=g).to(dtype)
    bias = torch.randn(N, generator=g).to(dtype) if epilogue else None
    C = torch.full((M, N), float("nan"), dtype=dtype)
    return A, B, bias, C


def launch(A, B, bias, C, arch, **cfg):
    """The user's call: fn(*tensors, arch=..., **constants); returns the emulator's LaunchStats."""
    if bias is None:
        return kernels.gemm(A, B, C, arch=arch, **cfg)
    return kernels.gemm_bias_relu(A, B, bias, C, arch=arch, **cfg)


def assert_close(C, ref, K, what):
    bad = outside_tolerance(C, ref, K)
    if bad.any():
        i, j = (int(x) for x in bad.nonzero()[0])
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.numel()} elements outside tolerance; first at "
                             f"[{i}, {j}]: got {C[i, j].item()}, expected {ref[i, j].item()}")


def _negative_controls(A, B, bias, C, transpose_B, block_K):
    """The tolerance must reject plausible lowering bugs: a dropped K tile, and a k permutation applied to one
    operand only (k <-> k^4 in each 8-element chunk: the two MFMA k-steps a CDNA3 ds_read_b128 feeds, swapped)."""
    K = A.shape[1]
    k0 = (K // block_K // 2) * block_K
    dropped = A.clone()
    dropped[:, k0:k0 + block_K] = 0
    perm = torch.arange(K)
    full = K // 8 * 8
    perm[:full] = perm[:full] ^ 4
    for name, bad_A in (("one K tile dropped", dropped), ("A's k permuted", A[:, perm])):
        frac = outside_tolerance(C, reference(bad_A, B, bias, transpose_B), K).float().mean().item()
        # measured over CASES: >= 0.97 of the elements rejected without the epilogue, >= 0.52 with it (where both
        # pre-activations are negative, relu makes both 0)
        assert frac > (0.4 if bias is not None else 0.9), \
            f"the tolerance accepts a reference with {name} (only {frac:.0%} of elements rejected)"


# ---- correctness: the covering set --------------------------------------------------------------------------------
TILES = {  # name -> (block_M, block_N, block_K)
    "64x64x32": (64, 64, 32),
    "128x128x64": (128, 128, 64),
    "256x256x64": (256, 256, 64),  # A + B tiles = 64 KiB of LDS: exactly gfx942's budget (num_stages=1)
}
# "ragged": partial tiles in M, N and K for every tile: 488 = 256 + 232, 476 = 256 + 220, 124 = 64 + 60 leave
# the same remainders mod 256 / 128 / 64 / 32 as the 1000 x 1500 x 700 this shape once was (232 / 104 / 40 in M,
# 220 / 92 / 28 in N, 60 / 28 in K) and the same 8k+8-byte rows (no LDS DMA), with >= 2 workgroups along M and N
# and >= 2 K steps for every tile: the same masked paths (one 64x64x32 case: 2.6 s -> 0.4 s on the emulator).
SHAPES = {"256^3": (256, 256, 256), "1024^3": (1024, 1024, 1024), "ragged": (488, 476, 124),
          "row": (1, 2048, 512)}

# (arch, dtype, B layout, tile, threads, shape, epilogue). Per arch: each tile with both B layouts; both dtypes,
# every shape and both epilogue settings; the ragged shape (partial tiles in M, N and K) with every tile.
# 256x256x64 runs at 256 threads (2x2 waves, 256 AGPRs: the whole accumulator file) and at 512 threads (4x2 waves,
# 128 AGPRs), each arch getting both. 1024^3: one case per arch.
CASES = [
    ("gfx942", "bf16", "KN", "64x64x32", 256, "256^3", False),
    ("gfx942", "f16", "NK", "64x64x32", 256, "row", True),
    ("gfx942", "f16", "KN", "128x128x64", 256, "1024^3", False),
    ("gfx942", "bf16", "NK", "128x128x64", 256, "256^3", True),
    ("gfx942", "bf16", "KN", "256x256x64", 256, "ragged", True),
    ("gfx942", "f16", "NK", "256x256x64", 512, "ragged", False),
    ("gfx942", "bf16", "NK", "64x64x32", 256, "ragged", False),
    ("gfx942", "f16", "KN", "128x128x64", 256, "ragged", True),
    ("gfx950", "bf16", "NK", "64x64x32", 256, "256^3", False),
    ("gfx950", "f16", "KN", "64x64x32", 256, "row", False),
    ("gfx950", "bf16", "KN", "128x128x64", 256, "row", True),
    ("gfx950", "f16", "NK", "128x128x64", 256, "256^3", True),
    ("gfx950", "f16", "KN", "256x256x64", 512, "ragged", True),
    ("gfx950", "bf16", "NK", "256x256x64", 256, "1024^3", False),
    ("gfx950", "f16", "KN", "64x64x32", 256, "ragged", True),
    ("gfx950", "bf16", "NK", "128x128x64", 256, "ragged", False),
]


def _case_id(case):
    arch, dt, layout, tile, threads, shape, epi = case
    return f"{arch}-{dt}-B{layout}-{tile}-t{threads}-{shape}-{'bias_relu' if epi else 'plain'}"


def test_covering_set_covers_every_axis():
    axes = list(zip(*CASES))
    assert set(axes[0]) == {"gfx942", "gfx950"} and set(axes[1]) == set(DTYPES) and set(axes[2]) == {"KN", "NK"}
    assert set(axes[3]) == set(TILES) and set(axes[5]) == set(SHAPES) and set(axes[6]) == {False, True}
    for arch in ("gfx942", "gfx950"):
        mine = [c for c in CASES if c[0] == arch]
        assert {(c[3], c[2]) for c in mine} == {(t, lay) for t in TILES for lay in ("KN", "NK")}
        assert {c[1] for c in mine} == set(DTYPES) and {c[6] for c in mine} == {False, True}
        assert {c[5] for c in mine} == set(SHAPES)


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_gemm_matches_torch(case):
    arch, dt, layout, tile, threads, shape, epilogue = case
    dtype, transpose_B = DTYPES[dt], layout == "NK"
    (M, N, K), (bm, bn, bk) = SHAPES[shape], TILES[tile]
    A, B, bias, C = inputs(M, N, K, dtype, transpose_B, epilogue, seed=CASES.index(case))
    stats = launch(A, B, bias, C, arch, block_M=bm, block_N=bn, block_K=bk, threads=threads,
                   transpose_B=transpose_B)
    assert stats.workgroups == math.ceil(M / bm) * math.ceil(N / bn)
    ref = reference(A, B, bias, transpose_B)
    assert_close(C, ref, K, _case_id(case))
    _negative_controls(A, B, bias, C, transpose_B, bk)


# ---- the same cases with num_stages 2 and 3 -----------------------------------------------------------------------
# Every case of CASES again at num_stages 2 and 3. The cut is the problem size only: the emulator's time grows with
# workgroups x K steps, so each shape becomes a few tiles of its own kind (in units of the case's tile). Every other
# axis of every case is kept. What each shape tests stays, and the K trip count n covers n < S, n = S and n > S:
#   "256^3"  -> whole tiles, 2 workgroups along N, n = 2 (= S at S=2, < S at S=3)
#   "1024^3" -> whole tiles, 2 workgroups along M, n = 6: the steady loop runs several trips (its back-edge)
#   "ragged" -> partial tiles in M, N and K (masked rows, columns and k), n = 4; 16-byte rows (LDS DMA on gfx950)
#   "row"    -> M = 1 and one partial K tile: n = 1 < S, the pipeline is only prologue and drain; rows of 8k+8
#               bytes, as in the ragged shape of CASES (register-staged copies: LDS DMA needs 16-byte rows)
STAGES = (2, 3)
# The LDS a workgroup may use (CDNA3 / CDNA4 ISA guides): S buffers of the A and B tiles must fit, otherwise the
# compile refuses with a ResourceError naming the bytes needed and available.
LDS_BYTES = {"gfx942": 64 * 1024, "gfx950": 160 * 1024}


def pipelined_shape(shape, bm, bn, bk):
    return {"256^3": (bm, 2 * bn, 2 * bk), "1024^3": (2 * bm, bn, 6 * bk),
            "ragged": (bm + 44, bn + 4, 3 * bk + 24), "row": (1, bn + 44, bk // 2 + 4)}[shape]


def _assert_lds_refusal(err, arch, needed, fn):
    """The ResourceError the user sees for S buffers that do not fit: bytes needed and available, at their line."""
    msg = str(err)
    found = re.search(rf"LDS\b.*needs (\d+) bytes.*{arch} has (\d+)", msg)
    assert found and int(found[2]) == LDS_BYTES[arch] and int(found[1]) > int(found[2]), msg
    assert needed > LDS_BYTES[arch], f"{needed} bytes of stage buffers fit {arch}'s LDS, yet refused: {msg}"
    _assert_at_gemm_line(err, fn, calls=("T.alloc_shared(", "T.Pipelined("))  # a buffer, or the stages


def _assert_register_refusal(err, arch, threads):
    """The ResourceError for stages whose staging registers do not fit (never a spill): VGPRs needed vs the file,
    and what holds them; or VGPRs + AGPRs needed vs what the workgroup's waves leave each wave of a SIMD's
    512-register file (ISA guides: a workgroup's waves spread over the CU's 4 SIMDs)."""
    msg = str(err)
    found = re.search(rf"needs (\d+) VGPRs, {arch} has (\d+) \(live at the peak: .*staging", msg)
    if found:
        assert int(found[1]) > int(found[2]) == get_arch(arch).arch_vgprs, msg
        return
    found = re.search(rf"= (\d+) registers of the unified file per wave; {threads} threads .* leaves (\d+) per wave "
                      rf"on {arch}", msg)
    assert found and int(found[1]) > int(found[2]) == 512 // math.ceil(threads / 64 / 4), msg


@pytest.mark.parametrize("stages", STAGES, ids=[f"S{s}" for s in STAGES])
@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_pipelined_gemm_matches_torch(case, stages):
    arch, dt, layout, tile, threads, shape, epilogue = case
    dtype, transpose_B = DTYPES[dt], layout == "NK"
    (bm, bn, bk) = TILES[tile]
    M, N, K = pipelined_shape(shape, bm, bn, bk)
    A, B, bias, C = inputs(M, N, K, dtype, transpose_B, epilogue, seed=CASES.index(case) + 100 * stages)
    fn, args = (kernels.gemm, (A, B, C)) if bias is None else (kernels.gemm_bias_relu, (A, B, bias, C))
    needed = stages * (bm + bn) * bk * A.element_size()  # S buffers of the A and B tiles
    try:
        compiled = fn.compile(*args, arch=arch, block_M=bm, block_N=bn, block_K=bk, threads=threads,
                              transpose_B=transpose_B, num_stages=stages)
    except ResourceError as err:
        if "register budget" in str(err):  # register-staged stages ahead live in VGPRs (gfx942 256x256)
            return _assert_register_refusal(err, arch, threads)
        return _assert_lds_refusal(err, arch, needed, fn)
    assert compiled.metadata["lds_bytes"] <= LDS_BYTES[arch]
    stats = compiled(*args)
    assert stats.workgroups == math.ceil(M / bm) * math.ceil(N / bn)
    what = f"{_case_id(case)} num_stages={stages} on {M}x{N}x{K}"
    assert_close(C, reference(A, B, bias, transpose_B), K, what)
    _negative_controls(A, B, bias, C, transpose_B, bk)
    if arch == "gfx950" and transpose_B and K * A.element_size() % 16 == 0:
        # both operands K-major, 16-byte rows: every operand byte by LDS DMA
        assert stats.bytes_global_to_lds and not any(m.startswith("ds_write") for m in stats.by_mnemonic), what


def test_launches_are_checked():
    """The jit call launches with Module.launch's defaults: hazard / race / wait-state checks on."""
    assert inspect.signature(Module.launch).parameters["check"].default is True


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_block_M_48_runs_on_16x16_mfma(arch):
    """block_M = 48 is not a multiple of 32 but fits the 16x16 MFMA shapes (waves 1x4): a valid config (on gfx950
    with B (K, N) read by ds_read_b64_tr_b16 into 16x16x32 operands)."""
    A, B, _, C = inputs(96, 256, 128, torch.bfloat16, False, False, seed=48)
    stats = kernels.gemm(A, B, C, arch=arch, block_M=48)
    assert stats.by_mnemonic.get(plan_gemm(arch, "bf16", 48, 128, 64, 256).mfma.name("bf16"), 0) > 0
    assert (stats.by_mnemonic.get("ds_read_b64_tr_b16", 0) > 0) == (arch == "gfx950")
    assert_close(C, reference(A, B, None, False), 128, f"48x128x64 on {arch}")


# ---- configs that do not fit: compile-time errors with needed vs available, at the user's T.gemm line -------------
def _call_lines(jit_fn, call):
    """(file, lines) of the `call`s (e.g. "T.gemm(") in a tile program's source."""
    lines, first = inspect.getsourcelines(jit_fn.fn)
    return inspect.getsourcefile(jit_fn.fn), [first + i for i, text in enumerate(lines) if call in text]


def _assert_at_gemm_line(err, jit_fn, calls=("T.gemm(",)):
    """The error starts with its location: the line of the user's T.gemm (or of one of `calls`)."""
    path, lines = _call_lines(jit_fn, calls[0])
    lines += [n for call in calls[1:] for n in _call_lines(jit_fn, call)[1]]
    where, _, lineno = err.location.rpartition(":")
    assert os.path.samefile(where, path) and int(lineno) in lines, (err.location, f"{path}:{lines}")
    assert str(err).startswith(err.location + ": ")


def _tensors(M, N, K, dtype=torch.bfloat16):
    return torch.empty(M, K, dtype=dtype), torch.empty(K, N, dtype=dtype), torch.empty(M, N, dtype=dtype)


def test_lds_over_budget_on_gfx942_fits_gfx950():
    cfg = dict(block_M=256, block_N=256, block_K=128, transpose_B=True)  # (256 + 256) * 128 * 2 = 131072 bytes
    A, B, _, C = inputs(256, 256, 256, torch.bfloat16, True, False, seed=128)
    with pytest.raises(ResourceError) as info:
        kernels.gemm.compile(A, B, C, arch="gfx942", **cfg)
    msg = str(info.value)
    assert re.search(r"LDS: needs 131072 bytes.*gfx942 has 65536", msg), msg
    _assert_at_gemm_line(info.value, kernels.gemm)
    # gfx950 has 160 KiB: the same config compiles, and runs correctly
    compiled = kernels.gemm.compile(A, B, C, arch="gfx950", **cfg)
    assert compiled.metadata["lds_bytes"] == 131072
    compiled(A, B, C)
    assert_close(C, reference(A, B, None, True), 256, "256x256x128 on gfx950")


def test_block_K_128_with_B_as_KN_on_gfx950():
    # the transposing copy's XOR-swizzled LDS addresses at block_K=128 (once a lowering bug)
    A, B, _, C = inputs(256, 256, 256, torch.bfloat16, False, False, seed=129)
    kernels.gemm(A, B, C, arch="gfx950", block_M=128, block_N=128, block_K=128)
    assert_close(C, reference(A, B, None, False), 256, "128x128x128, B (K, N), on gfx950")


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_accumulators_over_the_register_file(arch):
    # 256x256 fp32 accumulators on one wave: 65536 / 64 lanes = 1024 registers per lane; the AGPR file has 256
    with pytest.raises(ResourceError) as info:
        kernels.gemm.compile(*_tensors(512, 512, 512), arch=arch, block_M=256, block_N=256, block_K=64, threads=64)
    msg = str(info.value)
    assert re.search(r"needs 1024 AGPRs per lane.*has 256", msg), msg
    _assert_at_gemm_line(info.value, kernels.gemm)


@pytest.mark.parametrize("cfg, constraint", [
    # no MFMA shape tiles 40 rows: neither 32 nor 16 divides it (block_M = 48 is fine: see above)
    (dict(block_M=40), r"fits no MFMA shape.*block_M % \(16\*waves_M\) == 0"),
    # K-major LDS rows are XOR-swizzled in 16-byte chunks: a power-of-two number of them
    (dict(block_K=48), r"block_K must be a power of two"),
], ids=["block_M=40", "block_K=48"])
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_tile_that_does_not_fit_the_mfma_tiling(arch, cfg, constraint):
    A, B, C = _tensors(256, 256, 256)
    bias = torch.empty(256, dtype=torch.bfloat16)
    for fn, args in ((kernels.gemm, (A, B, C)), (kernels.gemm_bias_relu, (A, B, bias, C))):
        with pytest.raises(CompileError) as info:
            fn.compile(*args, arch=arch, **cfg)
        assert not isinstance(info.value, ResourceError)
        assert re.search(constraint, str(info.value)), str(info.value)
        _assert_at_gemm_line(info.value, fn)


# ---- LDS bank conflicts and the instructions ---------------------------------------------------------------------
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_operand_reads_have_no_bank_conflicts(arch):
    A, B, _, C = inputs(256, 256, 256, torch.bfloat16, False, False, seed=7)
    stats = kernels.gemm(A, B, C, arch=arch, block_M=128, block_N=128, block_K=64)
    # 4 workgroups x 4 waves x 4 k-tiles x 4 read steps x (2 A + 2 B fragments); B (K, N) on gfx950: each B
    # fragment is two ds_read_b64_tr_b16
    fragments = 4 * 4 * 4 * 4
    tr = arch == "gfx950"
    assert stats.by_mnemonic["ds_read_b128"] == fragments * (2 if tr else 4)
    assert stats.by_mnemonic.get("ds_read_b64_tr_b16", 0) == fragments * (4 if tr else 0)
    conflicts = {m: n for m, n in stats.lds_bank_conflicts_by_mnemonic.items() if m.startswith("ds_read") and n}
    assert not conflicts, conflicts
    assert_close(C, reference(A, B, None, False), 256, f"128x128x64 on {arch}")


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_asm_is_made_of_the_expected_instructions(arch):
    # the fullest config: 64 KiB of LDS and all 256 AGPRs, still no scratch (no spills)
    cfg = dict(block_M=256, block_N=256, block_K=64, threads=256)
    k = kernels.gemm.compile(*_tensors(256, 256, 256), arch=arch, **cfg)
    mnemonics = set(re.findall(r"^\s+([a-z][a-z0-9_]*)\b", k.asm, re.M))
    mfma = plan_gemm(arch, "bf16", 256, 256, 64, 256).mfma.name("bf16")
    assert {"buffer_load_dwordx4", "ds_write_b128", "ds_read_b128", "s_barrier", mfma} <= mnemonics
    assert not {m for m in mnemonics if m.startswith("scratch_")}
    assert re.search(r"\.private_segment_fixed_size:\s*0\b", k.asm)
    assert k.metadata["lds_bytes"] == 65536 and k.metadata["agprs"] == 256
