"""MFMA layouts and arithmetic of the emulated device.

Ground truth:
  * CDNA3 shapes: AMD's Matrix Instruction Calculator (tests/data/mfma_layouts_cdna3.json). Operands are
    packed into registers and D is read back straight from the calculator's (lane, register, bits)
    entries, never through tilegcn's own layout functions.
  * gfx950 shapes (the calculator has no CDNA4): the formulas of docs/isa-notes.md, restated literally below.

Tolerance. A and B hold bf16/f16 values, whose products are exact in fp32, so the only error is the
fp32 rounding of the K+1-term sum (K products and C). For recursive summation in any order,
|computed - exact| <= gamma * sum(|A_ik * B_kj|) + gamma * |C_ij| with gamma = (K+1) * u / (1 - (K+1) * u),
u = 2**-24 (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., eq. 4.4). We check against
an fp64 reference with exactly that per-element bound (about 2e-6 of the magnitude for K = 32), and
against torch's own fp32 matmul + C with twice it (both fp32 results lie within one bound of the exact
value). Integer-valued data whose sums stay below 2**24 have no rounding at all and must match exactly,
which makes any layout mistake unmistakable.
"""
from __future__ import annotations

import json
import pathlib
import zlib

import pytest
import torch

from tilegcn.amdgcn import arch as arch_mod
from tilegcn.amdgcn.mfma_layout import a_location, b_location, d_location
from tilegcn.errors import EmulatorError
from tilegcn.runtime.emulator import mfma

DATA = pathlib.Path(__file__).parent / "data" / "mfma_layouts_cdna3.json"
CALC = json.loads(DATA.read_text())["instructions"]
TORCH_DTYPE = {"bf16": torch.bfloat16, "f16": torch.float16}
U = 2.0**-24


def arch_shape(arch: str, M: int, N: int, K: int, dtype: str):
    """The MfmaShape of the arch table for M x N x K (None when the arch lacks it)."""
    for s in arch_mod.get_arch(arch).mfma_shapes[dtype]:
        if (s.M, s.N, s.K) == (M, N, K):
            return s
    return None


def calc_names():
    """Calculator instructions that tilegcn implements (bf16/f16 with fp32 accumulation)."""
    return sorted(n for n in CALC if mfma.shape_of(n) is not None)


def entries(table):
    for key, (lane, reg, lo, hi) in table.items():
        row, col = (int(x) for x in key.split(","))
        yield row, col, lane, reg, lo, hi


# --------------------------------------------------------------------------------------------------
# layout tables: calculator data and docs/isa-notes.md formulas, as (index arrays) the packers below use
# --------------------------------------------------------------------------------------------------

class Layout:
    """Where each A[i][k], B[k][j] (lane, 16-bit slot = 2*register + half) and D[i][j] (lane, register) lie."""

    def __init__(self, M, N, K, a_regs, d_regs, a, b, d):
        self.M, self.N, self.K, self.a_regs, self.d_regs = M, N, K, a_regs, d_regs
        self.a, self.b, self.d = a, b, d  # dicts (row, col) -> (lane, slot) / (lane, reg)


