"""The checker's power: delete each `s_waitcnt` of a kernel, one at a time, re-run it on the emulator with
checks on, and count how many deletions the emulator catches.

    PYTHONPATH=$PWD python bench/checker_power.py                 # corpus + tilegcn GEMMs
    PYTHONPATH=$PWD python bench/checker_power.py --only softmax --verbose
    PYTHONPATH=$PWD python bench/checker_power.py --no-corpus --gemm

Kernels: every tests/corpus/*.json (its saved assembly, `.amdgcn`, is edited and reassembled with
llvm-mc + ld.lld) and the tilegcn GEMM configs below (their `.asm`). The k-th `s_waitcnt` line of the
assembly is the k-th `s_waitcnt` of the disassembled kernel, which is how a deletion is matched to what
the unedited run saw at that wait.

Outcome of one deletion:
  caught     the launch raised HazardError / RaceError / EmulatorError
  wrong      no error but the result differs from torch: a checker gap (the emulator let a broken kernel
             through); listed in full
  missed     no error and the right result. Each miss gets the reason the unedited run shows:
             - not reached: the wait never executed with these inputs;
             - idle: when it executed nothing was outstanding beyond its counts (an earlier wait, or
               the in-order counters, already guaranteed it) -- redundant;
             - covered: it retired loads, but nothing touched their destinations before a later wait
               retired them too -- redundant for this program;
             - lds stores: it retired only DS writes. LDS reads of other waves are checked by the race
               tracker (a write not waited for before the s_barrier is a RaceError), and the wave's own
               DS ops are in order -- redundant. (tilegcn's `lgkmcnt(14)` waits between long runs of
               ds_writes are of this kind: they keep at most 15 DS ops outstanding, the largest count
               the 4-bit LGKM_CNT field can name; the emulator's queue has no such bound to check);
             - global stores: it retired only VM-queue stores/atomics without a return value; such a
               wait orders global memory for other waves, which the emulator does not check (no
               cross-wave global-memory race detection) -- a checker gap where a kernel needs it,
               redundant otherwise. Flat stores count here even when they land in LDS: the emulator
               keeps flat ops on the VM queue only and does not race-check their LDS bytes (hardware
               counts them on VM_CNT and LGKM_CNT, and LLVM's workgroup release waits only lgkmcnt(0)
               for them, so race-checking them needs that dual-counter model first).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from tilegcn.errors import TilegcnError  # noqa: E402
from tilegcn.runtime import emulator  # noqa: E402
from tilegcn.runtime.emulator import machine as _machine  # noqa: E402
from tilegcn.toolchain import assemble  # noqa: E402

from test_corpus import CORPUS, ENTRIES, load_entry, run_entry  # noqa: E402

_WAIT_LINE = re.compile(r"^\s*s_waitcnt\b")
GEMM_CONFIGS = [  # (arch, M, N, K, config): small shapes, the tile shapes tests/test_gemm.py covers
    ("gfx942", 128, 128, 128, dict(block_M=64, block_N=64, block_K=64, threads=256)),
    ("gfx942", 128, 128, 256, dict(block_M=128, block_N=128, block_K=64, threads=256, num_stages=2)),
    ("gfx950", 128, 128, 128, dict(block_M=64, block_N=64, block_K=64, threads=256, transpose_B=True)),
    ("gfx950", 128, 128, 256, dict(block_M=128, block_N=128, block_K=128, threads=256)),
]


class WaitRecorder:
    """Wraps Machine.wait during the unedited run: per wait pc, whether it ever ran, ever retired
    something, and whether what it retired included loads (entries with destination registers)."""

    def __init__(self):
        self.seen = {}  # instruction index -> {"ran", "retired", "loads"}

    def __enter__(self):
        self._orig = _machine.Machine.wait
        rec = self

        def wait(m, g, vmcnt=None, lgkmcnt=None):
            info = rec.seen.setdefault(g.pc - 1, {"ran": 0, "retired": 0, "loads": 0, "global_stores": 0})
            info["ran"] += 1
            before = {id(e): e for e in g.vmq + g.lgkmq}
            rec._orig(m, g, vmcnt, lgkmcnt)
            after = {id(e) for e in g.vmq + g.lgkmq}
            gone = [e for k, e in before.items() if k not in after]
            info["retired"] += len(gone) > 0
            info["loads"] += any(e.vregs or e.sregs for e in gone)
            info["global_stores"] += any(e.kind == "vm" and not (e.vregs or e.sregs) for e in gone)

        _machine.Machine.wait = wait
        return self

    def __exit__(self, *exc):
        _machine.Machine.wait = self._orig


def wait_indices(module, kernel):
    """Instruction indices of the kernel's s_waitcnt, in address order."""
    info = module.kernels[kernel]
    sym = module.code.symbols.get(kernel)
    end = info.entry_address + sym.size if sym is not None and sym.size else 1 << 64
    return [i for i, ins in enumerate(module.instrs)
            if ins.base == "s_waitcnt" and info.entry_address <= ins.addr < end]


def reason(seen, index):
    info = seen.get(index)
    if info is None:
        return "not reached"
    if not info["retired"]:
        return "idle"
    if info["loads"]:
        return "covered"
    return "global stores" if info["global_stores"] else "lds stores"


