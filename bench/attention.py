"""Flash attention forward: the timing model's TFLOP/s of tilegcn's best config beside Triton's flash attention, at
the shapes of issue 21's published figures.

    /work/venvs/triton/bin/python bench/triton_attention.py --tutorial PATH/06-fused-attention.py --out DIR
    PYTHONPATH=$PWD python bench/attention.py [--triton DIR] [--arch gfx950,gfx942] [--shape aiter,hipkittens]
                                              [--causal both|yes|no] [--quick] [--triton-keep 3]

For MI355X (gfx950) and MI300X (gfx942), at aiter's published shape (GQA 64 query / 8 KV heads, d = 128, b = 1,
s = 16384) and HipKittens' (MHA 16 heads, B = 16, N = 16384, d = 128), causal and not, fp16:
(a) tilegcn: the configs the repository's attention programs offer today, each estimated by the model; the best
    is marked `*` and is "tilegcn's best config". Candidates: the config(s) examples/attention/attention.py runs
    for the arch (a CONFIGS list, a per-arch BEST, or its BLOCK_M / BLOCK_N / THREADS / NUM_STAGES) on the GQA port
    it runs, and TileLang's three ported forward kernels at upstream's configs (examples/tilelang/
    example_gqa_fwd_bshd.py, example_mha_fwd_bhsd.py for MHA shapes, example_amd_flash_attn_fwd.py with one query
    tile per workgroup). Each row says how P reaches P @ V (registers or LDS) and the VGPRs.
(b) Triton 3.9: its tutorial 06-fused-attention.py forward, from the code objects bench/triton_attention.py writes
    into DIR (not committed), one per AMD autotune config of the tutorial. Its autotuner picks one config per
    (N_CTX, HEAD_DIM) by measurement; here every config is ranked by the model at the first shape, non-causal
    (printed), and the best `--triton-keep` are estimated at every shape, causal and not, the best marked `*`.
    Before any is timed, every object runs on the emulated device at a small shape (1 x 2 heads x 256 tokens,
    d = 128) against torch's scaled_dot_product_attention: a wrong object is reported, not timed. The tutorial has
    no grouped-query heads, so at aiter's shape it runs as MHA with 64 K/V heads (the same FLOPs, 8x the K/V bytes;
    at 16384 tokens attention is far from the memory roofline).
Printed beside them: tilegcn best / Triton best (target >= 1.3), the non-causal target (>= 1300 TFLOP/s MI355X,
>= 550 MI300X), the model's error band on published foreign kernels (tilegcn/perfmodel/band.py: the hold-out median
and worst |error|; the worst rows are aiter's hand-written FAv3 attention, which the model puts 60-70 % too slow),
and issue 21's published figures. TFLOP/s count 4 * b * heads * s^2 * d FLOPs, half of that causal (the
convention of the published figures and of Triton's tutorial), whatever a kernel computes on the diagonal.
Causal grids are timed from five query tiles, first to last (tilegcn/perfmodel/grid.py: workgroups of unequal
work); a grid that remaps its workgroup ids (the AMD port's T.use_swizzle) is flagged and not ranked. tilegcn's
estimates run on tensors of the first batch only (first_batch: their grids put the batch on z, which the model
does not sample); Triton's grid folds batch and heads into y, which the model samples, so its estimates run on
whole zero tensors (4.6 GB resident at HipKittens' shape: untouched pages cost nothing). `--quick`: the first tilegcn candidate and no Triton ranking
(the tutorial's test config only, BLOCK_M 128 / BLOCK_N 64 / 4 warps). Every estimate simulates every loop trip
(`detail_iterations`, `--detail N` to fast-forward after N trips as the model does by default): the default's
fast-forward times each wave's remaining trips at the rate of its first few, and two workgroups a CU drift in
phase over a long KV loop: tilegcn's gfx950 128x64 kernel (2 workgroups a CU) is put at 1,826 TFLOP/s with the
MFMA pipe 110 % busy when fast-forwarded (100 % with the CU's busiest-SIMD floor, perfmodel/cu.py), at 1,134
simulated whole (its MFMA pipe 71 % busy while both workgroups run); Triton's objects and gfx942's one-workgroup
kernels give the same figure either way. `--shape small`: 16 heads x 2048 tokens
(GQA: 4 KV heads), d = 64 and 128 (what bench/attention_estimate.py printed). Results: docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "examples" / "tilelang")]

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import example_amd_flash_attn_fwd  # noqa: E402
import example_gqa_fwd_bshd  # noqa: E402
import example_mha_fwd_bhsd  # noqa: E402
from tilegcn.amdgcn.arch import TIMING  # noqa: E402
from tilegcn.perfmodel import estimate  # noqa: E402
from tilegcn.perfmodel.band import band_text  # noqa: E402

# examples/attention/attention.py by path: this script's own name would shadow it on sys.path
_spec = importlib.util.spec_from_file_location("attention_example", REPO / "examples" / "attention" / "attention.py")
attention_example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(attention_example)


@dataclass(frozen=True)
class Shape:
    name: str
    batch: int
    heads: int
    kv_heads: int
    seq: int
    dim: int

    def flops(self, causal):
        full = 4 * self.batch * self.heads * self.seq * self.seq * self.dim
        return full // 2 if causal else full

    def __str__(self):
        heads = f"{self.heads}/{self.kv_heads} heads (GQA)" if self.kv_heads != self.heads else f"{self.heads} heads"
        return f"{self.name}: b={self.batch}, {heads}, s={self.seq}, d={self.dim}"


SHAPES = {
    "aiter": [Shape("aiter", 1, 64, 8, 16384, 128)],
    "hipkittens": [Shape("HipKittens", 16, 16, 16, 16384, 128)],
    "small": [Shape("small", 1, 16, 4, 2048, 64), Shape("small", 1, 16, 4, 2048, 128)],
}
TARGET_RATIO = 1.3
TARGET_TFLOPS = {"MI355X": 1300, "MI300X": 550}  # non-causal, issue 21
PUBLISHED = {  # (device, shape name, causal) -> [(what, TFLOP/s)], issue 21's measurements
    ("MI355X", "aiter", False): [("aiter assembly FAv3", 1437.6), ("Gluon fav4 (shape per issue 21)", 1241)],
    ("MI355X", "aiter", True): [("aiter assembly FAv3", 1392.5)],
    ("MI355X", "HipKittens", False): [("HipKittens", 1304)],
    ("MI300X", "aiter", False): [("aiter assembly FAv3", 547.8)],
}
CHECK = dict(batch=1, heads=2, seq=256, dim=128)
QUICK_TRITON_TILE = (128, 64, 4)  # the tutorial's own single test config (BLOCK_M, BLOCK_N, num_warps)  # the Triton objects' correctness check against torch


# ---- tilegcn ---------------------------------------------------------------------------------------------------
def example_configs(arch):
    """examples/attention/attention.py's configs for `arch`, as flashattn keyword dicts, in whichever form it gives
    them: a CONFIGS list of such dicts, a BEST dict of arch -> (block_M, block_N, threads, num_stages), or module
    constants BLOCK_M / BLOCK_N / NUM_STAGES / THREADS."""
    configs = getattr(attention_example, "CONFIGS", None)
    if configs:
        return [dict(c) for c in configs]
    best = getattr(attention_example, "BEST", {}).get(arch)
    if best is not None:
        block_m, block_n, threads, stages = best
        return [dict(block_M=block_m, block_N=block_n, num_stages=stages, threads=threads)]
    names = dict(block_M="BLOCK_M", block_N="BLOCK_N", num_stages="NUM_STAGES", threads="THREADS")
    if not all(hasattr(attention_example, n) for n in names.values()):
        return []  # none of these forms: the ports' upstream configs below still run
    return [{k: getattr(attention_example, n) for k, n in names.items()}]


def tilegcn_candidates(arch, shape, causal):
    """[(label, build)] where build() -> (CompiledKernel, args): the configs the repository offers today."""
    b, h, hk, s, d = shape.batch, shape.heads, shape.kv_heads, shape.seq, shape.dim
    # compile-only tensors: torch.empty's pages are never touched (1 GiB each at HipKittens' shape); the estimate
    # runs on first_batch copies
    q = torch.empty(b, s, h, d, dtype=torch.float16)
    kv = torch.empty(b, s, hk, d, dtype=torch.float16)
    out = []
    for c in example_configs(arch):
        label = (f"attention.py GQA port {c['block_M']}x{c['block_N']} st{c['num_stages']} t{c['threads']}"
                 + "".join(f" {k}={v}" for k, v in c.items() if k not in ("block_M", "block_N", "num_stages", "threads")))
        out.append((label, lambda c=c: (example_gqa_fwd_bshd.flashattn(b, h, s, d, causal, groups=h // hk, **c),
                                        (q, kv, kv))))
    upstream_gqa = dict(block_M=64, block_N=64, num_stages=2, threads=128)  # its main()'s config
    if upstream_gqa not in example_configs(arch):
        out.append(("TileLang GQA BSHD port 64x64 st2 t128",
                    lambda: (example_gqa_fwd_bshd.flashattn(b, h, s, d, causal, groups=h // hk, **upstream_gqa),
                             (q, kv, kv))))
    if h == hk:
        qh = torch.empty(b, h, s, d, dtype=torch.float16)
        out.append(("TileLang MHA BHSD port 64x64 st1 t128",
                    lambda: (example_mha_fwd_bhsd.flashattn(b, h, s, s, d, causal, block_M=64, block_N=64,
                                                            num_stages=1, threads=128), (qh, qh, qh))))
    amd = dict(example_amd_flash_attn_fwd.CONFIG)
    amd["num_split_q"] = -(-s // amd["block_M"])  # one query tile per workgroup
    out.append((f"TileLang AMD BSHD port {amd['block_M']}x{amd['block_N']} st{amd['num_stages']} t{amd['threads']}",
                lambda: (example_amd_flash_attn_fwd.fast_flashattn(b, h, s, d, causal, h // hk, **amd), (q, kv, kv))))
    return out


def p_route(ir):
    """How P (acc_s cast to 16 bits) reaches P @ V: kernel.ir's convert_layout line."""
    line = next((line for line in ir.splitlines() if "convert_layout acc_s" in line and " via " in line), None)
    return line.split(" via ")[1].strip() if line else "?"


