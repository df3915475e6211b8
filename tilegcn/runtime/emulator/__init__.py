"""The emulated device: loads a linked HSACO code object like a runtime would and runs its kernels on
torch tensors (CPU, or whatever device the tensors live on).

    from tilegcn.runtime import emulator
    mod = emulator.load("kernel.hsaco")                    # or bytes; arch from the code object
    stats = mod.launch("gemm", grid=(gx, gy, gz), block=(256, 1, 1), args=[A, B, C, M, N, K])
    print(stats.summary())                                 # also mod.last_stats
    mod.launch("k", grid, block, kernarg=packed_bytes, buffers=[t1, t2], shared_mem=4096)

A launch is set up as hipModuleLaunchKernel sets it up (`dispatch.py`): hidden kernel arguments (grid
and block sizes, dynamic LDS size, apertures, ...), the AQL dispatch packet and queue behind the
dispatch/queue pointer user SGPRs, dynamic LDS (`shared_mem`) on top of the descriptor's fixed size, and
arguments as values or as pre-packed bytes (`kernarg`) whose pointers may reach `buffers`.

Instructions come from `llvm-objdump -d --mcpu=<arch>` of the file (decoded once per code object and
cached in memory); the initial register state follows the kernel descriptor (see `machine.py`). With
check=True (the default) asynchrony hazards, LDS races and MFMA wait states are errors; check=False
keeps the semantics and skips those checks.
"""
from __future__ import annotations

import collections
import contextlib
import contextvars
import hashlib
import os
import threading

import torch

from ...amdgcn.arch import get_arch
from ...errors import ArgumentError, DeviceError, EmulatorError
from ... import toolchain
from .. import codeobject
from .. import kernargs
from . import dispatch
from .decode import Instr, parse_objdump
from .machine import Machine, positive_int_env
from .ops_mem import build_memory
from .ops_f64 import build_f64
from .ops_mfma import build_mfma
from .ops_gpridx import build_gpr_idx, check_indexed, index_regions
from .ops_mode import build_mode
from .ops_salu import build_scalar, build_sopp
from .ops_valu import build_valu
from .program import Binder, BindError, Ctx, fault_handler
from .stats import LaunchStats
from .valu_hazards import RecentWrites

__all__ = ["EmulatorDevice", "Launch", "Module", "load", "LaunchStats"]

class _RecentlyUsed(collections.OrderedDict):
    """A memo that keeps its `maxsize` most recently used entries: a long-lived process (a test session, a
    sweep that loads hundreds of configs) would otherwise keep every program it ever decoded (8-15 MB for a
    256x256 GEMM). A module keeps its own reference, so an evicted entry is only decoded again on a new load."""

    def __init__(self, maxsize: int):
        super().__init__()
        self.maxsize = maxsize

    def get(self, key, default=None):
        if key not in self:
            return default
        self.move_to_end(key)
        return self[key]

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.maxsize:
            self.popitem(last=False)


_DECODED = _RecentlyUsed(32)  # (sha256, arch[, sha256 of a caller's listing]) -> list of Instr
_BOUND = _RecentlyUsed(32)  # (the _DECODED key, kernel, device) -> Program
_LOCK = threading.Lock()
# while set (`recording_launches`), launches are appended here instead of run: tilegcn.testing.do_bench
# estimates them with the timing model, so a benchmark of a large shape does not emulate it
_RECORDING = contextvars.ContextVar("tilegcn_emulator_recording", default=None)


@contextlib.contextmanager
def recording_launches():
    """Within the block, `Module.launch` on this thread records each launch, (module, kernel_name, launch
    keyword arguments), into the yielded list and returns None without running it."""
    recorded = []
    token = _RECORDING.set(recorded)
    try:
        yield recorded
    finally:
        _RECORDING.reset(token)


