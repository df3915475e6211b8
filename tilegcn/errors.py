"""Every error tilegcn raises derives from TilegcnError, so users can catch one type.

Program errors (raised while tracing or lowering a user's kernel) carry the user's
source location, "file:line", found by walking the stack for the first frame outside
the tilegcn package.
"""
from __future__ import annotations

import os
import sys

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


class TilegcnError(Exception):
    """Base class of all tilegcn errors."""


class ToolchainError(TilegcnError):
    """LLVM is missing, too old, lacks the AMDGPU target, or rejected our assembly."""


class InternalError(TilegcnError):
    """tilegcn itself went wrong (a bug to report, not a mistake in the user's program): e.g. the compiler emitted an
    instruction its instruction table does not know."""


class UnsupportedArchError(TilegcnError):
    """An arch other than the supported ones was requested."""


class ArgumentError(TilegcnError):
    """A kernel was called with arguments it cannot take (dtype, shape, stride, device).

    `location` is the user's call site (file:line of the call into the jitted function), found like
    CompileError's; pass location="" for none."""

    def __init__(self, message: str, location: str | None = None):
        self.location = location if location is not None else user_location()
        self.raw_message = message
        super().__init__(f"{self.location}: {message}" if self.location else message)


class CompileError(TilegcnError):
    """A tile program is invalid or cannot be lowered. `location` is the user's file:line."""

    def __init__(self, message: str, location: str | None = None):
        self.location = location if location is not None else user_location()
        self.raw_message = message
        super().__init__(f"{self.location}: {message}" if self.location else message)


class ResourceError(CompileError):
    """A kernel needs more LDS or registers than the arch has (needed vs available)."""


class CacheError(TilegcnError):
    """A cache entry could not be written or read."""


class MismatchError(TilegcnError, AssertionError):
    """`tilegcn.testing.assert_close`: two tensors differ beyond the tolerance (an AssertionError, as pytest and
    torch.testing expect)."""


class ExportError(TilegcnError):
    """An ahead-of-time export (tilegcn.aot) could not be written, or its folder is missing, altered or not one."""


class DeviceError(TilegcnError):
    """A device could not load or launch a code object."""


_CLI_FILE = os.path.join(_PACKAGE_DIR, "__main__.py")


def user_location(skip_package: str = _PACKAGE_DIR) -> str | None:
    """'file:line' of the innermost stack frame that is not tilegcn's own code; None under the command line
    (`tilegcn ...`, `python -m tilegcn ...`): the frames outside it are runpy's or the console script's, not
    a line the user wrote."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if filename == _CLI_FILE:
            return None
        internal = filename.startswith(skip_package + os.sep) or os.path.basename(filename) == "contextlib.py"
        if not internal and "importlib" not in filename:
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return None


class EmulatorError(DeviceError):
    """The emulated device refused a code object or an instruction (illegal, unknown, out of bounds)."""


class HazardError(EmulatorError):
    """A register or LDS byte was read (or overwritten) while its producer was still in flight,
    or an MFMA result was read before the arch's required wait states."""


class RaceError(EmulatorError):
    """Two waves of a workgroup touched the same LDS byte (write/read or read/write) in one barrier epoch."""
