"""Instructions real compilers emit, on the emulated device: compile a broad set of Triton 3.9 kernels for
gfx942 and gfx950, list the mnemonics the emulator does not model, and run each kernel against torch.

    /work/venvs/triton/bin/python bench/triton_instructions.py --generate DIR   # needs Triton (separate venv)
    PYTHONPATH=$PWD python bench/triton_instructions.py DIR                       # tilegcn only

The second command prints, per code object, the unmodelled instructions (with counts) and for each kernel
the largest difference from torch. Triton passes LDS as dynamic shared memory; until the launch takes a
`shared_mem=` size this script gives kernels with no fixed LDS the arch's whole LDS.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import glob
import os
import sys
from pathlib import Path


def generate(out):
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget

    @triton.jit
    def add(x, y, z, n, B: tl.constexpr):
        o = tl.program_id(0)*B + tl.arange(0, B); m = o < n
        tl.store(z+o, tl.load(x+o, mask=m) + tl.load(y+o, mask=m), mask=m)
    @triton.jit
    def div(x, y, z, n, B: tl.constexpr):
        o = tl.program_id(0)*B + tl.arange(0, B); m = o < n
        tl.store(z+o, tl.load(x+o, mask=m) / tl.load(y+o, mask=m), mask=m)
    @triton.jit
    def idiv(x, y, z, w, n, B: tl.constexpr):
        o = tl.program_id(0)*B + tl.arange(0, B); m = o < n
        a = tl.load(x+o, mask=m); b = tl.load(y+o, mask=m, other=1)
        tl.store(z+o, a // b, mask=m); tl.store(w+o, a % b, mask=m)
    @triton.jit
    def softmax(x, y, n, stride, B: tl.constexpr):
        r = tl.program_id(0); c = tl.arange(0, B); m = c < n
        v = tl.load(x + r*stride + c, mask=m, other=-float('inf'))
        v = v - tl.max(v, 0); e = tl.exp(v); tl.store(y + r*stride + c, e / tl.sum(e, 0), mask=m)
    @triton.jit
    def layernorm(x, w, b, y, n, stride, eps, B: tl.constexpr):
        r = tl.program_id(0); c = tl.arange(0, B); m = c < n
        v = tl.load(x + r*stride + c, mask=m, other=0.).to(tl.float32)
        mean = tl.sum(v, 0) / n; d = tl.where(m, v - mean, 0.); var = tl.sum(d*d, 0)/n
        rs = 1/tl.sqrt(var + eps)
        out = d*rs*tl.load(w+c, mask=m) + tl.load(b+c, mask=m)
        tl.store(y + r*stride + c, out.to(y.dtype.element_ty), mask=m)
    @triton.jit
    def rmsnorm(x, w, y, n, stride, eps, B: tl.constexpr):
        r = tl.program_id(0); c = tl.arange(0, B); m = c < n
        v = tl.load(x + r*stride + c, mask=m, other=0.).to(tl.float32)
        rs = tl.rsqrt(tl.sum(v*v, 0)/n + eps)
        tl.store(y + r*stride + c, (v*rs*tl.load(w+c, mask=m).to(tl.float32)).to(y.dtype.element_ty), mask=m)
    @triton.jit
    def cvt(x, y, n, B: tl.constexpr):
        o = tl.program_id(0)*B + tl.arange(0, B); m = o < n
        tl.store(y+o, tl.load(x+o, mask=m).to(y.dtype.element_ty), mask=m)
    @triton.jit
    def atom(x, y, n, B: tl.constexpr):
        o = tl.program_id(0)*B + tl.arange(0, B); m = o < n
        tl.atomic_add(y + (o % 7), tl.load(x+o, mask=m), mask=m)
    @triton.jit
    def atommax(x, y, z, n, B: tl.constexpr):
        o = tl.program_id(0)*B + tl.arange(0, B); m = o < n
        old = tl.atomic_max(y + (o%5), tl.load(x+o, mask=m), mask=m); tl.store(z+o, old, mask=m)
    @triton.jit
    def matmul(a, b, c, M, N, K, sam, sbk, scm, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pm = tl.program_id(0); pn = tl.program_id(1)
        rm = pm*BM + tl.arange(0, BM); rn = pn*BN + tl.arange(0, BN); rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), tl.float32)
        for k in range(0, K, BK):
            A = tl.load(a + rm[:, None]*sam + (k+rk)[None, :], mask=(rm[:, None] < M) & ((k+rk)[None, :] < K), other=0.)
            Bt = tl.load(b + (k+rk)[:, None]*sbk + rn[None, :], mask=((k+rk)[:, None] < K) & (rn[None, :] < N), other=0.)
            acc += tl.dot(A, Bt)
        tl.store(c + rm[:, None]*scm + rn[None, :], acc.to(c.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))
    @triton.jit
    def attn(q, k, v, o, L, sd, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
        pm = tl.program_id(0); rm = pm*BM + tl.arange(0, BM); rd = tl.arange(0, D)
        Q = tl.load(q + rm[:, None]*sd + rd[None, :])
        mi = tl.full((BM,), -float('inf'), tl.float32); li = tl.zeros((BM,), tl.float32); acc = tl.zeros((BM, D), tl.float32)
        for s in range(0, L, BN):
            rn = s + tl.arange(0, BN)
            Kt = tl.load(k + rn[None, :]*sd + rd[:, None]); S = tl.dot(Q, Kt) * 0.125
            mn = tl.maximum(mi, tl.max(S, 1)); p = tl.exp(S - mn[:, None]); al = tl.exp(mi - mn)
            li = li*al + tl.sum(p, 1); V = tl.load(v + rn[:, None]*sd + rd[None, :])
            acc = acc*al[:, None] + tl.dot(p.to(V.dtype), V); mi = mn
        tl.store(o + rm[:, None]*sd + rd[None, :], (acc / li[:, None]).to(o.dtype.element_ty))
    @triton.jit
    def intops(x, y, z, n, B: tl.constexpr):
        o = tl.program_id(0)*B + tl.arange(0, B); m = o < n
        a = tl.load(x+o, mask=m); b = tl.load(y+o, mask=m)
        r = (a * b) ^ (a >> 3) + tl.maximum(a, b) - (a.to(tl.int64) * b.to(tl.int64) >> 7).to(tl.int32)
        tl.store(z+o, r, mask=m)
    @triton.jit
    def cumsum(x, y, n, B: tl.constexpr):
        c = tl.arange(0, B); m = c < n
        tl.store(y + c, tl.cumsum(tl.load(x+c, mask=m, other=0.), 0), mask=m)
    @triton.jit
    def argmax(x, y, n, B: tl.constexpr):
        r = tl.program_id(0); c = tl.arange(0, B); m = c < n
        tl.store(y + r, tl.argmax(tl.load(x+r*n+c, mask=m, other=-float('inf')), 0))
    @triton.jit
    def mathf(x, y, n, B: tl.constexpr):
        o = tl.program_id(0)*B + tl.arange(0, B); m = o < n
        v = tl.load(x+o, mask=m)
        tl.store(y+o, tl.sin(v) + tl.cos(v) + tl.log(tl.abs(v)+1) + tl.sigmoid(v) + tl.math.erf(v) + tl.sqrt_rn(tl.abs(v)) + tl.div_rn(v, 3.0), mask=m)
    @triton.jit
    def f16math(x, y, n, B: tl.constexpr):
        o = tl.program_id(0)*B + tl.arange(0, B); m = o < n
        v = tl.load(x+o, mask=m)
        tl.store(y+o, tl.maximum(v * v + v, 0.5 * v), mask=m)

    K = [
      ("add_f32", add, {"x":"*fp32","y":"*fp32","z":"*fp32","n":"i32"}, {"B":256}),
      ("add_f16", add, {"x":"*fp16","y":"*fp16","z":"*fp16","n":"i32"}, {"B":512}),
      ("add_i64", add, {"x":"*i64","y":"*i64","z":"*i64","n":"i32"}, {"B":256}),
      ("div_f32", div, {"x":"*fp32","y":"*fp32","z":"*fp32","n":"i32"}, {"B":256}),
      ("idiv_i32", idiv, {"x":"*i32","y":"*i32","z":"*i32","w":"*i32","n":"i32"}, {"B":256}),
      ("idiv_i64", idiv, {"x":"*i64","y":"*i64","z":"*i64","w":"*i64","n":"i32"}, {"B":256}),
      ("softmax", softmax, {"x":"*fp32","y":"*fp32","n":"i32","stride":"i32"}, {"B":1024}),
      ("softmax_f16", softmax, {"x":"*fp16","y":"*fp16","n":"i32","stride":"i32"}, {"B":256}),
      ("layernorm", layernorm, {"x":"*fp16","w":"*fp32","b":"*fp32","y":"*fp16","n":"i32","stride":"i32","eps":"fp32"}, {"B":1024}),
      ("rmsnorm", rmsnorm, {"x":"*bf16","w":"*bf16","y":"*bf16","n":"i32","stride":"i32","eps":"fp32"}, {"B":512}),
      ("cvt_f32_bf16", cvt, {"x":"*fp32","y":"*bf16","n":"i32"}, {"B":256}),
      ("cvt_f32_f16", cvt, {"x":"*fp32","y":"*fp16","n":"i32"}, {"B":256}),
      ("cvt_f32_fp8", cvt, {"x":"*fp32","y":"*fp8e4nv","n":"i32"}, {"B":256}),
      ("cvt_f32_i8", cvt, {"x":"*fp32","y":"*i8","n":"i32"}, {"B":256}),
      ("cvt_i8_f32", cvt, {"x":"*i8","y":"*fp32","n":"i32"}, {"B":256}),
      ("cvt_f16_f32", cvt, {"x":"*fp16","y":"*fp32","n":"i32"}, {"B":256}),
      ("atomic_add_f32", atom, {"x":"*fp32","y":"*fp32","n":"i32"}, {"B":256}),
      ("atomic_add_i32", atom, {"x":"*i32","y":"*i32","n":"i32"}, {"B":256}),
      ("atomic_max", atommax, {"x":"*i32","y":"*i32","z":"*i32","n":"i32"}, {"B":256}),
      ("atomic_max_f32", atommax, {"x":"*fp32","y":"*fp32","z":"*fp32","n":"i32"}, {"B":256}),
      ("matmul_f16", matmul, {"a":"*fp16","b":"*fp16","c":"*fp16","M":"i32","N":"i32","K":"i32","sam":"i32","sbk":"i32","scm":"i32"}, {"BM":64,"BN":64,"BK":32}),
      ("matmul_bf16", matmul, {"a":"*bf16","b":"*bf16","c":"*fp32","M":"i32","N":"i32","K":"i32","sam":"i32","sbk":"i32","scm":"i32"}, {"BM":128,"BN":128,"BK":64}),
      ("matmul_f32", matmul, {"a":"*fp32","b":"*fp32","c":"*fp32","M":"i32","N":"i32","K":"i32","sam":"i32","sbk":"i32","scm":"i32"}, {"BM":32,"BN":32,"BK":16}),
      ("attn", attn, {"q":"*fp16","k":"*fp16","v":"*fp16","o":"*fp16","L":"i32","sd":"i32"}, {"D":64,"BM":64,"BN":32}),
      ("intops", intops, {"x":"*i32","y":"*i32","z":"*i32","n":"i32"}, {"B":256}),
      ("cumsum", cumsum, {"x":"*fp32","y":"*fp32","n":"i32"}, {"B":256}),
      ("argmax", argmax, {"x":"*fp32","y":"*i32","n":"i32"}, {"B":256}),
      ("mathf", mathf, {"x":"*fp32","y":"*fp32","n":"i32"}, {"B":256}),
      ("f16math", f16math, {"x":"*fp16","y":"*fp16","n":"i32"}, {"B":256}),
      ("bf16math", f16math, {"x":"*bf16","y":"*bf16","n":"i32"}, {"B":256}),
    ]
    def MM(ab, c):
        return {"a": ab, "b": ab, "c": c, "M": "i32", "N": "i32", "K": "i32", "sam": "i32", "sbk": "i32", "scm": "i32"}

    os.makedirs(out, exist_ok=True)
    for arch in ("gfx942", "gfx950"):
        for name, fn, sig, consts in K + [("matmul16_f16", matmul, MM("*fp16", "*fp16"), {"BM": 64, "BN": 64, "BK": 64}),
                                          ("matmul16_bf16", matmul, MM("*bf16", "*fp32"), {"BM": 64, "BN": 64, "BK": 64})]:
            opts = {"matrix_instr_nonkdim": 16} if name.startswith("matmul16") else {}
            k = triton.compile(triton.compiler.ASTSource(fn, sig, consts), target=GPUTarget("hip", arch, 64), options=opts)
            Path(out, f"{name}.{arch}.hsaco").write_bytes(k.asm["hsaco"])
    print(f"wrote {2 * (len(K) + 2)} code objects to {out}")


# ---- checking (tilegcn only) ----------------------------------------------------------------------------------
def _load(path):
    from tilegcn.runtime import emulator
    mod = emulator.load(path)
    for info in mod.kernels.values():  # stand-in for a dynamic-LDS launch parameter (see the docstring)
        if info.descriptor.group_segment_fixed_size == 0:
            object.__setattr__(info, "descriptor", dataclasses.replace(info.descriptor,
                                                                     group_segment_fixed_size=mod.arch.lds_bytes))
    return mod


def unmodelled(mod):
    """Counter of mnemonic -> count of the instructions the emulator cannot run (with the reason)."""
    import torch

    from tilegcn.runtime.emulator import _bind
    from tilegcn.runtime.emulator.program import Ctx
    found = collections.Counter()
    for info in mod.kernels.values():
        ctx = Ctx(mod.arch, info.descriptor, {ins.addr: i for i, ins in enumerate(mod.instrs)}, torch.device("cpu"))
        for i, ins in enumerate(mod.instrs):
            h = _bind(ins, i, ctx)
            if "fault_handler" in h.run.__qualname__:
                found[ins.mnemonic] += 1
    return found


def cases(torch):
    """name -> (args builder, launch grid, reference from the args, compared outputs)."""
    g = torch.Generator().manual_seed(0)
    rn = lambda *s, dt=torch.float32: torch.randn(*s, generator=g).to(dt)  # noqa: E731
    ri = lambda lo, hi, *s, dt=torch.int32: torch.randint(lo, hi, s, generator=g, dtype=dt)  # noqa: E731
    n = 1000
    out = {}

    def ew(name, x, y, fn, grid=4):
        out[name] = (lambda: [x, y, torch.zeros_like(x), n], (grid,), lambda a: fn(a[0], a[1]), 2)
    ew("add_f32", rn(n), rn(n), torch.add)
    ew("add_f16", rn(n, dt=torch.float16), rn(n, dt=torch.float16), torch.add, 2)
    ew("add_i64", ri(-2**62, 2**62, n, dt=torch.int64), ri(-2**62, 2**62, n, dt=torch.int64), torch.add)
    x, y = rn(n) * 1e3, rn(n)
    ew("div_f32", x, y, torch.div)
    for name, dt, big in (("idiv_i32", torch.int32, 2**31 - 1), ("idiv_i64", torch.int64, 2**62)):
        a, b = ri(-big, big, n, dt=dt), ri(1, 1000, n, dt=dt)
        out[name] = (lambda a=a, b=b: [a, b, torch.zeros_like(a), torch.zeros_like(a), n], (4,),
                     lambda t: torch.div(t[0], t[1], rounding_mode="trunc"), 2)
    R, C = 8, 700
    out["softmax"] = (lambda: [rn(R, C), torch.zeros(R, C), C, C], (R,), lambda t: torch.softmax(t[0], 1), 1)
    out["softmax_f16"] = (lambda: [rn(R, 200, dt=torch.float16), torch.zeros(R, 200, dtype=torch.float16), 200, 200], (R,),
                          lambda t: torch.softmax(t[0].float(), 1), 1)
    out["layernorm"] = (lambda: [rn(R, C, dt=torch.float16), rn(C), rn(C), torch.zeros(R, C, dtype=torch.float16), C, C,
                                 1e-5], (R,), lambda t: torch.nn.functional.layer_norm(t[0].float(), (C,), t[1], t[2], 1e-5), 3)
    out["rmsnorm"] = (lambda: [rn(R, 300, dt=torch.bfloat16), rn(300, dt=torch.bfloat16),
                               torch.zeros(R, 300, dtype=torch.bfloat16), 300, 300, 1e-5], (R,),
                      lambda t: t[0].float() * torch.rsqrt((t[0].float() ** 2).mean(1, keepdim=True) + 1e-5) * t[1].float(), 2)
    for name, src, dst in (("cvt_f32_bf16", torch.float32, torch.bfloat16), ("cvt_f32_f16", torch.float32, torch.float16),
                           ("cvt_f32_i8", torch.float32, torch.int8), ("cvt_i8_f32", torch.int8, torch.float32),
                           ("cvt_f16_f32", torch.float16, torch.float32)):
        out[name] = (lambda src=src, dst=dst: [(rn(n) * 50).to(src), torch.zeros(n, dtype=dst), n], (4,),
                     lambda t: t[0].to(t[1].dtype), 1)
    out["atomic_add_f32"] = (lambda: [rn(n), torch.zeros(7), n], (4,),
                             lambda t: torch.stack([t[0][i::7].sum() for i in range(7)]), 1)
    out["atomic_add_i32"] = (lambda: [ri(-1000, 1000, n), torch.zeros(7, dtype=torch.int32), n], (4,),
                             lambda t: torch.stack([t[0][i::7].sum() for i in range(7)]).int(), 1)
    out["atomic_max"] = (lambda: [ri(-1000, 1000, n), torch.full((5,), -5000, dtype=torch.int32), torch.zeros(n, dtype=torch.int32), n],
                         (4,), lambda t: torch.stack([t[0][i::5].max() for i in range(5)]), 1)
    out["atomic_max_f32"] = (lambda: [rn(n), torch.full((5,), -100.0), torch.zeros(n), n], (4,),
                             lambda t: torch.stack([t[0][i::5].max() for i in range(5)]), 1)
    out["intops"] = (lambda: [ri(-2**20, 2**20, n), ri(-2**20, 2**20, n), torch.zeros(n, dtype=torch.int32), n], (4,),
                     lambda t: ((t[0] * t[1]) ^ ((t[0] >> 3) + torch.maximum(t[0], t[1])
                                                 - ((t[0].long() * t[1].long()) >> 7).int())), 2)
    out["cumsum"] = (lambda: [rn(256), torch.zeros(256), 256], (1,), lambda t: torch.cumsum(t[0], 0), 1)
    out["argmax"] = (lambda: [rn(8, 200), torch.zeros(8, dtype=torch.int32), 200], (8,), lambda t: t[0].argmax(1).int(), 1)
    out["mathf"] = (lambda: [rn(n) * 3, torch.zeros(n), n], (4,),
                    lambda t: (torch.sin(t[0]) + torch.cos(t[0]) + torch.log(t[0].abs() + 1) + torch.sigmoid(t[0])
                               + torch.erf(t[0]) + torch.sqrt(t[0].abs()) + t[0] / 3), 1)
    for name, dt in (("f16math", torch.float16), ("bf16math", torch.bfloat16)):
        out[name] = (lambda dt=dt: [rn(n, dt=dt), torch.zeros(n, dtype=dt), n], (4,),
                     lambda t: torch.maximum(t[0] * t[0] + t[0], 0.5 * t[0]), 1)
    for name, dt, odt, bm in (("matmul_f16", torch.float16, torch.float16, 64), ("matmul_bf16", torch.bfloat16, torch.float32, 128),
                              ("matmul_f32", torch.float32, torch.float32, 32), ("matmul16_f16", torch.float16, torch.float16, 64),
                              ("matmul16_bf16", torch.bfloat16, torch.float32, 64)):
        M, N, K = bm + 16, bm + 8, 96
        out[name] = (lambda dt=dt, odt=odt, M=M, N=N, K=K: [rn(M, K, dt=dt), rn(K, N, dt=dt), torch.zeros(M, N, dtype=odt),
                                                           M, N, K, K, N, N],
                     (2, 2), lambda t: t[0].float() @ t[1].float(), 2)
    out["attn"] = (lambda: [rn(64, 64, dt=torch.float16), rn(64, 64, dt=torch.float16), rn(64, 64, dt=torch.float16),
                            torch.zeros(64, 64, dtype=torch.float16), 64, 64], (1,),
                   lambda t: torch.softmax((t[0].float() @ t[1].float().T) * 0.125, 1) @ t[2].float(), 3)
    return out


def check(folder):
    import torch

    from tilegcn.errors import TilegcnError
    table = cases(torch)
    total = collections.Counter()
    for path in sorted(glob.glob(os.path.join(folder, "*.hsaco"))):
        name, arch = Path(path).stem.rsplit(".", 1)
        mod = _load(path)
        missing = unmodelled(mod)
        total.update(missing)
        line = f"{name:16s} {arch}  "
        if missing:
            line += "unmodelled: " + ", ".join(f"{k} x{v}" for k, v in missing.most_common()) + "  "
        if name in table:
            build, grid, ref, which = table[name]
            args = build() + [torch.zeros(16, dtype=torch.uint8)] * 2  # Triton's two hidden scratch pointers
            try:
                mod.launch(next(iter(mod.kernels)), grid, (256, 1, 1), args)
                got = args[which]
                err = (got.double() - ref(args).double()).abs().max().item()
                line += f"max |emulator - torch| = {err:.3g}"
            except TilegcnError as e:
                line += f"ERROR {str(e).splitlines()[0][:150]}"
        print(line)
    print("unmodelled over all code objects:", dict(total) or "none")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder")
    ap.add_argument("--generate", action="store_true", help="compile the kernels into FOLDER (needs Triton)")
    a = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    generate(a.folder) if a.generate else check(a.folder)
