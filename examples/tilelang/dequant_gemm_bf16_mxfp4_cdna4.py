"""MXFP4 dequantize-GEMM, ported from TileLang: examples/dequantize_gemm/example_dequant_gemm_bf16_mxfp4_cdna4.py at
tile-ai/tilelang commit a35008a42531c62b976ae4cec3855d4383db0f3c (upstream's docstring follows).

Mechanical changes only:
- imports: `tilegcn` and `from tilegcn import language as T`; TVM's `tirx.const` / `tirx.reinterpret` are
  `T.const` / `T.reinterpret` (the helper's `tirx.PrimExpr` annotations dropped), `tilelang.layout` is
  `tilegcn.layout`; `source_format="uint32"` (tilegcn has no uint32 dtype; the argument is read by the fast path
  only); upstream's `dequantize_utils.torch_convert_bit_twiddling` / `torch_convert` (the references) are copied below;
- the fast path (`fast_dequant=True`) calls a HIP C++ intrinsic (`T.import_source` / `T.call_extern` of
  `quantize.get_mxfp_intrin_group`'s source), which a compiler straight to AMDGCN cannot take: the intrinsic lookup
  happens only when that path is asked for, and raises there (docs/refusals.md); its macro stays for reference;
- the `@tilelang.autotune` sweep is left out (as in gemm_fp8_amd.py); `main()` checks on CPU tensors on the
  emulated device with upstream's tolerances instead of the profiler (no latency: tilegcn's timing model is
  bench/), with scales 0..3 (2 ** scale as upstream's int32 shift) and the simple path's references.

The kernel body is TileLang's, line for line; the simple path is arch-neutral and runs on gfx942 and gfx950.

MXFP4 dequantize-GEMM example for AMD gfx950 (CDNA4 / MI350).

Mirrors example_dequant_gemm_bf16_mxfp4_hopper.py for NVIDIA Hopper.
Computes:  C (MxN, bf16) = dequantize(B) (NxK, bf16) @ A^T (MxK, bf16)
where B is stored as packed uint8 (2 FP4 E2M1 values per byte) with
per-block E8M0 scale factors.

This file only runs on AMD gfx950.  Use `@tilelang.testing.requires_gfx950`
in test wrappers; the kernel itself is target-agnostic Python but the
underlying HIP C++ (hip_fp4.h) is compiled only for __gfx950__.
"""

import itertools

import torch

import tilegcn
from tilegcn import language as T
from tilegcn.errors import CompileError


def get_mxfp_intrin_group(**kwargs):
    """upstream's quantize.get_mxfp_intrin_group returns HIP C++ source for T.import_source: refused here."""
    raise CompileError("fast_dequant=True calls a HIP C++ intrinsic (T.import_source / T.call_extern), and tilegcn "
                       "compiles tile programs straight to AMDGCN without a C++ compiler; use fast_dequant=False "
                       "(the same dequantization in T.Parallel bit operations)")


def torch_convert_bit_twiddling(tensor):
    """
    This function expects `tensor` to be a 2-D torch.Tensor of dtype `torch.uint8`. Each output element is produced by combining two input bytes and extracting a bf16-like 16-bit pattern according to one of four positional bit layouts (pos 0..3). The result is scaled by 2**126 to adjust the exponent bias and returned as dtype `torch.bfloat16`.

    Parameters:
        tensor (torch.Tensor): 2-D input tensor with dtype `torch.uint8`. Shape (N, K).

    Returns:
        torch.Tensor: New tensor of dtype `torch.bfloat16` with shape (N, K*2), where each input column pair produces two bf16 output columns.

    Raises:
        AssertionError: If any byte inputs used for a conversion are not dtype `torch.uint8`.
    """
    assert tensor.dim() == 2 and tensor.dtype == torch.uint8
    N, K = tensor.shape
    assert K % 2 == 0, "Number of columns must be even"

    # Combine pairs of uint8 values into uint32 for safe bitwise ops on CUDA
    val0 = tensor[:, 0::2].to(torch.int32)
    val1 = tensor[:, 1::2].to(torch.int32)
    val_concat = (val0 << 8) | val1  # (N, K//2), uint32

    # Expand to match output shape where each pair generates 4 values
    val_concat_expanded = val_concat.repeat_interleave(4, dim=1)  # (N, K//2*4)

    # Positional encoding for bit-twiddling logic
    pos = torch.arange(K * 2, device=tensor.device) % 4  # (K*2,)

    # Bit masks for decoding (as uint32 for CUDA compatibility)
    mask = 0b1000000111000000
    mask1 = 0b1000000000000000
    mask2 = 0b0000000110000000
    mask3 = 0b0000000001000000

    # Calculate results for all 4 positions in parallel
    res0 = val_concat_expanded & mask
    res1 = (val_concat_expanded << 3) & mask
    res2 = (val_concat_expanded << 6) & mask
    res3 = ((val_concat_expanded << 1) & mask1) | ((val_concat_expanded >> 3) & mask2) | ((val_concat_expanded >> 7) & mask3)

    # Select the correct result based on position
    bf16 = torch.where(pos == 0, res0, torch.where(pos == 1, res1, torch.where(pos == 2, res2, res3)))

    # Convert to uint16 for .view(torch.bfloat16)
    bf16_uint16 = (bf16 & 0xFFFF).to(torch.uint16)
    bf16_bf16 = bf16_uint16.view(torch.bfloat16)

    # Avoid integer overflow by using a float32 multiplier for the exponent scaling
    bf16_new = bf16_bf16 * (2.0**126)

    return bf16_new