def first_batch(shape, dtype):
    """Zeros of the first batch of a (batch, ...) tensor. The model runs the workgroups of one XCD's first round
    and its samples along x and y (tilegcn/perfmodel/grid.py), all at z = 0: batch 0 at tilegcn's grids (x query
    tiles, y heads, z batch), so an estimate needs no more memory than that. A workgroup of another batch would
    fault on the unmapped address and the row would say so."""
    return torch.zeros(1, *shape[1:], dtype=dtype)


WHOLE_LOOPS = 1 << 20  # detail_iterations past any loop's trip count: every trip simulated, none extrapolated


def estimate_compiled(k, full_args, flops, detail=WHOLE_LOOPS):
    """The model's estimate of CompiledKernel `k` launched as on `full_args`, on first_batch tensors."""
    from tilegcn.runtime.emulator import load

    small = {name: first_batch(t.shape, t.dtype) for name, t in zip(k.fn.arg_names, full_args)}
    small.update({name: first_batch(shape, getattr(torch, dtype)) for name, shape, dtype in k.outputs})
    args = [small[a["name"]] for a in k.metadata["args"]]
    return estimate(load(k.hsaco, arch=k.arch), k.name, k.grid_for(list(full_args)), k.block, args,
                    device=TIMING[k.arch].device, flops=flops, detail_iterations=detail)


