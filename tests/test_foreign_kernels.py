"""Foreign code objects of the timing model's calibration set (bench/calibration/aiter) run correctly on the
emulated device: aiter's hand-written gfx942 FAv3 attention forward (bf16, head dim 128; it uses v-registers
past accum_offset and v_nop) computes softmax(Q K^T / sqrt(d)) V as torch does, GQA included. Small: 2 heads
sharing one KV head, 256 tokens, one workgroup per head (about 3 s). Checked, it runs every `buffer_load_dword ...
lds` that directly follows `s_add_u32 m0` (the ISA guide does not ask a wait state there) and stops at its first
MFMA-to-VALU hazard (about 1 s). HipKittens' gfx950 bf16 GEMM (bench/calibration/hipkittens, built by clang-22
from its source at 512^3) computes A B^T unchecked (about 3 s) and is refused checked at its unawaited LDS DMA
read (about 1 s); its attention forward (4 heads on 2 KV heads, 256 tokens) gives torch's output and
log-sum-exp, checked (about 2 s), and its causal forward (512 tokens) the causal ones, unchecked (about 3 s: it
reads an MFMA result sooner than the ISA guide's wait states: clang-22 leaves that read, at a block where two
paths join, unpadded). aiter's gfx950 fp8 blockscale GEMM computes (A a_scale) (B b_scale)^T unchecked (about
1 s) and is refused checked at its epilogue's early read of an MFMA result (under 1 s); its MXFP4 GEMM computes
the e8m0-scaled e2m1 product, checked (about 2 s).
"""
import sys
from pathlib import Path