def torch_convert(tensor, scale_size=None, Scale=None):
    """upstream's dequantize_utils.torch_convert: each byte's two 4-bit fields (low first) decoded to bf16."""
    assert tensor.dim() == 2 and tensor.dtype == torch.uint8
    N, K = tensor.shape

    f4 = torch.stack((tensor & 0x0F, tensor >> 4), dim=-1)
    f4 = f4.reshape(N, K * 2).to(torch.int16)
    sign = (f4 >> 3) * -32768
    exponent = ((f4 & 6) >> 1) + 126
    if scale_size is not None:
        assert Scale is not None
        scale_idx = torch.arange(K * 2, device=tensor.device) // scale_size
        exponent = torch.clamp(exponent + Scale[:, scale_idx].to(torch.int16), max=255)
    mantissa = (f4 & 1) << 6
    return (sign + (exponent << 7) + mantissa).view(torch.bfloat16)


def _tir_u8_to_f4_to_bf16(nbit: int, val, pos, scale, dtype: str):
    """Convert a packed 4-bit FP4 field to bfloat16 (mirrors Hopper example, ignoring overflow clamp)."""
    assert nbit == 4
    assert dtype == T.bfloat16
    assert val.dtype == T.uint8
    mask = T.const((1 << nbit) - 1, T.uint16)
    f4 = (val >> (pos.astype(T.uint16) * T.const(nbit, T.uint16))) & mask
    s = f4 >> T.const(3, T.uint16)
    e_f4 = (f4 & T.const(6, T.uint16)) >> T.const(1, T.uint16)
    e_bf16 = e_f4 + T.const(126, T.uint16)
    m_f4 = f4 & T.const(1, T.uint16)
    val_bf16 = T.reinterpret(
        T.bfloat16,
        ((((s << T.const(8, T.uint16)) | e_bf16) << T.const(7, T.uint16)) | (m_f4 << T.const(6, T.uint16))).astype(T.uint16),
    )
    return val_bf16


def get_configs():
    iter_params = dict(
        block_M=[64, 128, 256],
        block_N=[64, 128, 256],
        block_K=[64, 128, 256],
        num_stages=[0, 2],
        threads=[128, 256],
        split=[1, 2],
    )
    return [{k: v for k, v in zip(iter_params, values)} for values in itertools.product(*iter_params.values())]