def tilegcn_rows(arch, shape, causal, quick, detail=WHOLE_LOOPS):
    """[(label, estimate or error text, note)]."""
    rows = []
    candidates = tilegcn_candidates(arch, shape, causal)
    for label, build in candidates[:1] if quick else candidates:
        try:
            kernel, args = build()
            k = kernel.compile(*args, arch=arch)
            est = estimate_compiled(k, args, shape.flops(causal), detail)
            rows.append((label, est, f"P via {p_route(k.ir)}, {k.metadata['vgprs']} VGPRs"))
        except Exception as exc:  # a config that does not fit (LDS, registers) is reported, not fatal
            rows.append((label, f"{type(exc).__name__}: {str(exc).splitlines()[0][:100]}", ""))
    return rows


# ---- Triton ----------------------------------------------------------------------------------------------------
def triton_objects(folder, arch, causal, dim, tiles=None):
    """[(file, manifest entry)] of the objects for (arch, causal, head dim); `tiles`: only these (BLOCK_M, BLOCK_N,
    num_warps), in that order."""
    manifest = json.load(open(os.path.join(folder, "manifest.json")))
    out = [(f, m) for f, m in manifest.items()
           if m["arch"] == arch and m["causal"] == causal and m["head_dim"] == dim]
    if tiles is not None:
        out = sorted((x for x in out if tile_of(x[1]) in tiles), key=lambda x: tiles.index(tile_of(x[1])))
    return out


