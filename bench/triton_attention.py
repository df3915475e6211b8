"""Compile Triton 3.9's flash attention forward (its tutorial 06-fused-attention.py) for gfx942 and gfx950, for
bench/attention.py --triton.

Benchmark-only (Triton is never a tilegcn dependency; neither the tutorial's source nor the code objects are
committed). Run it with the Triton environment, which compiles for AMD targets without a GPU:

    /work/venvs/triton/bin/python bench/triton_attention.py --tutorial PATH/06-fused-attention.py --out /tmp/triton_attn

PATH: triton-lang/triton's python/tutorials, the tensor-descriptor version of the tutorial that Triton 3.9 compiles
(the older block-pointer version stops at `tl.make_block_ptr`: "Block pointers have been removed"). The tutorial's
module body asks the active GPU driver for a device, so the file is not imported: its forward kernels
(`_attn_fwd_inner`, `_maybe_make_tensor_desc`, `_attn_fwd`), its autotune `configs` with the `NUM_STAGES_OPTIONS`
block before them, and its `keep` and `prune_invalid_configs` filters are taken from the file's syntax tree and run
as written, with `is_hip()` answering True and `is_cuda()` False: the configs the tutorial tunes over on AMD GPUs
(BLOCK_M 64 / 128, BLOCK_N 32 / 64 / 128, num_stages 1, num_warps 4 / 8; causal launches drop BLOCK_M < BLOCK_N).
`@triton.autotune` is left off: every config is compiled, and bench/attention.py picks the best by the timing
model, as the autotuner would by measurement.

The launch is the tutorial's `_attention.forward` on AMD: Q, K, V, Out (Z, H, N_CTX, HEAD_DIM) fp16 contiguous
passed as plain pointers (no host descriptors on HIP; the kernel makes device-side ones), M (Z, H, N_CTX) fp32,
grid (N_CTX / BLOCK_M, Z * H), STAGE 3 causal / 1 not, `waves_per_eu` 2 (HEAD_DIM 128) as its forward sets it for
HIP. Its forward also sets `allow_flush_denorm` on HIP; that is left off (`--allow-flush-denorm` puts it back):
with it the descriptor flushes f32 denormals and LLVM brackets each f32 division of the epilogue with
`s_setreg_imm32_b32 hwreg(HW_REG_MODE, 4, 2)` (denormals on, then off again), which the emulated device refuses
(it runs a kernel in its descriptor's denormal mode), so bench/attention.py could not check the object against
torch. Without it the code is the same up to the epilogue (gfx950, 128x64, 4 warps: the first differing line is the
epilogue's log2 of l_i; 1484 instead of 1605 instructions, 128 of those the s_setreg brackets, and log2 gains its
range scaling). The pointers and N_CTX are marked divisible by 16, as Triton's launcher
specialises them for the bench's shapes; Z and H are left unmarked so one object serves every batch and head count.
HEAD_DIM 128, fp16. Writes NAME.ARCH.hsaco and manifest.json ({file: kernel, arch, BLOCK_M, BLOCK_N, num_warps,
num_stages, causal, head_dim, waves_per_eu, allow_flush_denorm, block, shared_mem, compiler,
source}).
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import sys

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

ARCHES = ("gfx942", "gfx950")
HEAD_DIM = 128
KERNEL_FUNCTIONS = ("_attn_fwd_inner", "_maybe_make_tensor_desc", "_attn_fwd")
HOST_FUNCTIONS = ("keep", "prune_invalid_configs", "_host_descriptor_pre_hook")
WAVES_PER_EU = 2  # the tutorial's forward on HIP: 3 if HEAD_DIM <= 64 else 2


class _NoHostDescriptor:
    """Stands in for triton.tools.tensor_descriptor.TensorDescriptor in the pre-hook: HIP passes plain pointers."""


def _wanted(node):
    if isinstance(node, ast.FunctionDef):
        return node.name in KERNEL_FUNCTIONS + HOST_FUNCTIONS
    if isinstance(node, ast.Assign):
        return any(getattr(t, "id", None) in ("configs", "NUM_STAGES_OPTIONS") for t in node.targets)
    # the `if is_hip(): NUM_STAGES_OPTIONS = [1] ...` block (not the PYTEST_VERSION one)
    return isinstance(node, ast.If) and "NUM_STAGES_OPTIONS" in ast.unparse(node) and "PYTEST" not in ast.unparse(node)


def load_tutorial(path):
    """{name: object} for the tutorial's forward kernels, configs and filters, run from its syntax tree (its module
    body needs a GPU driver) in a namespace whose `is_hip()` says True and `is_cuda()` False."""
    tree = ast.parse(open(path).read(), filename=path)
    wanted = [node for node in tree.body if _wanted(node)]
    for node in wanted:
        if isinstance(node, ast.FunctionDef):
            # the autotuner wraps _attn_fwd for launches; compiling one config at a time needs the bare kernel
            node.decorator_list = [d for d in node.decorator_list if "autotune" not in ast.unparse(d)]
    namespace = {"triton": triton, "tl": tl, "os": os, "is_hip": lambda: True, "is_cuda": lambda: False,
                 "supports_host_descriptor": lambda: False, "TensorDescriptor": _NoHostDescriptor,
                 "__name__": "fused_attention_tutorial"}
    # @triton.jit reads each function's source through `inspect`: the code keeps the real file's name and lines
    exec(compile(ast.Module(body=wanted, type_ignores=[]), path, "exec"), namespace)
    missing = [n for n in KERNEL_FUNCTIONS + ("keep", "prune_invalid_configs", "configs") if n not in namespace]
    if missing:
        raise SystemExit(f"{path}: no {', '.join(missing)} (not the tutorial's tensor-descriptor forward kernels?)")
    return namespace


def launch_configs(tutorial, causal):
    """The tutorial's AMD configs its `keep` and `prune_invalid_configs` leave for a 16384-token launch."""
    kept = [c for c in tutorial["configs"] if tutorial["keep"](c)]
    return tutorial["prune_invalid_configs"](kept, {}, N_CTX=16384, STAGE=3 if causal else 1)