@tilegcn.jit(out_idx=[-1], target="hip -mcpu=gfx950")
def matmul(
    M,
    N,
    K,
    in_dtype,
    out_dtype,
    accum_dtype,
    source_format="uint32",
    num_bits=4,
    scale_size=32,
    fast_dequant=True,
    with_bias=False,
    block_M=256,
    block_N=128,
    block_K=128,
    num_stages=2,
    threads=256,
    split=1,
):
    """
    MXFP4 dequantize-GEMM kernel for AMD gfx950.

    Inputs:
      A      : (M, K) in in_dtype (e.g. bfloat16)
      B      : (N, K//2) uint8  -- packed 2x FP4 per byte
      Scale  : (N, K//scale_size) uint8  -- E8M0 per-block exponent
      [Bias] : (M, N) out_dtype (optional)
    Output:
      C      : (M, N) out_dtype
    """
    num_elems_per_byte = 8 // num_bits
    storage_dtype = T.uint8
    QK = K // num_elems_per_byte
    Block_QK = block_K // num_elems_per_byte

    A_shape = (M, K)
    B_shape = (N, QK)
    Bias_shape = (M, N)
    Scale_shape = (N, K // scale_size)
    A_shared_shape = (block_M, block_K)
    B_shared_shape = (block_N, Block_QK)
    Bias_shared_shape = (block_M, block_N)
    B_dequantize_shared_shape = (block_N, block_K)
    assert K % (block_K * split) == 0

    if fast_dequant:
        # Obtain the HIP C++ dequantization intrinsic (gfx950-specific).
        mxfp_intrin_info = get_mxfp_intrin_group(
            out_dtype=in_dtype,
            source_format=source_format,
            source_bit=num_bits,
            storage_dtype=storage_dtype,
            use_twiddling=True,
            target="hip -mcpu=gfx950",
        )
        import_source = mxfp_intrin_info["c_source"]
        func_name = mxfp_intrin_info["func_name"]
        assert import_source is not None
        assert func_name is not None

    def get_fast_dequant_func(in_dtype="fp4", out_dtype=T.bfloat16):
        assert in_dtype in ["fp4"]
        assert out_dtype in [T.bfloat16]

        MAX_TRANSACTION_SIZE_BITS = 128
        local_size = MAX_TRANSACTION_SIZE_BITS // (8 * T.dtype(out_dtype).bytes)
        local_compress_size = local_size // num_elems_per_byte

        @T.macro
        def fast_dequant_bf16_fp4_twiddling(B_shared, B_dequantize_shared, Scale, k):
            T.import_source(import_source)

            tx = T.get_thread_binding()
            bx = T.get_block_binding(0)

            B_local_thread = T.alloc_local((local_compress_size,), storage_dtype)
            B_dequantize_local_thread = T.alloc_local((local_size,), out_dtype)
            Scale_local_thread = T.alloc_local((1,), storage_dtype)
            Scale_local_thread_exponent = T.alloc_local((1,), out_dtype)

            for i in T.serial(0, block_N * block_K // threads // local_size):
                index_base = i * threads * local_compress_size + tx * local_compress_size
                for v in T.vectorized(0, local_compress_size):
                    index = index_base + v
                    B_local_thread[v] = B_shared[index // Block_QK, index % Block_QK]
                index_scale = index_base // (scale_size // num_elems_per_byte)
                si = index_scale // (block_K // scale_size)
                sj = index_scale % (block_K // scale_size)
                Scale_local_thread[0] = Scale[bx * block_N + si, k * block_K // scale_size + sj]
                Scale_local_thread_exponent[0] = T.shift_left(1, Scale_local_thread[0])

                T.call_extern(
                    func_name,
                    T.access_ptr(B_local_thread, "r"),
                    T.access_ptr(B_dequantize_local_thread, "w"),
                    1,
                    dtype=out_dtype,
                )

                for v in T.vectorized(local_size):
                    B_dequantize_local_thread[v] *= Scale_local_thread_exponent[0]

                for v in T.vectorized(0, local_size):
                    index = i * threads * local_size + tx * local_size + v
                    B_dequantize_shared[index // block_K, index % block_K] = B_dequantize_local_thread[v]

        return fast_dequant_bf16_fp4_twiddling

    def get_simple_dequant_func(in_dtype="fp4", out_dtype=T.bfloat16):
        assert in_dtype in ["fp4"]
        assert out_dtype in [T.bfloat16]

        @T.macro
        def simple_dequant_bf16_fp4(B_shared, B_dequantize_shared, Scale, k):
            B_local = T.alloc_fragment(B_shared_shape, storage_dtype)
            B_dequantize_local = T.alloc_fragment(B_dequantize_shared_shape, out_dtype)

            bx = T.get_block_binding(0)
            T.copy(B_shared, B_local)
            for i, j in T.Parallel(block_N, block_K):
                B_dequantize_local[i, j] = _tir_u8_to_f4_to_bf16(
                    num_bits,
                    B_local[i, j // num_elems_per_byte],
                    j % num_elems_per_byte,
                    Scale[
                        bx * block_N + i,
                        k * block_K // scale_size + j // scale_size,
                    ],
                    dtype=out_dtype,
                ) * T.shift_left(
                    1,
                    Scale[bx * block_N + i, k * block_K // scale_size + j // scale_size],
                )
            T.copy(B_dequantize_local, B_dequantize_shared)

        return simple_dequant_bf16_fp4

    @T.prim_func
    def main(
        A: T.Tensor(A_shape, in_dtype),
        B: T.Tensor(B_shape, storage_dtype),
        Scale: T.Tensor(Scale_shape, storage_dtype),
        Bias: T.Tensor(Bias_shape, out_dtype),
        C: T.Tensor((M, N), out_dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared(A_shared_shape, in_dtype)
            B_shared = T.alloc_shared(B_shared_shape, storage_dtype)
            B_dequantize_shared = T.alloc_shared(B_dequantize_shared_shape, in_dtype)
            Bias_shared = T.alloc_shared(Bias_shared_shape, out_dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            C_shared = T.alloc_shared((block_M, block_N), out_dtype)

            T.annotate_layout({B_shared: tilegcn.layout.make_swizzled_layout(B_shared)})

            if with_bias:
                T.annotate_layout({Bias_shared: tilegcn.layout.make_swizzled_layout(Bias_shared)})

            if with_bias:
                T.copy(
                    Bias[by * block_M : (by + 1) * block_M, bx * block_N : (bx + 1) * block_N],
                    Bias_shared,
                )
                T.copy(Bias_shared, C_local)
            else:
                T.clear(C_local)

            for k in T.Pipelined(K // block_K, num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[bx * block_N, k * block_K // num_elems_per_byte], B_shared)
                if fast_dequant:
                    get_fast_dequant_func()(B_shared, B_dequantize_shared, Scale, k)
                else:
                    get_simple_dequant_func()(B_shared, B_dequantize_shared, Scale, k)
                T.gemm(A_shared, B_dequantize_shared, C_local, transpose_B=True)

            T.copy(C_local, C_shared)
            T.copy(
                C_shared,
                C[by * block_M : (by + 1) * block_M, bx * block_N : (bx + 1) * block_N],
            )

    return main


# ---------------------------------------------------------------------------
# Reference implementations (CPU/CUDA torch, for correctness checking)
# ---------------------------------------------------------------------------


def ref_program_twiddling(A, qB, Scale, Bias=None):
    """Reference: dequantize via bit-twiddling then matmul."""
    B = torch_convert_bit_twiddling(qB)
    B = B * 2 ** (Scale[:, torch.arange(B.shape[1], device=B.device) // 32].float())
    C = torch.matmul(A.to(torch.float), B.T.to(torch.float))
    return C.to(torch.bfloat16)


def ref_program_simple(A, qB, Scale, Bias=None):
    """Reference: simple nibble-by-nibble dequantization then matmul."""
    B = torch_convert(qB)
    B = B * 2 ** (Scale[:, torch.arange(B.shape[1], device=B.device) // 32].float())
    C = torch.matmul(A.to(torch.float), B.T.to(torch.float))
    return C.to(torch.bfloat16)


def ref_program_twiddling_with_bias(A, qB, Scale, Bias):
    B = torch_convert_bit_twiddling(qB)
    B = B * 2 ** (Scale[:, torch.arange(B.shape[1], device=B.device) // 32].float())
    C = torch.matmul(A.to(torch.float), B.T.to(torch.float)) + Bias.to(torch.float)
    return C.to(torch.bfloat16)


def ref_program_simple_with_bias(A, qB, Scale, Bias):
    B = torch_convert(qB)
    B = B * 2 ** (Scale[:, torch.arange(B.shape[1], device=B.device) // 32].float())
    C = torch.matmul(A.to(torch.float), B.T.to(torch.float)) + Bias.to(torch.float)
    return C.to(torch.bfloat16)


# ---------------------------------------------------------------------------
# Main entry point
# ---------------------------------------------------------------------------


def main(m=256, n=256, k=256, scale_size=32, fast_dequant=True, with_bias=False, tune=False):
    kernel = matmul(
        m,
        n,
        k,
        T.bfloat16,
        T.bfloat16,
        T.float32,
        num_bits=4,
        scale_size=scale_size,
        block_M=128,
        block_N=128,
        block_K=128,
        num_stages=2,
        threads=256,
        split=1,
        fast_dequant=fast_dequant,
        with_bias=with_bias,
    )

    if fast_dequant:
        ref = ref_program_twiddling_with_bias if with_bias else ref_program_twiddling
    else:
        ref = ref_program_simple_with_bias if with_bias else ref_program_simple

    gen = torch.Generator().manual_seed(0)
    A = torch.randn(m, k, generator=gen).to(torch.bfloat16)
    qB = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, generator=gen)
    Scale = torch.randint(0, 4, (n, k // scale_size), dtype=torch.uint8, generator=gen)
    Bias = torch.randn(m, n, generator=gen).to(torch.bfloat16)
    C = kernel(A, qB, Scale, Bias)
    torch.testing.assert_close(C, ref(A, qB, Scale, Bias), rtol=0.01, atol=0.01)
    print("All checks pass.")


if __name__ == "__main__":
    M, N, K = 256, 256, 256
    scale_size = 32
    main(M, N, K, scale_size, fast_dequant=False, with_bias=False)
    main(M, N, K, scale_size, fast_dequant=False, with_bias=True)
