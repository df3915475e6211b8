"""f32 -> fp8 / bf8 byte codes: the one encoder of the emulated device's fp8 conversions (ops_fp8.py's
v_cvt_pk_{fp8,bf8}_f32, ops_mode.py's scaled v_cvt_scalef32_pk_{fp8,bf8}_f32).

Values round to nearest even in the arch's format (arch.Arch.fp8_dtypes: FNUZ on gfx942, OCP on gfx950) through
torch's own float8 conversion. A value overflows when it rounds past the largest finite one: above the midpoint
between that value and the next one up, or at that midpoint when the largest's code is odd (the tie goes to the even
code above); infinities overflow. With `saturate` (MODE.FP16_OVFL) an overflowing value becomes the largest finite
value of its sign; without it, what the format has for overflow (CDNA3 / CDNA4 ISA guides, OCP 8-bit floating point
spec): NaN for the FNUZ formats (0x80) and OCP E4M3 (S.1111.111), inf for OCP E5M2. torch's conversion saturates
E4M3 itself, which is why the overflow codes are set here rather than left to it. NaN gives torch's NaN code.
tests/test_dtypes.py checks every code and a sweep of f32 values against torch on both arches, tests/test_emulator_lowp
the scaled forms.
"""
from __future__ import annotations

import functools

import torch


@functools.lru_cache(maxsize=None)
def _limits(dtype) -> tuple:
    """(largest finite value, the midpoint above it that still rounds down to it, whether the midpoint itself
    does: the largest value's code is even)."""
    top = torch.finfo(dtype).max
    values = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype).float()
    below = values[(values < top) & torch.isfinite(values)].max().item()  # the next value down from top
    top_even = (torch.tensor(top).to(dtype).view(torch.uint8).item() & 1) == 0
    return top, top + (top - below) / 2, top_even


def overflows(v: torch.Tensor, dtype) -> torch.Tensor:
    """bool: where float values `v` round past `dtype`'s largest finite value (infinities too; NaN never)."""
    _, midpoint, top_even = _limits(dtype)
    mag = v.abs()
    return (mag > midpoint) | ((mag == midpoint) & (not top_even))


# what a non-saturating conversion gives an overflowing value, by format: (code, whether it keeps the sign): NaN for
# the FNUZ formats (their one NaN, 0x80) and OCP E4M3 (S.1111.111), inf for OCP E5M2 (S.11111.00)
_OVERFLOW = {"float8_e4m3fnuz": (0x80, False), "float8_e5m2fnuz": (0x80, False), "float8_e4m3fn": (0x7F, True),
             "float8_e5m2": (0x7C, True)}


def _overflow_code(dtype, negative: torch.Tensor) -> torch.Tensor:
    code, signed = _OVERFLOW[str(dtype).removeprefix("torch.")]
    return (negative.long() << 7 if signed else torch.zeros_like(negative, dtype=torch.int64)) | code


def encode(v: torch.Tensor, dtype, saturate) -> torch.Tensor:
    """int64 byte codes (0..255) of float values `v` in the fp8 torch `dtype`; `saturate`: bool (a tensor that
    broadcasts against `v`, or a Python bool): overflowing values become the largest finite one (module doc)."""
    top, _, _ = _limits(dtype)
    x = v.float()
    clamped = torch.where(x.abs() > top, torch.sign(x) * top, x)  # up to the midpoint it rounds to top anyway
    codes = clamped.to(dtype).view(torch.uint8).long()
    over = overflows(x, dtype) & ~torch.as_tensor(saturate, device=x.device)
    return torch.where(over, _overflow_code(dtype, torch.signbit(x)), codes)
