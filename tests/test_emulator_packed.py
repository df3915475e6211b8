"""Packed conversions (v_cvt_pk_*) and packed 16-bit integer VALU on the emulated device, lane by lane
against numpy/torch references written from the ISA guide's definitions."""
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from asm.emukit import run_lanes  # noqa: E402

N = 256
gen = torch.Generator().manual_seed(3)
A = torch.randint(-2**31, 2**31 - 1, (N,), dtype=torch.int32, generator=gen)
B = torch.randint(-2**31, 2**31 - 1, (N,), dtype=torch.int32, generator=gen)
A[:4] = torch.tensor([70000, -70000, 65535, -1], dtype=torch.int32)


def u(t):
    return t.numpy().astype(np.int64) & 0xFFFFFFFF


def halves(t):
    x = u(t)
    return x & 0xFFFF, x >> 16


def test_saturating_and_normalising_packs():
    f = torch.randn(N, generator=gen) * 1.5
    f[:4] = torch.tensor([float("nan"), 2.0, -2.0, 0.5])
    outs = run_lanes("""v_cvt_pk_u16_u32 v20, v10, v11
                        v_cvt_pk_i16_i32 v21, v10, v11
                        v_cvt_pknorm_i16_f32 v22, v12, v12
                        v_cvt_pknorm_u16_f32 v23, v12, v12
                        v_mov_b32 v24, v11
                        v_cvt_pk_u8_f32 v24, v12, 2, v24""", [A, B, f], n_out=5)
    a, b = u(A), u(B)
    sa, sb = A.numpy().astype(np.int64), B.numpy().astype(np.int64)
    assert np.array_equal(u(outs[0]), np.minimum(a, 65535) | (np.minimum(b, 65535) << 16))
    lo, hi = np.clip(sa, -32768, 32767) & 0xFFFF, np.clip(sb, -32768, 32767) & 0xFFFF
    assert np.array_equal(u(outs[1]), lo | (hi << 16))
    fd = np.nan_to_num(f.double().numpy(), nan=0.0)
    snorm = np.round(np.clip(fd, -1, 1) * 32767).astype(np.int64) & 0xFFFF  # np.round: ties to even
    unorm = np.round(np.clip(fd, 0, 1) * 65535).astype(np.int64) & 0xFFFF
    assert np.array_equal(u(outs[2]), snorm | (snorm << 16))
    assert np.array_equal(u(outs[3]), unorm | (unorm << 16))
    byte = np.round(np.clip(fd, 0, 255)).astype(np.int64)
    assert np.array_equal(u(outs[4]), (b & ~(0xFF << 16)) | (byte << 16))


def test_packed_16bit_integer_ops_with_op_sel():
    outs = run_lanes("""v_pk_add_u16 v20, v10, v11
                        v_pk_sub_i16 v21, v10, v11 op_sel:[1,0] op_sel_hi:[0,1]
                        v_pk_mul_lo_u16 v22, v10, v11
                        v_pk_max_i16 v23, v10, v11
                        v_pk_lshlrev_b16 v24, v11, v10
                        v_pk_mad_u16 v25, v10, v11, v10""", [A, B], n_out=6)
    (al, ah), (bl, bh) = halves(A), halves(B)
    pk = lambda lo, hi: (lo & 0xFFFF) | ((hi & 0xFFFF) << 16)  # noqa: E731
    s16 = lambda x: np.where(x >= 0x8000, x - 0x10000, x)  # noqa: E731
    assert np.array_equal(u(outs[0]), pk(al + bl, ah + bh))
    assert np.array_equal(u(outs[1]), pk(ah - bl, al - bh))  # op_sel picks src0's high half for the low result
    assert np.array_equal(u(outs[2]), pk(al * bl, ah * bh))
    assert np.array_equal(u(outs[3]), pk(np.maximum(s16(al), s16(bl)), np.maximum(s16(ah), s16(bh))))
    assert np.array_equal(u(outs[4]), pk(al << (bl & 15), ah << (bh & 15)))
    assert np.array_equal(u(outs[5]), pk(al * bl + al, ah * bh + ah))
