"""MX-scaled T.gemm on gfx950 (issue 22): MXFP4 (float4_e2m1fn_x2, two values a byte) and MXFP8 (float8_e4m3fn /
e5m2) operands with E8M0 block scales, one per 32 K of a row of A and of a column of the product, on the emulated
device against numpy: the elements decoded from the OCP MX tables (fp4) or torch's float8 dtypes, times
2**(e - 127), multiplied in float64. The refusals (gfx942, mismatched scale tiles). Small tiles: the file takes
about 12 s."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import tilegcn
from kernels import mx_gemm
from test_ping_pong import PING_PONG_MARK
from tilegcn import language as T
from tilegcn.errors import CompileError

# OCP MX e2m1: sign, 2 exponent bits (bias 1), 1 mantissa bit; code 0..15
FP4_VALUES = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6])


@pytest.fixture(autouse=True)
def emulator(monkeypatch):
    monkeypatch.setenv("TILEGCN_DEVICE", "emulator")


def decode_fp4(packed: torch.Tensor) -> np.ndarray:
    """(R, K / 2) bytes -> (R, K) values, element 2b in the low nibble of byte b (OCP MX, torch's float4_e2m1fn_x2)."""
    p = packed.view(torch.uint8).numpy()
    out = np.empty((p.shape[0], 2 * p.shape[1]))
    out[:, 0::2], out[:, 1::2] = FP4_VALUES[p & 0xF], FP4_VALUES[p >> 4]
    return out


def block_scales(s: torch.Tensor) -> np.ndarray:
    """(R, K / 32) E8M0 codes -> (R, K) multipliers 2**(e - 127)."""
    return np.repeat(2.0 ** (s.numpy().astype(np.float64) - 127), 32, axis=1)


def mx_inputs(M, N, K, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == "fp4":
        A = torch.randint(0, 256, (M, K // 2), dtype=torch.uint8, generator=g).view(torch.float4_e2m1fn_x2)
        B = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, generator=g).view(torch.float4_e2m1fn_x2)
    else:
        A, B = (torch.randn(rows, K, generator=g).to(getattr(torch, dtype)) for rows in (M, N))
    # scales 2**-7 .. 2**6: a wrong block, row or operand of a scale moves the result far past fp32 rounding
    SA, SB = (torch.randint(120, 134, (rows, K // 32), dtype=torch.uint8, generator=g) for rows in (M, N))
    return A, B, SA, SB


def reference(A, B, SA, SB, scaled=True) -> np.ndarray:
    a, b = (decode_fp4(x) if x.dtype == torch.float4_e2m1fn_x2 else x.double().numpy() for x in (A, B))
    if scaled:
        a, b = a * block_scales(SA), b * block_scales(SB)
    return a @ b.T


@pytest.mark.parametrize("dtype,shape,tile,stages,mfma", [
    # ragged M, N and K (K = 1280 is 2.5 tiles of 512), pipelined in K phases of 256 (the scale tiles split with the
    # operands): scale rows of 40 bytes, copied by 4-byte LDS DMA, the masked last trips included
    ("fp4", (160, 144, 1280), (128, 128, 512, 256), 2, "v_mfma_scale_f32_32x32x64_f8f6f4"),
    # scale rows of 10 bytes: 2-byte pieces through staged VGPRs
    ("float8_e4m3fn", (64, 64, 320), (64, 64, 128, 256), 2, "v_mfma_scale_f32_32x32x64_f8f6f4"),
    ("float8_e5m2", (32, 64, 256), (16, 64, 128, 64), 1, "v_mfma_scale_f32_16x16x128_f8f6f4"),
    # 8 waves: gfx950's ping-pong K loop (two wave groups a barrier apart), ragged M, N and K (3.125 tiles of 256)
    ("float8_e4m3fn", (112, 120, 800), (128, 128, 256, 512), 2, "v_mfma_scale_f32_32x32x64_f8f6f4"),
])
def test_mx_gemm_matches_numpy(dtype, shape, tile, stages, mfma):
    M, N, K = shape
    A, B, SA, SB = mx_inputs(M, N, K, dtype)
    C = torch.zeros(M, N)
    bm, bn, bk, threads = tile
    kw = dict(arch="gfx950", block_M=bm, block_N=bn, block_K=bk, threads=threads, num_stages=stages)
    mx_gemm(A, B, SA, SB, C, **kw)
    ref = reference(A, B, SA, SB)
    np.testing.assert_allclose(C.numpy(), ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    formats = {"fp4": "cbsz:4 blgp:4", "float8_e5m2": "cbsz:1 blgp:1", "float8_e4m3fn": None}[dtype]  # e4m3: code 0
    asm = mx_gemm.compile(A, B, SA, SB, C, **kw).asm
    assert (PING_PONG_MARK in asm) == (threads == 512)  # the ping-pong loop is gfx950's default at 8 waves
    lines = [ln for ln in asm.splitlines() if "f8f6f4" in ln]
    assert lines and all(ln.split()[0] == mfma for ln in lines), lines[:2]
    assert all(ln.rstrip().endswith(formats) if formats else "cbsz" not in ln for ln in lines), lines[:2]


def test_mxfp8_scale_rows_stay_whole_in_k_phases():
    """block_K 128 split into K phases of 64 leaves 2 scale bytes a row a phase; the scale tiles keep the K tile's
    4-byte rows instead, copied by LDS DMA in each phase (no 2-byte loads through VGPRs), each phase's gemm reading
    its half: ragged M and N, 10 phases (2 trips of 4 and 2 drain steps)."""
    A, B, SA, SB = mx_inputs(240, 120, 640, "float8_e4m3fn", seed=2)
    C = torch.zeros(240, 120)
    kw = dict(arch="gfx950", block_M=256, block_N=128, block_K=128, threads=256, num_stages=2)
    kernel = mx_gemm.compile(A, B, SA, SB, C, **kw)
    assert "_phase" in kernel.ir  # the loop runs in K phases
    assert "SA -> SA_s slot 0 (LDS DMA)" in kernel.asm and "buffer_load_ushort" not in kernel.asm
    mx_gemm(A, B, SA, SB, C, **kw)
    ref = reference(A, B, SA, SB)
    np.testing.assert_allclose(C.numpy(), ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


def test_scale_rows_stay_split_unless_both_tiles_can_keep_them():
    """A gemm reads its two scale tiles at one offset: a scale_B view whose rows are 21 bytes apart (no 4-byte
    loads) keeps both tiles in 2-byte phase rows through VGPRs, and the result stays right."""
    A, B, SA, SB = mx_inputs(240, 120, 640, "float8_e4m3fn", seed=3)
    wide = torch.zeros(120, 21, dtype=torch.uint8)
    wide[:, :20] = SB
    C = torch.zeros(240, 120)
    kw = dict(arch="gfx950", block_M=256, block_N=128, block_K=128, threads=256, num_stages=2)
    assert "SA -> SA_s slot 0 (LDS DMA)" not in mx_gemm.compile(A, B, SA, wide[:, :20], C, **kw).asm
    mx_gemm(A, B, SA, wide[:, :20], C, **kw)
    ref = reference(A, B, SA, SB)
    np.testing.assert_allclose(C.numpy(), ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


def test_fp4_gemm_without_scales():
    """Packed fp4 operands alone: the f8f6f4 MFMA with cbsz:4 blgp:4 and no scale operands."""
    A, B, SA, SB = mx_inputs(64, 64, 128, "fp4", seed=1)
    C = torch.zeros(64, 64)
    mx_gemm(A, B, SA, SB, C, arch="gfx950", scaled=False)
    np.testing.assert_allclose(C.numpy(), reference(A, B, SA, SB, scaled=False), rtol=0, atol=0)


def test_mx_gemm_refusals():
    A, B, SA, SB = mx_inputs(64, 64, 128, "fp4")
    C = torch.zeros(64, 64)
    with pytest.raises(CompileError, match="gfx942 has no MX-scaled.*dequant_gemm_bf16_mxfp4"):
        mx_gemm.compile(A, B, SA, SB, C, arch="gfx942")
    with pytest.raises(CompileError, match=r"scale_A must be a shared uint8 tile of shape \(64, 4\)"):
        _wrong_scale_tile.compile(A, B, SA, SB, C, arch="gfx950")
    bf = torch.zeros(64, 128, dtype=torch.bfloat16)
    with pytest.raises(CompileError, match="scale MX operands.*not bfloat16"):
        mx_gemm.compile(bf, bf, SA, SB, C, arch="gfx950")
    fp8 = mx_inputs(64, 64, 128, "float8_e4m3fn")[0]  # MXFP8 A x MXFP4 B: the way around is named
    with pytest.raises(CompileError, match=r"mixed MX formats.*widen the fp4 operand to float8_e4m3fn") as err:
        mx_gemm.compile(fp8, B, SA, SB, C, arch="gfx950")
    assert "kernels.py" in str(err.value)  # the T.gemm line
    with pytest.raises(CompileError, match="packed fp4 values .* are T.gemm operands only"):
        _fp4_fragment.compile(A, C, arch="gfx950")
    with pytest.raises(CompileError, match="float4_e2m1fn_x2 operands must be K-major"):
        _fp4_b_k_rows.compile(A, B, C, arch="gfx950")


@tilegcn.jit
def _fp4_fragment(A, C):
    with T.Kernel(1, threads=64) as bx:
        a = T.alloc_fragment((64, 64), T.float4_e2m1fn_x2)  # fp4 has no element math: refused
        T.copy(A[0, 0], a)


@tilegcn.jit
def _fp4_b_k_rows(A, B, C):
    with T.Kernel(1, 1, threads=256) as (bx, by):
        A_s = T.alloc_shared((64, 64), A.dtype)
        B_s = T.alloc_shared((64, 64), B.dtype)  # read as (K / 2, N): two values a byte along K cannot be transposed
        acc = T.alloc_fragment((64, 64), T.float32)
        T.gemm(A_s, B_s, acc)


@tilegcn.jit
def _wrong_scale_tile(A, B, SA, SB, C):
    with T.Kernel(1, 1, threads=256) as (bx, by):
        A_s = T.alloc_shared((64, 64), A.dtype)
        B_s = T.alloc_shared((64, 64), B.dtype)
        SA_s = T.alloc_shared((64, 2), T.uint8)  # K = 128 values need 4 scales a row
        SB_s = T.alloc_shared((64, 4), T.uint8)
        acc = T.alloc_fragment((64, 64), T.float32)
        T.gemm(A_s, B_s, acc, transpose_B=True, scale_A=SA_s, scale_B=SB_s)
