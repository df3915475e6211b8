"""The softmax's VALU forms on the emulated device, against torch and an outside FMA oracle: an fp32 `a * b - c` in
T.Parallel is one v_fma_f32 with a single rounding (as HIP and Triton contract it) unless the user turns contraction
off; row sums add a thread's values as a tree of v_pk_add_f32 and still match torch's sum."""
import pytest
import torch

import tilegcn
from tilegcn import language as T

from kernels import fma_f32

ARCHES = ["gfx942", "gfx950"]


@pytest.fixture(autouse=True)
def _emulator(monkeypatch):
    monkeypatch.setenv("TILEGCN_DEVICE", "emulator")


def scaled_minus_row(X, M, Y, *, scale=0.7213475204444817):
    """Y[i, j] = X[i, j] * scale - M[i] * scale: the exponent of flash attention's softmax (scale not a power of 2,
    so the product rounds)."""
    rows, cols = X.shape
    with T.Kernel(1, threads=64):
        x = T.alloc_fragment((rows, cols), "float32")
        m = T.alloc_fragment((rows,), "float32")
        T.copy(X[0, 0], x)
        T.copy(M[0], m)
        for i, j in T.Parallel(rows, cols):
            x[i, j] = x[i, j] * scale - m[i] * scale
        T.copy(x, Y[0, 0])


@pytest.mark.parametrize("arch", ARCHES)
def test_a_times_b_minus_c_is_one_fma_with_a_single_rounding(arch):
    torch.manual_seed(0)
    x, m = torch.randn(16, 32) * 8, torch.randn(16) * 8
    y = torch.empty(16, 32)
    scale = 0.7213475204444817
    fused = tilegcn.jit(scaled_minus_row)
    fused(x, m, y, arch=arch)
    row = (m * scale)[:, None]  # the per-row product: its own rounding, as HIP's contraction leaves it
    assert torch.equal(y, fma_f32(x, scale, -row))
    assert not torch.equal(y, x * scale - row)  # two roundings differ somewhere in these 512 values
    assert fused.compile(x, m, y, arch=arch).asm.count("v_fma_f32") == 16 * 32 // 64

    apart = tilegcn.jit(scaled_minus_row, compile_flags=["-ffp-contract=off"])  # TileLang's flag to hipcc
    apart(x, m, y, arch=arch)
    assert torch.equal(y, x * scale - row)
    assert "v_fma_f32" not in apart.compile(x, m, y, arch=arch).asm


@tilegcn.jit
def row_sums(X, S, *, threads=64):
    rows, cols = X.shape
    with T.Kernel(1, threads=threads):
        x = T.alloc_fragment((rows, cols), "float32")
        s = T.alloc_fragment((rows,), "float32")
        T.copy(X[0, 0], x)
        T.reduce_sum(x, s, dim=1)
        T.copy(s, S[0])


@pytest.mark.parametrize("arch", ARCHES)
def test_row_sums_add_pairs_as_a_tree_and_match_torch(arch):
    """Rows of 512 over 64 threads (8 values a thread a row, in register pairs) summed with v_pk_add_f32 in a tree
    on gfx950 (gfx942 adds one value an instruction: its 16-pass MFMAs hold packed-f32 ops, Arch.packed_f32_sums):
    the sums match torch's to fp32 rounding, and exactly where every partial sum is exact (small integers)."""
    torch.manual_seed(0)
    x = torch.randn(8, 512)
    s = torch.empty(8)
    row_sums(x, s, arch=arch)
    torch.testing.assert_close(s, x.sum(dim=1), rtol=1e-5, atol=1e-5)
    ints = torch.randint(-1000, 1000, (8, 512)).float()
    row_sums(ints, s, arch=arch)
    assert torch.equal(s, ints.sum(dim=1))
    asm = row_sums.compile(x, s, arch=arch).asm
    assert ("v_pk_add_f32" in asm) == (arch == "gfx950")


