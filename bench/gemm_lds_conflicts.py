"""LDS traffic and bank conflicts of T.gemm (tests/kernels.py `gemm`, bf16) on the emulated device.

    python bench/gemm_lds_conflicts.py [--size 256] [--stages 1,2] [--strict]

For each arch, tile config and num_stages (pipelined loops copy by LDS DMA on gfx950, and at num_stages=2 a
256x256x64 tile runs in K phases of 32: passes/pipelining.py), with B given as (K, N) and as (N, K)
(transpose_B=True): one launch of an
M = N = K = --size GEMM on the emulator (TILEGCN_DEVICE=emulator), then, from its LaunchStats, the counts of
ds_read_b128, of ds_read_b64_tr_b16 (gfx950, B as (K, N)) and of ds_write_* (wave-instructions), the extra cycles
the emulator's bank model charges them (tilegcn/runtime/emulator/stats.py: per phase of lanes, distinct dwords in
the busiest bank - 1; the phases of Arch.lds_phases, gfx950's ds_read_b128 in those HipKittens measured), the MFMA count, and the max error against torch (fp32 reference, bf16 output). Target: 0
ds_read conflict cycles (the XOR swizzles of the K-major LDS tiles and of gfx950's (K, N) tiles); ds_write_b16
(gfx942's transposing copy of B as (K, N)) is reported, not targeted.
The emulator's hazard / race checks are on, so every row is also a hazard-free run.
--strict: exit 1 when a ds_read conflicts or a result is wrong (nothing timed is checked).
"""
from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]
os.environ["TILEGCN_DEVICE"] = "emulator"

import torch  # noqa: E402

import kernels  # noqa: E402  (tests/kernels.py: the tile programs the tests use)
from tilegcn.errors import ResourceError, TilegcnError  # noqa: E402

# (block_M, block_N, block_K, threads); the last one only where LDS fits (gfx950: 160 KiB)
CONFIGS = [(64, 64, 32, 256), (128, 128, 64, 256), (256, 256, 64, 256), (256, 256, 64, 512), (256, 256, 128, 256)]
ARCHES = ("gfx942", "gfx950")


def run(arch, cfg, transpose_B, size, stages):
    bm, bn, bk, threads = cfg
    g = torch.Generator().manual_seed(0)
    A = torch.randn(size, size, generator=g).to(torch.bfloat16)
    B = torch.randn(size, size, generator=g).to(torch.bfloat16)  # (N, K) when transpose_B, else (K, N)
    C = torch.full((size, size), float("nan"), dtype=torch.bfloat16)
    stats = kernels.gemm(A, B, C, arch=arch, block_M=bm, block_N=bn, block_K=bk, threads=threads,
                         transpose_B=transpose_B, num_stages=stages)
    ref = A.float() @ (B.float().T if transpose_B else B.float())
    err = (C.float() - ref).abs().max().item()  # NaN when an output was not written
    by, conf = stats.by_mnemonic, stats.lds_bank_conflicts_by_mnemonic

    def total(d, prefix):
        return sum(v for k, v in d.items() if k.startswith(prefix))

    return dict(reads=by.get("ds_read_b128", 0), tr_reads=by.get("ds_read_b64_tr_b16", 0),
                read_conf=total(conf, "ds_read"), writes=total(by, "ds_write"),
                write_conf=total(conf, "ds_write"), mfma=total(by, "v_mfma"), err=err,
                ok=err <= 2 ** -7 * ref.abs().max().item(), seconds=stats.seconds)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=256, help="M = N = K (default 256)")
    ap.add_argument("--stages", default="1,2", help="num_stages values, comma-separated (default 1,2)")
    ap.add_argument("--strict", action="store_true", help="exit 1 if a ds_read conflicts or a result is wrong")
    args = ap.parse_args()
    print(f"reproduce: python bench/gemm_lds_conflicts.py --size {args.size} --stages {args.stages}   (from {REPO})")
    print(f"gemm bf16, M = N = K = {args.size}, emulated device; conflicts = extra LDS cycles (bank model)\n")
    head = (f"{'arch':7} {'tile':12} {'thr':>4} {'S':>2} {'B':7} {'ds_read_b128':>12} {'tr_b16':>7} {'read conf':>9} "
            f"{'ds_write':>9} {'write conf':>10} {'MFMA':>6} {'max err':>8} {'emu s':>6}")
    print(head)
    print("-" * len(head))
    failures = []
    t0 = time.perf_counter()
    for arch in ARCHES:
        for cfg, stages, transpose_B in itertools.product(CONFIGS, map(int, args.stages.split(",")), (False, True)):
            tile = "x".join(map(str, cfg[:3]))
            layout = "(N, K)" if transpose_B else "(K, N)"
            row = f"{arch:7} {tile:12} {cfg[3]:>4} {stages:>2} {layout:7}"
            try:
                r = run(arch, cfg, transpose_B, args.size, stages)
            except TilegcnError as e:
                msg = e.raw_message if hasattr(e, "raw_message") else str(e)
                print(f"{row} {type(e).__name__}: {msg.split(f'does not fit {arch}: ')[-1][:100]}")
                if not isinstance(e, ResourceError):  # a config that does not fit (LDS, registers) is expected
                    failures.append(f"{row}: {type(e).__name__}: {msg}")
                continue
            print(f"{row} {r['reads']:>12} {r['tr_reads']:>7} {r['read_conf']:>9} {r['writes']:>9} "
                  f"{r['write_conf']:>10} {r['mfma']:>6} {r['err']:>8.3g} {r['seconds']:>6.2f}")
            if r["read_conf"] or not r["ok"]:
                failures.append(f"{row}: {r['read_conf']} ds_read conflict cycles, max err {r['err']}")
    print(f"\ntotal {time.perf_counter() - t0:.1f} s")
    print("target (0 ds_read conflict cycles, correct results): " + ("met" if not failures else "MISSED"))
    for f in failures:
        print("  " + f)
    if failures and args.strict:
        sys.exit(1)


if __name__ == "__main__":
    main()