class Program:
    """A kernel's instructions bound to its descriptor: handlers indexed by instruction number. The other kernels'
    code (each from its entry to the next kernel's entry or the end; `entries`: every kernel's entry address in the
    code object) is not bound, and faults if reached: a code object of several kernels (a program of several T.Kernel
    blocks) would otherwise bind every kernel's code for each launch."""

    def __init__(self, name, arch, kernel, instrs, device, entries=()):
        self.name = name
        self.arch = arch
        self.descriptor = kernel.descriptor
        self.metadata = kernel.metadata
        addr_index = {ins.addr: i for i, ins in enumerate(instrs)}
        if kernel.entry_address not in addr_index:
            raise EmulatorError(f"tilegcn emulator: kernel {name!r}: entry 0x{kernel.entry_address:x} is not an "
                                f"instruction of the code object")
        self.entry_index = addr_index[kernel.entry_address]
        self.ctx = Ctx(arch, kernel.descriptor, addr_index, device)
        regions = index_regions(instrs)
        others = _other_kernels_code(self.entry_index, [addr_index[a] for a in entries if a in addr_index],
                                     len(instrs))
        bound = [(fault_handler(ins, i, f"execution left kernel {name!r} (this instruction is another kernel's)"), None)
                 if i in others else _bind(ins, i, self.ctx, regions.get(i, ())) for i, ins in enumerate(instrs)]
        self.handlers = [h for h, _ in bound]
        # instruction index -> why it cannot run (it faults if reached); see coverage.py
        self.unsupported = {i: why for i, (_, why) in enumerate(bound) if why}
        end = instrs[-1].addr + instrs[-1].size if instrs else 0
        self.handlers.append(fault_handler(Instr(end, 0, "<end of code>", "<end>", "<end>", "", []), len(instrs),
                                           "execution ran past the last instruction (no s_endpgm)"))
        self.uses_lds = any(h.cls == "ds" or "lds" in ins.mods for h, ins in zip(self.handlers, instrs))
        # the VALU-side wait states (valu_hazards.py): facts per instruction, once per program
        self.recent = RecentWrites(self.handlers, instrs, arch, kernel.descriptor.accum_offset)
        self.reg_name = self.ctx.reg_name
        self.sreg_name = self.ctx.sreg_name


def _other_kernels_code(entry: int, starts: list, end: int) -> set:
    """Instruction indices of the other kernels of a code object: each from its entry to the next kernel's entry (or
    the end). Code before the first entry (a device function) stays bound for every kernel; so does all of a
    single-kernel object."""
    starts = sorted(set(starts))
    spans = zip(starts, starts[1:] + [end])
    return {i for first, stop in spans if first != entry for i in range(first, stop)}


def _bind(ins, index, ctx, gpr_index=()):
    """(handler, None) for one instruction; (a handler that raises EmulatorError when executed, the reason)
    for anything that cannot be bound. `gpr_index`: the VGPR index mode's operand names when the instruction
    lies in an s_set_gpr_idx_on region, or why such a region cannot be modelled (ops_gpridx.py)."""
    why = None
    if ins.mnemonic == "<unparsed>":
        why = f"cannot decode this instruction: {ins.mods.get('error')}"
    elif isinstance(gpr_index, str):
        why = gpr_index
    else:
        b = Binder(ctx, ins)
        b.gpr_index = gpr_index
        try:
            # (f64 first: build_valu's class test takes every v_cmp_class_* and knows only f32's)
            for build in (build_f64, build_valu, build_mfma, build_memory, build_scalar, build_mode, build_gpr_idx):
                h = build(ins, b, index)
                if h is not None:
                    if gpr_index:
                        check_indexed(ins, b)
                    return h, None
            h = build_sopp(ins, b, index, ctx)
            if h is not None:
                return h, None
        except BindError as exc:
            why = f"{ins.mnemonic}: {exc}"
        else:
            why = (f"unknown instruction {ins.mnemonic!r} (not modelled by the emulator, or not an instruction "
                   f"of {ctx.arch.name})")
    return fault_handler(ins, index, why), why


