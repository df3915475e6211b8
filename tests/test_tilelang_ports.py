"""TileLang's own examples, ported with mechanical changes only (examples/tilelang/, each docstring names the upstream
file and commit and lists the changes), run on the emulated device for gfx942 and gfx950 with fp32, fp16 and bf16
inputs and compared with torch. Small shapes; each kernel is traced in TileLang's own style (eager: tensors
annotated in the body; closure: a factory returning a @T.prim_func)."""
import sys

import pytest
import torch

from conftest import REPO

sys.path.insert(0, str(REPO / "examples" / "tilelang"))

import cumsum  # noqa: E402
import deepgemm_fp8_2xacc  # noqa: E402
import dequant_gemm_bf16_mxfp4_cdna4  # noqa: E402
import dequant_gemm_w4a8  # noqa: E402
import elementwise_add  # noqa: E402
import gemm  # noqa: E402
import gemm_fp8_amd  # noqa: E402
import gemm_persistent  # noqa: E402
import gemm_splitk  # noqa: E402
import gemm_splitk_vectorize_atomicadd  # noqa: E402
import gemm_streamk  # noqa: E402
import gemv  # noqa: E402
import layernorm  # noqa: E402
import online_softmax  # noqa: E402
import per_token_cast_to_fp8  # noqa: E402
import reduce  # noqa: E402
import rms_norm  # noqa: E402
import topk  # noqa: E402

import tilegcn  # noqa: E402
from tilegcn import language as T  # noqa: E402

ARCHES = ["gfx942", "gfx950"]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# the tolerance of a result rounded to the dtype (upstream's own checks use 1e-2 for 16-bit types)
TOLERANCE = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.float16: dict(rtol=1e-2, atol=1e-2),
             torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}
CASES = [pytest.param(arch, dtype, id=f"{arch}-{str(dtype)[6:]}") for arch in ARCHES for dtype in DTYPES]


