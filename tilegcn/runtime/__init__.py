"""Devices behind one launch interface.

    device = get_device()                 # TILEGCN_DEVICE=emulator|hip|auto (auto: HIP if an AMD GPU is visible)
    module = device.load(hsaco_bytes)     # -> Module
    module.launch(kernel_name, grid, block, args)   # grid in workgroups, block in threads, (x, y, z)
    module.launch(kernel_name, grid, block, kernarg=packed, buffers=[t], shared_mem=bytes_of_dynamic_lds)

`args` are torch tensors (passed as device pointers) and Python ints/floats (by value), packed per the
code object's metadata by `tilegcn.runtime.kernargs`, the one place kernel arguments are packed; both
devices take the same launch parameters (see `tilegcn.runtime.emulator.Module.launch`).
"""
from __future__ import annotations

import functools
import os

from ..errors import DeviceError

DEVICE_CHOICES = ("emulator", "hip", "auto")


def hip_gpu_visible() -> bool:
    """True when a HIP runtime and at least one AMD GPU are present."""
    from . import hip

    return hip.available()


@functools.lru_cache(maxsize=None)
def _device(name: str):
    if name == "emulator":
        from .emulator import EmulatorDevice

        return EmulatorDevice()
    if name == "hip":
        from .hip import HipDevice

        return HipDevice()
    raise DeviceError(f"tilegcn: unknown device {name!r}; choose one of {', '.join(DEVICE_CHOICES)}")


def device_name(name: str | None = None) -> str:
    """Resolve a device choice (argument, else $TILEGCN_DEVICE, else auto) to 'emulator' or 'hip'."""
    name = (name or os.environ.get("TILEGCN_DEVICE") or "auto").lower()
    if name == "auto":
        return "hip" if hip_gpu_visible() else "emulator"
    if name not in DEVICE_CHOICES:
        raise DeviceError(f"tilegcn: unknown device {name!r}; choose one of {', '.join(DEVICE_CHOICES)}")
    return name


def get_device(name: str | None = None):
    return _device(device_name(name))