import pytest
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
    # unchecked (check=False): a VALU reads an MFMA chain's accumulator fewer wait states after it than LLVM and
    # the ISA guide ask (docs/hazards.md, "M0 and LDS DMA"; test_aiter_fav3_checked_run_passes_its_m0_writes)
    traced_machine(mod, name, launch, range(h * b)).run()
    kx, vx = (t.float().repeat_interleave(h // hk, dim=2) for t in (k, v))
    p = torch.softmax(torch.einsum("bqhd,bkhd->bhqk", q.float(), kx) * d ** -0.5, -1)
    ref = torch.einsum("bhqk,bkhd->bqhd", p, vx)
    torch.testing.assert_close(out.float(), ref, atol=4e-3, rtol=2e-2)


def test_aiter_fav3_checked_run_passes_its_m0_writes():
    from model_accuracy import aiter_fav3_launch
    from tilegcn.errors import HazardError

    b, h, hk, s = 1, 2, 1, 256
    mod, name, launch, out = aiter_fav3_launch("gfx942", b, h, hk, s)
    # its 34 LDS DMAs right after a SALU write of M0 run; the first refusal is a VALU read of an MFMA result
    with pytest.raises(HazardError, match=r"v_max3_f32.*reads the result of `v_mfma_f32_32x32x8_bf16"):
        mod.launch(name, **launch)


def test_hipkittens_gemm_computes_a_times_b_transposed():
    from model_accuracy import hk_gemm_launch

    n = 512
    g = torch.Generator().manual_seed(0)
    a, b = ((torch.randn(n, n, generator=g) / 10).bfloat16() for _ in range(2))
    mod, name, launch, c = hk_gemm_launch(n, a, b)
    # unchecked: its loop reads an LDS tile whose LDS DMA no s_waitcnt covers (next test)
    mod.launch(name, check=False, **launch)
    ref = a.float() @ b.float().T
    # its epilogue truncates fp32 to bf16 (base_types.cuh, convertor<bf16, float>): up to 2^-7 relative
    torch.testing.assert_close(c.float(), ref, rtol=2 ** -7, atol=1e-3)


def test_hipkittens_gemm_checked_run_refuses_its_unawaited_lds_read():
    from model_accuracy import hk_gemm_launch
    from tilegcn.errors import HazardError

    mod, name, launch, _ = hk_gemm_launch(512)
    with pytest.raises(HazardError, match=r"ds_read_b128.*while an LDS DMA .* is still in flight"):
        mod.launch(name, **launch)


def test_hipkittens_attention_forward_computes_attention_and_lse():
    from model_accuracy import hk_attn_launch

    b, h, hk, s, d = 1, 4, 2, 256, 128
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, s, n, d, generator=g).bfloat16() for n in (h, hk, hk))
    mod, name, launch, out, lse = hk_attn_launch(b, h, hk, s, qkv=(q, k, v))
    mod.launch(name, **launch)
    kx, vx = (t.float().repeat_interleave(h // hk, dim=2) for t in (k, v))
    scores = torch.einsum("bqhd,bkhd->bhqk", q.float(), kx) * d ** -0.5
    ref = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(scores, -1), vx)
    torch.testing.assert_close(out.float(), ref, atol=4e-3, rtol=2e-2)
    torch.testing.assert_close(lse[:, :, 0], torch.logsumexp(scores, -1), atol=4e-3, rtol=1e-3)


def test_hipkittens_causal_attention_forward_masks_future_tokens():
    from model_accuracy import hk_attn_launch

    b, h, hk, s, d = 1, 4, 2, 512, 128
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, s, n, d, generator=g).bfloat16() for n in (h, hk, hk))
    mod, name, launch, out, lse = hk_attn_launch(b, h, hk, s, qkv=(q, k, v), causal=True)
    # unchecked: a v_max_f32 reads an MFMA accumulator 6 wait states after it, where gfx950 asks 12 (clang-22
    # pads no read at the block after the mask's branch)
    mod.launch(name, check=False, **launch)
    kx, vx = (t.float().repeat_interleave(h // hk, dim=2) for t in (k, v))
    scores = torch.einsum("bqhd,bkhd->bhqk", q.float(), kx) * d ** -0.5
    scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
    ref = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(scores, -1), vx)
    torch.testing.assert_close(out.float(), ref, atol=8e-3, rtol=2e-2)
    torch.testing.assert_close(lse[:, :, 0], torch.logsumexp(scores, -1), atol=4e-3, rtol=1e-3)


# the OCP MX e2m1 values of the 16 codes (sign in bit 3), to decode aiter's packed fp4 operands
E2M1 = torch.tensor([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6])


def test_aiter_fp8_blockscale_gemm_computes_scaled_a_times_b_transposed():
    """aiter's gfx950 fp8 blockscale GEMM (128x128 tile), a partial row of tiles (M 100), two K blocks: C =
    (A a_scale) (B b_scale)^T, fp8 e4m3 decoded by torch. About 1 s."""
    from model_accuracy import aiter_fp8bs_launch

    m, n, k = 100, 256, 256
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(r, k, generator=g).to(torch.float8_e4m3fn) for r in (m, n))
    a_scale, b_scale = torch.rand(m, k // 128, generator=g) + .5, torch.rand(n // 128, k // 128, generator=g) + .5
    mod, name, launch, c = aiter_fp8bs_launch("128x128", m, n, k, a, b, a_scale, b_scale)
    # unchecked: its epilogue's v_pk_fma_f32 reads an MFMA result 6 wait states after it, where LLVM asks 8 (next test)
    mod.launch(name, check=False, **launch)
    ref = (a.float() * a_scale.repeat_interleave(128, 1)) @ (b.float() * b_scale.repeat_interleave(128, 0)
                                                               .repeat_interleave(128, 1)).T
    # its epilogue truncates fp32 to bf16: up to 2^-7 relative
    torch.testing.assert_close(c.float(), ref, rtol=2 ** -7, atol=1e-3)


def test_aiter_fp8_blockscale_gemm_checked_run_refuses_its_early_mfma_read():
    from model_accuracy import aiter_fp8bs_launch
    from tilegcn.errors import HazardError

    mod, name, launch, _ = aiter_fp8bs_launch("128x128", 128, 128, 128)
    with pytest.raises(HazardError, match=r"v_pk_fma_f32.*reads the result of `v_mfma_f32_16x16x32_fp8_fp8.*after 6 "
                                          r"wait states; gfx950 needs 8"):
        mod.launch(name, **launch)


def test_aiter_mxfp4_gemm_computes_scaled_a_times_b_transposed():
    """aiter's gfx950 MXFP4 GEMM (f4gemm 256x256), checked, M 200 (a partial tile): packed e2m1 operands with
    e8m0 scales per 32 K, decoded here from the MX tables; its bf16 output rounds to nearest. About 2 s."""
    from model_accuracy import aiter_f4_launch

    m, n, k = 200, 256, 256
    g = torch.Generator().manual_seed(0)
    ca, cb = (torch.randint(0, 16, (r, k), generator=g, dtype=torch.uint8) for r in (m, n))
    sa, sb = (torch.randint(124, 130, (r, k // 32), generator=g, dtype=torch.uint8) for r in (m, n))
    pack = lambda codes: (codes[:, 0::2] | (codes[:, 1::2] << 4)).contiguous()  # noqa: E731
    mod, name, launch, d = aiter_f4_launch("256x256", m, n, k, pack(ca), pack(cb), sa, sb)
    mod.launch(name, **launch)
    decode = lambda codes, s: E2M1[codes.long()] * torch.exp2(s.float() - 127).repeat_interleave(32, 1)  # noqa: E731
    ref = decode(ca, sa) @ decode(cb, sb).T
    torch.testing.assert_close(d.float(), ref, rtol=2 ** -8, atol=1e-3)
