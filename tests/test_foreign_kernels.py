"""Foreign code objects of the timing model's calibration set (bench/calibration/aiter) run correctly on the
emulated device: aiter's hand-written gfx942 FAv3 attention forward (bf16, head dim 128; it uses v-registers
past accum_offset and v_nop) computes softmax(Q K^T / sqrt(d)) V as torch does, GQA included. Small: 2 heads
sharing one KV head, 256 tokens, one workgroup per head (about 3 s).
"""
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))


def test_aiter_fav3_forward_computes_attention():
    from model_accuracy import aiter_fav3_launch
    from tilegcn.runtime.emulator.tracing import traced_machine

    b, h, hk, s, d = 1, 2, 1, 256, 128
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, s, n, d, generator=g).bfloat16() for n in (h, hk, hk))
    mod, name, launch, out = aiter_fav3_launch("gfx942", b, h, hk, s, qkv=(q, k, v))
    # unchecked (check=False): its LDS DMA follows an M0 write with no wait state, which the emulator's hazard
    # check (written from LLVM's rule) refuses
    traced_machine(mod, name, launch, range(h * b)).run()
    kx, vx = (t.float().repeat_interleave(h // hk, dim=2) for t in (k, v))
    p = torch.softmax(torch.einsum("bqhd,bkhd->bhqk", q.float(), kx) * d ** -0.5, -1)
    ref = torch.einsum("bhqk,bkhd->bqhd", p, vx)
    torch.testing.assert_close(out.float(), ref, atol=4e-3, rtol=2e-2)