@pytest.mark.parametrize("arch", ARCHES)
def test_flash_attention_loop_softmax_is_fmas_pair_sums_and_no_copies(arch):
    """TileLang's GQA forward (examples/tilelang/example_gqa_fwd_bshd.py, 128 x 64 tiles, 256 threads, 2 stages) at a
    small shape: its KV loop's exponent is one v_fma_f32 a score (`acc_s * scale - max * scale`), each row sum a
    tree of v_pk_add_f32 on gfx950 (Arch.packed_f32_sums), and the output rescale reads the row factor's own register:
    gfx942's v_pk_mul_f32 with no v_mov_b32 into the pair it reads, gfx950's one v_mul_f32 an element
    (Arch.packed_f32_scales) straight from the v_exp_f32 that computed it (on gfx950 the row sum's lane swap takes no
    copy either); the result matches torch's attention."""
    import sys

    import torch.nn.functional as F

    from conftest import REPO

    sys.path[:0] = [str(REPO / "examples" / "tilelang"), str(REPO / "bench")]
    import example_gqa_fwd_bshd
    from loop_metrics import loop_body

    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 256, 2, 128, generator=g).half()
    k, v = (torch.randn(1, 256, 1, 128, generator=g).half() for _ in range(2))
    kernel = example_gqa_fwd_bshd.flashattn(1, 2, 256, 128, False, groups=2, block_M=128, block_N=64, num_stages=2,
                                            threads=256)
    body = loop_body(kernel.compile(q, k, v, arch=arch).asm)
    ops = [line.split()[0] for line in body]
    assert ops.count("v_fma_f32") >= 32 and "v_sub_f32" not in ops
    if arch == "gfx950":
        assert ops.count("v_pk_add_f32") >= 15 and ops.count("v_add_f32") < 8
    else:
        assert "v_pk_add_f32" not in ops
    tiles = sum(line.startswith("v_exp_f32") for line in body) // 33  # 32 scores and the factor a tile
    if arch == "gfx950":  # Arch.packed_f32_scales: beside MFMAs, one v_mul_f32 an element, reading the v_exp_f32's
        rescales = [line.split() for line in body if line.startswith("v_mul_f32")]  # result (no copy between)
        rescales = [x for x in rescales if x[1] == x[2]]  # in place: acc_o *= scores_scale
        factors = {x[3] for x in rescales}
        assert "v_pk_mul_f32" not in ops and len(rescales) == 64 * tiles
        assert factors and all(any(line.startswith(f"v_exp_f32 {f},") for line in body) for f in factors), factors
    else:
        factors = {line.split()[3].rstrip(",") for line in body if line.startswith("v_pk_mul_f32")}
        pair_lows = {f"v{f[2:].split(':')[0]}" for f in factors}
        copied = [line for line in body if line.startswith("v_mov_b32") and line.split()[1].rstrip(",") in pair_lows]
        # the in-wave software pipeline alternates the factor between two fragments (scores_scale and its _next
        # twin): at most one move a KV tile into the pair the v_pk_mul_f32s read, never one a rescale
        rotated = "scores_scale_next" in kernel.compile(q, k, v, arch=arch).ir
        assert factors and len(copied) <= (max(tiles, 1) if rotated else 0), copied
    if arch == "gfx950":  # the row sum's v_permlane32_swap reads a pair the last v_pk_add_f32 filled twice: no copy
        assert any(line.startswith("v_pk_add_f32") and "op_sel:[0,1] op_sel_hi:[1,0]" in line for line in body)
    out = kernel(q, k, v, arch=arch)
    bhsd = [x.float().transpose(1, 2).repeat_interleave(2 // x.size(2), dim=1) for x in (q, k, v)]
    ref = F.scaled_dot_product_attention(*bhsd).transpose(1, 2)
    torch.testing.assert_close(out, ref.half(), rtol=1e-2, atol=1e-2)


@tilegcn.jit
def row_max_min(X, Mx, Mn, *, threads=64):
    rows, cols = X.shape
    with T.Kernel(1, threads=threads):
        x = T.alloc_fragment((rows, cols), "float32")
        mx = T.alloc_fragment((rows,), "float32")
        mn = T.alloc_fragment((rows,), "float32")
        T.copy(X[0, 0], x)
        T.reduce_max(x, mx, dim=1)
        T.reduce_min(x, mn, dim=1)
        T.copy(mx, Mx[0])
        T.copy(mn, Mn[0])


@pytest.mark.parametrize("arch", ARCHES)
def test_row_max_min_of_many_values_a_thread_propagate_nan_as_torch(arch):
    """8 values a thread a row: on gfx942 v_max3_f32 / v_min3_f32 (which drop a NaN) with the NaN found apart, a
    pair of values a v_cmp_u_f32; a NaN in any position of a thread's values gives NaN, infinities and zeros as
    torch.amax / amin."""
    torch.manual_seed(0)
    x = torch.randn(8, 512)
    for row, col in enumerate([0, 1, 6, 7, 64 * 3 + 2, 511]):  # first / last of a pair, of a thread, of the row
        x[row, col] = float("nan")
    x[6, 5], x[6, 300] = float("inf"), float("-inf")
    x[7] = 0.0
    x[7, 9] = -0.0
    mx, mn = torch.empty(8), torch.empty(8)
    row_max_min(x, mx, mn, arch=arch)
    for got, want in ((mx, x.amax(dim=1)), (mn, x.amin(dim=1))):
        assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.nan_to_num(), want.nan_to_num())
    if arch == "gfx942":
        asm = row_max_min.compile(x, mx, mn, arch=arch).asm
        assert "v_max3_f32" in asm and "v_min3_f32" in asm and "s_or_b64" in asm


@tilegcn.jit
def filled_then_max(X, M, *, start=-float("inf")):
    rows, cols = X.shape
    with T.Kernel(1, threads=64):
        x = T.alloc_fragment((rows, cols), "float32")
        m = T.alloc_fragment((rows,), "float32")
        T.copy(X[0, 0], x)
        T.fill(m, start)
        T.reduce_max(x, m, dim=1, clear=False)
        T.copy(m, M[0])


@pytest.mark.parametrize("arch", ARCHES)
def test_fill_with_minus_inf_then_accumulating_max_is_a_plain_max(arch):
    """flash attention's `T.fill(scores_max, -inf); T.reduce_max(acc_s, scores_max, clear=False)`: the fill's -inf
    changes no maximum (NaN included), so neither the fill nor the combine is emitted; another start value is
    still combined."""
    torch.manual_seed(0)
    x = torch.randn(8, 256) - 4.0
    x[3, 17] = float("nan")
    m = torch.empty(8)
    filled_then_max(x, m, arch=arch)
    want = x.amax(dim=1)
    assert torch.equal(m.isnan(), want.isnan()) and torch.equal(m.nan_to_num(), want.nan_to_num())
    assert "0xff800000" not in filled_then_max.compile(x, m, arch=arch).asm  # no -inf written anywhere
    filled_then_max(x, m, arch=arch, start=-3.0)
    want = torch.maximum(x.amax(dim=1), torch.tensor(-3.0))
    assert torch.equal(m.isnan(), want.isnan()) and torch.equal(m.nan_to_num(), want.nan_to_num())


@tilegcn.jit
def running_max_steps(X, Out, *, block=64):
    """Out[i] = the sum over tiles of how much row i's running max grew: `prev` is a register copy of `m` that must
    outlive m's next write (the copy flash attention keeps as scores_max_prev), in a loop."""
    rows, cols = X.shape
    with T.Kernel(1, threads=64):
        x = T.alloc_fragment((rows, block), "float32")
        m = T.alloc_fragment((rows,), "float32")
        prev = T.alloc_fragment((rows,), "float32")
        acc = T.alloc_fragment((rows,), "float32")
        T.fill(m, 0.0)
        T.fill(acc, 0.0)
        for k in T.serial(cols // block):
            T.copy(X[0, k * block], x)
            T.copy(m, prev)
            T.reduce_max(x, m, dim=1, clear=False)
            for i in T.Parallel(rows):
                acc[i] = acc[i] + (m[i] - prev[i])
        for i, j in T.Parallel(rows, block):  # (stored through a tile no thread shares: no EXEC mask in the kernel)
            x[i, j] = acc[i]
        T.copy(x, Out[0, 0])


@pytest.mark.parametrize("arch", ARCHES)
def test_a_register_copy_whose_source_is_rewritten_stays(arch):
    """Copy coalescing (amdgcn/coalesce.py) keeps a copy whose source changes while the copy is still read."""
    torch.manual_seed(0)
    x = torch.randn(4, 256)  # one row of m and prev a thread: one-register copies, which coalescing considers
    out = torch.empty(4, 64)
    running_max_steps(x, out, arch=arch)
    m, acc = torch.zeros(4), torch.zeros(4)
    for k in range(4):
        prev, m = m, torch.maximum(m, x[:, 64 * k:64 * (k + 1)].amax(dim=1))
        acc = acc + (m - prev)
    assert torch.equal(out, acc[:, None].expand(4, 64)) and (acc > 0).all()
