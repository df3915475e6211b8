"""Flash attention's KV loop as the hardware would see it: instruction mix and llvm-mca cycles per KV tile of one wave,
against the MFMA bound, for TileLang's GQA forward port (examples/tilelang/example_gqa_fwd_bshd.py, fp16, non-causal)
at the configs its autotune space offers on AMD (block_M / block_N 64 or 128, 128 or 256 threads, 1 or 2 stages):

    PYTHONPATH=$PWD python bench/attention_loop.py [--arch gfx950] [--dim 128] [--configs 128x64x2x256,...]
                                                   [--shape gqa|mha] [--no-estimate] [--detail N]

For each config (block_M x block_N x num_stages x threads) it compiles the kernel at issue 21's GQA shape (64 query
heads over 8 KV heads, d = --dim, b = 1, s = 16384; `--shape mha`: HipKittens' 16 heads, b = 16) without running it, finds the KV loop in the `.s` (the last
label a `s_cbranch_*` jumps back to: bench/loop_metrics.py `loop_body`) and prints per KV tile of one wave:
instructions, MFMAs, VALU instructions (v_* but MFMAs), v_exp_f32, ds_read, LDS DMA loads, loads into VGPRs,
s_waitcnt, s_barrier, v_accvgpr_read/write (accumulator round trips) and scratch instructions; then llvm-mca's cycles
for the loop body (-iterations=50, one wave alone on its SIMD, every memory access at the scheduling model's
latency) against the MFMA bound: the loop's MFMA FLOPs at the arch's full f16 rate (2 * 32 * 32 * 16 per 8 passes on
gfx950, 32x32x8 per 8 on gfx942), booked, like llvm-mca's AMDGPU model, at one cycle per pass (bench/loop_metrics.py's
docstring says more). A loop that the pipeliner unrolled over S tiles is divided by S. Then the kernel's registers
(VGPRs + AGPRs, scratch bytes) and the timing model's TFLOP/s (`kernel.estimate()` with every loop trip simulated,
as bench/attention.py says why (`--detail N`: fast-forward after N trips); MI355X for gfx950, MI300X for
gfx942) at the same shape; `--no-estimate` leaves it out.

`--probes` also prints, per config, the model's TFLOP/s and MFMA busy share of edited copies of the kernel (timing
probes: the edits break what the code computes): its KV loop without its packed-f32 VALU ops (`v_pk_mul_f32`, ...,
which cannot issue under an MFMA, arch.mfma_valu_holds) and without any VALU op, two ceilings of the in-wave loop;
and, for an even number of waves, the same kernel with its KV loop hand-split the way an 8-wave ping-pong runs
(HipKittens' attention, issue 21's "8-wave ping-pong or 4-wave interleave"): each step's MFMAs in one cluster, the
rest (softmax, rescale, copies) in another, a barrier after each, and the second half of the workgroup's waves one
barrier behind the first (an extra `s_barrier` before the loop for the one group, after it for the other), so one
wave of each SIMD runs its MFMA cluster while the other runs its vector cluster. Two placements of the LDS reads:
with their MFMAs (`reads in MFMA cluster`) and prefetched at the end of the vector cluster for the next step's MFMAs
(`reads in VALU cluster`).
The edit moves instructions across their dependencies (the rescale after the PV it should precede), so the code
computes nothing useful: it is a timing probe only, the same instructions in the ping-pong's order.

Two more probes put llvm-mca's one-wave view beside the model's (each probe row also gives its llvm-mca ratio): the
rescale of the accumulator as `v_pk_mul_f32` pairs (half its instructions; llvm-mca books a packed op at one cycle,
the model holds it behind every MFMA of the SIMD, S33), and the rescale's first multiplies, which the scheduler
issues while QK^T's first LDS reads land, moved under QK^T's last MFMAs, where llvm-mca (LDS reads at 5 cycles, no
other wave) sees the MFMA pipe wait for work.

`--setprio` also prints, per config, the model's TFLOP/s of the same kernel with `s_setprio 1` before each run of
MFMAs of the KV loop and `s_setprio 0` before the VALU instruction after it (the edited `.s` through
`CompiledKernel.with_asm`; the rule amdgcn/priority.py had before issue 21's session 26): whether raising the MFMA
issuer's priority that way pays, by the model.

Memory: the timing model's estimate at `--shape mha` (b = 16) takes about 5 GB of host memory (gfx950 256x64 over
512 threads, every trip simulated: 5.1 GB peak, 42 s, 2026-11-27); `--no-estimate` leaves it out.

The ratio mca / bound says how well the instruction stream of one wave keeps the MFMA pipe fed (1.0: the MFMAs
alone); VALU work that depends on the tile's own MFMAs (the softmax between QK^T and PV) and is not overlapped with
another tile's MFMAs shows as cycles above the bound.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench"), str(REPO / "examples" / "tilelang")]

import torch  # noqa: E402

import example_gqa_fwd_bshd  # noqa: E402
from loop_metrics import loop_body, mca_cycles  # noqa: E402
from tilegcn.amdgcn.arch import PACKED_F32_VALU, get_arch  # noqa: E402

# issue 21's shapes: (batch, query heads, KV heads, seq): GQA as aiter's published FAv3 figure, MHA as HipKittens'
SHAPES = {"gqa": (1, 64, 8, 16384), "mha": (16, 16, 16, 16384)}
CONFIGS = "64x64x2x128,128x64x1x256,128x64x2x256,128x128x2x256,64x128x2x128"
WHOLE_LOOPS = 1 << 20  # detail_iterations past any loop's trip count: every trip simulated (bench/attention.py)
_MFMA = re.compile(r"v_mfma_\w+?_(\d+)x(\d+)x(\d+)")


def compile_attention(arch: str, block_M: int, block_N: int, stages: int, threads: int, dim: int, shape="gqa"):
    batch, heads, kv_heads, seq = SHAPES[shape]
    q = torch.empty(batch, seq, heads, dim, dtype=torch.float16)
    kv = torch.empty(batch, seq, kv_heads, dim, dtype=torch.float16)
    kernel = example_gqa_fwd_bshd.flashattn(batch, heads, seq, dim, False, groups=heads // kv_heads,
                                            block_M=block_M, block_N=block_N, num_stages=stages, threads=threads)
    return kernel.compile(q, kv, kv, arch=arch)


def f16_flops_per_pass(arch) -> float:
    return max(2 * s.M * s.N * s.K / s.passes for s in arch.mfma_shapes["f16"])


def loop_metrics(asm: str, arch_name: str, block_M: int, block_N: int, threads: int, dim: int) -> dict:
    """Per KV tile of one wave: instruction counts, llvm-mca cycles, the MFMA bound and their ratio."""
    body = loop_body(asm)
    ops = Counter(i.split()[0] for i in body)
    flops = sum(2 * int(m) * int(n) * int(k) for i in body for m, n, k in _MFMA.findall(i.split()[0]))
    tile_flops = 2 * 2 * (block_M // (threads // 64)) * block_N * dim  # QK^T and PV of one wave's rows
    tiles = flops / tile_flops
    bound = flops / f16_flops_per_pass(get_arch(arch_name))
    cycles = mca_cycles(body, arch_name)
    count = lambda pred: sum(n for op, n in ops.items() if pred(op)) / tiles  # noqa: E731
    mfma = count(lambda op: op.startswith("v_mfma"))
    return dict(
        tiles=tiles, insts=len(body) / tiles, mfma=mfma,
        valu=count(lambda op: op.startswith("v_") and not op.startswith("v_mfma")),
        exp=count(lambda op: op == "v_exp_f32"), ds_read=count(lambda op: op.startswith("ds_read")),
        lds_dma=sum(1 for i in body if i.startswith("buffer_load") and i.endswith(" lds")) / tiles,
        vgpr_loads=sum(1 for i in body if i.startswith(("buffer_load", "global_load")) and not i.endswith(" lds"))
        / tiles,
        waitcnt=count(lambda op: op == "s_waitcnt"), barrier=count(lambda op: op == "s_barrier"),
        acc_rw=count(lambda op: op.startswith("v_accvgpr")),
        scratch=count(lambda op: op.startswith("scratch_")),
        mca=cycles / tiles, bound=bound / tiles, ratio=cycles / bound,
    )


COLUMNS = ("insts", "mfma", "valu", "exp", "ds_read", "lds_dma", "vgpr_loads", "waitcnt", "barrier", "acc_rw",
           "scratch", "mca", "bound", "ratio")
HEAD = ("insts", "mfma", "valu", "v_exp", "ds_rd", "dma", "ld_v", "wait", "bar", "acc_rw", "scr", "mca", "bound",
        "ratio")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="gfx950,gfx942")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--configs", default=CONFIGS, help="block_M x block_N x num_stages x threads, comma separated")
    ap.add_argument("--shape", default="gqa", choices=sorted(SHAPES),
                    help="gqa: b=1, 64 query / 8 KV heads, s=16384; mha: b=16, 16 heads, s=16384 (the same BSHD "
                    "kernel, groups=1)")
    ap.add_argument("--setprio", action="store_true",
                    help="also estimate the kernel with s_setprio 1 / 0 around the loop's MFMA runs")
    ap.add_argument("--probes", action="store_true",
                    help="also estimate edited copies of the kernel (timing probes, not runnable code): its KV loop "
                    "without packed-f32 ops, without VALU ops, and split into MFMA / vector clusters with the wave "
                    "groups one barrier apart (an 8-wave ping-pong's order)")
    ap.add_argument("--detail", type=int, default=WHOLE_LOOPS,
                    help="loop trips the model simulates before it fast-forwards (default: all of them)")
    ap.add_argument("--no-estimate", dest="estimate", action="store_false",
                    help="skip the timing model's TFLOP/s at the GQA shape")
    args = ap.parse_args(argv)
    print(f"{'config':<28}" + "".join(f"{h:>8}" for h in HEAD) + f"{'regs':>9}{'TFLOP/s':>9}  limited by")
    for arch in args.arch.split(","):
        for config in args.configs.split(","):
            _row(arch, config, args.dim, args.estimate, args.shape, args.setprio, args.detail, args.probes)


def _row(arch: str, config: str, dim: int, estimate: bool, shape: str = "gqa", setprio: bool = False,
         detail: int | None = None, probes: bool = False):
    bm, bn, stages, threads = (int(x) for x in config.split("x"))
    name = f"{arch} d{dim} {bm}x{bn} s{stages} {threads}t"
    try:
        k = compile_attention(arch, bm, bn, stages, threads, dim, shape)
        m = loop_metrics(k.asm, arch, bm, bn, threads, dim)
    except Exception as e:  # a config that does not fit (LDS, registers) is reported, not fatal
        print(f"{name:<28} {type(e).__name__}: {str(e)[:110]}")
        return
    regs = f"{k.metadata['vgprs']}+{k.metadata['agprs']}"
    tail = ""
    if estimate:
        e = k.estimate(detail_iterations=detail)
        batch, heads, _, seq = SHAPES[shape]
        flops = 4 * batch * heads * seq * seq * dim
        limit = next(ln for ln in str(e).splitlines() if ln.strip().startswith("limited by")).split(None, 2)[2]
        tail = f"{flops / e.seconds / 1e12:>9.1f}  {limit}"
        if setprio:
            path = Path(tempfile.mkdtemp()) / "setprio.s"
            path.write_text(with_mfma_priority(k.asm))
            tail += f"; with s_setprio: {flops / k.with_asm(str(path)).estimate(detail_iterations=detail).seconds / 1e12:.1f}"
    print(f"{name:<28}" + "".join(f"{m[c]:>8.1f}" if c != "ratio" else f"{m[c]:>8.2f}" for c in COLUMNS)
          + f"{regs:>9}" + tail, flush=True)
    if probes:
        flops = 4 * SHAPES[shape][0] * SHAPES[shape][1] * SHAPES[shape][3] ** 2 * dim
        _probes(k, arch, threads, (bm, bn, threads, dim), flops, detail)


def _probes(k, arch: str, threads: int, tile: tuple, flops: float, detail):
    """The `--probes` rows of one compiled kernel (the module docstring)."""
    edits = {"in-wave loop without packed-f32 ops": lambda asm: without_loop_lines(asm, PACKED_F32_VALU.match),
             "in-wave loop without VALU ops": lambda asm: without_loop_lines(asm, _is_valu),
             "rescale as v_pk_mul_f32 pairs": packed_rescale,
             "rescale's first muls moved under QK^T's last MFMAs": rescale_under_last_mfmas}
    if threads % 128 == 0:
        edits["ping-pong order, reads in MFMA cluster"] = lambda asm: ping_pong_order(asm, threads // 64, False)
        edits["ping-pong order, reads in VALU cluster"] = lambda asm: ping_pong_order(asm, threads // 64, True)
    for what, edit in edits.items():
        path = Path(tempfile.mkdtemp()) / "probe.s"
        text = edit(k.asm)
        path.write_text(text)
        e = k.with_asm(str(path)).estimate(detail_iterations=detail)
        print(f"  probe, {what}: {flops / e.seconds / 1e12:.1f} TFLOP/s, MFMA pipe "
              f"{e.breakdown['mfma_busy_pct']:.1f} % busy, barrier stalls {e.breakdown['stall_barrier_pct']:.1f} %, "
              f"llvm-mca {loop_metrics(text, arch, *tile)['ratio']:.2f} x the MFMA bound", flush=True)


_RESCALE = re.compile(r"\s*v_mul_f32 v(\d+), v\1, v(\d+)$")  # acc_o *= scores_scale: one element a v_mul_f32


def packed_rescale(asm: str) -> str:
    """`asm` with its last loop's rescale of the accumulator (`v_mul_f32 vN, vN, vF`, gfx950's form:
    Arch.packed_f32_scales) as one `v_pk_mul_f32` for each even N whose N + 1 follows within a few lines, in the
    first one's place: the form with half the instructions, which llvm-mca books at one cycle like any VALU op and
    the timing model holds behind every MFMA of the SIMD (S33). Computes what the kernel does (a probe all the same:
    nothing runs it)."""
    lines = asm.splitlines()
    start, end = _loop_span(lines)
    body = lines[start + 1:end]
    for i, ln in enumerate(body):
        first = _RESCALE.match(ln or "")
        if not first or int(first[1]) % 2 or int(first[2]) % 2:
            continue
        n, f = int(first[1]), int(first[2])
        for j in range(i + 1, min(i + 16, len(body))):
            second = _RESCALE.match(body[j] or "")
            if second and int(second[1]) == n + 1 and int(second[2]) == f:
                body[i] = f"  v_pk_mul_f32 v[{n}:{n + 1}], v[{n}:{n + 1}], v[{f}:{f + 1}] op_sel_hi:[1,0]"
                body[j] = None
                break
    return "\n".join(lines[:start + 1] + [ln for ln in body if ln is not None] + lines[end:]) + "\n"


def rescale_under_last_mfmas(asm: str, moved: int = 9) -> str:
    """`asm` with the first `moved` rescale multiplies of each step of its last loop (those the scheduler issues
    while QK^T's first LDS reads land, before its first MFMA) moved, three at a time, before QK^T's last three MFMAs,
    where llvm-mca's one-wave view sees the MFMA pipe stall for want of other work (timing only: a step's QK^T is
    its first 16 MFMAs, d128 x 64 keys a wave)."""
    lines = asm.splitlines()
    start, end = _loop_span(lines)
    body = lines[start + 1:end]
    barriers = [i for i, ln in enumerate(body) if _opcode(ln) == "s_barrier"] + [len(body)]
    out = body[:barriers[0]]
    for b, nxt in zip(barriers, barriers[1:]):
        step = body[b:nxt]
        mfmas = [i for i, ln in enumerate(step) if _opcode(ln).startswith("v_mfma")]
        early = [i for i in range(mfmas[0]) if _RESCALE.match(step[i])][:moved] if mfmas else []
        if len(mfmas) < 16 or not early:
            out += step
            continue
        targets = [m - 1 if _opcode(step[m - 1]) == "s_waitcnt" else m for m in mfmas[13:16]]
        groups = [early[k::3] for k in range(3)]
        placed = {t: [step[i] for i in g] for t, g in zip(targets, groups)}
        for i, ln in enumerate(step):
            if i not in early:
                out += placed.get(i, []) + [ln]
    return "\n".join(lines[:start + 1] + out + lines[end:]) + "\n"


def _opcode(line: str) -> str:
    return line.strip().split(" ")[0]


def _is_valu(op: str) -> bool:
    return op.startswith("v_") and not op.startswith("v_mfma")


def _loop_span(lines: list) -> tuple:
    """(label line, back-branch line) of the last loop of `lines`."""
    end = max(i for i, ln in enumerate(lines) if ln.strip().startswith("s_cbranch") and ".L" in ln)
    label = lines[end].split()[-1] + ":"
    return max(i for i in range(end) if lines[i].strip() == label), end


def without_loop_lines(asm: str, drop) -> str:
    """`asm` without the instructions of its last loop whose opcode `drop` accepts (a timing probe)."""
    lines = asm.splitlines()
    start, end = _loop_span(lines)
    body = [ln for ln in lines[start + 1:end] if not drop(_opcode(ln))]
    return "\n".join(lines[:start + 1] + body + lines[end:]) + "\n"


def _is_step_start(lines: list, i: int) -> bool:
    """Whether lines[i:] begin a pipelined step: the `s_waitcnt vmcnt(0)` + `s_barrier` that publish its stage."""
    return (lines[i].strip().startswith("s_waitcnt vmcnt(0)") and i + 1 < len(lines)
            and lines[i + 1].strip().startswith("s_barrier"))


def ping_pong_order(asm: str, waves: int, reads_ahead: bool) -> str:
    """`asm` with its last loop's steps reordered as an 8-wave ping-pong would run them (the module docstring,
    `--ping-pong-probe`): per step the wait and barrier that publish its stage, its MFMAs (with their LDS reads and
    lgkmcnt waits unless `reads_ahead`), a barrier, the rest (then the next step's LDS reads if `reads_ahead`);
    waves `waves // 2` and up pass one extra barrier before the loop, the others one after it. Timing only."""
    lines = asm.splitlines()
    start, end = _loop_span(lines)
    body, steps = lines[start + 1:end], []
    i = 0
    while i < len(body):
        if _is_step_start(body, i):
            steps.append([])
            i += 2
            continue
        if not steps:
            raise ValueError("ping-pong probe: the loop does not begin with a stage's wait and barrier")
        steps[-1].append(body[i])
        i += 1
    mfmas = [[ln for ln in st if _opcode(ln).startswith("v_mfma")] for st in steps]
    reads = [[ln for ln in st if _opcode(ln).startswith("ds_read") or ln.strip().startswith("s_waitcnt lgkmcnt")]
             for st in steps]
    rest = [[ln for ln in st if ln not in m and ln not in r] for st, m, r in zip(steps, mfmas, reads)]
    new = []
    for j in range(len(steps)):
        if reads_ahead:
            ahead = [ln for ln in reads[(j + 1) % len(steps)] if _opcode(ln).startswith("ds_read")]
            cluster = ["  s_waitcnt lgkmcnt(0)"] + mfmas[j]
        else:
            ahead = []
            cluster = [ln for ln in steps[j] if ln in mfmas[j] or ln in reads[j]]
        new += ["  s_waitcnt vmcnt(0)", "  s_barrier"] + cluster + ["  s_barrier"] + rest[j] + ahead
    sgprs = re.search(r"\.amdhsa_next_free_sgpr (\d+)", asm)
    group = f"s{sgprs.group(1)}"  # the wave's group: a free SGPR
    first_wave_of_second = 64 * (waves // 2)

    def extra_barrier(skip_group: int, name: str) -> list:
        return [f"  s_cmp_eq_u32 {group}, {skip_group}", f"  s_cbranch_scc1 {name}", "  s_barrier", f"{name}:"]
    before = [f"  v_readfirstlane_b32 {group}, v0", f"  s_cmp_ge_u32 {group}, {first_wave_of_second}",
              f"  s_cselect_b32 {group}, 1, 0"] + extra_barrier(0, ".Lping_pong_probe_0")
    out = lines[:start] + before + [lines[start]] + new + [lines[end]] + extra_barrier(1, ".Lping_pong_probe_1")
    out += lines[end + 1:]
    text = "\n".join(out) + "\n"
    return text.replace(sgprs.group(0), f".amdhsa_next_free_sgpr {int(sgprs.group(1)) + 1}")


def with_mfma_priority(asm: str) -> str:
    """`asm` with `s_setprio 1` before each run of MFMAs in the last loop and `s_setprio 0` before the first VALU
    instruction after it."""
    lines = asm.splitlines()
    start, head = _loop_span(lines)
    out, raised = lines[:start], False
    for ln in lines[start:head + 1]:
        op = _opcode(ln)
        if op.startswith("v_mfma") and not raised:
            out.append("  s_setprio 1")
            raised = True
        elif raised and op.startswith("v_") and not op.startswith("v_mfma"):
            out.append("  s_setprio 0")
            raised = False
        out.append(ln)
    return "\n".join(out + lines[head + 1:]) + "\n"


if __name__ == "__main__":
    os.environ.setdefault("TILEGCN_DEVICE", "emulator")
    main()