def tile_of(m):
    return m["BLOCK_M"], m["BLOCK_N"], m["num_warps"]


def triton_args(m, batch, heads, seq, dim, q=None, k=None, v=None):
    """_attn_fwd's launch arguments (the tutorial's forward on AMD) for Z = `batch`, on whole zero tensors unless
    q, k, v are given (its grid's y is batch x heads: the model's samples along y reach every batch); and Out."""
    q, k, v = (torch.zeros(batch, heads, seq, dim, dtype=torch.float16) if x is None else x for x in (q, k, v))
    o = torch.zeros_like(q)
    lse = torch.zeros(q.shape[0], heads, seq, dtype=torch.float32)
    scratch = [torch.zeros(16, dtype=torch.uint8)] * 2  # Triton's global and profile scratch pointers
    return [dim ** -0.5, lse, batch, heads, q, k, v, o, seq] + scratch, o


def triton_grid(m, batch, heads, seq):
    return (-(-seq // m["BLOCK_M"]), batch * heads, 1)


def load_triton(folder, file, arch):
    from tilegcn.runtime import emulator

    return emulator.load(open(os.path.join(folder, file), "rb").read(), arch=arch)


def check_triton(folder, file, m):
    """Run the object on the emulated device at CHECK's shape against torch's SDPA (fp32): (ok, max error)."""
    c = CHECK
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(c["batch"], c["heads"], c["seq"], c["dim"], generator=gen).half() for _ in range(3))
    args, o = triton_args(m, c["batch"], c["heads"], c["seq"], c["dim"], q, k, v)
    mod = load_triton(folder, file, m["arch"])
    mod.launch(m["kernel"], triton_grid(m, c["batch"], c["heads"], c["seq"]), tuple(m["block"]), args,
               shared_mem=m["shared_mem"])
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=m["causal"])
    err = (o.float() - ref).abs().max().item()
    return bool(torch.isfinite(o).all()) and err <= 1e-2, err  # the tutorial's test: atol 1e-2


def triton_rows(folder, arch, shape, causal, tiles, checked, detail=WHOLE_LOOPS):
    """[(label, estimate or error text, note)] of bench/triton_attention.py's objects for (arch, causal) at `tiles`
    (None: all)."""
    rows = []
    for file, m in triton_objects(folder, arch, causal, shape.dim, tiles):
        label = f"Triton {m['compiler'].split()[-1]} tutorial {m['BLOCK_M']}x{m['BLOCK_N']} w{m['num_warps']}"
        try:
            if file not in checked:
                checked[file] = check_triton(folder, file, m)
            ok, err = checked[file]
            if not ok:
                rows.append((label, f"wrong on the emulated device: max |O - SDPA| {err:.3g} > 0.01", ""))
                continue
            heads = shape.heads  # MHA: the tutorial has no grouped-query heads
            args, _ = triton_args(m, shape.batch, heads, shape.seq, shape.dim)
            est = estimate(load_triton(folder, file, arch), m["kernel"], triton_grid(m, shape.batch, heads, shape.seq),
                           tuple(m["block"]), args, device=TIMING[arch].device, shared_mem=m["shared_mem"],
                           flops=shape.flops(causal), detail_iterations=detail)
            rows.append((label, est, f"checked vs SDPA: {err:.1e}", tile_of(m)))
        except Exception as exc:  # an object the emulator stops at is reported, not fatal
            rows.append((label, f"{type(exc).__name__}: {str(exc).splitlines()[0][:100]}", ""))
    return [row[:3] for row in rows] if tiles is not None else rows


def triton_ranking(folder, arch, shape, checked, keep, detail=WHOLE_LOOPS):
    """Triton's configs ranked by the model at `shape`, non-causal, as its autotuner ranks them by measurement for
    one (N_CTX, HEAD_DIM) key: prints every row, returns the best `keep` tiles."""
    print(f"== {TIMING[arch].device} ({arch}), Triton's configs ranked by the model at {shape}, non-causal")
    rows = triton_rows(folder, arch, shape, False, None, checked, detail)
    print_rows([row[:3] for row in rows])
    good = sorted((row for row in rows if len(row) == 4 and trusted(row[1])), key=lambda row: -row[1].tflops)
    return [row[3] for row in good[:keep]]


