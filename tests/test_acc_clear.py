"""T.fill / T.clear of a gemm accumulator (AGPRs): an inline-constant value is written by MFMAs (D = 0 * 0 + c,
a whole 16- or 4-register tuple each), any other value by one v_accvgpr_write per register. Numerics against
torch on the emulated device (checks on: a missing wait state around the fill MFMAs is a HazardError), and the
instructions the user finds in `kernel.asm`. The wait states around the fill MFMAs are checked against LLVM's
hazard recognizer in tests/test_hazards_llvm.py (`test_accumulator_fill_hazards_match_llvm`); GEMMs with
T.clear at every stage count, NN/NT and with an epilogue are tests/test_gemm.py's."""
from __future__ import annotations

import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tilegcn
from tilegcn import language as T
from tilegcn.amdgcn.arch import get_arch
from tilegcn.passes.elementwise import _is_inline_f32
from tilegcn.perfmodel import estimate
from tilegcn.toolchain import find_llvm

sys.path.insert(0, str(Path(__file__).parent / "asm"))
from emukit import module  # noqa: E402


@pytest.fixture(autouse=True)
def emulator(monkeypatch):
    monkeypatch.setenv("TILEGCN_DEVICE", "emulator")


@tilegcn.jit
def gemm_from(A, B, C, *, value=0.0, block_M=32, block_N=32, block_K=32, threads=64, num_stages=1):
    """C = value + A @ B: the accumulator starts at `value` instead of 0."""
    M, K = A.shape
    N = C.shape[1]
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        A_s = T.alloc_shared((block_M, block_K), A.dtype)
        B_s = T.alloc_shared((block_K, block_N), B.dtype)
        acc = T.alloc_fragment((block_M, block_N), "float32")
        T.fill(acc, value)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
            T.copy(A[by * block_M, k * block_K], A_s)
            T.copy(B[k * block_K, bx * block_N], B_s)
            T.gemm(A_s, B_s, acc)
        T.copy(acc, C[by * block_M, bx * block_N])


def operands(M, N, K, seed=0):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(M, K, generator=g).to(torch.bfloat16)
    B = torch.randn(K, N, generator=g).to(torch.bfloat16)
    return A, B, torch.full((M, N), float("nan"), dtype=torch.float32)


def ops(asm: str, prefix: str) -> list:
    return [m.group(0) for m in re.finditer(rf"^\s*{prefix}\S*[^\n]*", asm, re.M)]


# -4.0 is an inline constant (MFMAs fill; README's example: 1.0 on gfx950), 0.3 is not (v_accvgpr_write from a VGPR)
@pytest.mark.parametrize("arch,value,num_stages", [("gfx942", -4.0, 2), ("gfx950", 0.3, 2)])
def test_filled_accumulator_matches_torch(arch, value, num_stages):
    A, B, C = operands(64, 32, 64)
    gemm_from(A, B, C, value=value, arch=arch, num_stages=num_stages)
    ref = A.float() @ B.float() + value
    torch.testing.assert_close(C, ref, rtol=2.0 ** -20, atol=1e-5)  # fp32 out: only the summation order differs


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_clear_is_mfmas_not_one_write_per_register(arch):
    """A 64x64 fp32 accumulator at 64 threads holds 64 AGPRs a lane: 4 MFMAs of 16 registers clear it."""
    A, B, C = operands(64, 64, 32)
    asm = gemm_from.compile(A, B, C, value=0.0, arch=arch, block_M=64, block_N=64).asm
    (name, shape), _ = get_arch(arch).acc_fill_mfmas()
    fills = [i for i in ops(asm, "v_mfma") if i.rstrip().endswith(", 0")]
    assert len(fills) == 64 // shape.d_regs and all(i.split()[0] == name for i in fills), fills
    assert not ops(asm, "v_accvgpr_write")


@pytest.mark.parametrize("value", [0.3, -0.0])
def test_value_without_inline_constant_keeps_accvgpr_writes(value):
    """0.3 has no inline constant; -0.0 neither, and 0 * 0 + (-0.0) would be +0.0, not the value asked for."""
    A, B, C = operands(32, 32, 32)
    asm = gemm_from.compile(A, B, C, value=value, arch="gfx950").asm
    assert len(ops(asm, "v_accvgpr_write")) == 32 * 32 // 64
    assert not [i for i in ops(asm, "v_mfma") if i.rstrip().endswith(", 0")]


def _ir_float(v: float) -> str:
    """An LLVM IR float constant: the bits of the double equal to the f32 nearest `v`."""
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", float(torch.tensor(v, dtype=torch.float32))))[0]


def test_inline_fill_values_are_llvms_inline_srcc():
    """The oracle for which values an MFMA fill may take: LLVM selects an MFMA whose C operand is the splat of an
    inline constant as that constant in srcC (every C element = the f32 value, as the emulator implements it), and
    any other splat as a register tuple. tilegcn's fill must use the inline srcC for exactly the same values."""
    values = [0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 4.0, -4.0, 0.3, -0.0, 3.0, 1e-30]
    ir = ["declare <4 x float> @llvm.amdgcn.mfma.f32.16x16x16bf16.1k(<4 x i16>, <4 x i16>, <4 x float>, i32, i32, i32)"]
    for n, v in enumerate(values):
        ir.append(f"define amdgpu_kernel void @k{n}(ptr addrspace(1) %out, <4 x i16> %a, <4 x i16> %b) {{\n"
                  f"  %r = call <4 x float> @llvm.amdgcn.mfma.f32.16x16x16bf16.1k(<4 x i16> %a, <4 x i16> %b, "
                  f"<4 x float> splat (float {_ir_float(v)}), i32 0, i32 0, i32 0)\n"
                  f"  store <4 x float> %r, ptr addrspace(1) %out\n  ret void\n}}")
    llc = find_llvm("gfx942").tool("llc")
    if llc is None:
        pytest.skip("this LLVM has no llc")
    out = subprocess.run([llc, "-mtriple=amdgcn-amd-amdhsa", "-mcpu=gfx942", "-o", "-"], input="\n".join(ir),
                         capture_output=True, text=True, check=True).stdout
    srcc = re.findall(r"v_mfma_f32_16x16x16_bf16 \S+, \S+, \S+, (\S+)", out)
    assert len(srcc) == len(values)
    llvm_inline = [not re.fullmatch(r"[av]\[\d+:\d+\]", c) for c in srcc]
    assert llvm_inline == [_is_inline_f32(v) for v in values], list(zip(values, srcc))


def test_timing_model_counts_no_flops_for_a_fill():
    """The estimate's FLOPs are the launch's work: a fill MFMA (a tuple times itself onto an inline constant) counts
    none; a first K step with a constant srcC (what LLVM emits for C = 0) and an accumulating step count theirs."""
    name = "v_mfma_f32_32x32x8_bf16"
    body = "\n".join([f"v_mov_b32 v{i}, 0" for i in range(64, 68)] + ["s_nop 1",
                      f"{name} v[0:15], v[64:65], v[64:65], 0",      # fill
                      f"{name} v[16:31], v[64:65], v[66:67], 0",     # first K step, C = 0
                      f"{name} v[0:15], v[64:65], v[66:67], v[0:15]",  # accumulate
                      "s_endpgm"])
    est = estimate(module(body, arch="gfx950", vgprs=72), "k", (1, 1, 1), (64, 1, 1), [torch.zeros(64)])
    assert est.flops == 2 * (2 * 32 * 32 * 8)
