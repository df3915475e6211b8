"""TileLang's flash decoding (examples/tilelang/example_mha_inference.py: one program, a split-KV kernel and a combine
kernel launched in order) by the timing model at upstream main()'s shape (batch 1, 32 heads, 128 queries, 8192 keys,
head dim 128, num_split 4, block_N 64) and upstream's block_M 128 (the combine kernel's emitted order needs 276 VGPRs;
the register allocator's last resort, amdgcn/pressure.py, fits it in 238), then block_M 64 for comparison:

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

BATCH, HEADS, Q_CTX, KV_CTX, D_HEAD, BLOCK_N = 1, 32, 128, 8192, 128, 64
BLOCK_MS = (128, 64)  # upstream's first


def main():
    flops = 2 * 2.0 * BATCH * HEADS * Q_CTX * KV_CTX * D_HEAD
    q = torch.zeros(BATCH, Q_CTX, HEADS, D_HEAD, dtype=torch.float16)
    kv = torch.zeros(BATCH, KV_CTX, HEADS, D_HEAD, dtype=torch.float16)
    for block_m in BLOCK_MS:
        program = example_mha_inference.flashattn(BATCH, HEADS, Q_CTX, KV_CTX, D_HEAD, False, block_m, BLOCK_N)
        for arch in ("gfx942", "gfx950"):
            compiled = program.compile(q, kv, kv, arch=arch)
            est = compiled.estimate(flops=flops)
            launches = " + ".join(f"{e.kernel} {e.seconds * 1e6:.1f} us" for e in est.launches)
            vgprs = "/".join(str(k["vgprs"]) for k in compiled.metadata["kernels"])
            print(f"block_M {block_m} {arch} ({est.device}, VGPRs {vgprs}): {launches} = {est.seconds * 1e6:.1f} us, "
                  f"{est.tflops:.1f} TFLOP/s")


if __name__ == "__main__":
    main()
