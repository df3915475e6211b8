"""Torch references of the corpus kernels (tests/corpus/*.json name them) and the input generators.

A reference takes the launch's arguments by name (tensors as generated, scalars as values) and returns
the expected outputs by name; the test compares every tensor argument marked as an output.
"""
from __future__ import annotations

import torch

import numpy as np

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "int32": torch.int32,
          "int8": torch.int8, "uint8": torch.uint8, "float8_e4m3fnuz": torch.float8_e4m3fnuz,
          "float8_e5m2fnuz": torch.float8_e5m2fnuz, "float8_e4m3fn": torch.float8_e4m3fn,
          "float8_e5m2": torch.float8_e5m2}


def make_input(spec: dict, gen: torch.Generator) -> torch.Tensor:
    shape, dtype, init = spec["shape"], DTYPES[spec["dtype"]], spec["init"]
    if init == "zeros":
        return torch.zeros(shape, dtype=dtype)
    if init == "randn":
        return torch.randn(shape, generator=gen).to(dtype)
    if init == "randn100":
        return (torch.randn(shape, generator=gen) * 100).to(dtype)
    if init == "rand":
        return torch.rand(shape, generator=gen).to(dtype)
    if init == "randint_signed":
        return torch.randint(-100000, 100000, shape, generator=gen, dtype=torch.int32)
    if init == "randint_nonzero":
        mag = torch.randint(1, 60, shape, generator=gen, dtype=torch.int32)
        return torch.where(torch.rand(shape, generator=gen) < 0.5, -mag, mag)
    if init == "randint16":
        return torch.randint(0, 16, shape, generator=gen, dtype=torch.int32)
    if init == "randint8":
        return torch.randint(-128, 128, shape, generator=gen, dtype=torch.int32).to(dtype)
    if init == "randbyte":  # packed fp4 pairs: every byte is two finite e2m1 values
        return torch.randint(0, 256, shape, generator=gen, dtype=torch.int32).to(dtype)
    if init == "e8m0":  # MX block scales 2**-7 .. 2**7
        return torch.randint(120, 135, shape, generator=gen, dtype=torch.int32).to(dtype)
    if init == "fp8_range_and_beyond":  # magnitudes from 1e-3 (fp8 subnormals) to ~150 (every e4m3 binade), and
        # one in 16 from 500 to 8000: past e4m3's largest value (240 FNUZ, 448 OCP), where the cast saturates
        mag = torch.exp(torch.empty(shape).uniform_(-7, 5, generator=gen))
        big = torch.exp(torch.empty(shape).uniform_(6.2, 9, generator=gen))
        mag = torch.where(torch.arange(mag.numel()).view(shape) % 16 == 5, big, mag)
        return torch.where(torch.rand(shape, generator=gen) < 0.5, -mag, mag).to(dtype)
    raise ValueError(f"unknown init {init!r}")


def add(x, y, **_):
    return {"out": x + y}


def gelu_silu(x, **_):
    v = x.float()
    return {"out_gelu": torch.nn.functional.gelu(v, approximate="tanh").half(),
            "out_silu": torch.nn.functional.silu(v).half()}


def row_sum_max(x, **_):
    return {"out_sum": x.sum(1), "out_max": x.amax(1), "out_argmax": x.argmax(1).int()}


def col_sum(x, **_):
    return {"out": x.sum(0)}


def softmax(x, **_):
    return {"out": torch.softmax(x.float(), dim=1).to(x.dtype)}


def layernorm(x, w, b, n_cols, eps, **_):
    v = x.float()
    mean, var = v.mean(1), v.var(1, unbiased=False)
    y = torch.nn.functional.layer_norm(v, (n_cols,), w.float(), b.float(), eps)
    return {"out": y.half(), "mean_out": mean, "rstd_out": torch.rsqrt(var + eps)}


def rmsnorm(x, w, eps, **_):
    v = x.float()
    return {"out": (v * torch.rsqrt(v.pow(2).mean(1, keepdim=True) + eps) * w.float()).bfloat16()}


def matmul(a, b, **_):
    return {"c": (a.float() @ b.float()).to(a.dtype)}


def flash_attn_fwd(q, k, v, sm_scale, **_):
    s = q.float() @ k.float().transpose(-1, -2) * sm_scale
    return {"o": (torch.softmax(s, -1) @ v.float()).half()}


def convert(x, **_):
    i = x.to(torch.int32)  # truncation toward zero, as fptosi
    return {"out_f16": x.half(), "out_bf16": x.bfloat16(), "out_i32": i, "out_from_int": (i * 3 + 1).float()}


