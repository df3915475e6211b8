"""Bind decoded instructions to one kernel: every instruction becomes a `Handler` whose `run(group)`
executes it for a group of waves, plus what the checks need (registers read and written, class).

Register operands are checked against the kernel descriptor here (VGPRs below accum_offset and the
allocated count, AGPRs at accum_offset + i, SGPRs below the allocated count); an instruction that
cannot be bound (unknown, illegal on the arch, out-of-range register) becomes a handler that raises
EmulatorError when - and only if - it executes.

Operand readers return int32 register bits: [n, 64] for a VGPR, [n, 1] for an SGPR (the same value in
every lane), a 0-dim tensor for a constant; ops broadcast them.
"""
from __future__ import annotations

import torch

from .decode import SPECIAL_SGPRS, Const, Reg, Special, signed32
from .state import Fault

INT_MIN = -(1 << 31)
_SPECIAL_NAMES = {slot: name for name, (slot, count) in SPECIAL_SGPRS.items() if count == 1}


class BindError(Exception):
    """An instruction cannot be bound for this kernel (message says why)."""


class Handler:
    """One bound instruction. vr/vw/sr/sw: registers read / written when it issues; vdef/sdef: registers
    its memory access reads or writes when it retires (load destinations); queue: 'vm', 'ds', 'smem'."""

    __slots__ = ("run", "ws", "vr", "vw", "sr", "sw", "vdef", "sdef", "vrw", "srw", "cls", "vector", "mfma",
                 "hazard_reads_mfma", "tracks_valu_write", "addr", "text", "mnemonic", "index", "queue")

    def __init__(self, ins, index, run, cls, binder=None, ws=1, mfma=None, queue=None):
        self.run, self.cls, self.ws, self.mfma, self.queue = run, cls, ws, mfma, queue
        self.addr, self.text, self.mnemonic, self.index = ins.addr, ins.text, ins.mnemonic, index
        b = binder
        self.vr = frozenset(b.vr) if b else frozenset()
        self.vw = frozenset(b.vw) if b else frozenset()
        self.sr = frozenset(b.sr) if b else frozenset()
        self.sw = frozenset(b.sw) if b else frozenset()
        self.vdef = frozenset(b.vdef) if b else frozenset()
        self.sdef = frozenset(b.sdef) if b else frozenset()
        self.vrw = self.vr | self.vw | self.vdef
        self.srw = self.sr | self.sw | self.sdef
        self.vector = cls in ("valu", "mfma", "vmem", "ds")
        self.hazard_reads_mfma = cls in ("valu", "vmem", "ds")
        self.tracks_valu_write = cls == "valu" and bool(self.vw)


class Ctx:
    """What binding needs to know about the kernel."""

    def __init__(self, arch, descriptor, addr_index: dict, device):
        self.arch = arch
        self.kd = descriptor
        self.accum_offset = descriptor.accum_offset
        self.vgpr_total = descriptor.vgpr_count
        self.n_vgpr = min(descriptor.accum_offset, descriptor.vgpr_count, arch.arch_vgprs)
        # v-register names the unified file reaches: v[n] is unified register n, so past accum_offset it is the
        # register a[n - accum_offset] names. The hardware checks only the allocation: aiter's FAv3 forward code
        # objects (gfx942 and gfx950) use v160..v255 with accum_offset 160 and no AGPRs.
        self.v_reach = min(descriptor.vgpr_count, arch.arch_vgprs)
        self.n_agpr = min(max(0, descriptor.vgpr_count - descriptor.accum_offset), arch.agprs)
        self.n_sgpr = min(descriptor.sgpr_count, arch.addressable_sgprs)
        self.addr_index = addr_index
        self.device = device
        mode = descriptor.float_denorm_mode_32
        self.flush_src = mode in (0, 2)
        self.flush_dst = mode in (0, 1)
        self.dx10_clamp = descriptor.dx10_clamp
        self.const_cache = {}

    def const_tensor(self, bits32: int):
        key = bits32 & 0xFFFFFFFF
        t = self.const_cache.get(key)
        if t is None:
            t = self.const_cache[key] = torch.tensor(signed32(key), dtype=torch.int32, device=self.device)
        return t

    def reg_name(self, unified: int) -> str:
        if unified >= self.accum_offset:
            return f"a{unified - self.accum_offset}"
        return f"v{unified}"

    def sreg_name(self, slot: int) -> str:
        return _SPECIAL_NAMES.get(slot, f"s{slot}")


