"""Flash attention forward in tilegcn (TileLang's GQA example, examples/tilelang/example_gqa_fwd_bshd.py), run on the
default device from the command line; `--check` compares with torch's scaled_dot_product_attention.

    python examples/attention/attention.py --check                     # 1 x 8 heads x 256 x 64, fp16, non-causal
    python examples/attention/attention.py --arch gfx942 --heads 8 --kv-heads 2 --seq 200 --dim 128 --causal --check

Q, K, V and the output are BSHD (batch, seq, heads, dim); `--kv-heads` below `--heads` is grouped-query attention
(each K/V head serves heads / kv-heads query heads). A ragged `--seq` (not a multiple of the tiles) is masked.

The tile (`--block-m` query rows x `--block-n` keys per step, `--threads`, `--stages`) defaults per arch to the best
of the configs upstream's autotune space offers by the timing model at issue 21's GQA shape, every loop trip
simulated (bench/attention_loop.py prints them all), two stages each (the next K/V tiles in flight during a step, Q
in registers): 256 x 64 over 512 threads, one workgroup of 8 waves a CU, on gfx950 (K/V by LDS DMA; non-causal
1,312 TFLOP/s against 1,201 for 128 x 64 over 256 threads, causal 1,112 against 1,040) and on gfx942
(register-staged loads).
"""
import argparse
import pathlib
import sys
import time

import torch
import torch.nn.functional as F

from tilegcn.jit import resolve_arch
from tilegcn.runtime import device_name

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tilelang"))
import example_gqa_fwd_bshd  # noqa: E402  (the ported TileLang kernel)

# (block_M, block_N, threads, num_stages) per arch: the timing model's best (module docstring)
BEST = {"gfx950": (256, 64, 512, 2), "gfx942": (256, 64, 512, 2)}


def reference(q, k, v, causal):
    """torch's attention on fp32 copies, K/V heads repeated for grouped-query attention; BSHD in and out."""
    groups = q.size(2) // k.size(2)
    bhsd = [x.float().transpose(1, 2).repeat_interleave(groups if x is not q else 1, dim=1) for x in (q, k, v)]
    return F.scaled_dot_product_attention(*bhsd, is_causal=causal).transpose(1, 2)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", default=None, help="gfx942 or gfx950 (default: TILEGCN_ARCH, the visible GPU, gfx950)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=8, help="query heads")
    p.add_argument("--kv-heads", type=int, default=None, help="K/V heads, dividing --heads (default: --heads, MHA)")
    p.add_argument("--seq", type=int, default=256, help="sequence length of Q and K/V")
    p.add_argument("--dim", type=int, default=64, help="head dimension")
    p.add_argument("--causal", action="store_true", help="causal mask (query i sees keys 0..i)")
    p.add_argument("--dtype", default="float16", choices=["float16"], help="Q, K, V and output dtype (the ported "
                   "kernel is TileLang's fp16 one)")
    p.add_argument("--check", action="store_true", help="compare with torch's scaled_dot_product_attention (fp32)")
    p.add_argument("--block-m", type=int, default=None, help="query rows per workgroup (default: per arch, BEST)")
    p.add_argument("--block-n", type=int, default=None, help="keys per KV step (default: per arch)")
    p.add_argument("--threads", type=int, default=None, help="threads per workgroup (default: per arch)")
    p.add_argument("--stages", type=int, default=None, help="T.Pipelined num_stages of the KV loop (default: per arch)")
    args = p.parse_args()
    arch = resolve_arch(args.arch)
    block_m, block_n, threads, stages = (given if given is not None else best for given, best in
                                         zip((args.block_m, args.block_n, args.threads, args.stages), BEST[arch]))
    kv_heads = args.kv_heads or args.heads
    if args.heads % kv_heads:
        p.error(f"--kv-heads {kv_heads} must divide --heads {args.heads}")
    groups = args.heads // kv_heads

    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    q = torch.randn(args.batch, args.seq, args.heads, args.dim, dtype=dtype)
    k, v = (torch.randn(args.batch, args.seq, kv_heads, args.dim, dtype=dtype) for _ in range(2))
    kernel = example_gqa_fwd_bshd.flashattn(args.batch, args.heads, args.seq, args.dim, args.causal, groups=groups,
                                            block_M=block_m, block_N=block_n, num_stages=stages, threads=threads)
    kind = "causal" if args.causal else "non-causal"
    print(f"tilegcn attention forward b={args.batch} heads={args.heads}/{kv_heads} seq={args.seq} d={args.dim} "
          f"{args.dtype} {kind} on the {device_name()} device ({arch}), tile {block_m}x{block_n}, {threads} threads, "
          f"{stages} stage(s)")

    start = time.perf_counter()
    out = kernel(q, k, v, arch=arch)
    print(f"compile + run: {time.perf_counter() - start:.2f} s")
    if args.check:
        ref = reference(q, k, v, args.causal)
        err = (out.float() - ref).abs().max().item()
        bound = 1e-2 + 1e-2 * ref.abs().max().item()  # upstream's rtol = atol = 0.01
        print(f"max |O - torch| = {err:.4g} (bound {bound:.3g})")
        if not torch.isfinite(out).all() or err > bound:
            raise SystemExit(f"FAIL: max error {err:.4g} > {bound:.3g} against torch")
        print(f"PASS: max error {err:.4g} <= {bound:.3g} against torch")


if __name__ == "__main__":
    main()