def int_math(a, b, **_):
    bits = (((a << 3) ^ (b >> 1)) & 0x7FFF) | torch.minimum(a, b)
    udiv = ((a.to(torch.int64) & 0xFFFFFFFF) // 7).to(torch.int32)
    return {"out_div": torch.div(a, b, rounding_mode="trunc"), "out_mod": torch.fmod(a, b), "out_bits": bits,
            "out_udiv": udiv}


def atomics(x, idx, hist, out_max, **_):
    h = hist.clone().index_add_(0, idx.long(), x)
    m = out_max.clone().scatter_reduce_(0, idx.long(), (x * 1000).to(torch.int32), reduce="amax")
    return {"hist": h, "out_max": m}


def cumsum(x, **_):
    return {"out": x.cumsum(1)}


def transpose(x, **_):
    return {"out": x.t().contiguous()}


def grid_info(out, **_):
    g = torch.arange(12, dtype=torch.int32)
    return {"out": torch.stack([torch.full((12,), 3), torch.full((12,), 2), torch.full((12,), 2), g], 1).int()}


def hip_intdiv(a, b, d, **_):
    return {"out_q": torch.div(a, b, rounding_mode="trunc"), "out_r": torch.fmod(a, b),
            "out_u": ((a.to(torch.int64) & 0xFFFFFFFF) // d).to(torch.int32)}


def hip_gemm(A, B, alpha, **_):
    return {"C": (A.double() @ B.double() * alpha).float()}


def hip_flat_lds(inp, **_):
    return {"out": (inp * 2).view(-1, 256).flip(1).reshape(-1)}


def matmul_int(a, b, **_):
    return {"c": (a.long() @ b.long()).int()}


def matmul_f32(a, b, **_):
    return {"c": (a.double() @ b.double()).float()}


def _round_to_xf32(x):
    """fp32 -> the nearest value with 10 fraction bits (ties to even), as fp32: xf32's input precision."""
    bits = x.view(torch.int32).long()
    rounded = (bits + 0xFFF + ((bits >> 13) & 1)) & ~0x1FFF
    return rounded.to(torch.int32).view(torch.float32)


def matmul_xf32(a, b, **_):
    return {"c": (_round_to_xf32(a).double() @ _round_to_xf32(b).double()).float()}


def fp8_cast(x, out_fp8, **_):
    """Triton's fp32 -> fp8 on AMD saturates (it sets MODE.FP16_OVFL, the conversions' clamp bit): out-of-range
    values become the largest finite value; the rest round to nearest even, as torch's own cast."""
    top = torch.finfo(out_fp8.dtype).max
    q = x.clamp(-top, top).to(out_fp8.dtype)
    return {"out_fp8": q, "out_back": q.float()}


# MX (OCP Microscaling) decoding, in numpy so it does not lean on torch's fp4 support
E2M1_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float64)


def decode_e2m1(packed: torch.Tensor) -> np.ndarray:
    """uint8 [..., n] of two e2m1 values each (element 2i in the low nibble) -> float64 [..., 2n]."""
    p = packed.numpy().astype(np.int64)
    nib = np.stack([p & 0xF, p >> 4], axis=-1).reshape(*p.shape[:-1], -1)
    return np.where(nib & 8, -1.0, 1.0) * E2M1_VALUES[nib & 7]


def decode_e8m0(scale: torch.Tensor) -> np.ndarray:
    """uint8 E8M0 scales -> float64 2**(s - 127) (s = 255 is NaN)."""
    s = scale.numpy().astype(np.float64)
    return np.where(s == 255, np.nan, np.exp2(s - 127))


def _dot_scaled(a_vals, a_scale, b_vals, b_scale):
    sa = np.repeat(decode_e8m0(a_scale), 32, axis=1)
    sb = np.repeat(decode_e8m0(b_scale), 32, axis=1)
    return {"c": torch.from_numpy((a_vals * sa) @ (b_vals * sb).T).float()}


def _mx_values(x):
    return decode_e2m1(x) if x.dtype == torch.uint8 else x.double().numpy()


def _dot_scaled_any(a, a_scale, b, b_scale, **_):
    """A / B as e4m3 (torch's float8) or packed e2m1 (uint8), each block of 32 along K times its scale."""
    return _dot_scaled(_mx_values(a), a_scale, _mx_values(b), b_scale)


dot_scaled_e4m3_e4m3 = dot_scaled_e2m1_e2m1 = dot_scaled_e4m3_e2m1 = dot_scaled_e2m1_e4m3 = _dot_scaled_any


def _dot_scaled_bf16(a, b, b_scale, **_):
    """bf16 A (no scale) times B decoded and scaled per 32 elements of K, transposed."""
    return _dot_scaled(a.double().numpy(), torch.full((a.shape[0], a.shape[1] // 32), 127, dtype=torch.uint8),
                       _mx_values(b), b_scale)


dot_scaled_bf16_e4m3 = dot_scaled_bf16_e2m1 = _dot_scaled_bf16
