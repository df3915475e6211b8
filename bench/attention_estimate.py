"""TileLang's flash attention forward ports (examples/tilelang/example_mha_fwd_bhsd.py, example_gqa_fwd_bshd.py,
example_amd_flash_attn_fwd.py) by the timing model, at upstream's main() configs (block 64 x 64, 128 threads; one stage
for BHSD, two for GQA; the AMD kernel's CDNA config with num_split_q = 32, one query tile per workgroup) on a 16-head,
2048-token problem (GQA: 4 KV heads), non-causal, head dims 64 and 128:

    PYTHONPATH=$PWD python bench/attention_estimate.py

Prints per arch and case how P reaches P @ V (kernel.ir's convert_layout: registers or an LDS scratch), the VGPRs, and
the model's TFLOP/s and limit (`CompiledKernel.estimate()`, docs/timing.md). These are the ports as TileLang writes
them, not a tuned attention (issue 21, build 3). Causal is left out: its workgroups run 1 to seq/block_N KV tiles, and
the model extrapolates the trips of the one workgroup it simulates (bx = 0: one tile), so it reports a fraction of
the FLOPs (5.4e8 of 8.6e9 for d=64) and a time that means nothing."""
import pathlib
import sys

import torch

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "examples" / "tilelang"))

import example_amd_flash_attn_fwd  # noqa: E402
import example_gqa_fwd_bshd  # noqa: E402
import example_mha_fwd_bhsd  # noqa: E402

BATCH, HEADS, SEQ = 1, 16, 2048


def _route(ir: str) -> str:
    line = next(line for line in ir.splitlines() if "convert_layout acc_s -> acc_s_cast" in line)
    return line.split(" via ")[1]


def _cases(dim: int, causal: bool):
    q = torch.zeros(BATCH, HEADS, SEQ, dim).half()
    yield ("mha_bhsd", example_mha_fwd_bhsd.flashattn(BATCH, HEADS, SEQ, SEQ, dim, causal, block_M=64, block_N=64,
                                                     num_stages=1, threads=128), (q, q, q))
    q = torch.zeros(BATCH, SEQ, HEADS, dim).half()
    kv = torch.zeros(BATCH, SEQ, HEADS // 4, dim).half()
    yield ("gqa_bshd", example_gqa_fwd_bshd.flashattn(BATCH, HEADS, SEQ, dim, causal, groups=4, block_M=64,
                                                     block_N=64, num_stages=2, threads=128), (q, kv, kv))
    q = torch.zeros(BATCH, SEQ, HEADS, dim).half()
    config = dict(example_amd_flash_attn_fwd.CONFIG, num_split_q=SEQ // 64)
    yield ("amd_bshd", example_amd_flash_attn_fwd.fast_flashattn(BATCH, HEADS, SEQ, dim, causal, 1, **config),
           (q, q, q))


def main():
    for arch in ("gfx942", "gfx950"):
        for dim in (64, 128):
            for name, kernel, args in _cases(dim, causal=False):
                k = kernel.compile(*args, arch=arch)
                e = k.estimate()
                flops = 4 * BATCH * HEADS * SEQ * SEQ * dim
                limit = next(line for line in str(e).splitlines() if line.strip().startswith("limited by"))
                print(f"{arch} {name} d={dim}: P via {_route(k.ir)}, {k.metadata['vgprs']} VGPRs, "
                      f"{flops / e.seconds / 1e12:.1f} TFLOP/s ({limit.split(None, 2)[2]})")


if __name__ == "__main__":
    main()