class Binder:
    """Binds one instruction's operands, recording the registers it reads and writes."""

    def __init__(self, ctx: Ctx, ins):
        self.ctx, self.ins = ctx, ins
        self.vr, self.vw, self.sr, self.sw = set(), set(), set(), set()
        self.vdef, self.sdef = set(), set()
        # DPP / SDWA: transforms of the next 32-bit sources read (in operand order), see ops_xlane.py
        self.src_hooks = []
        # VGPR index mode (ops_gpridx.py): the operands it names ('SRC0', ...) and the sources read indexed
        self.gpr_index, self.gpr_indexed = (), set()

    def defer(self, first, count, scalar=False):
        """Registers first.. that the instruction's memory access writes (or merges into) at retirement."""
        regs = set(range(first, first + count))
        if scalar:
            self.sw -= regs
            self.sdef |= regs
        else:
            self.vw -= regs
            self.vdef |= regs

    # ---- register indices -----------------------------------------------------------------------
    def vindex(self, op, count=None, what="operand") -> int:
        """Unified-file index of a VGPR/AGPR operand (checked against the descriptor's counts)."""
        if not isinstance(op, Reg) or op.kind not in "va":
            raise BindError(f"{what} must be a VGPR or AGPR, got {_txt(op)}")
        if count is not None and op.count != count:
            raise BindError(f"{what} {op.text} must be {count} register(s), not {op.count}")
        ctx = self.ctx
        if op.kind == "v":
            if op.index + op.count > ctx.v_reach:
                raise BindError(f"{op.text} is beyond the kernel's {ctx.v_reach} VGPRs (descriptor: "
                                f"{ctx.vgpr_total} unified registers, accum_offset {ctx.accum_offset})")
            return op.index
        if op.index + op.count > ctx.n_agpr:
            raise BindError(f"{op.text} is beyond the kernel's {ctx.n_agpr} AGPRs (descriptor: {ctx.vgpr_total} "
                            f"unified registers, accum_offset {ctx.accum_offset})")
        return ctx.accum_offset + op.index

    def sindex(self, op, count=None, what="operand") -> int:
        if not isinstance(op, Reg) or op.kind != "s":
            raise BindError(f"{what} must be an SGPR, got {_txt(op)}")
        if count is not None and op.count != count:
            raise BindError(f"{what} {op.text} must be {count} register(s), not {op.count}")
        if op.index < 102 and op.index + op.count > self.ctx.n_sgpr:
            raise BindError(f"{op.text} is beyond the kernel's {self.ctx.n_sgpr} SGPRs")
        return op.index

    def vdst(self, op, count=1, what="destination"):
        r = self.vindex(op, count, what)
        self.vw.update(range(r, r + op.count))
        return r

    def vsrc_index(self, op, count=1, what="source"):
        r = self.vindex(op, count, what)
        self.vr.update(range(r, r + op.count))
        return r

    def sdst(self, op, count=1, what="destination"):
        s = self.sindex(op, count, what)
        self.sw.update(range(s, s + op.count))
        return s

    def ssrc_index(self, op, count=1, what="source"):
        s = self.sindex(op, count, what)
        self.sr.update(range(s, s + op.count))
        return s

    def read_s(self, slot, count=1):
        self.sr.update(range(slot, slot + count))

    def write_s(self, slot, count=1):
        self.sw.update(range(slot, slot + count))

    # ---- 32-bit vector sources ------------------------------------------------------------------------
    def src(self, op, float_mods=True, what="source"):
        """Reader of a 32-bit source as int32 bits, with neg/abs applied to the sign bit (float operands)."""
        mods = (op.abs, op.neg) if isinstance(op, (Reg, Const)) else (False, False)
        if not float_mods and any(mods):
            raise BindError(f"{what} {_txt(op)}: neg/abs modifiers are not valid here")
        read = self._raw_src(op, what)
        if self.src_hooks:
            read = self.src_hooks.pop(0)(read)
        return _with_sign_mods(read, *mods) if any(mods) else read

    def _raw_src(self, op, what):
        if isinstance(op, Const):
            c = self.ctx.const_tensor(op.bits)
            return lambda g: c
        if isinstance(op, Special):
            return _special_reader(op.name)
        if isinstance(op, Reg) and op.kind in "va":
            r = self.vsrc_index(op, 1, what)
            return self._indexed(op, r) or _vreader(r)
        if isinstance(op, Reg) and op.kind == "s":
            s = self.ssrc_index(op, 1, what)
            return _sreader(s)
        raise BindError(f"{what} {_txt(op)} is not a valid 32-bit source")

    def _indexed(self, op, r, k=0):
        """A reader of VGPR r + k + M0[7:0] when VGPR index mode names this source (ops_gpridx.py), else None."""
        if not self.gpr_index or op.kind != "v":
            return None
        for n, name in enumerate(("SRC0", "SRC1", "SRC2")):
            if name in self.gpr_index and n + 1 < len(self.ins.operands) and self.ins.operands[n + 1] is op:
                from .ops_gpridx import indexed_vreader

                self.gpr_indexed.add(n)
                return indexed_vreader(r + k, self.ctx.v_reach, op.text)
        return None

    def src_pair(self, op, what="source"):
        """Readers (lo, hi) of a 64-bit source (register pair or constant)."""
        if isinstance(op, Const):
            v = op.bits64()
            lo, hi = self.ctx.const_tensor(v & 0xFFFFFFFF), self.ctx.const_tensor(v >> 32)
            return (lambda g: lo), (lambda g: hi)
        if isinstance(op, Reg) and op.kind in "va":
            r = self.vsrc_index(op, 2, what)
            lo = self._indexed(op, r)
            if lo is not None:
                return lo, self._indexed(op, r, 1)
            return _vreader(r), _vreader(r + 1)
        if isinstance(op, Reg) and op.kind == "s":
            s = self.ssrc_index(op, 2, what)
            return _sreader(s), _sreader(s + 1)
        raise BindError(f"{what} {_txt(op)} is not a valid 64-bit source")


