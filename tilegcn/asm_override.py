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

Where the parts live (jit imports neither this module nor autotune): which file runs in place of a key is the
cache's concern (`tilegcn.cache.override_file`); `CompiledKernel.with_asm` builds the edited entry; the check on
the emulated device is `tilegcn.testing.compare`. This module gathers them under their documented names.
"""
from __future__ import annotations

from .cache import ENV_ASM_OVERRIDE, AsmOverrideWarning, override_file
from .testing import AsmReport, AsmVerifyError, compare

__all__ = ["ENV_ASM_OVERRIDE", "AsmOverrideWarning", "AsmReport", "AsmVerifyError", "compare", "override_file",
           "with_asm"]


def with_asm(kernel, path, *, verify: bool = False, args=None, tolerance: float = 0.0):
    """A CompiledKernel launching like `kernel` but running the assembly in `path` (`kernel.with_asm`)."""
    return kernel.with_asm(path, verify=verify, args=args, tolerance=tolerance)
