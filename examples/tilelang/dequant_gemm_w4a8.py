"""W4A8 dequantize GEMM (int8 activations x int4 weights, int32 accumulation), ported from TileLang:
examples/dequantize_gemm/example_dequant_gemm_w4a8.py at tile-ai/tilelang commit
a35008a42531c62b976ae4cec3855d4383db0f3c.

B holds two signed int4 weights a byte (low nibble first); each K step copies its packed tile to a fragment, unpacks
it in registers to int8 (`_tir_u8_to_i4_to_i8`: shift the nibble to the top, reinterpret as int8, shift back down
arithmetically) and multiplies it on the int8 matrix cores: Ct = B @ A^T, the transposed output.

Mechanical changes only:
- imports: `tilegcn` and `from tilegcn import language as T`; `@tilegcn.jit(out_idx=...)` for `@tilelang.jit`;
  TVM's `tirx.const` / `tirx.reinterpret` are `T.const` / `T.reinterpret` (the helper's `tirx.PrimExpr` annotation
  dropped), `tilelang.layout` is `tilegcn.layout`; `torch.__getattribute__(str(dtypeC))` in `ref_program` (tilegcn's
  dtypes are not str, they carry torch's names);
- the `@autotune` sweep over `get_configs()` is left out (tilegcn's autotuner ranks with its timing model);
  `get_configs()` stays for reference;
- `kernel.get_profiler()` and its `assert_allclose(ref_program, rtol=1e-2, atol=1e-2)` are a call on CPU tensors
  (the emulated device) drawn as the profiler draws integer inputs, and `torch.testing.assert_close` with those
  tolerances; no latency (`profiler.do_bench`: tilegcn's timing model is bench/); `main()`'s defaults are smaller
  (the emulated device is slow); `run_regression_perf` (a CUDA profiler backend) is left out.

The kernel bodies are TileLang's, line for line; arch-neutral, they run on gfx942 and gfx950.
"""
import argparse
import itertools

import torch

import tilegcn
from tilegcn import language as T


def _tir_u8_to_i4_to_i8(nbit: int, val, pos, dtype: str):
    assert nbit == 4
    assert dtype == T.int8
    assert val.dtype == T.uint8

    mask = T.const((1 << nbit) - 1, T.uint8)

    i4 = (val >> (pos.astype(T.uint8) * T.const(nbit, T.uint8))) & mask

    i8_shifted = T.reinterpret(T.int8, i4 << T.const(4, T.uint8))
    i8 = i8_shifted >> T.const(4, T.int8)
    return i8


def get_configs():
    iter_params = dict(
        block_M=[64, 128],
        block_N=[64, 128],
        block_K=[128, 256],
        num_stages=[1, 2],
        threads=[128, 256, 512],
    )
    return [dict(zip(iter_params, values)) for values in itertools.product(*iter_params.values())]


