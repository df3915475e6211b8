"""TileLang's flash decoding (examples/tilelang/example_mha_inference.py: one program, a split-KV kernel and a combine
kernel launched in order) by the timing model at upstream main()'s shape (batch 1, 32 heads, 128 queries, 8192 keys,
head dim 128, num_split 4, block_N 64), with block_M 64: upstream's 128 needs 276 VGPRs in the combine kernel at head
dim 128 (tilegcn never spills, so it refuses that config):

    PYTHONPATH=$PWD python bench/flash_decoding_estimate.py

Prints per arch each launch's model time, their sum (`CompiledKernel.estimate()` of a program of several T.Kernel
blocks sums its launches; launch gaps are not modelled) and TFLOP/s over upstream's FLOP count (4 * b * h * q * kv * d).
A port as TileLang writes it, not a tuned decoder."""
import pathlib
import sys

import torch

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "examples" / "tilelang"))

import example_mha_inference  # noqa: E402

BATCH, HEADS, Q_CTX, KV_CTX, D_HEAD, BLOCK_M, BLOCK_N = 1, 32, 128, 8192, 128, 64, 64


def main():
    flops = 2 * 2.0 * BATCH * HEADS * Q_CTX * KV_CTX * D_HEAD
    q = torch.zeros(BATCH, Q_CTX, HEADS, D_HEAD, dtype=torch.float16)
    kv = torch.zeros(BATCH, KV_CTX, HEADS, D_HEAD, dtype=torch.float16)
    program = example_mha_inference.flashattn(BATCH, HEADS, Q_CTX, KV_CTX, D_HEAD, False, BLOCK_M, BLOCK_N)
    for arch in ("gfx942", "gfx950"):
        est = program.compile(q, kv, kv, arch=arch).estimate(flops=flops)
        launches = " + ".join(f"{e.kernel} {e.seconds * 1e6:.1f} us" for e in est.launches)
        print(f"{arch} ({est.device}): {launches} = {est.seconds * 1e6:.1f} us, {est.tflops:.1f} TFLOP/s")


if __name__ == "__main__":
    main()
