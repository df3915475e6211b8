"""TileLang's flash attention forward examples, ported with mechanical changes only (examples/tilelang/, each docstring
names the upstream file and commit and lists the changes), run on the emulated device (checks on) for gfx942 and
gfx950 and compared with torch.nn.functional.scaled_dot_product_attention, causal and not. Tiny shapes: one or two
64-row query tiles over one or two 64-key tiles, head dim 64."""
import sys

import pytest
import torch
import torch.nn.functional as F

from conftest import REPO

sys.path.insert(0, str(REPO / "examples" / "tilelang"))

import example_amd_flash_attn_fwd  # noqa: E402
import example_gqa_fwd_bshd  # noqa: E402
import example_mha_fwd_bhsd  # noqa: E402
import example_mha_inference  # noqa: E402

ARCHES = ["gfx942", "gfx950"]


def _qkv(batch, heads, seq, dim, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, heads, seq, dim, generator=g).half() for _ in range(3)]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("arch", ARCHES)
def test_mha_fwd_bhsd(arch, causal):
    """Upstream's main() config (block 64 x 64, 128 threads, one stage); seq 96 leaves a ragged query tile and a
    ragged key tile (the kernel masks keys past seq_kv; causal: its loop stops at the diagonal, a runtime bound)."""
    Q, K, V = _qkv(1, 1, 96, 64)
    kernel = example_mha_fwd_bhsd.flashattn(1, 1, 96, 96, 64, causal, block_M=64, block_N=64, num_stages=1,
                                            threads=128)
    out = kernel(Q, K, V, arch=arch)
    ref = F.scaled_dot_product_attention(Q.float(), K.float(), V.float(), is_causal=causal)
    torch.testing.assert_close(out, ref.half(), rtol=1e-2, atol=1e-2)  # upstream's tolerance


def test_mha_fwd_bhsd_keeps_p_in_registers():
    """The softmax probabilities reach P @ V without a trip through LDS (the accumulator-to-operand repack)."""
    Q, K, V = _qkv(1, 1, 64, 64)
    kernel = example_mha_fwd_bhsd.flashattn(1, 1, 64, 64, 64, False)
    assert "convert_layout acc_s -> acc_s_cast via registers" in kernel.compile(Q, K, V, arch="gfx942").ir


@pytest.mark.parametrize("arch,causal,seq,dim", [("gfx942", True, 96, 64), ("gfx950", False, 128, 128)],
                         ids=["gfx942-causal-ragged-d64", "gfx950-full-d128"])
