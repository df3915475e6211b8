"""Floating-point helpers with the rounding the ISA specifies (round to nearest even unless an
instruction says otherwise), on torch tensors of raw register bits.

Exact fused multiply-add: the product of two f32 values is exact in f64, and TwoSum gives the exact
error of the f64 sum; rounding that pair to f64 with round-to-odd and then to f32 (or f16) rounds once,
correctly (round-to-odd at >= p+2 bits makes the final round-to-nearest-even innocuous).
"""
from __future__ import annotations

import torch

FLT_MIN = 1.1754943508222875e-38  # smallest normal f32


def flush_denorms(x: torch.Tensor) -> torch.Tensor:
    """f32 denormals -> signed zero (FLOAT_DENORM_MODE_32 = flush)."""
    return torch.where(x.abs() < FLT_MIN, x * 0.0, x)


def _two_sum(a: torch.Tensor, b: torch.Tensor):
    s = a + b
    bb = s - a
    err = (a - (s - bb)) + (b - bb)
    return s, err


def _round_to_odd_f64(s: torch.Tensor, err: torch.Tensor) -> torch.Tensor:
    """s + err (s = RNE(s + err) in f64) rounded to f64 with round-to-odd."""
    bits = s.view(torch.int64)
    even = (bits & 1) == 0
    inexact = (err != 0) & torch.isfinite(s)
    toward = torch.nextafter(s, torch.where(err > 0, torch.full_like(s, float("inf")), torch.full_like(s, -float("inf"))))
    return torch.where(inexact & even, toward, s)


def fma_f64_odd(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """a*b + c (f64 inputs holding f32/f16 values) as f64 rounded to odd."""
    p = a * b  # exact: 24 + 24 bits < 53
    s, err = _two_sum(p, c)
    return _round_to_odd_f64(s, err)


def fma_f32(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Correctly rounded (RNE) f32 fused multiply-add; inputs broadcastable f32 tensors or floats."""
    a, b, c = (t.double() if isinstance(t, torch.Tensor) else torch.tensor(float(t), dtype=torch.float64)
               for t in (a, b, c))
    return fma_f64_odd(a, b, c).float()


def f64_to_f32_odd(x: torch.Tensor) -> torch.Tensor:
    """f64 -> f32 with round-to-odd (keeps a later f32 -> f16 rounding correct)."""
    r = x.float()
    back = r.double()
    inexact = (back != x) & torch.isfinite(x)
    rbits = r.view(torch.int32)
    # truncate toward zero: step back when RNE rounded away from zero
    away = back.abs() > x.abs()
    trunc_bits = torch.where(inexact & away, rbits - 1, rbits)
    odd_bits = torch.where(inexact, trunc_bits | 1, trunc_bits)
    return odd_bits.view(torch.float32)


def f32_to_f16_bits(x: torch.Tensor) -> torch.Tensor:
    """f32 -> f16 bit pattern (int32, low 16 bits), round to nearest even."""
    return x.to(torch.float16).view(torch.int16).to(torch.int32) & 0xFFFF


def f32_to_f16_rtz_bits(x: torch.Tensor) -> torch.Tensor:
    """f32 -> f16 bit pattern, round toward zero (v_cvt_pkrtz_f16_f32)."""
    h = x.to(torch.float16)
    bits = h.view(torch.int16).to(torch.int32) & 0xFFFF
    hf = h.float()
    # RNE rounded away from zero (larger magnitude, incl. overflow to inf): step one ulp toward zero
    away = (hf.abs() > x.abs()) & ~torch.isnan(x)
    return torch.where(away, bits - 1, bits)


def f32_to_bf16_bits(x: torch.Tensor) -> torch.Tensor:
    """f32 -> bf16 bit pattern (int32, low 16 bits), round to nearest even."""
    return x.to(torch.bfloat16).view(torch.int16).to(torch.int32) & 0xFFFF


def f16_bits_to_f32(bits: torch.Tensor) -> torch.Tensor:
    """Low 16 bits of an int32 tensor as f16 -> f32 (exact)."""
    return (bits & 0xFFFF).to(torch.int16).view(torch.float16).float()
