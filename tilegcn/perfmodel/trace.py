"""Dynamic instruction streams from the functional emulator: the timing model's input.

`record(module, name, grid, block, args, ...)` runs the kernel on the emulated device for the workgroups
that share one XCD in the first dispatch round (workgroup i goes to XCD i % 8) and observes it through
the emulator's public trace API (tilegcn/runtime/emulator/tracing.py):
- the *stream* of each wave of the first of those workgroups: its pc sequence, with the extra LDS cycles
  of every DS instruction (the emulator's bank-conflict phases), and markers where a loop was skipped;
- the *footprint* of every recorded workgroup: the 128-byte lines each of its global loads touches, with the
  load's position in the wave's stream of global loads (its step) and the loop iteration it ran in
  (segments between taken backward branches), for the L2 model.

Loop fast-forward. Simulating 128 K steps of a 256x256 tile in the functional emulator takes ~15 s here;
the timing model needs only a few steady iterations. After `detail_iterations` trips of a loop whose exit
test is a bottom `s_cmp` + `s_cbranch_scc*` on an SGPR that moves by a constant step, the trace computes
the remaining trip count from the comparison and moves the counter SGPR to the last trip (in every wave
of the group), so the loop runs once more and the epilogue executes. The stream gets a `Skip` marker with
the number of trips left out; the timing model adds that many copies of the steady iteration time. The
computed values after a fast-forward are garbage (the model needs only control flow and addresses); a
loop whose counter cannot be recognised runs to the end.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import copy

import numpy as np
import torch

from ..runtime.emulator.tracing import Const, Reg, StopRun, run_traced, traced_machine

_CMP = {"eq": lambda a, b: a == b, "lg": lambda a, b: a != b, "gt": lambda a, b: a > b,
        "ge": lambda a, b: a >= b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b}
MAX_TRIPS = 1 << 20


@dataclass
class Skip:
    """Stream marker: `trips` iterations of the loop starting at pc index `loop` were fast-forwarded."""

    loop: int
    trips: int


@dataclass
class Trace:
    program: object  # emulator Program (handlers, descriptor)
    streams: list  # per wave of the detailed workgroup: list of (pc, extra LDS cycles) or Skip
    footprints: dict = field(default_factory=dict)  # (workgroup, segment) -> (steps, lines) arrays (l2.py)


class Tracer:
    """The machine's trace hook (see module docstring)."""

    def __init__(self, machine, instrs, detail_iterations, line_bytes, footprint_segments=(0, 1, 2)):
        self.m = machine
        self.instrs = instrs
        self.detail = detail_iterations
        self.line_shift = line_bytes.bit_length() - 1
        self.segs_wanted = set(footprint_segments)
        self.wpw = machine.waves_per_wg
        self.streams = [[] for _ in range(self.wpw)]
        self.footprints = {}
        self.conflicts = 0
        self.access = None
        self.segment = {}  # chunk-local wave -> loop iterations completed (any loop)
        self.steps = {}  # chunk-local wave -> global load instructions executed
        self.trips = {}  # loop pc -> trips taken in the current run of the loop
        self.snap = {}  # loop pc -> SGPR values of the group's first wave at each back edge
        self.last_cmp = None
        self.first_chunk = True
        self.stop_after = None  # stop the run once every wave completed this many loop trips

    # ---- hooks called by the machine ----------------------------------------------------------------
    def ds_conflicts(self, count):
        self.conflicts += count

    def global_access(self, addr, act, write):
        if not write:
            self.access = (addr, act)

    def step(self, g, h, pc):
        conflicts, self.conflicts = self.conflicts, 0
        access, self.access = self.access, None
        if self.first_chunk and g.waves[0] < self.wpw:
            extra = conflicts / g.n
            for w in g.waves:
                if w < self.wpw:
                    self.streams[w].append((pc, extra))
        if access is not None:
            self._footprint(g, *access)
        if h.cls == "salu" and h.mnemonic.startswith("s_cmp"):
            self.last_cmp = pc
        elif h.cls == "branch" and g.state != "split":
            if g.pc <= pc:
                self._back_edge(g, pc, g.pc)
            elif self.trips.get(pc):
                self.trips[pc] = 0  # the loop exited

    # ---- footprints -----------------------------------------------------------------------------------
    def _footprint(self, g, addr, act):
        seg = self.segment.get(g.waves[0], 0)
        step = self.steps.get(g.waves[0], 0)  # the waves' count of global loads so far
        for w in g.waves:
            self.steps[w] = step + 1
        if seg not in self.segs_wanted:
            return
        n = addr.shape[0]
        rows = torch.arange(n, dtype=torch.int64, device=addr.device).view(n, 1, 1)
        # lines are counted from each buffer's start, as if it were line aligned (as hipMalloc's are), so
        # the estimate does not depend on where torch happened to allocate the tensor
        bases = self.m.mem.bases
        region = (torch.searchsorted(bases, addr.contiguous(), right=True) - 1).clamp(min=0)
        lines = ((addr - bases[region]) >> self.line_shift) | (region << 32)
        keys = (rows << 44) | lines  # [n, 64, k]
        keys = keys[act] if act is not None else keys.reshape(-1)
        wgs = [self.m.chunk_wgs[w // self.wpw] for w in g.waves]
        keys = np.unique(keys.cpu().numpy())
        rows = keys >> 44
        lines = keys & ((1 << 44) - 1)
        fp = self.footprints
        for row in np.unique(rows).tolist():  # the waves' workgroups (usually one)
            mine = lines[rows == row]
            fp.setdefault((wgs[row], seg), []).append((np.full(len(mine), step, np.int64), mine))

    # ---- loops ----------------------------------------------------------------------------------------------
    def _back_edge(self, g, pc, target):
        for w in g.waves:
            self.segment[w] = self.segment.get(w, 0) + 1
        if self.stop_after is not None and len(self.segment) == self.m.W and \
                min(self.segment.values()) > self.stop_after:
            raise StopRun()
        n = self.trips.get(pc, 0) + 1
        self.trips[pc] = n
        m = self.m
        if g.n != m.W:
            return  # diverged waves: no fast-forward
        snaps = self.snap.setdefault(pc, [])
        snaps.append(m.sgpr[:, g.waves[0]].tolist())
        if n == self.detail and self.last_cmp is not None and self.instrs[pc].base.startswith("s_cbranch"):
            self._fast_forward(g, pc, target, snaps[-3:])
            self.snap[pc] = []

    def _fast_forward(self, g, pc, target, snaps):
        if len(snaps) < 3:
            return
        cmp_ins, br = self.instrs[self.last_cmp], self.instrs[pc]
        parts = cmp_ins.base.split("_")  # s_cmp_lt_u32
        if len(parts) != 4 or parts[2] not in _CMP or len(cmp_ins.operands) != 2:
            return
        pred, signed = _CMP[parts[2]], parts[3].startswith("i")
        take_if = br.base.endswith("scc1")
        if not (br.base.endswith("scc1") or br.base.endswith("scc0")):
            return
        vals = []
        for op in cmp_ins.operands:
            if isinstance(op, Reg) and op.kind == "s" and op.count == 1:
                vals.append(("reg", op.index, [s[op.index] for s in snaps]))
            elif isinstance(op, Const):
                vals.append(("const", None, [op.value if op.kind != "float" else op.bits] * 3))
            else:
                return
        counter = [v for v in vals if v[0] == "reg" and v[2][2] - v[2][1] == v[2][1] - v[2][0] != 0]
        fixed = [v for v in vals if v[2][0] == v[2][1] == v[2][2]]
        if len(counter) != 1 or len(fixed) != 1:
            return
        _, slot, cv = counter[0]
        step = cv[2] - cv[1]
        first = vals[0] is counter[0]

        def taken(c):
            a, b = (c, fixed[0][2][0]) if first else (fixed[0][2][0], c)
            a, b = _as_int(a, signed), _as_int(b, signed)
            return pred(a, b) == take_if

        remaining = 0
        c = cv[2]
        while remaining < MAX_TRIPS:
            c = (c + step) & 0xFFFFFFFF
            if not taken(c):
                break
            remaining += 1
        else:
            return
        # `remaining` more back edges would be taken: skip all of them but the last trip
        if remaining < 2:
            return
        skip = remaining - 1
        self.m.sgpr[slot, g.waves[0]:g.waves[-1] + 1] = (cv[2] + skip * step) & 0xFFFFFFFF
        if self.first_chunk:
            for w in g.waves:
                if w < self.wpw:
                    self.streams[w].append(Skip(target, skip))


def _as_int(v, signed):
    v &= 0xFFFFFFFF
    return v - (1 << 32) if signed and v & 0x80000000 else v


_WHAT = "tilegcn timing: the functional run that feeds the timing model"


def record(module, name, launch_args, wgs, detail_iterations=4, line_bytes=128) -> Trace:
    """Two functional runs with the trace hook (`launch_args`: Module.prepare's keyword arguments):
    - the detailed workgroup `wgs[0]`, exactly (check=False), for the wave streams;
    - all of `wgs` (one XCD's workgroups of a round) for their L2 footprints. This run skips MFMA math and
      LDS accesses (their values cannot change the addresses of GEMM-like kernels) and stops once every
      wave is past the iterations it records, so it costs a few loop trips of address arithmetic.
    """
    machine = traced_machine(module, name, launch_args, wgs[:1])
    tracer = Tracer(machine, module.instrs, detail_iterations, line_bytes, footprint_segments=())
    run_traced(machine, tracer, _WHAT)
    program = machine.prog
    machine = traced_machine(module, name, launch_args, wgs, _addresses_only)
    foot = Tracer(machine, module.instrs, 0, line_bytes)
    foot.first_chunk = False
    foot.stop_after = max(foot.segs_wanted)
    run_traced(machine, foot, _WHAT)
    footprints = {key: tuple(np.concatenate(x) for x in zip(*parts)) for key, parts in foot.footprints.items()}
    return Trace(program, tracer.streams, footprints)


def _addresses_only(handlers):
    out = []
    for h in handlers:
        if h.cls in ("mfma", "ds"):
            h = copy.copy(h)
            h.run = _nothing
        out.append(h)
    return out


def _nothing(g):
    pass
