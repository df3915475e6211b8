"""The emulated device's public trace API: run part of a launch with an observer, for tools built on the
emulator (the timing model, tilegcn/perfmodel) that must not reach into its internals.

    machine = traced_machine(module, "gemm", dict(grid=g, block=b, args=args), workgroups=[0, 8, 16])
    run_traced(machine, observer)          # functional run of those workgroups only, calling the observer

An observer has three hooks, called by the machine as it runs:
- `step(group, handler, pc)` after each instruction a wave group executed: `group.waves` (wave numbers within
  the run), `group.pc` (the next pc), `group.n` (waves in the group), `group.state` ("split" while diverged);
  `handler.cls` ("salu", "branch", "mfma", "ds", ...) and `handler.mnemonic`;
- `global_access(addr, active, write)` for every global memory access: byte addresses [lanes, ...] and the
  active-lane mask (None: all);
- `ds_conflicts(count)` for the extra LDS bank-conflict cycles of a DS instruction.
It may read the machine's `sgpr` ([register, wave] values, writable: a tool may move a loop counter),
`mem.bases` (sorted start addresses of the mapped buffers), `chunk_wgs` (the linear workgroup id of each
workgroup of the current chunk), `W` (waves in the chunk) and `waves_per_wg`; raising `StopRun` from a hook
ends the run cleanly (what has been written stays written, unless the machine's memory is lazy). Decoded
instructions are `module.instrs` (`Instr`: `.base`, `.operands` of `Reg` and `Const`), the bound handlers
`machine.prog.handlers`.
"""
from __future__ import annotations

import copy

import torch

from ...errors import EmulatorError
from .decode import Const, Instr, Reg
from .machine import Machine
from .mfma import shape_of as mfma_shape

__all__ = ["Const", "Instr", "Reg", "StopRun", "dim3", "launch_threads", "mfma_shape", "run_traced",
           "traced_machine"]


class StopRun(Exception):
    """Raised by an observer's hook to end a traced run early (what has been written stays written)."""


def dim3(value, what: str) -> tuple:
    """A grid or block as the launch takes it (an int, or 1 to 3 ints) -> (x, y, z); a DeviceError if bad."""
    from . import _dim3

    return _dim3(value, what)


def launch_threads() -> int:
    """torch's intra-op thread count during a launch ($TILEGCN_EMULATOR_THREADS, default 1)."""
    from . import _launch_threads

    return _launch_threads()


def traced_machine(module, name: str, launch_args: dict, workgroups, handlers=None, lazy_memory=False) -> Machine:
    """A machine set up for the launch `Module.prepare(name, **launch_args)` would make, running only the linear
    workgroup ids `workgroups`, unchecked (check=False). `handlers`: a function of the bound handler list
    returning the list to run instead (e.g. one that skips MFMA math), applied to a copy of the program.
    `lazy_memory`: stage the tensors' bytes page by page as the run first touches them, and write no store
    back into them (a run whose outputs nobody reads: state.GlobalMemory)."""
    launch = module.prepare(name, **launch_args)
    prog = launch.program
    if handlers is not None:
        prog = copy.copy(prog)
        prog.handlers = handlers(prog.handlers)
    machine = Machine(prog, launch.grid, launch.block, launch.dispatch, launch.tensors, False, launch.device,
                      lazy_memory)
    machine.wg_subset = list(workgroups)
    return machine


def run_traced(machine: Machine, observer, what: str = "a traced run") -> None:
    """Run `machine` with `observer` attached (see the module doc). An emulator error is re-raised naming
    `what` the run was for."""
    machine.tracer = observer
    threads, want = torch.get_num_threads(), launch_threads()
    torch.set_num_threads(want)
    try:
        machine.run()
    except StopRun:
        machine.mem.finish()
    except EmulatorError as e:
        raise EmulatorError(f"{what} failed: {e}") from None
    finally:
        torch.set_num_threads(threads)