def _txt(op):
    return getattr(op, "text", None) or repr(op)


def _vreader(r):
    def read(g):
        V = g.V
        return V[r] if V is not None else g.m.vgpr[r].index_select(0, g.sel)
    return read


def _sreader(slot):
    def read(g):
        return g.rs(slot).to(torch.int32).unsqueeze(1)
    return read


def _special_reader(name):
    def read(g):
        if name == "src_scc":
            v = g.rscc()
        elif name == "src_vccz":
            v = (g.rs(106) | g.rs(107)) == 0
        else:
            v = (g.rs(126) | g.rs(127)) == 0
        return v.to(torch.int32).unsqueeze(1)
    return read


def _with_sign_mods(read, ab, neg):
    if ab and neg:
        return lambda g: read(g) | INT_MIN
    if ab:
        return lambda g: read(g) & 0x7FFFFFFF
    return lambda g: read(g) ^ INT_MIN


def as_f32(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.float32)


def as_bits(y: torch.Tensor) -> torch.Tensor:
    return y.view(torch.int32)


def u32(x: torch.Tensor) -> torch.Tensor:
    """int32 bits -> int64 holding the unsigned value."""
    return x.to(torch.int64) & 0xFFFFFFFF


def fault_handler(ins, index, message, kind="EmulatorError"):
    def run(g):
        raise Fault(message, row=0, kind=kind)
    return Handler(ins, index, run, "other")


