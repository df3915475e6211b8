"""Where MFMA operands live in a wave's registers: the one home of the layout formulas.

The compiler uses these functions to place A/B fragments and to find accumulator elements; the
emulator (`tilegcn.runtime.emulator.mfma`) builds its gather indices from the very same functions.

Formulas (lane l in 0..63; `shape` is an `arch.MfmaShape` with M == N; see docs/isa-notes.md, MFMA):

  kpl = shape.k_per_lane = K * M / 64 consecutive k values of one row of A (one column of B) sit in one lane,
        two 16-bit values per register, low half first:
    A[i][k]: lane = M * (k // kpl) + i,  register = (k % kpl) // 2,  half = k % 2
    B[k][j]: lane = N * (k // kpl) + j,  register = (k % kpl) // 2,  half = k % 2
  (CDNA3 16x16x16 and 32x32x8: kpl = 4, checked entry by entry against AMD's Matrix Instruction
   Calculator; gfx950 16x16x32 and 32x32x16: kpl = 8, per CK.)

  D (and C) fp32, G = 64 / N lane groups, R = d_row_block (4) consecutive rows per register block:
    D[i][j]: lane = N * ((i // R) % G) + j,  register = R * (i // (R * G)) + i % R
  (16x16: lane 16*(i//4) + j, register i%4; 32x32: lane 32*((i//4)%2) + j, register 4*(i//8) + i%4.)
"""
from __future__ import annotations

WAVE = 64  # MFMA operands are always spread over a 64-lane wave


def _check(shape) -> None:
    """The formulas below assume square tiles spread over whole lane groups of one wave."""
    if (
        shape.M != shape.N
        or WAVE % shape.N
        or (shape.K * shape.M) % (2 * WAVE)  # whole registers of two 16-bit values per lane
        or shape.M % (shape.d_row_block * (WAVE // shape.N))
    ):
        raise ValueError(f"tilegcn: no register layout known for MFMA {shape.M}x{shape.N}x{shape.K}")


def _in_range(name: str, value: int, bound: int) -> None:
    if not 0 <= value < bound:
        raise IndexError(f"tilegcn: MFMA index {name}={value} out of range 0..{bound - 1}")


def a_location(shape, i: int, k: int) -> tuple:
    """(lane, register, half) of A[i][k]; register counts from the first VGPR of srcA, half 0 = bits [15:0]."""
    _in_range("i", i, shape.M)
    _in_range("k", k, shape.K)
    _check(shape)
    kpl = shape.k_per_lane
    return shape.M * (k // kpl) + i, (k % kpl) // 2, k % 2


def b_location(shape, k: int, j: int) -> tuple:
    """(lane, register, half) of B[k][j]; the mirror image of A with j in place of i."""
    _in_range("k", k, shape.K)
    _in_range("j", j, shape.N)
    _check(shape)
    kpl = shape.k_per_lane
    return shape.N * (k // kpl) + j, (k % kpl) // 2, k % 2


def d_location(shape, i: int, j: int) -> tuple:
    """(lane, register) of the fp32 accumulator element D[i][j] (C is read from the same place)."""
    _check(shape)
    _in_range("i", i, shape.M)
    _in_range("j", j, shape.N)
    rows, groups = shape.d_row_block, WAVE // shape.N
    return shape.N * ((i // rows) % groups) + j, rows * (i // (rows * groups)) + i % rows


def element_location(M: int, K: int, i: int, k: int, blocks: int = 1) -> tuple:
    """(lane, slot) of A[i][k] (B[k][j] with j for i and N for M) of an MFMA with elements of any width (issue 22:
    8/6/4-bit, fp32), slot counting elements from bit 0 of the operand's first register.

    With blocks = 1 it is the formula above with kpl = K * M / 64 elements per lane. An operand read as `blocks`
    register blocks (gfx950's f8f6f4 MFMAs on 8-bit elements: two blocks of 4 VGPRs) is `blocks` MFMAs of K / blocks
    side by side: block b holds k in [b * K / blocks, (b + 1) * K / blocks) with the blocks = 1 formula inside.
    Checked against the calculator's fp8 and f32 tables (tests/data) and, for gfx950, against Triton's code objects
    in tests/corpus (only block scales tell the K order apart: a permutation of K common to A and B leaves A @ B
    unchanged)."""
    _in_range("i", i, M)
    _in_range("k", k, K)
    if WAVE % M or (K * M) % (WAVE * blocks):
        raise ValueError(f"tilegcn: no register layout known for MFMA operands {M}x{K}")
    sub_k = K // blocks
    kpl = sub_k * M // WAVE
    block, kk = divmod(k, sub_k)
    return M * (kk // kpl) + i, block * kpl + kk % kpl


def acc_location(M: int, N: int, i: int, j: int, rows: int = 4) -> tuple:
    """(lane, register) of the 32-bit accumulator element D[i][j] (fp32 or int32) of any M x N MFMA: the D formula
    above without the operand-width condition `d_location` checks."""
    _in_range("i", i, M)
    _in_range("j", j, N)
    groups = WAVE // N
    if WAVE % N or M % (rows * groups):
        raise ValueError(f"tilegcn: no accumulator layout known for MFMA {M}x{N}")
    return N * ((i // rows) % groups) + j, rows * (i // (rows * groups)) + i % rows