@tilegcn.jit(out_idx=[1])
def _convert_test(N, K, block_N, block_K, in_dtype, num_bits=4, threads=128):
    num_elems_per_byte = 8 // num_bits
    storage_dtype = T.uint8
    B_shape = (N, K // num_elems_per_byte)
    B_shared_shape = (block_N, block_K // num_elems_per_byte)
    B_dequantize_shared_shape = (block_N, block_K)

    @T.prim_func
    def main(
        B: T.Tensor(B_shape, storage_dtype),
        C: T.Tensor((N, K), in_dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_N), threads=threads) as (bx):
            B_shared = T.alloc_shared(B_shared_shape, storage_dtype)
            B_local = T.alloc_fragment(B_shared_shape, storage_dtype)
            B_dequantize_local = T.alloc_fragment(B_dequantize_shared_shape, in_dtype)

            for k in T.Pipelined(0, T.ceildiv(K, block_K), num_stages=1):
                T.copy(B[bx * block_N, k * block_K // num_elems_per_byte], B_shared)
                T.copy(B_shared, B_local)
                for i, j in T.Parallel(block_N, block_K):
                    B_dequantize_local[i, j] = _tir_u8_to_i4_to_i8(
                        num_bits,
                        B_local[i, j // num_elems_per_byte],
                        j % num_elems_per_byte,
                        dtype=in_dtype,
                    )
                T.copy(B_dequantize_local, C[bx * block_N, k * block_K])

    return main


def torch_convert(tensor):
    assert tensor.dim() == 2 and tensor.dtype == torch.uint8
    N, K = tensor.shape

    i4 = torch.stack((tensor & 0x0F, tensor >> 4), dim=-1)
    i4 = i4.reshape(N, K * 2).to(torch.int8)
    return (i4 << 4) >> 4


def ref_program(A, qB):
    dtypeC = T.int32
    B = torch_convert(qB)
    C = torch.matmul(A.to(torch.float), B.T.to(torch.float))
    C = C.to(torch.__getattribute__(str(dtypeC)))
    return C.transpose(0, 1)


@tilegcn.jit(out_idx=[2])
def matmul_int8xint4(
    M,
    N,
    K,
    in_dtype,
    out_dtype,
    accum_dtype,
    num_bits=4,
    block_M=32,
    block_N=32,
    block_K=128,
    num_stages=1,
    threads=128,
):
    num_elems_per_byte = 8 // num_bits
    storage_dtype = T.uint8
    A_shape = (M, K)
    B_shape = (N, K // num_elems_per_byte)
    A_shared_shape = (block_M, block_K)
    B_shared_shape = (block_N, block_K // num_elems_per_byte)
    B_dequantize_local_shape = (block_N, block_K)

    assert K % (block_K) == 0

    @T.prim_func
    def main(
        A: T.Tensor(A_shape, in_dtype),
        B: T.Tensor(B_shape, storage_dtype),
        Ct: T.Tensor((N, M), out_dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared(A_shared_shape, in_dtype)
            B_shared = T.alloc_shared(B_shared_shape, storage_dtype)
            B_local = T.alloc_fragment(B_shared_shape, storage_dtype)
            B_dequantize_local = T.alloc_fragment(B_dequantize_local_shape, in_dtype)
            B_dequantize_prev_local = T.alloc_fragment(B_dequantize_local_shape, in_dtype)
            Ct_local = T.alloc_fragment((block_N, block_M), accum_dtype)
            Ct_shared = T.alloc_shared((block_N, block_M), out_dtype)

            T.annotate_layout(
                {
                    B_shared: tilegcn.layout.make_swizzled_layout(B_shared),
                }
            )

            T.clear(Ct_local)
            for k in T.Pipelined(K // block_K, num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[bx * block_N, k * block_K // num_elems_per_byte], B_shared)
                T.copy(B_shared, B_local)
                for i, j in T.Parallel(block_N, block_K):
                    B_dequantize_local[i, j] = _tir_u8_to_i4_to_i8(
                        num_bits,
                        B_local[i, j // num_elems_per_byte],
                        j % num_elems_per_byte,
                        dtype=in_dtype,
                    )
                T.copy(B_dequantize_local, B_dequantize_prev_local)
                T.gemm(B_dequantize_prev_local, A_shared, Ct_local, transpose_B=True)
            T.copy(Ct_local, Ct_shared)
            T.copy(Ct_shared, Ct[bx * block_N : (bx + 1) * block_N, by * block_M : (by + 1) * block_M])

    return main


def main(m=128, n=128, k=256, tune=False):
    total_flops = 2 * m * n * k
    if not tune:
        kernel = matmul_int8xint4(
            m,
            n,
            k,
            T.int8,
            T.int32,
            T.int32,
            num_bits=4,
            block_M=32,
            block_N=32,
            block_K=128,
            num_stages=1,
            threads=128,
        )
        A = torch.randint(-2, 3, (m, k), dtype=torch.int8)
        qB = torch.randint(0, 3, (n, k // 2), dtype=torch.uint8)
        torch.testing.assert_close(kernel(A, qB), ref_program(A, qB), rtol=1e-2, atol=1e-2)
        print("All checks pass.")

    else:
        raise NotImplementedError("tune=True needs upstream's @autotune sweep, which this port leaves out")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", type=int, default=128, help="Matrix dimension M")
    parser.add_argument("--n", type=int, default=128, help="Matrix dimension N")
    parser.add_argument("--k", type=int, default=256, help="Matrix dimension K")
    parser.add_argument("--tune", action="store_true", help="Enable tuning")
    args = parser.parse_args()

    M, N, K = args.m, args.n, args.k
    main(M, N, K, args.tune)
