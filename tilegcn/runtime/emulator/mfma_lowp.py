"""The low-precision and fp32 MFMAs of the emulated device (issue 22): int8 (int32 accumulation), fp8/bf8,
fp32, xf32 and gfx950's f8f6f4 forms, plain and with E8M0 block scales (`v_mfma_scale_f32_*`).

    info = lookup("v_mfma_i32_32x32x16_i8", arch)          # arch.LowpMfma, or None
    d = execute(info, "gfx950", a, b, c, a_fmt, b_fmt)       # a, b, c: int32 register bits [W, 64, regs]

Every element is decoded exactly (fp8/bf8 through torch's own float8 dtypes, fp6/fp4 from the OCP MX formulas)
and multiplied by the 2**(e - 127) of its 32-element block; the products (exact in float64) are summed in
float64 and C added before the one rounding to fp32 (int8: exact integers, then the int32 wrap-around). The
hardware sums in its own order in fp32, so results may differ from it in the last bits of fp32, never in the
layout or the decoding. xf32 operands are fp32 values rounded to 10 fraction bits first, to nearest even: an
assumption no outside source checks (the ISA guide, LLVM and the calculator do not say how fp32 becomes xf32;
truncation would differ by about 1e-3 relative per product).

Layouts: `tilegcn.amdgcn.mfma_layout.element_location` / `acc_location`, the formulas the calculator data
and the Triton corpus (tests/corpus) check.
"""
from __future__ import annotations

import functools

import torch

from ...amdgcn import arch as _arch
from ...amdgcn.mfma_layout import acc_location, element_location
from ...errors import EmulatorError

SCALE_BLOCK = 32  # elements of K that share one E8M0 scale (OCP MX)
WIDTH = {"i8": 8, "fp8": 8, "bf8": 8, "fp6": 6, "bf6": 6, "fp4": 4, "f32": 32, "xf32": 32}
# OCP MX element formats: (exponent bits, mantissa bits, bias); none has inf or NaN
_MINIFLOATS = {"fp6": (2, 3, 1), "bf6": (3, 2, 3), "fp4": (2, 1, 1)}


def lookup(mnemonic: str, arch) -> "_arch.LowpMfma | None":
    """The LowpMfma `mnemonic` names on `arch` (an Arch), or None; a trailing `_e64` is accepted."""
    name = mnemonic.strip().lower().removesuffix("_e64")
    return arch.lowp_mfmas.get(name)


def formats(info, cbsz: int, blgp: int) -> tuple:
    """(A format, B format): the f8f6f4 forms' from cbsz / blgp, the others' from the mnemonic."""
    if info.a_type != "f8f6f4":
        return info.a_type, info.b_type
    for what, code in (("cbsz", cbsz), ("blgp", blgp)):
        if code not in _arch.F8F6F4_FORMATS:
            raise EmulatorError(f"f8f6f4 MFMA: {what}:{code} selects no operand format (0..4)")
    return _arch.F8F6F4_FORMATS[cbsz][0], _arch.F8F6F4_FORMATS[blgp][0]


def kpl(info, which: str) -> int:
    """Elements of one row of A (which='a') or column of B one lane holds."""
    return info.K * (info.M if which == "a" else info.N) // 64


def operand_regs(info, which: str, fmt: str) -> int:
    """VGPRs of srcA / srcB per lane for elements of `fmt`."""
    return kpl(info, which) * WIDTH[fmt] // 32


def acc_regs(info) -> int:
    return info.M * info.N // 64


@functools.lru_cache(maxsize=None)
def decode_table(fmt: str, arch_name: str) -> torch.Tensor:
    """float64 value of every code of an 8/6/4-bit format."""
    if fmt in ("fp8", "bf8"):
        dtype = getattr(torch, _arch.get_arch(arch_name).fp8_dtypes[("fp8", "bf8").index(fmt)])
        return torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype).double()
    if fmt == "i8":
        return torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.int8).double()
    ebits, mbits, bias = _MINIFLOATS[fmt]
    codes = torch.arange(1 << (1 + ebits + mbits), dtype=torch.int64)
    mant = (codes & ((1 << mbits) - 1)).double() / (1 << mbits)
    exp = (codes >> mbits) & ((1 << ebits) - 1)
    mag = torch.where(exp == 0, mant * 2.0 ** (1 - bias), (1 + mant) * torch.exp2((exp - bias).double()))
    return torch.where((codes >> (ebits + mbits)) & 1 == 1, -mag, mag)


def _codes(regs: torch.Tensor, width: int, count: int) -> torch.Tensor:
    """int32 [W, 64, n] registers -> int64 [W, 64, count] element codes packed from bit 0 up (6-bit ones cross
    register boundaries)."""
    words = regs.to(torch.int64) & 0xFFFFFFFF
    if width == 8:
        return regs.contiguous().view(torch.uint8).to(torch.int64)[..., :count]
    if width == 4:
        b = regs.contiguous().view(torch.uint8).to(torch.int64)
        return torch.stack([b & 0xF, b >> 4], dim=-1).flatten(-2)[..., :count]
    # any width: element e spans bits [w*e, w*e + w) of the little-endian register string
    bit = torch.arange(count, dtype=torch.int64) * width
    lo_word, shift = bit // 32, bit % 32
    hi_word = torch.clamp(lo_word + 1, max=words.shape[-1] - 1)
    pair = words.index_select(-1, lo_word) | (words.index_select(-1, hi_word) << 32)
    return (pair >> shift) & ((1 << width) - 1)