class Module:
    """A loaded code object; `launch` runs one of its kernels."""

    def __init__(self, data: bytes, arch=None, device=None, disassembly=None):
        self.code = codeobject.parse(data)
        self.arch = get_arch(self.code.arch if arch is None else arch)  # arch="" is refused, not the default
        self.digest = hashlib.sha256(self.code.data).hexdigest()
        self.kernels = self.code.kernels
        self.last_stats = None
        self._dispatches = 0  # dispatch ids, as a queue numbers its packets
        # `disassembly`: the caller's llvm-objdump text of these very bytes (an exported kernel carries it, bound
        # to the code object by the export's manifest), so a machine without LLVM can run it. Memoised under its
        # own digest too: a caller's text never stands in for objdump's in another load of the same bytes.
        key = (self.digest, self.arch.name) if disassembly is None else (
            self.digest, self.arch.name, hashlib.sha256(disassembly.encode()).hexdigest())
        with _LOCK:
            instrs = _DECODED.get(key)
            if instrs is None:
                text = toolchain.disassemble(self.code.data, self.arch.name) if disassembly is None else disassembly
                instrs = _DECODED[key] = parse_objdump(text)
        self.instrs = instrs
        self._decoded_key = key

    def program(self, name, device) -> Program:
        if name not in self.kernels:
            raise DeviceError(f"tilegcn emulator: no kernel {name!r} in the code object; it has "
                              f"{', '.join(self.kernels) or 'none'}")
        key = (*self._decoded_key, name, str(device))
        with _LOCK:
            prog = _BOUND.get(key)
            if prog is None:
                entries = [k.entry_address for k in self.kernels.values()]
                prog = _BOUND[key] = Program(name, self.arch, self.kernels[name], self.instrs, device, entries)
        return prog

    def launch(self, kernel_name, grid=(1, 1, 1), block=(64, 1, 1), args=(), shared_mem=0, kernarg=None,
               buffers=(), check=True) -> LaunchStats:
        """Run `kernel_name` over `grid` workgroups of `block` threads, as hipModuleLaunchKernel would;
        returns LaunchStats. The explicit arguments come as values (`args`) or as their packed bytes
        (`kernarg`, with `args` empty); `buffers` are tensors the kernel reaches only through pointers
        inside those bytes or structs (they are mapped like tensor arguments); `shared_mem` bytes of
        dynamic LDS are added to the descriptor's fixed size."""
        recording = _RECORDING.get()
        if recording is not None:  # inside `recording_launches`: noted for the timing model, not run
            recording.append((self, kernel_name, dict(grid=grid, block=block, args=args, shared_mem=shared_mem,
                                                      kernarg=kernarg, buffers=buffers)))
            return None
        launch = self.prepare(kernel_name, grid, block, args, shared_mem, kernarg, buffers)
        _check_emulated_size(kernel_name, launch.grid)
        machine = Machine(launch.program, launch.grid, launch.block, launch.dispatch, launch.tensors, check,
                          launch.device)
        with _LaunchThreads():
            stats = machine.run()
        self.last_stats = stats
        return stats

    def prepare(self, kernel_name, grid=(1, 1, 1), block=(64, 1, 1), args=(), shared_mem=0, kernarg=None,
                buffers=()) -> "Launch":
        """Everything `launch` checks and builds before running (program, dispatch, mapped tensors)."""
        grid, block = _dim3(grid, "grid"), _dim3(block, "block")
        if isinstance(shared_mem, bool) or not isinstance(shared_mem, int) or shared_mem < 0:
            raise ArgumentError(f"tilegcn emulator: shared_mem must be a byte count >= 0, got {shared_mem!r}")
        args, buffers = list(args), list(buffers)
        for i, b in enumerate(buffers):
            if not isinstance(b, torch.Tensor):
                raise ArgumentError(f"tilegcn emulator: buffers[{i}] must be a tensor, got {type(b).__name__}")
        tensors = [a for a in args if isinstance(a, torch.Tensor)] + buffers
        devices = {t.device for t in tensors}
        if len(devices) > 1:
            raise DeviceError(f"tilegcn emulator: tensor arguments live on different devices: {sorted(map(str, devices))}")
        device = devices.pop() if devices else torch.device("cpu")
        prog = self.program(kernel_name, device)
        _check_launch_size(kernel_name, grid, block, self.arch)
        info = self.kernels[kernel_name]
        kd = prog.descriptor
        if kd.float_round_mode_32 or kd.float_round_mode_16_64:
            raise EmulatorError(f"tilegcn emulator: kernel {kernel_name!r}: only round-to-nearest-even float modes "
                                f"are modelled (descriptor FLOAT_ROUND_MODE {kd.float_round_mode_32}/"
                                f"{kd.float_round_mode_16_64})")
        if kd.wavefront_size32:
            raise EmulatorError(f"tilegcn emulator: kernel {kernel_name!r} asks for wave32; {self.arch.name} runs wave64")
        explicit = kernargs.build(info.metadata, args, kernarg, info.metadata.get(".kernarg_segment_size", kd.kernarg_size))
        self._dispatches += 1
        disp = dispatch.prepare(info, grid, block, explicit, shared_mem, dispatch_id=self._dispatches)
        return Launch(prog, grid, block, disp, tensors, device)


