"""MFMA (matrix fused multiply-add, fp32 accumulate) for the emulated device.

    info = shape_of("v_mfma_f32_32x32x8_bf16")     # MfmaInfo, or None for an instruction we do not know
    d = execute(mnemonic, a, b, c)                 # a, b: int32 [W, 64, a_regs]; c: float32 [W, 64, d_regs]

D = A @ B + C with every element of A and B taken from the registers where the ISA puts it
(`tilegcn.amdgcn.mfma_layout`, the layout formulas the compiler uses too) and D written back in the
accumulator layout. Products of two bf16/f16 values are exact in fp32, so the one batched fp32 matmul
differs from the hardware only in the order (and hence the fp32 rounding) of the K-term sums.

Shapes and names come from the arch tables (`tilegcn.amdgcn.arch`); the older spellings LLVM still
accepts (`v_mfma_f32_32x32x8bf16_1k`, `v_mfma_f32_16x16x16f16`) and a trailing `_e64` map to the same
instruction. Modifiers (cbsz/abid/blgp, neg) are not handled here; the caller must refuse them.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import torch

from ...amdgcn import arch as _arch
from ...amdgcn.mfma_layout import a_location, b_location, d_location
from ...errors import EmulatorError

_TORCH_DTYPE = {"bf16": torch.bfloat16, "f16": torch.float16}


@dataclass(frozen=True)
class MfmaInfo:
    M: int
    N: int
    K: int
    a_regs: int  # VGPRs per lane for srcA and for srcB
    d_regs: int  # fp32 registers per lane for srcC and vdst
    passes: int
    in_dtype: str  # 'bf16' | 'f16'


# v_mfma_f32_<M>x<N>x<K>[_]<bf16|f16>[_1k][_e64]
_NAME = re.compile(r"v_mfma_f32_(\d+)x(\d+)x(\d+)_?(bf16|f16)(_1k)?(?:_e64)?")


@functools.lru_cache(maxsize=None)
def _known_shapes() -> dict:
    """(M, N, K, dtype) -> (MfmaShape, frozenset of arch names that have it), from the arch tables."""
    known = {}
    for arch in _arch.ARCHES.values():
        for dtype, shapes in arch.mfma_shapes.items():
            for s in shapes:
                prev = known.get((s.M, s.N, s.K, dtype))
                known[(s.M, s.N, s.K, dtype)] = (s, (prev[1] if prev else frozenset()) | {arch.name})
    return known


@functools.lru_cache(maxsize=None)
def _lookup(mnemonic: str):
    """(MfmaShape, dtype, arch names) for a mnemonic in any accepted spelling, else None."""
    m = _NAME.fullmatch(mnemonic.strip().lower())
    if m is None or (m.group(5) and m.group(4) != "bf16"):  # `_1k` only ever spelled a bf16 instruction
        return None
    dtype = m.group(4)
    found = _known_shapes().get((int(m.group(1)), int(m.group(2)), int(m.group(3)), dtype))
    return None if found is None else (found[0], dtype, found[1])


def shape_of(mnemonic: str, arch: str | None = None) -> MfmaInfo | None:
    """The MFMA `mnemonic` names, or None when it is not one we know (or, given `arch`, not one that arch has)."""
    found = _lookup(mnemonic)
    if found is None:
        return None
    shape, dtype, arches = found
    if arch is not None and _arch.get_arch(arch).name not in arches:
        return None
    return MfmaInfo(shape.M, shape.N, shape.K, shape.a_regs, shape.d_regs, shape.passes, dtype)


@functools.lru_cache(maxsize=None)
def _gather(shape):
    """Index tensors for one MfmaShape, built once from the layout functions.

    a_idx[i*K + k]  = position of A[i][k] in a lane-major flat [64 * a_regs * 2] array of 16-bit halves
    b_idx[k*N + j]  = position of B[k][j] likewise
    d_inv[p]        = i*N + j of the D (and C) element at position p of a flat [64 * d_regs] fp32 array
    """
    halves, regs = 2 * shape.a_regs, shape.d_regs

    def half_pos(loc):
        lane, reg, half = loc
        return lane * halves + reg * 2 + half

    a_idx = [half_pos(a_location(shape, i, k)) for i in range(shape.M) for k in range(shape.K)]
    b_idx = [half_pos(b_location(shape, k, j)) for k in range(shape.K) for j in range(shape.N)]
    d_loc = [d_location(shape, i, j) for i in range(shape.M) for j in range(shape.N)]
    d_pos = [lane * regs + reg for lane, reg in d_loc]
    if sorted(d_pos) != list(range(64 * regs)) or sorted(a_idx) != list(range(64 * halves)) \
            or sorted(b_idx) != list(range(64 * halves)):
        raise AssertionError(f"MFMA layout of {shape} does not fill the registers one to one")
    d_inv = [0] * (64 * regs)
    for e, p in enumerate(d_pos):
        d_inv[p] = e
    as_tensor = functools.partial(torch.tensor, dtype=torch.long)
    return as_tensor(a_idx), as_tensor(b_idx), as_tensor(d_inv)


def _halves(regs: torch.Tensor, dtype: torch.dtype, name: str, shape: tuple) -> torch.Tensor:
    """int32 [W, 64, n] register bits -> [W, 64 * n * 2] 16-bit values (low half first) of `dtype`."""
    if regs.dtype != torch.int32 or tuple(regs.shape) != shape:
        raise EmulatorError(f"MFMA {name}: expected int32 {list(shape)} registers, got {regs.dtype} {list(regs.shape)}")
    # little-endian: viewing an int32 as two int16 puts bits [15:0] first
    return regs.contiguous().view(torch.int16).view(dtype).reshape(regs.shape[0], -1)


def execute(mnemonic: str, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """D = A @ B + C for the W waves at once; returns float32 [W, 64, d_regs] in the accumulator layout."""
    found = _lookup(mnemonic)
    if found is None:
        raise EmulatorError(f"tilegcn emulator: {mnemonic!r} is not an MFMA the emulator implements")
    shape, dtype, _ = found
    a_idx, b_idx, d_inv = _gather(shape)
    waves = a.shape[0]
    a_h = _halves(a, _TORCH_DTYPE[dtype], "srcA", (waves, 64, shape.a_regs))
    b_h = _halves(b, _TORCH_DTYPE[dtype], "srcB", (waves, 64, shape.a_regs))
    if c.dtype == torch.int32:  # accumulator passed as raw register bits
        c = c.view(torch.float32)
    if c.dtype != torch.float32 or tuple(c.shape) != (waves, 64, shape.d_regs):
        raise EmulatorError(f"MFMA srcC: expected float32 [{waves}, 64, {shape.d_regs}], got {c.dtype} {list(c.shape)}")
    # widen first: gathering fp32 is several times faster than gathering 16-bit floats on CPU
    a_mat = a_h.float().index_select(1, a_idx).view(waves, shape.M, shape.K)
    b_mat = b_h.float().index_select(1, b_idx).view(waves, shape.K, shape.N)
    # sum the K products in fp32, put them in accumulator order, then add C where it already lies
    d = torch.bmm(a_mat, b_mat).view(waves, -1).index_select(1, d_inv)
    d += c.reshape(waves, -1)
    return d.view(waves, 64, shape.d_regs)