def _randn(*shape, dtype, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.parametrize("arch,dtype", CASES)
def test_online_softmax(arch, dtype):
    X = _randn(4, 512, dtype=dtype)
    Y = online_softmax.softmax_kernel(X, BLOCK_N=256, dtype=dtype, arch=arch)  # two tiles per row: the online update
    torch.testing.assert_close(Y, X.float().softmax(dim=1).to(dtype), **TOLERANCE[dtype])


@pytest.mark.parametrize("arch,dtype", CASES)
def test_rms_norm(arch, dtype):
    A = _randn(4, 256, dtype=dtype)
    B = rms_norm.rms_norm(A, 1, arch=arch)
    assert B.dtype == torch.float32  # upstream's kernel declares B = T.empty((M, N), T.float)
    torch.testing.assert_close(B, rms_norm.ref_program(A.float()), **TOLERANCE[dtype])


@pytest.mark.parametrize("arch,dtype", CASES)
def test_rms_norm_splitk(arch, dtype):
    A = _randn(4, 256, dtype=dtype)
    B = rms_norm.rms_norm_splitk(A, 1, 128, arch=arch)
    assert B.dtype == torch.float32  # upstream's kernel declares B = T.empty((M, N), T.float)
    torch.testing.assert_close(B, rms_norm.ref_program(A.float()), **TOLERANCE[dtype])


@pytest.mark.parametrize("arch,dtype", CASES)
def test_layernorm_forward(arch, dtype):
    x, g, b = (_randn(*shape, dtype=dtype, seed=seed) for seed, shape in enumerate([(4, 512), (512,), (512,)]))
    kernel = layernorm._layernorm_fwd(4, 512, in_dtype=str(dtype)[6:], out_dtype=str(dtype)[6:])
    y, mean, rstd = kernel(x, g, b, arch=arch)
    xf = x.float()
    torch.testing.assert_close(y, layernorm.ref_program(xf, g.float(), b.float(), 1e-5).to(dtype), **TOLERANCE[dtype])
    torch.testing.assert_close(mean, xf.mean(dim=1), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(rstd, torch.rsqrt(xf.var(dim=1, unbiased=False) + 1e-5), rtol=1e-4, atol=1e-4)


# every op on both arches, the dtype rotating so that each arch sees all three and each op two (10 kernels, not 30)
ROW_CASES = [pytest.param(arch, DTYPES[(k + a) % 3], op, id=f"{arch}-{str(DTYPES[(k + a) % 3])[6:]}-{op}")
             for a, arch in enumerate(ARCHES) for k, op in enumerate(["sum", "max", "min", "abssum", "absmax"])]


@pytest.mark.parametrize("arch,dtype,op", ROW_CASES)
def test_row_reduce(arch, dtype, op):
    A = _randn(64, 128, dtype=dtype)
    B = reduce.row_reduce(64, 128, dtype, op, "fragment", "fragment", 128, 1)(A, arch=arch)
    expected = reduce.REFERENCES[op](A.float(), 1).to(dtype)
    torch.testing.assert_close(B, expected, **TOLERANCE[dtype])


@pytest.mark.parametrize("reduce_fn", ["reduce_sum", "reduce_max"])
@pytest.mark.parametrize("arch", ARCHES)
def test_column_reduce(arch, reduce_fn):
    """Upstream's column kernel is float32 only (its tensors are annotated T.float32)."""
    A = _randn(64, 2, dtype=torch.float32)
    B = reduce.column_reduce(getattr(T, reduce_fn), 64, 2)(A, arch=arch)
    torch.testing.assert_close(B, reduce.REFERENCES[reduce_fn[7:]](A, 0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("arch,dtype", CASES)
def test_gemv_alloc_reducer(arch, dtype):
    a, x = _randn(256, 256, dtype=dtype), _randn(256, dtype=dtype, seed=1)
    o = gemv.gemv_alloc_reducer(a, x, dtype=dtype, arch=arch)
    torch.testing.assert_close(o, (a.float() @ x.float()).to(dtype), **TOLERANCE[dtype])


# upstream's test_cumsum_smem / test_cumsum_fragment cases on 128 x 128 (two 64-row tiles a side, not 256 x 256)
CUMSUM_CASES = [pytest.param(arch, scope, dim, reverse, id=f"{arch}-{scope}-dim{dim}-{'rev' if reverse else 'fwd'}")
                for arch in ARCHES for scope, dim, reverse in [("smem", 0, False), ("smem", 1, True),
                                                               ("fragment", 0, True), ("fragment", 1, False)]]


@pytest.mark.parametrize("arch,scope,dim,reverse", CUMSUM_CASES)
def test_cumsum(arch, scope, dim, reverse):
    make = cumsum.cumsum_smem_test if scope == "smem" else cumsum.cumsum_fragment_test
    kernel = tilegcn.jit(make(128, 128, 64, 64, dim, reverse), out_idx=-1)
    A = _randn(128, 128, dtype=torch.float32)
    B = kernel(A, arch=arch)
    torch.testing.assert_close(B, cumsum.ref_program(A, 128, 128, 64, 64, dim, reverse), atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("scope", ["smem", "fragment"])
def test_cumsum_1d(arch, scope):
    make = cumsum.cumsum_smem_test_1d if scope == "smem" else cumsum.cumsum_fragment_test_1d
    A = _randn(512, dtype=torch.float32)
    B = tilegcn.jit(make(512, 64, reverse=True), out_idx=-1)(A, arch=arch)
    torch.testing.assert_close(B, A.view(8, 64).flip(1).cumsum(1).flip(1).reshape(512), atol=1e-3, rtol=1e-3)


def test_per_token_cast_to_fp8_on_gfx950():
    """Upstream's checks (its main()) on a ragged-free smaller shape, and the fp8 bytes equal torch's where the
    scale is the reference's (the tolerance only covers scales rounded differently)."""
    x = _randn(16, 256, dtype=torch.float32)
    x_fp8, x_amax = per_token_cast_to_fp8.per_token_cast_to_fp8(x, 8, arch="gfx950")
    want_fp8, want_amax = per_token_cast_to_fp8.ref_program(x)
    assert x_fp8.dtype == torch.float8_e4m3fn and x_amax.shape == (16, 2)
    torch.testing.assert_close(x_fp8.float(), want_fp8.float(), rtol=0.01, atol=0.01)
    torch.testing.assert_close(x_amax, want_amax, rtol=0.01, atol=0.01)
    same_scale = (x_amax == want_amax).repeat_interleave(128, dim=1)
    assert torch.equal(x_fp8.view(torch.uint8)[same_scale], want_fp8.view(torch.uint8)[same_scale])


def test_per_token_cast_to_fp8_names_the_fnuz_format_on_gfx942():
    """gfx942 has the FNUZ fp8 formats only: the kernel's T.float8_e4m3fn is refused, naming the one to use."""
    with pytest.raises(tilegcn.errors.CompileError, match=r"X_fp8 is float8_e4m3fn, an fp8 format gfx942 does not "
                                                          r"have.*use T.float8_e4m3fnuz"):
        per_token_cast_to_fp8.per_token_cast_to_fp8(_randn(16, 256, dtype=torch.float32), 8, arch="gfx942")


@pytest.mark.parametrize("arch", ARCHES)
def test_topk(arch):
    """The kernel at one config per arch (`.fn`: the jit function under the autotuner; tests/test_examples.py runs
    the example's main(), which tunes)."""
    logits = torch.rand((64, 128), generator=torch.Generator().manual_seed(0))
    gates, indices = topk.tl_topk.fn(logits, 6, blk_m=32, arch=arch)
    want_gates, want_indices = topk.ref_program(logits, 6)
    torch.testing.assert_close(gates, want_gates)
    torch.testing.assert_close(indices, want_indices)


# upstream's main() on 64 x 128 x 256 (not 1024^3): 2 x 1 output tiles of 64 x 64, each summed over 4 K slices by 4
# workgroups adding into C at once; the element form (T.Parallel) and the tile form
SPLITK = {"element": gemm_splitk, "tile": gemm_splitk_vectorize_atomicadd}


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("form", SPLITK)
def test_gemm_splitk(arch, form):
    a, b = _randn(64, 256, dtype=torch.float16), _randn(256, 128, dtype=torch.float16, seed=1)
    c = torch.zeros(64, 128)
    SPLITK[form].matmul(a, b, c, 64, 64, 32, 4, arch=arch)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-2, atol=1e-2)  # upstream's tolerance


@pytest.mark.parametrize("arch", ARCHES)
def test_gemm_streamk(arch):
    """Upstream's setup at 80 x 128 x 128 with 2 programs (its total_sm): 5 tiles of 16 x 128, 4 K iterations each;
    3 stream-k tiles share 12 iterations, 6 per program (tiles 0 and 2 whole: stored; tile 1 split between the two:
    atomic adds), then 2 tiles whole, one per program. main() checks C against torch.matmul (upstream's 1e-2)."""
    gemm_streamk.setup(80, 128, 128, 2)
    assert (gemm_streamk.streamk_tiles, gemm_streamk.streamk_full_tiles, gemm_streamk.sm_patition_factor) == (3, 6, 1)
    gemm_streamk.main(arch=arch)


@pytest.mark.parametrize("arch,dtype", CASES)
def test_elementwise_add_through_shared(arch, dtype):
    """Inputs staged in shared tiles, the sum stored fragment -> shared -> global; 40 x 96 leaves a ragged row block
    (upstream's block_M=32, block_N=32, threads=128)."""
    a, b = _randn(40, 96, dtype=dtype), _randn(40, 96, dtype=dtype, seed=1)
    c = elementwise_add.elementwise_add(a, b, block_M=32, block_N=32, threads=128, in_dtype=dtype, out_dtype=dtype,
                                        arch=arch)
    assert torch.equal(c, (a.float() + b.float()).to(dtype))  # one fp32 add, rounded once


@pytest.mark.parametrize("arch", ARCHES)
def test_gemm_returns_its_output(arch):
    """Ragged M and N (96 x 80 over 64 x 64 tiles), two K steps."""
    a, b = _randn(96, 64, dtype=torch.float16), _randn(64, 80, dtype=torch.float16, seed=1)
    c = gemm.matmul(a, b, block_M=64, block_N=64, block_K=32, arch=arch)
    torch.testing.assert_close(c, (a.float() @ b.float()).half(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("arch", ARCHES)
def test_gemm_fp8_amd(arch, monkeypatch):
    """fp8 T.gemm (e4m3: FNUZ on gfx942, OCP on gfx950, as the port's determine_fp8_type picks for the target arch):
    upstream's check, and the fp32 matmul of exactly the fp8 inputs (products exact, fp32 sums in another order)."""
    monkeypatch.setenv("TILEGCN_ARCH", arch)
    # the factory picks its dtype for the target when called, and a kernel factory keeps one kernel per argument set
    # (not per target): a fresh memo per arch, as two processes targeting the two arches would have
    monkeypatch.setattr(gemm_fp8_amd.fp8_matmul, "_kernels", {})
    fp8 = gemm_fp8_amd.determine_torch_fp8_type()
    assert fp8 == {"gfx942": torch.float8_e4m3fnuz, "gfx950": torch.float8_e4m3fn}[arch]
    a, b = (_randn(*shape, dtype=torch.float16, seed=seed).mul(4).to(fp8) for seed, shape in ((0, (96, 256)),
                                                                                                 (1, (64, 256))))
    kernel = gemm_fp8_amd.fp8_matmul(96, 64, 256, block_M=32, block_N=64, block_K=128, num_stages=0,
                                     num_threads=256, k_pack=1, gemm_type="ss")
    c = kernel(a, b)
    torch.testing.assert_close(c, gemm_fp8_amd.ref_program(a, b), rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(c, a.float() @ b.float().T, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("arch", ARCHES)
def test_gemm_storing_c_through_shared(arch):
    """The fp32 accumulator copied into an f16 shared tile, that tile copied to C (masked at the ragged edges)."""
    a, b = _randn(96, 64, dtype=torch.float16), _randn(64, 80, dtype=torch.float16, seed=1)
    c = gemm_persistent.matmul_non_persistent(a, b, block_M=64, block_N=64, block_K=32, threads=128,
                                                  num_stages=2, arch=arch)
    torch.testing.assert_close(c, gemm_persistent.ref_program(a.float(), b.float()).half(), rtol=1e-2,
                               atol=1e-2)


# FP4 E2M1 values of the 8 codes with the sign bit clear, by code (OCP MX spec: exponent bias 1, code 1 subnormal)
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def _mxfp4_decode(qB, Scale, scale_size=32):
    """MXFP4 weights as fp32, from the OCP MX spec rather than upstream's helper: each byte holds two E2M1 codes, the
    low nibble first; each run of scale_size weights along K is scaled by its E8M0 scale, 2 ** (scale - 127), which
    the kernel applies as 2 ** scale (TileLang's int32 shift; upstream's reference too)."""
    codes = torch.stack((qB & 0xF, qB >> 4), dim=-1).reshape(qB.shape[0], -1).long()
    values = torch.tensor(E2M1)[codes & 7] * torch.where(codes >= 8, -1.0, 1.0)
    return values * 2.0 ** Scale.float().repeat_interleave(scale_size, dim=1)


@pytest.mark.parametrize("arch", ARCHES)
def test_dequant_gemm_bf16_mxfp4(arch, monkeypatch):
    """TileLang's MXFP4 dequantize GEMM (simple path: the packed bytes unpacked to bf16 by bit operations in a
    fragment read at [i, j // 2], scaled, copied into the T.gemm's B tile, bf16 MFMA), with a bias: upstream's
    reference on random bytes, and the MX spec's decoding on codes whose E2M1 exponent is not 0 (upstream's kernel
    and reference decode exponent 0 as if normal: 0.5 and 0.75 for the codes that mean 0 and 0.5)."""
    monkeypatch.setenv("TILEGCN_ARCH", arch)
    monkeypatch.setattr(dequant_gemm_bf16_mxfp4_cdna4.matmul, "_kernels", {})
    M, N, K = 64, 64, 128
    kernel = dequant_gemm_bf16_mxfp4_cdna4.matmul(M, N, K, T.bfloat16, T.bfloat16, T.float32, block_M=64, block_N=64,
                                                  block_K=64, num_stages=2, threads=128, fast_dequant=False,
                                                  with_bias=True)
    gen = torch.Generator().manual_seed(0)
    A = torch.randn(M, K, generator=gen).to(torch.bfloat16)
    Scale = torch.randint(0, 4, (N, K // 32), dtype=torch.uint8, generator=gen)
    Bias = (torch.randn(M, N, generator=gen) * 64).to(torch.bfloat16)  # large enough for the tolerance to see it
    qB = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, generator=gen)
    torch.testing.assert_close(kernel(A, qB, Scale, Bias),
                               dequant_gemm_bf16_mxfp4_cdna4.ref_program_simple_with_bias(A, qB, Scale, Bias),
                               rtol=0.01, atol=0.01)
    normal = qB | 0x22  # every nibble's exponent field (bits 1-2) nonzero: the codes both decodings agree on
    want = A.float() @ _mxfp4_decode(normal, Scale).T + Bias.float()
    torch.testing.assert_close(kernel(A, normal, Scale, Bias).float(), want, rtol=8e-3, atol=0.5)


def test_dequant_gemm_bf16_mxfp4_fast_path_is_refused():
    """The fast path compiles a HIP C++ intrinsic: a CompileError that names the simple path."""
    with pytest.raises(tilegcn.CompileError, match="fast_dequant=False"):
        dequant_gemm_bf16_mxfp4_cdna4.matmul(64, 64, 128, T.bfloat16, T.bfloat16, T.float32, fast_dequant=True)


def _blockwise_reference(A_fp8, B_fp8, A_scale, B_scale, group=128):
    """DeepGEMM's scaling from its definition, not upstream's helper: block k of K contributes the fp32 product of
    the fp8 blocks times the row's scale of that block (A_scale[m, k]) and the scale of B's 128 x 128 block
    (B_scale[n // 128, k]); the sum over k stays in fp32."""
    out = torch.zeros(A_fp8.shape[0], B_fp8.shape[0])
    for k in range(A_fp8.shape[1] // group):
        part = A_fp8[:, k * group:(k + 1) * group].float() @ B_fp8[:, k * group:(k + 1) * group].float().T
        out += part * A_scale[:, k:k + 1] * B_scale[:, k].repeat_interleave(group)[None, :B_fp8.shape[0]]
    return out


@pytest.mark.parametrize("out_dtype,block_N", [(T.bfloat16, 64), (T.float32, 16)])
def test_deepgemm_fp8_blockwise_scales(out_dtype, block_N, monkeypatch):
    """TileLang's DeepSeek DeepGEMM fp8 GEMM on gfx950 (e4m3fn, the OCP format): A scaled per token and 128 K, B per
    128 x 128 block, applied to each K step's fp32 accumulator, stored as bf16 / fp32 through a shared tile. Upstream's
    check (its reference rounds each block's product to bf16), and the blockwise sum in fp32, rounded once."""
    monkeypatch.setenv("TILEGCN_ARCH", "gfx950")
    deepgemm_fp8_2xacc.assert_tl_gemm_correctness(128, 128, 256, block_N, T.float8_e4m3fn, out_dtype, T.float32)
    torch.manual_seed(0)  # inputs drawn and cast as upstream's check does
    A_fp8, A_scale = deepgemm_fp8_2xacc.per_token_cast_to_fp8(torch.randn(128, 256).to(torch.bfloat16))
    B_fp8, B_scale = deepgemm_fp8_2xacc.per_block_cast_to_fp8(torch.randn(128, 256).to(torch.bfloat16))
    want = _blockwise_reference(A_fp8, B_fp8, A_scale, B_scale)
    got = deepgemm_fp8_2xacc.tl_gemm(A_fp8, B_fp8, A_scale, B_scale, block_N, T.float8_e4m3fn, out_dtype, T.float32)
    if out_dtype == T.float32:
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)
    else:
        torch.testing.assert_close(got.float(), want.to(torch.bfloat16).float(), rtol=2 ** -7, atol=1e-3)


def test_deepgemm_fp8_names_the_fnuz_format_on_gfx942(monkeypatch):
    """Upstream's kernel asks for float8_e4m3fn, which gfx942's matrix cores do not read: refused with its format."""
    monkeypatch.setenv("TILEGCN_ARCH", "gfx942")
    with pytest.raises(tilegcn.CompileError, match="float8_e4m3fn, an fp8 format gfx942 does not have.*fnuz"):
        deepgemm_fp8_2xacc.main()


def _int4_decode(qB):
    """Signed int4 weights from their bytes, two a byte, low nibble first, each nibble two's complement (-8 .. 7):
    from the definition, not upstream's torch_convert."""
    nibbles = torch.stack((qB & 0xF, qB >> 4), dim=-1).reshape(qB.shape[0], -1).long()
    return nibbles - 16 * (nibbles >= 8)


@pytest.mark.parametrize("arch,num_stages", [("gfx942", 1), ("gfx950", 2)])
def test_dequant_gemm_w4a8(arch, num_stages, monkeypatch):
    """TileLang's W4A8 dequantize GEMM: int4 weights unpacked in registers to int8 (T.reinterpret to int8 and an
    arithmetic shift), the int8 fragment the A operand of an int8 T.gemm (through an LDS tile), Ct = B @ A^T stored
    through a shared tile. Upstream's integer-input check, and every byte and every int8 against the exact product."""
    monkeypatch.setenv("TILEGCN_ARCH", arch)
    monkeypatch.setattr(dequant_gemm_w4a8.matmul_int8xint4, "_kernels", {})
    kernel = dequant_gemm_w4a8.matmul_int8xint4(64, 64, 256, T.int8, T.int32, T.int32, num_bits=4, block_M=32,
                                                block_N=32, block_K=128, num_stages=num_stages, threads=128)
    gen = torch.Generator().manual_seed(4)
    A = torch.randint(-2, 3, (64, 256), dtype=torch.int8, generator=gen)  # as TileLang's profiler draws them
    qB = torch.randint(0, 3, (64, 128), dtype=torch.uint8, generator=gen)
    torch.testing.assert_close(kernel(A, qB), dequant_gemm_w4a8.ref_program(A, qB), rtol=1e-2, atol=1e-2)
    A = torch.randint(-128, 128, (64, 256), dtype=torch.int8, generator=gen)
    qB = torch.randint(0, 256, (64, 128), dtype=torch.uint8, generator=gen)
    assert torch.equal(kernel(A, qB).long(), _int4_decode(qB) @ A.long().T)


def test_w4a8_int4_to_int8_conversion(monkeypatch):
    """The port's `_convert_test` kernel: every byte's two nibbles as int8, against the definition."""
    monkeypatch.setenv("TILEGCN_ARCH", "gfx942")
    qB = torch.arange(256, dtype=torch.int32).to(torch.uint8).reshape(16, 16)
    out = dequant_gemm_w4a8._convert_test(16, 32, 16, 32, T.int8)(qB)
    assert torch.equal(out.long(), _int4_decode(qB))