def signature():
    """(signature, divisibility attributes) of `_attn_fwd`'s runtime arguments."""
    names = ["sm_scale", "M", "Z", "H", "desc_q", "desc_k", "desc_v", "desc_o", "N_CTX"]
    types = {"sm_scale": "fp32", "M": "*fp32", "Z": "i32", "H": "i32", "N_CTX": "i32"}
    sig = {n: types.get(n, "*fp16") for n in names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if n not in ("sm_scale", "Z", "H")}
    return sig, attrs


def compile_one(kernel, config, causal, arch, flush_denorm=False):
    sig, attrs = signature()
    consts = dict(HEAD_DIM=HEAD_DIM, FP8_OUTPUT=False, STAGE=3 if causal else 1, warp_specialize=False,
                  IS_HOPPER=False, **config.kwargs)
    sig = dict(sig, **{k: "constexpr" for k in consts})
    src = ASTSource(kernel, signature=sig, constexprs=consts, attrs=attrs)
    options = {"num_warps": config.num_warps, "num_stages": config.num_stages, "waves_per_eu": WAVES_PER_EU}
    if flush_denorm:
        options["allow_flush_denorm"] = True
    return triton.compile(src, target=GPUTarget("hip", arch, 64), options=options)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tutorial", required=True, help="triton-lang/triton's python/tutorials/06-fused-attention.py")
    ap.add_argument("--out", required=True)
    ap.add_argument("--source", default="triton-lang/triton", help="what the manifest says the tutorial is")
    ap.add_argument("--allow-flush-denorm", action="store_true",
                    help="as the tutorial launches on HIP (the emulated device cannot run these objects)")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    tutorial = load_tutorial(args.tutorial)
    manifest = {}
    for arch in ARCHES:
        for causal in (False, True):
            for config in launch_configs(tutorial, causal):
                bm, bn = config.kwargs["BLOCK_M"], config.kwargs["BLOCK_N"]
                stem = f"attn_fwd_{bm}x{bn}_w{config.num_warps}_s{config.num_stages}_{'causal' if causal else 'full'}"
                try:
                    k = compile_one(tutorial["_attn_fwd"], config, causal, arch, args.allow_flush_denorm)
                except Exception as exc:  # one config that does not compile must not stop the others
                    print(f"FAILED {stem}.{arch}: {type(exc).__name__}: {str(exc)[:300]}", file=sys.stderr)
                    continue
                file = f"{stem}.{arch}.hsaco"
                with open(os.path.join(args.out, file), "wb") as f:
                    f.write(k.asm["hsaco"])
                manifest[file] = dict(kernel=k.name, arch=arch, BLOCK_M=bm, BLOCK_N=bn, num_warps=config.num_warps,
                                      num_stages=config.num_stages, causal=causal, head_dim=HEAD_DIM,
                                      waves_per_eu=WAVES_PER_EU, allow_flush_denorm=args.allow_flush_denorm,
                                      block=[64 * config.num_warps, 1, 1], shared_mem=k.metadata.shared,
                                      compiler=f"triton {triton.__version__}",
                                      source=f"{args.source} python/tutorials/06-fused-attention.py")
                print(f"built {file}: {k.metadata.shared} B LDS")
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
