"""fp8 GEMM for AMD GPUs, ported from TileLang: examples/gemm_fp8/example_tilelang_gemm_amd.py at tile-ai/tilelang
commit a35008a42531c62b976ae4cec3855d4383db0f3c.

Mechanical changes only:
- imports: `tilegcn` and `from tilegcn import language as T`; `@tilegcn.jit(out_idx=[-1])` for `@tilelang.jit`;
  `torch.testing.assert_close` for TileLang's `torch_assert_close` (the same tolerances);
- `determine_fp8_type` / `determine_torch_fp8_type` (tilelang.language.fp8) pick the fp8 encoding of the visible GPU
  (FNUZ, OCP on gfx950); here the target arch picks it the same way, the arch tilegcn compiles for
  (`tilegcn.jit.resolve_arch`: $TILEGCN_ARCH, the visible GPU, else the default);
- the `@tilelang.autotune` sweep over `get_configs()` is left out (tilegcn's autotuner ranks with its timing model
  and takes no `supply_prog` / `manual_check_prog`): `fp8_matmul` takes one config, `get_configs()` and the
  autotuner's check functions stay for reference; CPU tensors on the emulated device in `main()`.

The kernel bodies are TileLang's, line for line. `gemm_fp8_rs` (A in registers) needs T.gemm with a fragment
operand (issue 21); `gemm_fp8_ss` runs on both arches.
"""
import itertools

import torch

import tilegcn
from tilegcn import language as T
from tilegcn.jit import resolve_arch


def determine_fp8_type(fp8_format="e4m3"):
    """TileLang's rule: the OCP formats on gfx950, FNUZ on the other AMD arches; by the target arch here."""
    if fp8_format not in {"e4m3", "e5m2"}:
        raise ValueError(f"Unsupported FP8 format: {fp8_format}")
    if resolve_arch().startswith("gfx950"):
        return T.float8_e4m3fn if fp8_format == "e4m3" else T.float8_e5m2
    return T.float8_e4m3fnuz if fp8_format == "e4m3" else T.float8_e5m2fnuz


def determine_torch_fp8_type(fp8_format="e4m3"):
    return getattr(torch, str(determine_fp8_type(fp8_format)))


def ref_program(A, B):
    return (A.half() @ B.half().T).to(dtype=torch.float32)


def manual_check_prog(C, C_ref):
    torch.testing.assert_close(C[0], C_ref[0], rtol=0.01, atol=0.1)


def supply_prog(args):
    a_param, b_param = args
    M, K = a_param.shape
    N, _ = b_param.shape
    fp8_dtype = determine_torch_fp8_type()
    a = (torch.randn(M, K, dtype=torch.float16) * 0.01).to(dtype=fp8_dtype)
    b = (torch.randn(N, K, dtype=torch.float16) * 0.01).to(dtype=fp8_dtype)
    return [a, b]


def get_configs():
    block_Ms = [32, 64, 128]
    block_Ns = [32, 64, 128]
    block_Ks = [64, 128]
    num_stages = [0]
    num_threads = [256]
    k_packs = [1, 2]
    gemm_types = ["ss", "rs"]

    valid_configs = []

    for m, n, k, stages, t, kp, gemm_type in itertools.product(block_Ms, block_Ns, block_Ks, num_stages, num_threads,
                                                                k_packs, gemm_types):
        valid_configs.append(
            {
                "block_M": m,
                "block_N": n,
                "block_K": k,
                "num_stages": stages,
                "num_threads": t,
                "k_pack": kp,
                "gemm_type": gemm_type,
            }
        )
    return valid_configs


@tilegcn.jit(out_idx=[-1])
def fp8_matmul(M, N, K, block_M, block_N, block_K, num_stages, num_threads, k_pack, gemm_type):
    dtype = determine_fp8_type()
    accum_dtype = T.float32

    @T.prim_func
    def gemm_fp8_rs(
        A: T.Tensor((M, K), dtype),
        B: T.Tensor((N, K), dtype),
        C: T.Tensor((M, N), accum_dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=num_threads) as (bx, by):
            A_local = T.alloc_fragment((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_N, block_K), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)

            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_local)
                T.copy(B[bx * block_N, k * block_K], B_shared)
                T.gemm(A_local, B_shared, C_local, transpose_B=True, k_pack=k_pack, policy=T.GemmWarpPolicy.FullRow)

            T.copy(C_local, C[by * block_M, bx * block_N])

    @T.prim_func
    def gemm_fp8_ss(
        A: T.Tensor((M, K), dtype),
        B: T.Tensor((N, K), dtype),
        C: T.Tensor((M, N), accum_dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=num_threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_N, block_K), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)

            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[bx * block_N, k * block_K], B_shared)
                T.gemm(A_shared, B_shared, C_local, transpose_B=True, k_pack=k_pack, policy=T.GemmWarpPolicy.FullRow)

            T.copy(C_local, C[by * block_M, bx * block_N])

    if gemm_type == "ss":
        return gemm_fp8_ss
    elif gemm_type == "rs":
        return gemm_fp8_rs
    else:
        raise ValueError(f"Invalid gemm_type: {gemm_type}")


def test_gemm_fp8(M, N, K, **config):
    kernel = fp8_matmul(M, N, K, **config)
    fp8_dtype = determine_torch_fp8_type()
    a = (torch.randn(M, K, dtype=torch.float16) * 0.01).to(dtype=fp8_dtype)
    b = (torch.randn(N, K, dtype=torch.float16) * 0.01).to(dtype=fp8_dtype)
    c = kernel(a, b)
    ref_c = ref_program(a, b)
    torch.testing.assert_close(c, ref_c, rtol=1e-2, atol=1e-2)
    print("passed~")


if __name__ == "__main__":
    test_gemm_fp8(128, 128, 256, block_M=64, block_N=64, block_K=128, num_stages=0, num_threads=256, k_pack=1,
                  gemm_type="ss")
