"""Per-token (per 128-element group) cast to fp8, ported from TileLang: examples/cast/example_per_token_cast_to_fp8.py
at tile-ai/tilelang commit a35008a42531c62b976ae4cec3855d4383db0f3c.

Mechanical changes only:
- imports: `tilegcn` and `from tilegcn import language as T`; `@tilegcn.jit` for `@tilelang.jit`;
- `main()` checks against `ref_program` with CPU tensors on a smaller shape (the emulated device), with
  `torch.testing.assert_close` for TileLang's `torch_assert_close` (the same tolerances); the benchmarks against
  torch and Triton (`do_bench`, `example_triton_cast_to_fp8`) and `run_regression_perf` are left out.

The kernel body is TileLang's, line for line. It writes `T.float8_e4m3fn`, the OCP format that gfx950 (MI355X) has;
gfx942 (MI300X) has the FNUZ formats only, so there tilegcn refuses it, naming `float8_e4m3fnuz` (TileLang's HIP
backend maps its `float8_e4m3` to `torch.float8_e4m3fnuz` for the same reason).
"""
from typing import Tuple

import torch

import tilegcn
from tilegcn import language as T


@tilegcn.jit
def per_token_cast_to_fp8(X, blk_m):
    M, N = T.const("M, N")
    dtype = T.float
    group_size = 128
    fp8_min = -448.0
    fp8_max = 448.0

    X: T.Tensor((M, N), dtype)
    X_fp8 = T.empty((M, N), T.float8_e4m3fn)
    X_amax = T.empty((M, T.ceildiv(N, group_size)), dtype)

    with T.Kernel(T.ceildiv(M, blk_m), T.ceildiv(N, group_size), threads=128) as (bx, by):
        row = bx
        row_g_id = by
        y_local = T.alloc_fragment((blk_m, group_size), dtype)
        y_amax_local = T.alloc_fragment((blk_m,), dtype)
        y_s_local = T.alloc_fragment((blk_m,), dtype)
        y_q_local = T.alloc_fragment((blk_m, group_size), dtype)
        y_q_local_fp8 = T.alloc_fragment((blk_m, group_size), T.float8_e4m3fn)

        T.copy(X[row * blk_m : (row + 1) * blk_m, row_g_id * group_size : (row_g_id + 1) * group_size], y_local)
        T.reduce_absmax(y_local, y_amax_local, dim=1)
        for i in T.Parallel(blk_m):
            y_amax_local[i] = T.max(y_amax_local[i], 1e-4)
            y_s_local[i] = y_amax_local[i] / fp8_max
        for i, j in T.Parallel(blk_m, group_size):
            y_q_local[i, j] = T.clamp(y_local[i, j] / y_s_local[i], fp8_min, fp8_max)
        T.copy(y_q_local, y_q_local_fp8)
        for i in T.Parallel(blk_m):
            X_amax[row * blk_m + i, row_g_id] = y_s_local[i]
        T.copy(y_q_local_fp8, X_fp8[row * blk_m : (row + 1) * blk_m, row_g_id * group_size : (row_g_id + 1) * group_size])

    return X_fp8, X_amax


def ceil_div(x: int, y: int) -> int:
    """
    Perform ceiling division of two integers.

    Args:
        x: the dividend.
        y: the divisor.

    Returns:
        The result of the ceiling division.
    """
    return (x + y - 1) // y


def ref_program(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    # this function don't support cpu tensor
    assert x.dim() == 2
    m, n = x.shape
    new_n = ceil_div(n, 128) * 128
    x_padded = torch.nn.functional.pad(x, (0, new_n - n))
    x_view = x_padded.view(m, -1, 128)
    x_amax = x_view.abs().float().amax(dim=2).view(m, -1).clamp(1e-4)
    x_fp8 = (x_view * (448.0 / x_amax.unsqueeze(2))).to(torch.float8_e4m3fn)
    x_fp8 = x_fp8.view(m, -1)[:, :n].contiguous()
    return x_fp8, (x_amax / 448.0).view(m, -1)


def main(M=64, N=384, blk_m=8, arch="gfx950"):
    x = torch.randn(M, N, dtype=torch.float32)

    x_fp8, x_amax = per_token_cast_to_fp8(x, blk_m, arch=arch)
    x_fp8_ref, x_amax_ref = ref_program(x)

    torch.testing.assert_close(x_fp8.to(torch.float32), x_fp8_ref.to(torch.float32), rtol=0.01, atol=0.01)
    torch.testing.assert_close(x_amax, x_amax_ref, rtol=0.01, atol=0.01)
    print("All checks pass.")


if __name__ == "__main__":
    main()