# ---- report ----------------------------------------------------------------------------------------------------
def trusted(est):
    """An estimate of a grid whose sampled workgroups are not linear in x (a remapped grid: T.use_swizzle) averages
    five samples that need not be representative: shown, not ranked."""
    return not isinstance(est, str) and est.breakdown.get("unequal_linear", True)


def best(rows):
    good = [est for _, est, _ in rows if trusted(est)]
    return max(good, key=lambda e: e.tflops) if good else None


def print_rows(rows):
    top = best(rows)
    for label, est, note in rows:
        if isinstance(est, str):
            print(f"    {label:52} {'-':>8}  {est}")
            continue
        b = est.breakdown
        mark = "*" if est is top else " "
        if not trusted(est):
            note += "; work not linear in x (remapped workgroup ids): not ranked"
        print(f"  {mark} {label:52} {est.tflops:>8,.1f}  mfma {b['mfma_busy_pct']:.0f}%, {b['workgroups_per_cu']} wg/CU, "
              f"limited by {b['limiting']}; {note}")


def summary(device, shape, causal, mine, theirs):
    lines = []
    if mine is not None and theirs is not None:
        ratio = mine.tflops / theirs.tflops
        lines.append(f"tilegcn / Triton = {ratio:.2f} (target >= {TARGET_RATIO}: {'met' if ratio >= TARGET_RATIO else 'NOT met'})")
    if mine is not None and not causal:
        goal = TARGET_TFLOPS[device]
        lines.append(f"tilegcn {mine.tflops:,.0f} TFLOP/s (target >= {goal} on {device}: "
                     f"{'met' if mine.tflops >= goal else 'NOT met'})")
    for what, tflops in PUBLISHED.get((device, shape.name, causal), []):
        lines.append(f"published, {device}: {what} {tflops:,} TFLOP/s")
    lines.append(f"model error on published foreign kernels ({device}): {band_text(device)}")
    for line in lines:
        print(f"    {line}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--triton", metavar="DIR", help="bench/triton_attention.py's output (Triton rows left out without)")
    ap.add_argument("--arch", default="gfx950,gfx942")
    ap.add_argument("--shape", default="aiter,hipkittens", help="aiter, hipkittens, small (comma-separated)")
    ap.add_argument("--causal", default="both", choices=["both", "yes", "no"])
    ap.add_argument("--quick", action="store_true", help="one tilegcn candidate; Triton's 128x64 w4 object only")
    ap.add_argument("--triton-keep", type=int, default=3, help="Triton configs kept from the ranking (default 3)")
    ap.add_argument("--triton-tiles", help="skip the ranking: these BLOCK_MxBLOCK_Nxwarps, e.g. 128x64x4,128x32x4")
    ap.add_argument("--detail", type=int, default=WHOLE_LOOPS,
                    help="loop trips simulated before the model fast-forwards (default: all of them)")
    args = ap.parse_args(argv)
    causals = {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]
    checked = {}
    shapes = [s for name in args.shape.split(",") for s in SHAPES[name]]
    t0 = time.perf_counter()
    for arch in args.arch.split(","):
        device = TIMING[arch].device
        tiles = {}
        for shape in shapes:
            if args.triton and shape.dim not in tiles:
                if args.triton_tiles:
                    tiles[shape.dim] = [tuple(int(v) for v in t.split("x")) for t in args.triton_tiles.split(",")]
                else:
                    tiles[shape.dim] = ([QUICK_TRITON_TILE] if args.quick else
                                        triton_ranking(args.triton, arch, shape, checked, args.triton_keep,
                                                       args.detail))
            for causal in causals:
                t1 = time.perf_counter()
                print(f"== {device} ({arch}), {shape}, {'causal' if causal else 'non-causal'}: model TFLOP/s")
                mine = tilegcn_rows(arch, shape, causal, args.quick, args.detail)
                print_rows(mine)
                theirs = (triton_rows(args.triton, arch, shape, causal, tiles[shape.dim], checked, args.detail)
                          if args.triton else [])
                print_rows(theirs)
                summary(device, shape, causal, best(mine), best(theirs))
                print(f"    ({time.perf_counter() - t1:.0f} s)", flush=True)
                gc.collect()
    print(f"({time.perf_counter() - t0:.0f} s in all)")


if __name__ == "__main__":
    os.environ.setdefault("TILEGCN_DEVICE", "emulator")
    main()