def calc_layout(name: str) -> Layout:
    ins = CALC[name]
    M, N, K = ins["M"], ins["N"], ins["K"]
    a, b, d = {}, {}, {}
    for dst, key in ((a, "A"), (b, "B")):
        for row, col, lane, reg, lo, hi in entries(ins[key]):
            assert hi - lo == 15 and lo in (0, 16)
            dst[(row, col)] = (lane, 2 * reg + lo // 16)
    for row, col, lane, reg, lo, hi in entries(ins["D"]):
        assert (lo, hi) == (0, 31)
        d[(row, col)] = (lane, reg)
    a_regs = 1 + max(slot for _, slot in a.values()) // 2
    d_regs = 1 + max(reg for _, reg in d.values())
    return Layout(M, N, K, a_regs, d_regs, a, b, d)


def notes_layout(M: int, K: int) -> Layout:
    """docs/isa-notes.md, gfx950 16x16x32 / 32x32x16: A[i][k] at lane dim*(k//8)+i, register (k%8)//2, half k%2
    (B[k][j] alike); D as for the CDNA3 shapes: 16x16 lane 16*(i//4)+j, register i%4;
    32x32 register 4*(i//8)+i%4, lane 32*((i//4)%2)+j."""
    N = M
    a = {(i, k): (M * (k // 8) + i, 2 * ((k % 8) // 2) + k % 2) for i in range(M) for k in range(K)}
    b = {(k, j): (N * (k // 8) + j, 2 * ((k % 8) // 2) + k % 2) for k in range(K) for j in range(N)}
    if M == 16:
        d = {(i, j): (16 * (i // 4) + j, i % 4) for i in range(M) for j in range(N)}
    else:
        d = {(i, j): (32 * ((i // 4) % 2) + j, 4 * (i // 8) + i % 4) for i in range(M) for j in range(N)}
    return Layout(M, N, K, 4, M * N // 64, a, b, d)


def pack16(values: torch.Tensor, where: dict, regs: int, dtype) -> torch.Tensor:
    """[W, R, C] matrix -> int32 [W, 64, regs] register bits, element (r, c) at where[(r, c)]."""
    W = values.shape[0]
    bits = values.to(dtype).view(torch.int16)
    out = torch.zeros(W, 64, 2 * regs, dtype=torch.int16)
    keys = list(where)
    rows = torch.tensor([r for r, _ in keys])
    cols = torch.tensor([c for _, c in keys])
    lanes = torch.tensor([where[k][0] for k in keys])
    slots = torch.tensor([where[k][1] for k in keys])
    out[:, lanes, slots] = bits[:, rows, cols]
    return out.view(torch.int32)


def pack_acc(values: torch.Tensor, where: dict, regs: int) -> torch.Tensor:
    W = values.shape[0]
    out = torch.full((W, 64, regs), float("nan"))
    keys = list(where)
    lanes, regs_ = [where[k][0] for k in keys], [where[k][1] for k in keys]
    out[:, lanes, regs_] = values[:, [r for r, _ in keys], [c for _, c in keys]]
    return out


def unpack_acc(regs: torch.Tensor, where: dict, M: int, N: int) -> torch.Tensor:
    W = regs.shape[0]
    out = torch.full((W, M, N), float("nan"), dtype=regs.dtype)
    keys = list(where)
    lanes, regs_ = [where[k][0] for k in keys], [where[k][1] for k in keys]
    out[:, [r for r, _ in keys], [c for _, c in keys]] = regs[:, lanes, regs_]
    return out


def random_operands(lay: Layout, dtype: str, waves: int, integers: bool, seed: int):
    g = torch.Generator().manual_seed(seed)
    if integers:  # small integers: exact in bf16/f16, and every partial sum exact in fp32
        A = torch.randint(-8, 9, (waves, lay.M, lay.K), generator=g).float()
        B = torch.randint(-8, 9, (waves, lay.K, lay.N), generator=g).float()
        C = torch.randint(-1000, 1001, (waves, lay.M, lay.N), generator=g).float()
    else:  # spread magnitudes over several binades, both signs
        def spread(*size):
            return torch.randn(*size, generator=g) * 2.0 ** torch.randint(-4, 5, size, generator=g)

        A, B = spread(waves, lay.M, lay.K), spread(waves, lay.K, lay.N)
        C = torch.randn(waves, lay.M, lay.N, generator=g) * 4
    # the values the instruction actually sees
    A = A.to(TORCH_DTYPE[dtype]).float()
    B = B.to(TORCH_DTYPE[dtype]).float()
    return A, B, C


def check_against_reference(D: torch.Tensor, A, B, C, exact: bool):
    ref64 = A.double() @ B.double() + C.double()
    if exact:
        assert torch.equal(D.double(), ref64), "integer data must give the exact result"
        return
    K = A.shape[-1]
    gamma = (K + 1) * U / (1 - (K + 1) * U)
    bound = gamma * (A.double().abs() @ B.double().abs() + C.double().abs())
    err = (D.double() - ref64).abs()
    assert bool((err <= bound).all()), f"max error / bound = {(err / bound.clamp_min(1e-300)).max():.3g}"
    torch_fp32 = torch.bmm(A, B) + C
    assert bool(((D.double() - torch_fp32.double()).abs() <= 2 * bound).all())


# --------------------------------------------------------------------------------------------------
# (1) layout functions vs the calculator, entry by entry
# --------------------------------------------------------------------------------------------------

def test_calculator_covers_what_gfx942_implements():
    """Every bf16/f16 shape of gfx942's table has calculator data, so nothing below is silently skipped (the 8-bit
    shapes T.gemm emits run through mfma_lowp: tests/test_emulator_lowp.py and tests/test_gemm8.py check them)."""
    ours = {s.name(dt) for dt, shapes in arch_mod.get_arch("gfx942").mfma_shapes.items() for s in shapes
            if s.elem_bytes == 2}
    assert ours == set(calc_names())
    assert len(ours) == 4
    # the calculator's fp8 / fp32-input instructions are not ours
    assert mfma.shape_of("v_mfma_f32_16x16x32_fp8_fp8") is None
    assert mfma.shape_of("v_mfma_f32_32x32x2_f32") is None


@pytest.mark.parametrize("name", calc_names())
def test_layout_functions_match_calculator(name):
    ins = CALC[name]
    dtype = name.rsplit("_", 1)[1]
    shape = arch_shape("gfx942", ins["M"], ins["N"], ins["K"], dtype)
    assert shape is not None and shape.name(dtype) == name
    assert len(ins["A"]) == shape.M * shape.K and len(ins["B"]) == shape.K * shape.N
    assert len(ins["D"]) == shape.M * shape.N
    for i, k, lane, reg, lo, hi in entries(ins["A"]):
        assert a_location(shape, i, k) == (lane, reg, lo // 16), f"A[{i}][{k}]"
        assert hi == lo + 15
    for k, j, lane, reg, lo, hi in entries(ins["B"]):
        assert b_location(shape, k, j) == (lane, reg, lo // 16), f"B[{k}][{j}]"
        assert hi == lo + 15
    for i, j, lane, reg, lo, hi in entries(ins["D"]):
        assert d_location(shape, i, j) == (lane, reg), f"D[{i}][{j}]"
        assert (lo, hi) == (0, 31)
    # register counts of the arch table agree with the calculator
    lay = calc_layout(name)
    assert (shape.a_regs, shape.d_regs) == (lay.a_regs, lay.d_regs)
    info = mfma.shape_of(name)
    assert (info.M, info.N, info.K, info.a_regs, info.d_regs, info.in_dtype) == (
        shape.M, shape.N, shape.K, shape.a_regs, shape.d_regs, dtype)
    assert info.passes == shape.passes == ins["cycles"] // 4


@pytest.mark.parametrize("M,K", [(16, 32), (32, 16)])
def test_gfx950_layout_functions_match_isa_notes(M, K):
    for dtype in ("bf16", "f16"):
        shape = arch_shape("gfx950", M, M, K, dtype)
        assert shape is not None and arch_shape("gfx942", M, M, K, dtype) is None
        lay = notes_layout(M, K)
        for (i, k), (lane, slot) in lay.a.items():
            assert a_location(shape, i, k) == (lane, slot // 2, slot % 2)
        for (k, j), (lane, slot) in lay.b.items():
            assert b_location(shape, k, j) == (lane, slot // 2, slot % 2)
        for (i, j), where in lay.d.items():
            assert d_location(shape, i, j) == where
        # "D as for the CDNA3 shapes": the calculator's D of the CDNA3 shape with the same M x N
        cdna3 = CALC[f"v_mfma_f32_{M}x{M}x{K // 2}_{dtype}"]
        for i, j, lane, reg, _, _ in entries(cdna3["D"]):
            assert d_location(shape, i, j) == (lane, reg)


def test_layout_functions_reject_out_of_range():
    shape = arch_shape("gfx942", 16, 16, 16, "bf16")
    with pytest.raises(IndexError):
        a_location(shape, 16, 0)
    with pytest.raises(IndexError):
        b_location(shape, 0, -1)
    with pytest.raises(IndexError):
        d_location(shape, 0, 16)


# --------------------------------------------------------------------------------------------------
# (2) execute() on CDNA3 shapes, data placed by the calculator
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("integers", [True, False], ids=["exact-int", "random"])
@pytest.mark.parametrize("name", calc_names())
def test_execute_matches_torch_calculator_layout(name, integers):
    dtype = name.rsplit("_", 1)[1]
    lay = calc_layout(name)
    W = 3
    A, B, C = random_operands(lay, dtype, W, integers, seed=zlib.crc32(name.encode()) + integers)
    a = pack16(A, lay.a, lay.a_regs, TORCH_DTYPE[dtype])
    b = pack16(B, lay.b, lay.a_regs, TORCH_DTYPE[dtype])
    c = pack_acc(C, lay.d, lay.d_regs)
    d = mfma.execute(name, a, b, c)
    assert d.dtype == torch.float32 and d.shape == (W, 64, lay.d_regs)
    check_against_reference(unpack_acc(d, lay.d, lay.M, lay.N), A, B, C, exact=integers)


# --------------------------------------------------------------------------------------------------
# (3) execute() on gfx950 shapes, data placed by the docs/isa-notes.md formulas
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("integers", [True, False], ids=["exact-int", "random"])
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("M,K", [(16, 32), (32, 16)])
def test_execute_gfx950_shapes_match_torch(M, K, dtype, integers):
    name = f"v_mfma_f32_{M}x{M}x{K}_{dtype}"
    assert mfma.shape_of(name, arch="gfx950") is not None and mfma.shape_of(name, arch="gfx942") is None
    lay = notes_layout(M, K)
    W = 2
    A, B, C = random_operands(lay, dtype, W, integers, seed=M * 1000 + K + integers)
    a = pack16(A, lay.a, 4, TORCH_DTYPE[dtype])
    b = pack16(B, lay.b, 4, TORCH_DTYPE[dtype])
    d = mfma.execute(name, a, b, pack_acc(C, lay.d, lay.d_regs))
    check_against_reference(unpack_acc(d, lay.d, M, M), A, B, C, exact=integers)


# --------------------------------------------------------------------------------------------------
# execute() details: spellings, C pass-through, errors
# --------------------------------------------------------------------------------------------------

def test_shape_of_spellings():
    want = mfma.shape_of("v_mfma_f32_32x32x8_bf16")
    assert want == mfma.MfmaInfo(M=32, N=32, K=8, a_regs=2, d_regs=16, passes=8, in_dtype="bf16")
    # llvm-mc 22 accepts the older spellings and prints (objdump too) the `_bf16` / `_f16` ones
    assert mfma.shape_of("v_mfma_f32_32x32x8bf16_1k") == want
    assert mfma.shape_of("v_mfma_f32_32x32x8_bf16_1k") == want
    assert mfma.shape_of("v_mfma_f32_32x32x8_bf16_e64") == want
    assert mfma.shape_of("v_mfma_f32_16x16x16f16") == mfma.shape_of("v_mfma_f32_16x16x16_f16")
    assert mfma.shape_of("v_mfma_f32_16x16x16_f16").in_dtype == "f16"
    assert mfma.shape_of("v_mfma_f32_16x16x32_bf16") == mfma.MfmaInfo(16, 16, 32, 4, 4, 4, "bf16")
    assert mfma.shape_of("v_mfma_f32_32x32x16_f16") == mfma.MfmaInfo(32, 32, 16, 4, 16, 8, "f16")
    for other in ("v_mfma_f32_32x32x4bf16", "v_mfma_f32_16x16x16f16_1k", "v_mfma_f32_4x4x4_16b_f16",
                  "v_mfma_f64_16x16x4_f64", "v_add_f32", "v_mfma_f32_32x32x8_bf16x"):
        assert mfma.shape_of(other) is None, other
    assert mfma.shape_of("v_mfma_f32_32x32x8_f16", arch="gfx942") is not None


def test_execute_zero_operands_pass_c_through_bit_exact():
    for name in ("v_mfma_f32_16x16x16_bf16", "v_mfma_f32_32x32x8_f16", "v_mfma_f32_32x32x16_bf16"):
        info = mfma.shape_of(name)
        c = torch.randn(5, 64, info.d_regs)
        zeros = torch.zeros(5, 64, info.a_regs, dtype=torch.int32)
        assert torch.equal(mfma.execute(name, zeros, zeros, c), c)
        # raw accumulator bits are accepted too
        assert torch.equal(mfma.execute(name, zeros, zeros, c.view(torch.int32)), c)


def test_execute_wave_independence_and_large_batch():
    name = "v_mfma_f32_32x32x8_bf16"
    lay = calc_layout(name)
    A, B, C = random_operands(lay, "bf16", 128, integers=True, seed=7)
    a, b = pack16(A, lay.a, 2, torch.bfloat16), pack16(B, lay.b, 2, torch.bfloat16)
    d = mfma.execute(name, a, b, pack_acc(C, lay.d, 16))
    check_against_reference(unpack_acc(d, lay.d, 32, 32), A, B, C, exact=True)
    # one wave alone gives the same answer as inside the batch
    d5 = mfma.execute(name, a[5:6], b[5:6], pack_acc(C[5:6], lay.d, 16))
    assert torch.equal(d5[0], d[5])


def test_execute_errors():
    zeros2 = torch.zeros(1, 64, 2, dtype=torch.int32)
    with pytest.raises(EmulatorError, match="not an MFMA"):
        mfma.execute("v_mfma_f32_32x32x2_f32", zeros2, zeros2, torch.zeros(1, 64, 16))
    with pytest.raises(EmulatorError, match="srcA"):
        mfma.execute("v_mfma_f32_16x16x32_bf16", zeros2, zeros2, torch.zeros(1, 64, 4))
    with pytest.raises(EmulatorError, match="srcC"):
        mfma.execute("v_mfma_f32_16x16x16_bf16", zeros2, zeros2, torch.zeros(1, 64, 16))
    with pytest.raises(EmulatorError, match="srcB"):
        mfma.execute("v_mfma_f32_16x16x16_bf16", zeros2, zeros2.float(), torch.zeros(1, 64, 4))


# --------------------------------------------------------------------------------------------------
# (4) end to end: an assembled kernel run on the emulated device
# --------------------------------------------------------------------------------------------------

def mfma_kernel_asm(arch: str, name: str) -> str:
    """One wave: load this lane's A and B registers from two buffers (lane-major dwords), zero the AGPR
    accumulators, one MFMA, wait out the hazard, read the AGPRs back and store them lane-major."""
    a_info = arch_mod.get_arch(arch)
    info = mfma.shape_of(name, arch=arch)
    ar, dr = info.a_regs, info.d_regs
    # wait states (s_nop N gives N+1) per docs/isa-notes.md / the arch table
    after_write = a_info.mfma_hazards.valu_write_to_mfma_src
    after_mfma = a_info.mfma_hazards.vdst_to_read[info.passes]
    load = {2: "buffer_load_dwordx2", 4: "buffer_load_dwordx4"}[ar]
    va, vb, vd = 4, 8, 12  # v[4:7] A, v[8:11] B, v[12:27] D
    acc = f"a[0:{dr - 1}]"
    lines = [
        "s_load_dwordx2 s[4:5], s[0:1], 0x0",
        "s_load_dwordx2 s[6:7], s[0:1], 0x8",
        "s_load_dwordx2 s[8:9], s[0:1], 0x10",
        "v_and_b32 v0, 0x3ff, v0",  # work-item id x = lane (one 64-thread block)
        f"v_lshlrev_b32 v1, {(ar * 4).bit_length() - 1}, v0",  # lane * 4 * a_regs
        f"v_lshlrev_b32 v2, {(dr * 4).bit_length() - 1}, v0",  # lane * 4 * d_regs
        "s_waitcnt lgkmcnt(0)",
    ]
    for base, ptr, nbytes in ((12, 4, 256 * ar), (16, 6, 256 * ar), (20, 8, 256 * dr)):
        lines += [  # raw buffer V#: base, stride 0, NUM_RECORDS = bytes, word 3 = 0x00020000
            f"s_mov_b32 s{base}, s{ptr}",
            f"s_and_b32 s{base + 1}, s{ptr + 1}, 0xffff",
            f"s_mov_b32 s{base + 2}, {nbytes}",
            f"s_mov_b32 s{base + 3}, 0x00020000",
        ]
    lines += [
        f"{load} v[{va}:{va + ar - 1}], v1, s[12:15], 0 offen",
        f"{load} v[{vb}:{vb + ar - 1}], v1, s[16:19], 0 offen",
    ]
    lines += [f"v_accvgpr_write_b32 a{r}, 0" for r in range(dr)]
    lines += [
        "s_waitcnt vmcnt(0)",
        f"s_nop {after_write - 1}",
        f"{name} {acc}, v[{va}:{va + ar - 1}], v[{vb}:{vb + ar - 1}], {acc}",
        f"s_nop {after_mfma - 1}",
    ]
    lines += [f"v_accvgpr_read_b32 v{vd + r}, a{r}" for r in range(dr)]
    lines += [f"buffer_store_dwordx4 v[{vd + 4 * q}:{vd + 4 * q + 3}], v2, s[20:23], 0 offen offset:{16 * q}"
              for q in range(dr // 4)]
    lines += ["s_endpgm"]
    body = "\n".join("  " + ln for ln in lines)
    args = "\n".join(
        f"      - {{ .name: {n}, .offset: {8 * i}, .size: 8, .value_kind: global_buffer, .address_space: global }}"
        for i, n in enumerate("abd"))
    return f""".amdgcn_target "amdgcn-amd-amdhsa--{arch}"
.text
.globl mfma_test
.p2align 8
.type mfma_test,@function
mfma_test:
{body}
.size mfma_test, .-mfma_test

.rodata
.p2align 6
.amdhsa_kernel mfma_test
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
  .amdhsa_next_free_vgpr {32 + dr}
  .amdhsa_next_free_sgpr 24
  .amdhsa_accum_offset 32
.end_amdhsa_kernel

.amdgpu_metadata
---
amdhsa.version: [ 1, 2 ]
amdhsa.target: amdgcn-amd-amdhsa--{arch}
amdhsa.kernels:
  - .name: mfma_test
    .symbol: mfma_test.kd
    .kernarg_segment_size: 24
    .kernarg_segment_align: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .wavefront_size: 64
    .sgpr_count: 24
    .vgpr_count: {32 + dr}
    .agpr_count: {dr}
    .max_flat_workgroup_size: 64
    .args:
{args}
...
.end_amdgpu_metadata
"""


E2E_CASES = [("gfx942", n) for n in calc_names()] + [
    ("gfx950", f"v_mfma_f32_{shape}_{dt}") for shape in ("16x16x32", "32x32x16", "16x16x16", "32x32x8")
    for dt in ("bf16", "f16")
]


def _emulator_load():
    emulator = pytest.importorskip("tilegcn.runtime.emulator")
    if not hasattr(emulator, "load"):
        pytest.skip("emulator core (tilegcn.runtime.emulator.load) not available yet")
    return emulator.load


def test_end_to_end_kernels_assemble():
    """The hand-written kernels are valid for llvm-mc (checked even while the emulator core is missing)."""
    from tilegcn.toolchain import assemble, disassemble

    for arch, name in E2E_CASES:
        text = disassemble(assemble(mfma_kernel_asm(arch, name), arch), arch)
        assert name in text  # objdump prints the spelling shape_of() is asked about


@pytest.mark.parametrize("arch,name", E2E_CASES)
def test_end_to_end_kernel_on_emulator(arch, name):
    load = _emulator_load()
    from tilegcn.toolchain import assemble

    info = mfma.shape_of(name, arch=arch)
    dtype = info.in_dtype
    lay = calc_layout(name) if name in CALC else notes_layout(info.M, info.K)
    A, B, _ = random_operands(lay, dtype, 1, integers=False, seed=len(name) + info.K)
    C = torch.zeros(1, info.M, info.N)
    a = pack16(A, lay.a, info.a_regs, TORCH_DTYPE[dtype]).reshape(-1).clone()
    b = pack16(B, lay.b, info.a_regs, TORCH_DTYPE[dtype]).reshape(-1).clone()
    d = torch.full((64 * info.d_regs,), float("nan"))
    hsaco = assemble(mfma_kernel_asm(arch, name), arch)
    load(hsaco).launch("mfma_test", (1, 1, 1), (64, 1, 1), [a, b, d])
    check_against_reference(unpack_acc(d.view(1, 64, info.d_regs), lay.d, info.M, info.N), A, B, C, exact=False)
