"""Torch references of the corpus kernels (tests/corpus/*.json name them) and the input generators.

A reference takes the launch's arguments by name (tensors as generated, scalars as values) and returns
the expected outputs by name; the test compares every tensor argument marked as an output.
"""
from __future__ import annotations

import torch

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "int32": torch.int32}


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
