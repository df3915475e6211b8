"""Run a hand-edited assembly file in place of the generated one (the IREE "hijack" / TRITON_KERNEL_OVERRIDE
pattern), and check the edit on the emulated device.

    k = gemm.compile(a, b, c)                      # k.asm is the generated kernel.s
    k2 = k.with_asm("edited.s")                    # same launch (name, grid, block, arguments), edited code
    k2 = k.with_asm("edited.s", verify=True, args=(a, b, c))   # run both on the emulator; AsmVerifyError on a
                                                               # difference or a hazard, else k2.verification
    TILEGCN_ASM_OVERRIDE=DIR python app.py         # every kernel whose DIR/<cache key>.s exists runs that file

Like the cache root, DIR and the file must be yours and not writable by others, and the file a regular file
(a link only within DIR): another user must not be able to choose the code your kernels run. An unsafe file
is not used (`AsmOverrideWarning` naming why); each override in use is announced once per process, with the
same warning class, naming the kernel and the file.

The edited file is assembled and linked like generated code and stored in the disk cache under a key of its
own text (the generated entry is untouched). `verify` runs the generated and the edited kernel on copies of the
same arguments on the emulated device with every check on, and reports the largest difference of each tensor,
any hazard or race the edit introduced, and the timing model's estimate of both.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import stat
import time
import warnings
from pathlib import Path

from . import __version__, toolchain
from .errors import ArgumentError, EmulatorError, TilegcnError

ENV_ASM_OVERRIDE = "TILEGCN_ASM_OVERRIDE"


class AsmVerifyError(TilegcnError):
    """An overriding assembly file changed the results or introduced a hazard. `.report` says how."""

    def __init__(self, report: "AsmReport"):
        self.report = report
        super().__init__(str(report))


class AsmOverrideWarning(UserWarning):
    """A kernel runs a hand-edited assembly file from $TILEGCN_ASM_OVERRIDE, or such a file is unsafe and
    is not used."""


_warned: set = set()  # (key, path, why): each notice once per process


def _warn_once(ident: tuple, message: str) -> None:
    if ident not in _warned:
        _warned.add(ident)
        warnings.warn(message, AsmOverrideWarning, stacklevel=4)


def override_file(key: str) -> Path | None:
    """The real path of $TILEGCN_ASM_OVERRIDE/<cache key>.s when the variable is set, the file exists and
    it is safe (see the module doc); an unsafe one is not used, with an AsmOverrideWarning naming why."""
    folder = os.environ.get(ENV_ASM_OVERRIDE)
    if not folder:
        return None
    path = Path(folder) / f"{key}.s"
    if not os.path.lexists(path):
        return None
    problem = _override_problem(Path(folder), path)
    if problem:
        _warn_once((key, str(path), problem),
                   f"tilegcn: {ENV_ASM_OVERRIDE}: not using {path}: {problem}, so another user could choose the "
                   f"code your kernel runs; the generated code runs. Fix: chmod go-w (and chown to you) the "
                   f"folder and the file, and keep the file itself in the folder")
        return None
    return Path(os.path.realpath(path))


def _override_problem(folder: Path, path: Path) -> str | None:
    """Why the override file `path` in `folder` is unsafe, or None (the cache root's rules)."""
    from .cache import unsafe_problems

    try:
        real_folder = os.path.realpath(folder)
        problems = [f"the folder {folder}: {p}" for p in unsafe_problems(os.stat(real_folder))]
        real = os.path.realpath(path)
        if os.path.dirname(real) != real_folder:
            problems.append(f"it is a symbolic link leading out of the folder (to {real})")
        st = os.stat(real)
    except OSError as e:
        return f"cannot check it ({e})"
    if not stat.S_ISREG(st.st_mode):
        problems.append("it is not a regular file")
    problems += [f"the file: {p}" for p in unsafe_problems(st)]
    return "; ".join(problems) or None


def apply_override(kernel):
    """`kernel`, or, when $TILEGCN_ASM_OVERRIDE holds a safe <cache key>.s for it, a kernel running that
    file, announced once per process (AsmOverrideWarning): code that is not the generated one never runs
    unsaid."""
    path = override_file(kernel.key)
    if path is None:
        return kernel
    _warn_once((kernel.key, str(path), None),
               f"tilegcn: {ENV_ASM_OVERRIDE}: kernel {kernel.name} (cache key {kernel.key[:16]}, "
               f"{kernel.fn.source_location}) runs the hand-edited {path}, not the generated code")
    return kernel.with_asm(path)


def with_asm(kernel, path, *, verify: bool = False, args=None, tolerance: float = 0.0):
    """A CompiledKernel launching like `kernel` but running the assembly in `path` (see the module doc)."""
    from .cache import ENTRY_FILE_LIMIT, Cache, read_limited
    from .jit import CompiledKernel

    path = Path(path)
    if verify and args is None:
        raise ArgumentError("tilegcn: with_asm(verify=True) needs args=(...), the inputs to run both kernels on")
    try:  # limited: a path to /dev/zero or a huge file is refused, not read until memory runs out
        asm = read_limited(path, ENTRY_FILE_LIMIT, follow_symlinks=True).decode()
    except (OSError, ValueError) as e:
        raise ArgumentError(f"tilegcn: cannot read the overriding assembly {path}: {e}") from None
    llvm = toolchain.find_llvm(kernel.arch)
    ident = "\0".join(["asm-override", asm, kernel.arch, llvm.version, __version__, repr(kernel.metadata["args"])])
    key = hashlib.sha256(ident.encode()).hexdigest()

    def build(tmp: Path) -> dict:
        t0 = time.perf_counter()
        hsaco = toolchain.assemble(asm, kernel.arch)  # ToolchainError names the bad line
        (tmp / "kernel.ir").write_text(kernel.ir)
        (tmp / "kernel.s").write_text(asm)
        (tmp / "kernel.hsaco").write_bytes(hsaco)
        meta = {k: v for k, v in kernel.metadata.items() if k not in ("key", "hsaco_sha256")}
        meta.update(asm_override=str(path.resolve()), overrides=kernel.key, created=time.time(),
                    compile_time={"assemble": time.perf_counter() - t0})
        return meta

    entry, _ = Cache().get_or_build(key, build)
    edited = CompiledKernel(kernel.fn, entry, kernel.signature, kernel.constants, kernel.arch, {},
                            prints=kernel.prints)
    if verify:
        report = compare(kernel, edited, args)
        edited.verification = report
        if not report.ok(tolerance):
            raise AsmVerifyError(report)
    return edited


@dataclasses.dataclass
class AsmReport:
    """The generated kernel vs the edited one on the same inputs (emulated device, checks on)."""

    name: str
    edited_path: str
    max_diff: dict  # tensor argument -> max |edited - generated| (inf where a NaN appears on one side only)
    hazard: str | None  # the emulator's HazardError / RaceError for the edited kernel
    estimates: tuple  # (generated, edited): str() of the timing model's estimate, or why there is none

    def ok(self, tolerance: float = 0.0) -> bool:
        return self.hazard is None and all(d <= tolerance for d in self.max_diff.values())

    def __str__(self):
        diffs = ", ".join(f"{k} {v:.4g}" for k, v in self.max_diff.items()) or "not compared"
        lines = [f"asm override of {self.name} with {self.edited_path}:",
                 f"  max |edited - generated|: {diffs}",
                 f"  hazards: {self.hazard or 'none'}",
                 f"  estimate, generated: {self.estimates[0]}",
                 f"  estimate, edited:    {self.estimates[1]}"]
        return "\n".join(lines)


def compare(generated, edited, args) -> AsmReport:
    """Run both kernels on copies of `args` on the emulated device and report (see AsmReport)."""
    import torch

    from .autotune import _copies

    outputs, hazard = [], None
    for k in (generated, edited):
        copies = _copies(args)
        try:
            _run_emulated(k, copies, check=True)
        except EmulatorError as e:
            if k is generated:
                raise
            hazard = f"{type(e).__name__}: {e}"
            try:
                _run_emulated(k, copies, check=False)  # still compare what it computes
            except EmulatorError as after:  # unchecked, it runs into what the hazard causes (a memory fault)
                hazard += f"\n    without the checks it then fails: {type(after).__name__}: {after}"
                copies = None  # nothing to compare
        outputs.append(copies)
    diffs = {}
    for name, a, b in zip(generated.fn.arg_names, *outputs) if outputs[1] is not None else ():
        if isinstance(a, torch.Tensor) and a.numel():
            d = (b.double() - a.double()).abs()
            d[a.isnan() & b.isnan()] = 0.0
            diffs[name] = d.nan_to_num(float("inf")).max().item()
    return AsmReport(generated.name, edited.metadata.get("asm_override", "?"), diffs, hazard,
                     (_estimate(generated, args), _estimate(edited, args)))


def _run_emulated(kernel, args, check: bool):
    from .runtime.emulator import load

    names = [a["name"] for a in kernel.metadata["args"]]  # the kernel's parameters among the positional args
    args = [args[kernel.fn.arg_names.index(n)] for n in names] if names else list(args)
    load(kernel.hsaco).launch(kernel.name, kernel.grid, kernel.block, args, check=check)


def _estimate(kernel, args) -> str:
    from .autotune import _copies

    try:
        return str(kernel.estimate(args=_copies(args)))  # for the kernel's arch's device
    except TilegcnError as e:
        return f"unavailable ({e})"
