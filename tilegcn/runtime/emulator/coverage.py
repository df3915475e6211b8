"""Which instructions of a code object the emulated device cannot run, per kernel.

    python -m tilegcn.runtime.emulator.coverage FILE.hsaco [FILE ...] [--arch gfx950]

prints, for every kernel, the mnemonics the emulator does not model (with how often and the first
address) and exits with status 1 when there is any; a kernel whose every instruction is modelled prints
one "ok" line. The instructions are bound exactly as a launch binds them, so "modelled" here means a
launch would not stop on an unknown instruction (it may still stop on a hazard or a memory fault).
"""
from __future__ import annotations

import argparse
import sys

import torch

from . import load


def _kernel_range(module, name):
    """[first, end) instruction addresses of kernel `name`: its function symbol, else up to the next entry."""
    info = module.kernels[name]
    sym = module.code.symbols.get(name)
    if sym is not None and sym.size:
        return info.entry_address, info.entry_address + sym.size
    later = sorted(k.entry_address for k in module.kernels.values() if k.entry_address > info.entry_address)
    return info.entry_address, later[0] if later else 1 << 64


def unsupported(module) -> dict:
    """{kernel name: {mnemonic: [(address, reason), ...]}} of what the emulator cannot run."""
    out = {}
    for name in module.kernels:
        prog = module.program(name, torch.device("cpu"))
        lo, hi = _kernel_range(module, name)
        found = {}
        for index, why in sorted(prog.unsupported.items()):
            ins = module.instrs[index]
            if lo <= ins.addr < hi:
                mnemonic = ins.text.split()[0] if ins.mnemonic == "<unparsed>" else ins.mnemonic
                found.setdefault(mnemonic, []).append((ins.addr, why))
        out[name] = found
    return out


def report(paths, arch=None, stream=None) -> int:
    """Print the report for `paths`; returns the number of kernels with something not modelled."""
    stream = stream or sys.stdout
    bad = 0
    for path in paths:
        module = load(path, arch=arch)
        for name, found in unsupported(module).items():
            lo, hi = _kernel_range(module, name)
            count = sum(1 for ins in module.instrs if lo <= ins.addr < hi)
            if not found:
                print(f"{path}: {module.arch.name} {name}: ok, all {count} instructions modelled", file=stream)
                continue
            bad += 1
            print(f"{path}: {module.arch.name} {name}: {sum(map(len, found.values()))} of {count} instructions "
                  f"not modelled", file=stream)
            for mnemonic, where in sorted(found.items()):
                addr, why = where[0]
                print(f"  {mnemonic} x{len(where)} (first at 0x{addr:x}): {why}", file=stream)
    return bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tilegcn.runtime.emulator.coverage",
                                 description="List the instructions of code objects the emulator cannot run.")
    ap.add_argument("files", nargs="+", help="code objects (.hsaco)")
    ap.add_argument("--arch", default=None, help="decode and run as this arch instead of the code object's")
    a = ap.parse_args(argv)
    return 1 if report(a.files, a.arch) else 0


if __name__ == "__main__":
    sys.exit(main())