def test_gqa_fwd_bshd(arch, causal, seq, dim):
    """Upstream's main() config (block 64 x 64, 128 threads, two stages), 4 query heads sharing 2 KV heads."""
    g = torch.Generator().manual_seed(0)
    Q = torch.randn(1, seq, 4, dim, generator=g).half()
    K, V = (torch.randn(1, seq, 2, dim, generator=g).half() for _ in range(2))
    kernel = example_gqa_fwd_bshd.flashattn(1, 4, seq, dim, causal, groups=2, block_M=64, block_N=64, num_stages=2,
                                            threads=128)
    out = kernel(Q, K, V, arch=arch)
    bhsd = [x.float().transpose(1, 2).repeat_interleave(4 // x.size(2), dim=1) for x in (Q, K, V)]
    ref = F.scaled_dot_product_attention(*bhsd, is_causal=causal).transpose(1, 2)
    torch.testing.assert_close(out, ref.half(), rtol=1e-2, atol=1e-2)  # upstream's tolerance


@pytest.mark.parametrize("arch,causal,groups,num_split_q", [("gfx942", True, 2, 1), ("gfx950", False, 1, 2)],
                         ids=["gfx942-causal-gqa", "gfx950-full-split2"])
def test_amd_flash_attn_fwd(arch, causal, groups, num_split_q):
    """Upstream's CDNA config (block 64 x 64, 128 threads, k_pack 2): each workgroup walks query tiles b_split,
    b_split + num_split_q, ... in a device `while` on a T.alloc_var (one workgroup takes both tiles of seq 128 with
    num_split_q 1); causal, its KV loop ends at a bound computed from that variable."""
    g = torch.Generator().manual_seed(0)
    Q = torch.randn(1, 128, 2, 64, generator=g).half()
    K, V = (torch.randn(1, 128, 2 // groups, 64, generator=g).half() for _ in range(2))
    config = dict(example_amd_flash_attn_fwd.CONFIG, num_split_q=num_split_q)
    kernel = example_amd_flash_attn_fwd.fast_flashattn(1, 2, 128, 64, causal, groups=groups, **config)
    out = kernel(Q, K, V, arch=arch)
    bhsd = [x.float().transpose(1, 2).repeat_interleave(2 // x.size(2), dim=1) for x in (Q, K, V)]
    ref = F.scaled_dot_product_attention(*bhsd, is_causal=causal).transpose(1, 2)
    torch.testing.assert_close(out, ref.half(), rtol=1e-2, atol=1e-2)  # upstream's tolerance


@pytest.mark.parametrize("arch,shape", [("gfx942", (2, 2, 20, 512, 64, 128)), ("gfx950", (1, 3, 70, 256, 128, 64))],
                         ids=["gfx942-b2-ragged20", "gfx950-d128-ragged70"])
def test_flash_decoding(arch, shape):
    """Flash decoding (examples/flash_decoding/example_mha_inference.py), one program of two T.Kernel blocks: the
    split kernel walks seqlen_kv / 4 keys per workgroup (grid z = num_split) and writes each split's output and
    log2-sum-exp into T.alloc_global scratch; the combine kernel, launched next, rescales the 4 partial outputs.
    Ragged query lengths (20 of a 128-row tile; 70 over two 64-row tiles), head dims 64 and 128, batch 2 / 3 heads;
    checked against torch's attention at upstream's tolerance."""
    batch, heads, seq_q, seq_kv, dim, block_M = shape
    g = torch.Generator().manual_seed(0)
    Q = torch.randn(batch, seq_q, heads, dim, generator=g).half()
    K, V = (torch.randn(batch, seq_kv, heads, dim, generator=g).half() for _ in range(2))
    kernel = example_mha_inference.flashattn(batch, heads, seq_q, seq_kv, dim, False, block_M, 64)
    out = kernel(Q, K, V, arch=arch)
    ref = F.scaled_dot_product_attention(*(x.float().transpose(1, 2) for x in (Q, K, V))).transpose(1, 2)
    torch.testing.assert_close(out, ref.half(), rtol=1e-2, atol=1e-2)  # upstream's tolerance


@pytest.mark.parametrize("arch", ARCHES)
def test_flash_decoding_upstream_config_fits_the_registers(arch):
    """Upstream main()'s config (32 heads, 128 queries, 8192 keys, head dim 128, BLOCK_M 128, BLOCK_N 64) compiles:
    its combine kernel holds o_accum_local (128 VGPRs), po_local (64), lse_local (32) and three [block_M] rows (16
    each), 276 VGPRs in the emitted order, which tilegcn never spills. The allocator's last resort (one value per
    rewrite of a fragment's pieces, then, if that is not enough, the po_local loads issued a few ahead of their use)
    fits it in the 256 VGPRs of both arches, and kernel.ir says how. Compile only (tests/test_examples.py runs main()
    at head dim 128)."""
    batch, heads, seq_q, seq_kv, dim = 1, 32, 128, 8192, 128
    q = torch.zeros(batch, seq_q, heads, dim, dtype=torch.float16)
    kv = torch.zeros(batch, seq_kv, heads, dim, dtype=torch.float16)
    compiled = example_mha_inference.flashattn(batch, heads, seq_q, seq_kv, dim, False, 128, 64).compile(
        q, kv, kv, arch=arch)
    split, combine = compiled.metadata["kernels"]
    assert split["vgprs"] <= 256 and combine["vgprs"] <= 256
    combine_ir = compiled.ir.split("(launch 1 of 2)")[1]
    assert "with fragment groups split" in combine_ir and "emitted order needs 276 VGPRs" in combine_ir