class Launch:
    """One prepared dispatch: the bound program, dims, dispatch state (kernarg, packet, user SGPRs) and the
    tensors mapped into global memory."""

    def __init__(self, program, grid, block, dispatch_state, tensors, device):
        self.program, self.grid, self.block = program, grid, block
        self.dispatch, self.tensors, self.device = dispatch_state, tensors, device


class _LaunchThreads:
    """torch's intra-op thread count set to `_launch_threads()` while any launch runs, restored when the last
    one ends: the count is process-wide, so launches from several Python threads share one save/restore (each
    saving and restoring its own could leave the process at the launch's count)."""

    _lock = threading.Lock()
    _running = 0
    _saved = None

    def __enter__(self):
        cls = _LaunchThreads
        with cls._lock:
            if cls._running == 0:
                cls._saved = torch.get_num_threads()
                want = _launch_threads()
                if want != cls._saved:
                    torch.set_num_threads(want)
            cls._running += 1

    def __exit__(self, *exc):
        cls = _LaunchThreads
        with cls._lock:
            cls._running -= 1
            if cls._running == 0 and torch.get_num_threads() != cls._saved:
                torch.set_num_threads(cls._saved)


def _launch_threads() -> int:
    """torch intra-op threads during a launch. The emulator's tensors are mostly a few thousand to a few
    hundred thousand elements, where waking a thread pool for every op costs more than it saves (on the
    2-core machines this was measured on, by a factor of up to 400): default 1, override with
    $TILEGCN_EMULATOR_THREADS."""
    return positive_int_env("TILEGCN_EMULATOR_THREADS", 1, "torch threads")


# The emulated device runs some 10^4 small workgroups a second at best: a launch of more workgroups than
# this would take hours, so it is refused up front (the timing model, which runs a few, takes any grid)
MAX_EMULATED_WORKGROUPS = 1 << 24


def _check_launch_size(name, grid, block, arch):
    """Refuse what no dispatch packet can describe (before anything is packed into one)."""
    threads = block[0] * block[1] * block[2]
    if threads > arch.max_workgroup_threads:
        raise EmulatorError(f"tilegcn emulator: kernel {name!r}: block {block} has {threads} threads; {arch.name} "
                            f"allows 1..{arch.max_workgroup_threads}")
    for axis, g, b in zip("xyz", grid, block):
        if g * b > dispatch.MAX_GRID_WORK_ITEMS:
            raise DeviceError(f"tilegcn emulator: kernel {name!r}: grid {grid} of {block}-thread blocks has {g * b} "
                              f"work-items along {axis}; a dispatch holds at most 2^32-1 per dimension (the AQL "
                              f"packet's grid size is 32-bit): split the launch, or spread it over y and z")


def _check_emulated_size(name, grid):
    workgroups = grid[0] * grid[1] * grid[2]
    if workgroups > MAX_EMULATED_WORKGROUPS:
        raise EmulatorError(f"tilegcn emulator: kernel {name!r}: grid {grid} has {workgroups} workgroups; the "
                            f"emulated device would take hours over it and runs at most {MAX_EMULATED_WORKGROUPS} "
                            f"per launch: emulate a smaller problem, or run it on a GPU")


def _dim3(v, what):
    if isinstance(v, int):
        v = (v,)
    v = tuple(int(x) for x in v) + (1,) * (3 - len(v))
    if len(v) != 3 or any(x < 1 for x in v):
        raise DeviceError(f"tilegcn emulator: {what} must be 1 to 3 positive integers, got {v}")
    return v


class EmulatorDevice:
    """The Device interface of the emulator: `load(hsaco) -> Module`."""

    name = "emulator"

    def __init__(self, arch=None):
        self.arch = arch

    def load(self, hsaco, arch=None) -> Module:
        return load(hsaco, arch=self.arch if arch is None else arch)


def load(path_or_bytes, arch=None, disassembly=None) -> Module:
    """Load a code object (bytes or a path). `arch` overrides the code object's arch (decode and run it
    as that arch). `disassembly`: its `llvm-objdump -d --mcpu=<arch>` text, made beforehand (then no LLVM is
    needed; the caller vouches that it is the text of these bytes)."""
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        data = bytes(path_or_bytes)
    else:
        with open(os.fspath(path_or_bytes), "rb") as f:
            data = f.read()
    return Module(data, arch, disassembly=disassembly)