def measure(label, asm, arch, kernel, run, verbose=False):
    """Delete each wait of `asm`; `run(hsaco) -> bool` (True = result right) raises on a caught error."""
    lines = asm.splitlines()
    wait_lines = [i for i, ln in enumerate(lines) if _WAIT_LINE.match(ln)]
    original = assemble(asm, arch)
    module = emulator.load(original)
    waits = wait_indices(module, kernel)
    if len(waits) != len(wait_lines):
        print(f"{label}: {len(wait_lines)} s_waitcnt lines but {len(waits)} in the disassembly; skipped")
        return None
    with WaitRecorder() as rec:
        if not run(original):
            print(f"{label}: the unedited kernel gives a wrong result; skipped")
            return None
    counts = {"caught": 0, "wrong": 0, "not reached": 0, "idle": 0, "covered": 0, "lds stores": 0, "global stores": 0}
    details = []
    for line_no, index in zip(wait_lines, waits):
        edited = "\n".join(lines[:line_no] + lines[line_no + 1:]) + "\n"
        text = f"0x{module.instrs[index].addr:x} `{lines[line_no].strip()}`"
        try:
            ok = run(assemble(edited, arch))
        except TilegcnError as exc:
            counts["caught"] += 1
            details.append((text, "caught", type(exc).__name__))
            continue
        outcome = reason(rec.seen, index) if ok else "wrong"
        counts[outcome] += 1
        details.append((text, outcome, ""))
    missed = len(waits) - counts["caught"]
    print(f"{label}: {len(waits)} waits, caught {counts['caught']}, missed {missed} "
          f"(idle {counts['idle']}, covered {counts['covered']}, lds stores {counts['lds stores']}, "
          f"global stores {counts['global stores']}, "
          f"not reached {counts['not reached']}, WRONG ANSWER {counts['wrong']})")
    for text, outcome, extra in details:
        if verbose or outcome in ("wrong", "global stores"):
            print(f"    {text}: {outcome}{' ' + extra if extra else ''}")
    return counts


def corpus_runner(meta):
    def run(hsaco):
        named, expected = run_entry(meta, check=True, hsaco=hsaco)
        return all(torch.allclose(named[k].float(), expected[k].float(), atol=meta["atol"], rtol=meta["rtol"])
                   for k in expected)
    return run


def corpus_kernels(only):
    for path in ENTRIES:
        meta = load_entry(path)
        if only and meta["name"] not in only:
            continue
        asm = Path(CORPUS, meta["amdgcn"]).read_text()
        # Triton names its target "amdgpu9.42-amd-amdhsa-unknown-gfx942", which llvm-mc refuses to reassemble
        asm = re.sub(r'\.amdgcn_target\s+"[^"]*"', '.amdgcn_target "amdgcn-amd-amdhsa--' + meta["arch"] + '"', asm)
        yield f"{meta['name']} {meta['arch']}", asm, meta["arch"], meta["kernel"], corpus_runner(meta)


def gemm_kernels():
    import kernels

    for arch, M, N, K, cfg in GEMM_CONFIGS:
        g = torch.Generator().manual_seed(0)
        A = torch.randn(M, K, generator=g).bfloat16()
        tb = cfg.get("transpose_B", False)
        B = torch.randn(*((N, K) if tb else (K, N)), generator=g).bfloat16()
        C = torch.zeros(M, N, dtype=torch.bfloat16)
        compiled = kernels.gemm.compile(A, B, C, arch=arch, **cfg)
        ref = A.float() @ (B.float().T if tb else B.float())
        grid, block = tuple(compiled.metadata["grid"]), tuple(compiled.metadata["block"])

        def run(hsaco, compiled=compiled, A=A, B=B, C=C, ref=ref, grid=grid, block=block):
            C.zero_()
            emulator.load(hsaco).launch(compiled.name, grid, block, [A, B, C], check=True)
            return bool(((C.float() - ref).abs() <= 0.02 * ref.abs().max()).all())

        label = f"tilegcn gemm {arch} {M}x{N}x{K} " + ",".join(f"{k}={v}" for k, v in cfg.items())
        yield label, compiled.asm, arch, compiled.name, run


def main(argv=None):
    ap = argparse.ArgumentParser(description="Delete each s_waitcnt, re-run on the emulator, count catches.")
    ap.add_argument("--only", nargs="*", help="corpus kernel names")
    ap.add_argument("--no-corpus", action="store_true")
    ap.add_argument("--gemm", action="store_true", help="also the tilegcn GEMMs (default when no --only)")
    ap.add_argument("--verbose", action="store_true", help="print every deletion, not only wrong/global-stores")
    ap.add_argument("--json", help="write the per-kernel counts here")
    a = ap.parse_args(argv)
    start = time.perf_counter()
    sources = []
    if not a.no_corpus:
        sources.append(corpus_kernels(a.only))
    if a.gemm or not a.only:
        sources.append(gemm_kernels())
    total, results = {}, {}
    for source in sources:
        for label, asm, arch, kernel, run in source:
            try:
                counts = measure(label, asm, arch, kernel, run, a.verbose)
            except TilegcnError as exc:  # the unedited kernel does not run (e.g. an unmodelled instruction)
                print(f"{label}: not measured: {str(exc).splitlines()[0][:200]}")
                continue
            if counts:
                results[label] = counts
                for k, v in counts.items():
                    total[k] = total.get(k, 0) + v
    n = sum(total.values())
    print(f"\nall: {n} deletions in {len(results)} kernels: caught {total.get('caught', 0)}, "
          f"idle {total.get('idle', 0)}, covered {total.get('covered', 0)}, lds stores {total.get('lds stores', 0)}, "
          f"global stores {total.get('global stores', 0)}, "
          f"not reached {total.get('not reached', 0)}, WRONG ANSWER {total.get('wrong', 0)} "
          f"({time.perf_counter() - start:.0f} s)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