def _round_to_xf32(x: torch.Tensor) -> torch.Tensor:
    """fp32 -> the nearest value with 10 fraction bits, ties to even (inf/NaN kept)."""
    bits = x.view(torch.int32).to(torch.int64)
    rounded = ((bits + 0xFFF + ((bits >> 13) & 1)) & ~0x1FFF).to(torch.int32).view(torch.float32)
    return torch.where(torch.isfinite(x), rounded, x)


def _values(regs: torch.Tensor, fmt: str, count: int, arch_name: str) -> torch.Tensor:
    """[W, 64, n] register bits -> float64 [W, 64, count] element values."""
    if fmt in ("f32", "xf32"):
        x = regs.contiguous().view(torch.float32)[..., :count]
        return (_round_to_xf32(x) if fmt == "xf32" else x).double()
    return decode_table(fmt, arch_name)[_codes(regs, WIDTH[fmt], count)]


def register_blocks(info, fmt: str) -> int:
    """Register blocks an operand is read as (mfma_layout.element_location): 2 for 8-bit elements of the f8f6f4
    forms (8 VGPRs, two blocks of 4), else 1."""
    return 2 if info.a_type == "f8f6f4" and WIDTH[fmt] == 8 else 1


@functools.lru_cache(maxsize=None)
def _gather(M: int, N: int, K: int, a_blocks: int, b_blocks: int):
    """Flat [64 * kpl] element positions of A (i-major) and B (k-major), the D element of each accumulator position
    (lane-major [64 * d_regs]), and the lane whose scale applies to A[i][k] / B[k][j] (one E8M0 byte per 32 k)."""
    kpa, kpb = K * M // 64, K * N // 64

    def slot(loc, per_lane):
        lane, s = loc
        return lane * per_lane + s

    a_idx = [slot(element_location(M, K, i, k, a_blocks), kpa) for i in range(M) for k in range(K)]
    b_idx = [slot(element_location(N, K, j, k, b_blocks), kpb) for k in range(K) for j in range(N)]
    d_regs = M * N // 64
    d_inv = [0] * (64 * d_regs)
    for e, (lane, reg) in enumerate(acc_location(M, N, i, j) for i in range(M) for j in range(N)):
        d_inv[lane * d_regs + reg] = e
    # the scale of row i (column j) and k block k // 32 sits in lane M * (k // 32) + i: the same lanes for every
    # element width (CDNA4 ISA guide, V_MFMA_SCALE_F32_*_F8F6F4)
    a_scale = [M * (k // SCALE_BLOCK) + i for i in range(M) for k in range(K)] if K * M <= 64 * SCALE_BLOCK else []
    b_scale = [N * (k // SCALE_BLOCK) + j for k in range(K) for j in range(N)] if K * N <= 64 * SCALE_BLOCK else []
    as_tensor = functools.partial(torch.tensor, dtype=torch.long)
    return tuple(as_tensor(x) for x in (a_idx, b_idx, d_inv, a_scale, b_scale))


def decode_e8m0(byte: torch.Tensor) -> torch.Tensor:
    """E8M0 scale codes -> float64 2**(e - 127); 0xFF is NaN (OCP MX)."""
    e = byte.to(torch.float64)
    return torch.where(byte == 0xFF, torch.full_like(e, float("nan")), torch.exp2(e - 127))


def execute(info, arch_name: str, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, a_fmt: str, b_fmt: str,
            a_scale: torch.Tensor | None = None, b_scale: torch.Tensor | None = None) -> torch.Tensor:
    """D = (A * scale_A) @ (B * scale_B) + C for W waves; a, b, c int32 register bits [W, 64, regs], scales float64
    [W, 64] (lane M * (k // 32) + i holds the scale of row i, k block k // 32). Returns int32 bits
    [W, 64, d_regs] (fp32 or int32 values as the instruction's accumulator)."""
    M, N, K = info.M, info.N, info.K
    waves = a.shape[0]
    va = _values(a, a_fmt, kpl(info, "a"), arch_name)
    vb = _values(b, b_fmt, kpl(info, "b"), arch_name)
    a_idx, b_idx, d_inv, a_sc, b_sc = _gather(M, N, K, register_blocks(info, a_fmt), register_blocks(info, b_fmt))
    a_mat = va.reshape(waves, -1).index_select(1, a_idx).view(waves, M, K)
    b_mat = vb.reshape(waves, -1).index_select(1, b_idx).view(waves, K, N)
    if a_scale is not None:
        a_mat = a_mat * a_scale.index_select(1, a_sc).view(waves, M, K)
        b_mat = b_mat * b_scale.index_select(1, b_sc).view(waves, K, N)
    d = torch.bmm(a_mat, b_mat).view(waves, -1).index_select(1, d_inv).view(waves, 64, -1)
    if info.acc == "i32":
        # int8 products and their sums stay far below 2**53: exact in float64; the int32 sum wraps around
        total = d.to(torch.int64) + c.to(torch.int64)
        return ((total + 2**31) % 2**32 - 2**31).to(torch.int32)
    return (d + c.view(torch.float32).double()).float().view(torch.int32)
